//go:build !linux

package storetest

import "syscall"

// dieWithParent: only Linux kills children with their parent; elsewhere
// TestMain's cleanup stops them.
func dieWithParent() *syscall.SysProcAttr { return nil }
