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

// mapFile maps the first size bytes of f, shared: what is written there
// is in the page cache at once, and outlives the process.
func mapFile(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func unmapFile(b []byte) error { return syscall.Munmap(b) }

// journalSupported says the ledger keeps a crash journal here.
const journalSupported = true
