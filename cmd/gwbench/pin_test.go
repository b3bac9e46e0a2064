package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{
		"1":       {1},
		"0,2":     {0, 2},
		"2-3":     {2, 3},
		"0,4-5,4": {0, 4, 5},
		" 3 , 1 ": {1, 3},
	} {
		got, err := parseCPUList(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "a", "3-1", "-1", "1-", "1,,2", "0x1"} {
		_, err := parseCPUList(in)
		require.ErrorContains(t, err, "is not a CPU list", in)
	}
}

func TestPinPlanKeepsACPUForTheRest(t *testing.T) {
	if runtime.GOOS != "linux" {
		_, err := newPinPlan("0")
		require.ErrorContains(t, err, "needs Linux")
		return
	}
	allowed, err := allowedCPUs(os.Getpid())
	require.NoError(t, err)
	require.NotEmpty(t, allowed)

	_, err = newPinPlan(formatCPUs(allowed))
	require.ErrorContains(t, err, "leaves no CPU for the load generator")
	_, err = newPinPlan(strconv.Itoa(allowed[len(allowed)-1] + 1))
	require.ErrorContains(t, err, "is not one this process may run on")

	if len(allowed) < 2 {
		return
	}
	plan, err := newPinPlan(strconv.Itoa(allowed[0]))
	require.NoError(t, err)
	require.Equal(t, []int{allowed[0]}, plan.targets)
	require.Equal(t, allowed[1:], plan.rest)
}

// A report says where its processes ran.
func TestPlacementNamesTheCPUs(t *testing.T) {
	require.Equal(t, "targets and PostgreSQL on CPU 2, 3; the simulator and the load generator on CPU 0, 1",
		placement(&pinPlan{targets: []int{2, 3}, rest: []int{0, 1}}))
	require.Contains(t, placement(nil), "shared")
}

// A run's spool directory goes once its gateway has left nothing in it,
// and stays, named, while rows wait there for PostgreSQL: in a spool
// segment, or in the journal of a gateway that did not write them.
func TestKeepBacklogOnlyWhileRowsWait(t *testing.T) {
	empty := t.TempDir() + "/ledger-spool-a"
	require.NoError(t, os.MkdirAll(empty, 0o755))
	var out strings.Builder
	keepBacklog(empty, &out)
	require.NoDirExists(t, empty)
	require.Empty(t, out.String())

	full := t.TempDir() + "/ledger-spool-b"
	require.NoError(t, os.MkdirAll(full, 0o755))
	require.NoError(t, os.WriteFile(full+"/ledger-h-1-x-000001.spool", make([]byte, 3<<20), 0o600))
	keepBacklog(full, &out)
	require.DirExists(t, full)
	require.Contains(t, out.String(), "ledger rows wait in "+full+" (3.0 MiB spooled, 0 journals)")

	killed := t.TempDir() + "/ledger-spool-c"
	require.NoError(t, os.MkdirAll(killed, 0o755))
	require.NoError(t, os.WriteFile(killed+"/ledger-h-1-x.journal", make([]byte, 64), 0o600))
	out.Reset()
	keepBacklog(killed, &out)
	require.DirExists(t, killed)
	require.Contains(t, out.String(), "ledger rows wait in "+killed+" (0.0 MiB spooled, 1 journals)")
}
