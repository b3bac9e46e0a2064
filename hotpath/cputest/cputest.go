// Package cputest holds what tests need to bound the CPU a piece of work
// costs: the process's own CPU time, read from the kernel, not a wall
// clock that a busy machine stretches.
package cputest

import (
	"syscall"
	"testing"
	"time"
)

// Used is the CPU time this process has used so far, user and system.
func Used(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("cannot read the process's CPU time: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
