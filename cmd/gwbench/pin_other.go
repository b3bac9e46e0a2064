//go:build !linux

package main

import "errors"

// pinner pins nothing here: CPU affinity is set through Linux's
// sched_setaffinity.
type pinner struct{}

func newPinner() pinner { return pinner{} }

var errPinLinux = errors.New("pinning processes to CPUs needs Linux")

func allowedCPUs(int) ([]int, error)         { return nil, errPinLinux }
func (p *pinner) pin(int, []int, bool) error { return errPinLinux }
func (p *pinner) restore()                   {}
