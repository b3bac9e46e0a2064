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
	cmd := exec.Command("sh", "-c", "sleep 60 & read line; sleep 60 & wait")
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
	root := cmd.Process.Pid
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
