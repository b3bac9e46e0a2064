package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/child"
	"github.com/edgegw/gateway/storage/storetest"
)

// Two gateway processes share one database. The first claims a run's items
// and is killed (SIGKILL) mid-call; the second retries them once their
// leases lapse and finishes the run: every case has exactly one result, the
// killed attempts are retried under new request ids, and the run's cost is
// exactly its ledger rows, one per attempt that reached a model.
func TestEvalRunSurvivesKilledProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: this test builds and starts two gateway processes")
	}
	dbURL := storetest.DatabaseURL(t)
	bin := buildGateway(t)
	out, err := exec.Command(bin, "migrate", "--database-url", dbURL).CombinedOutput()
	require.NoError(t, err, "%s", out)
	start := func() *child.Process {
		p, err := child.Start(context.Background(), filepath.Base(bin), bin,
			[]string{"DATABASE_URL=" + dbURL, "GATEWAY_DEMO=false"},
			[]string{"listening", "key invalidation channel listening"},
			"serve", "--addr", "127.0.0.1:0", "--admin-addr", "", "--log-level", "debug",
			"--eval-lease", "2s", "--eval-poll", "100ms", "--eval-workers", "8",
			"--ledger-spool-dir", t.TempDir())
		require.NoError(t, err)
		t.Cleanup(p.Stop)
		return p
	}

	a := start()
	tn := newTenant(t, dbURL, "fleet-evals@example.com")
	ca := evalClient{addr: a.Addr, key: tn.key}
	suite := ca.suite(t, "Durable")
	for range 6 {
		ca.addCase(t, suite, "[[sim:ttft_ms=6000]] [[sim:reply=ok]]", eq("ok"))
	}
	runID := ca.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", map[string]any{"concurrency": 4})["id"].(string)
	require.Eventually(t, func() bool {
		counts := ca.ok(t, 200, "GET", "/api/v1/evals/runs/"+runID, nil)["counts"].(map[string]any)
		return counts["running"] == 4.0
	}, 10*time.Second, 20*time.Millisecond, "the first process claims up to the run's concurrency")

	// Each call takes six seconds: the second process starts, and the
	// first dies, while all four are still in flight.
	b := start()
	cb := evalClient{addr: b.Addr, key: tn.key}
	before := cb.ok(t, 200, "GET", "/api/v1/evals/runs/"+runID, nil)["counts"].(map[string]any)
	require.NoError(t, syscall.Kill(a.PID, syscall.SIGKILL))
	killed := time.Now()
	require.EqualValues(t, 4, before["running"], "%v", before)
	require.EqualValues(t, 0, before["passed"], "%v", before)

	run := cb.waitRun(t, runID, 60*time.Second)
	require.Equal(t, "completed", run["status"], "%v", run)
	require.Greater(t, time.Since(killed), 2*time.Second, "claims were retried only after their leases lapsed")
	counts := run["counts"].(map[string]any)
	require.EqualValues(t, 6, counts["total"])
	require.EqualValues(t, 6, counts["passed"])
	require.EqualValues(t, 1, run["pass_rate"])

	results := cb.results(t, runID)
	require.Len(t, results, 6)
	retried := 0
	for _, r := range results {
		require.Equal(t, "passed", r["status"])
		require.Equal(t, "ok", r["reply"])
		if r["attempts"] == 2.0 {
			retried++
		} else {
			require.EqualValues(t, 1, r["attempts"])
		}
	}
	require.Equal(t, 4, retried, "the four items the killed process held were each retried once")

	// One ledger row per attempt that reached a model: the killed ones
	// never got an answer, so exactly one per result, none twice.
	var cost int64
	var byRoute map[string]int
	require.Eventually(t, func() bool {
		cost, byRoute = runLedger(t, dbURL, runID)
		return byRoute["eval_case"] == 6
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, map[string]int{"eval_case": 6}, byRoute)
	run = cb.ok(t, 200, "GET", "/api/v1/evals/runs/"+runID, nil)
	require.Positive(t, cost)
	var sum int64
	for _, r := range results {
		sum += picoOf(t, r["cost"])
	}
	require.Equal(t, cost, picoOf(t, run["cost"]))
	require.Equal(t, cost, sum)
}
