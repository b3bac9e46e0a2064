package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/edgegw/gateway/bench/load"
)

// parseCPUList reads a CPU list as taskset and /sys write them: "1",
// "0,2", "2-3", "0,4-5". The numbers come back sorted, each once.
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		last := first
		if err == nil && isRange {
			last, err = strconv.Atoi(hi)
		}
		if err != nil || first < 0 || last < first {
			return nil, usagef("--pin-targets: %q is not a CPU list (for example 1, 0,2 or 2-3)", s)
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

// formatCPUs writes cpus back as a list: 0, 2, 3.
func formatCPUs(cpus []int) string {
	parts := make([]string, len(cpus))
	for i, c := range cpus {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ", ")
}

// pinPlan is where --pin-targets puts each process of a local run: the
// targets' own processes and PostgreSQL on the CPUs named, the simulator
// and the load generator on the CPUs left. On a machine whose cores all
// the processes share, a target's throughput is what the load generator
// and the simulator leave it; pinned, it is what its own CPU allows.
// PostgreSQL goes with the targets: it serves the gateway's ledger, whose
// rows must reach it within the run. On the load generator's CPU it fell
// behind (the ledger spooled 210,000 of one run's 236,000 rows), and the
// CPU the rows cost left the measured window.
type pinPlan struct {
	targets, rest []int
	pinner
}

// placement says where a local run's processes ran, for its reports:
// pinned as p says, or (p nil) all on every CPU this process may use.
func placement(p *pinPlan) string {
	if p != nil {
		return fmt.Sprintf("targets and PostgreSQL on CPU %s; the simulator and the load generator on CPU %s",
			formatCPUs(p.targets), formatCPUs(p.rest))
	}
	if cpus, err := allowedCPUs(os.Getpid()); err == nil {
		return "shared: the targets, the simulator, PostgreSQL and the load generator on CPU " + formatCPUs(cpus)
	}
	return "shared by every process"
}

// newPinPlan splits the CPUs this process may run on between the targets
// (list) and the rest. Both sides must keep at least one.
func newPinPlan(list string) (*pinPlan, error) {
	targets, err := parseCPUList(list)
	if err != nil {
		return nil, err
	}
	p := &pinPlan{pinner: newPinner()}
	allowed, err := allowedCPUs(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("--pin-targets: %w", err)
	}
	for _, c := range targets {
		if !slices.Contains(allowed, c) {
			return nil, usagef("--pin-targets: CPU %d is not one this process may run on (%s)", c, formatCPUs(allowed))
		}
	}
	for _, c := range allowed {
		if !slices.Contains(targets, c) {
			p.rest = append(p.rest, c)
		}
	}
	if len(p.rest) == 0 {
		return nil, usagef("--pin-targets: %s leaves no CPU for the load generator and the simulator (this process may run on %s)",
			formatCPUs(targets), formatCPUs(allowed))
	}
	p.targets = targets
	return p, nil
}

// apply pins the load generator (this process's threads, not its
// children: they are the targets) and every process the targets hold:
// a target's own process and its descendants, and PostgreSQL's, on the
// targets' CPUs; the simulator and any other process measured on the
// rest. A target whose own process is the simulator (direct) leaves it
// with the rest: every other target drives it.
func (p *pinPlan) apply(targets []load.Target, sim int) error {
	if err := p.pin(os.Getpid(), p.rest, false); err != nil {
		return fmt.Errorf("--pin-targets: the load generator: %w", err)
	}
	for _, t := range targets {
		for _, proc := range t.Procs {
			cpus := p.rest
			if (proc.Own && proc.PID != sim) || proc.Name == postgresProc {
				cpus = p.targets
			}
			if err := p.pin(proc.PID, cpus, !proc.Alone); err != nil {
				return fmt.Errorf("--pin-targets: %s (pid %d): %w", proc.Name, proc.PID, err)
			}
		}
	}
	return nil
}
