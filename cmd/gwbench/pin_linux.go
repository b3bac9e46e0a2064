package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/edgegw/gateway/bench/load"
)

// pinner sets the CPU affinity of every thread of a process tree and
// puts back, at the end, the affinity each had: a PostgreSQL the run did
// not start must not stay pinned after it.
type pinner struct {
	saved map[int]unix.CPUSet // thread id: its affinity before the pin
	roots map[int]unix.CPUSet // a tree's root: its affinity before the pin
}

func newPinner() pinner {
	return pinner{saved: map[int]unix.CPUSet{}, roots: map[int]unix.CPUSet{}}
}

// allowedCPUs lists the CPUs pid may run on.
func allowedCPUs(pid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// pin puts every thread of pid, and with tree of each of its descendants,
// on cpus. Threads and processes they start later inherit the affinity.
// A thread or process that exits meanwhile is skipped; pid itself must
// exist.
func (p *pinner) pin(pid int, cpus []int, tree bool) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	var root unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &root); err != nil {
		return err
	}
	if _, ok := p.roots[pid]; !ok {
		p.roots[pid] = root
	}
	procs := []int{pid}
	if tree {
		procs = append(procs, load.Descendants(pid)...)
	}
	for _, proc := range procs {
		for _, tid := range threads(proc) {
			var was unix.CPUSet
			if unix.SchedGetaffinity(tid, &was) != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue
				}
				return err
			}
			if _, ok := p.saved[tid]; !ok {
				p.saved[tid] = was
			}
		}
	}
	return nil
}

// restore puts every pinned thread that still runs back on the CPUs it
// had, and a process started since below a pinned root (a backend the
// postmaster forked during the run) back on its root's.
func (p *pinner) restore() {
	for root, set := range p.roots {
		for _, proc := range load.Descendants(root) {
			for _, tid := range threads(proc) {
				if _, ok := p.saved[tid]; !ok {
					_ = unix.SchedSetaffinity(tid, &set)
				}
			}
		}
	}
	for tid, set := range p.saved {
		_ = unix.SchedSetaffinity(tid, &set)
	}
	clear(p.saved)
	clear(p.roots)
}

// threads lists the thread ids of pid; none when it has exited.
func threads(pid int) []int {
	entries, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		return nil
	}
	tids := make([]int, 0, len(entries))
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}
