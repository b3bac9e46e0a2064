// Package cputest holds what tests need to bound the CPU a piece of work
// costs: the process's own CPU time, read from the kernel, not a wall
// clock that a busy machine stretches; and the guard of tests that read
// what the kernel counts in /proc.
package cputest

import (
	"os"
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

// NeedProc stops a test that reads file, under /proc, where there is none
// (not Linux). Under CI, which runs on Linux, a missing file is a failure,
// never a skip.
func NeedProc(t testing.TB, file string) {
	t.Helper()
	if _, err := os.Stat(file); err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing, and CI runs on Linux", file)
	}
	t.Skipf("%s is Linux's", file)
}
