//go:build unix

package storage

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on f without waiting. The lock belongs
// to the open file and goes away when it is closed or the process dies.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
