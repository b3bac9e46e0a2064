package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/load"
	"github.com/edgegw/gateway/bench/sim"
)

// The budget run measures every line on a stack, here one simulator
// standing in for all three targets, in short windows: each bounded line
// with a verdict, and the figures the budget has no bound for — overhead at
// one request at a time and the throughput frontier — beside them.
func TestBudgetRunWritesEveryLine(t *testing.T) {
	s, ln, err := sim.Listen("127.0.0.1:0", sim.Config{})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	url := "http://" + ln.Addr().String()
	var targets []load.Target
	for _, name := range []string{"direct", "refproxy", "gateway"} {
		targets = append(targets, load.Target{Name: name, BaseURL: url, Wire: load.WireUpstream})
	}
	var stdout bytes.Buffer
	b := &budgetRun{targets: targets, duration: 300 * time.Millisecond, warmup: 100 * time.Millisecond, frontier: true,
		opt: load.Options{FrontierBudget: 3 * time.Second, ProbeDuration: 200 * time.Millisecond},
		out: t.TempDir(), stdout: &stdout, placement: placement(&pinPlan{targets: []int{1}, rest: []int{0}})}
	require.NoError(t, b.run(context.Background()))

	raw, err := os.ReadFile(filepath.Join(b.out, "budget.txt"))
	require.NoError(t, err)
	text := string(raw)
	require.True(t, strings.HasSuffix(stdout.String(), "\n"+text), "the budget is printed last")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`PERFORMANCE BUDGET\nCPUs +targets and PostgreSQL on CPU 1; the simulator and the load generator on CPU 0 +- +-\n`),
		regexp.MustCompile(`throughput at saturation, gateway / reference proxy +\d\.\d\d \(\d+ / \d+ rps\) +≥ 0\.80 +(PASS|FAIL)`),
		regexp.MustCompile(`non-streaming overhead p50 at \d+ rps +-?[\d.]+(µs|ms) +≤ 150µs +(PASS|FAIL)`),
		regexp.MustCompile(`non-streaming overhead p99, one request at a time +-?[\d.]+(µs|ms) \(reference proxy -?[\d.]+(µs|ms)\) +- +-\n`),
		regexp.MustCompile(`throughput frontier: highest rate with p99 overhead under 1\.00ms +(\d+ rps \(p99 -?[\d.]+(µs|ms)\)|none held) +- +-\n`),
		regexp.MustCompile(`throughput frontier: highest rate with p99 overhead under 10\.00ms `),
		regexp.MustCompile(`streaming: frame-order violations +0 +0 +PASS`),
	} {
		require.Regexp(t, want, text)
	}
	// The six bounded lines are counted; the six figures (the CPUs first)
	// are not.
	require.Regexp(t, `\n[0-6] passed, [0-6] failed\n$`, text)
	passed, failed := strings.Count(text, " PASS\n"), strings.Count(text, " FAIL\n")
	require.Equal(t, 6, passed+failed)
	for _, dir := range []string{"saturation", "chat-nonstream-half-saturation", "chat-nonstream-one-at-a-time", "chat-stream-256tok"} {
		_, err := os.Stat(filepath.Join(b.out, dir, "summary.txt"))
		require.NoError(t, err, dir)
	}
}
