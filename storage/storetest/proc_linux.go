package storetest

import "syscall"

// dieWithParent makes a server the tests start die with the test binary,
// should it exit without stopping it.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
