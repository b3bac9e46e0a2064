package main

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/load"
)

// A pinned tree runs on the CPUs asked, every thread of every process in
// it; after restore each is back on its own, and a process the root
// started during the pin is back on the root's.
func TestPinMovesATreeAndRestorePutsItBack(t *testing.T) {
	p := newPinner()
	allowed, err := allowedCPUs(os.Getpid())
	require.NoError(t, err)
	// The last CPU alone differs from what the tree starts with wherever
	// there are two.
	target := []int{allowed[len(allowed)-1]}

	// A shell with one child now, and one more when a line arrives.
	root, stdin := startShell(t, "sleep 60 & read line; sleep 60 & wait")
	require.Eventually(t, func() bool { return len(load.Descendants(root)) == 1 }, 10*time.Second, 10*time.Millisecond)
	first := load.Descendants(root)[0]

	require.NoError(t, p.pin(root, target, true))
	for _, pid := range []int{root, first} {
		got, err := allowedCPUs(pid)
		require.NoError(t, err)
		require.Equal(t, target, got, "pid %d", pid)
	}

	_, err = io.WriteString(stdin, "go\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(load.Descendants(root)) == 2 }, 10*time.Second, 10*time.Millisecond)
	var second int
	for _, pid := range load.Descendants(root) {
		if pid != first {
			second = pid
		}
	}
	got, err := allowedCPUs(second)
	require.NoError(t, err)
	require.Equal(t, target, got, "a child started under a pin inherits it")

	p.restore()
	for _, pid := range []int{root, first, second} {
		got, err := allowedCPUs(pid)
		require.NoError(t, err)
		require.Equal(t, allowed, got, "pid %d after restore", pid)
	}
}

// apply puts each process where the plan says: a target's own process and
// PostgreSQL (with its backends) on the targets' CPUs; the simulator, which
// every target drives, on the rest; the load generator's threads on the
// rest, and not its children, which are the targets.
func TestApplyPinsTargetsAndPostgresApartFromTheLoad(t *testing.T) {
	allowed, err := allowedCPUs(os.Getpid())
	require.NoError(t, err)
	// Wherever there are two CPUs the two sides differ.
	plan := &pinPlan{targets: allowed[len(allowed)-1:], rest: allowed[:1], pinner: newPinner()}
	t.Cleanup(plan.restore)

	start := func(script string) int {
		pid, _ := startShell(t, script)
		return pid
	}
	proxy, sim, other := start("exec sleep 60"), start("exec sleep 60"), start("exec sleep 60")
	pg := start("sleep 60 & wait")
	require.Eventually(t, func() bool { return len(load.Descendants(pg)) == 1 }, 10*time.Second, 10*time.Millisecond)
	backend := load.Descendants(pg)[0]

	targets := []load.Target{{Name: "gateway", Procs: []load.Proc{
		{Name: "gateway", PID: proxy, Own: true},
		{Name: "simulator", PID: sim},
		{Name: postgresProc, PID: pg},
		{Name: "load generator", PID: os.Getpid(), Alone: true},
	}}}
	require.NoError(t, plan.apply(targets, sim))

	for pid, want := range map[int][]int{proxy: plan.targets, pg: plan.targets, backend: plan.targets, sim: plan.rest, other: allowed} {
		got, err := allowedCPUs(pid)
		require.NoError(t, err)
		require.Equal(t, want, got, "pid %d", pid)
	}
	for _, tid := range threads(os.Getpid()) {
		got, err := allowedCPUs(tid)
		require.NoError(t, err)
		require.Equal(t, plan.rest, got, "the load generator's thread %d", tid)
	}

	plan.restore()
	for _, pid := range []int{proxy, pg, backend, sim, os.Getpid()} {
		got, err := allowedCPUs(pid)
		require.NoError(t, err)
		require.Equal(t, allowed, got, "pid %d after restore", pid)
	}
}

// startShell starts sh -c script, killed with every process below it when
// the test ends, and returns its pid and its standard input.
func startShell(t *testing.T, script string) (int, io.Writer) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		for _, pid := range load.Descendants(cmd.Process.Pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid, stdin
}
