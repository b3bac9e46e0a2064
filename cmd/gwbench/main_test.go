package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/load"
	"github.com/edgegw/gateway/bench/sim"
)

func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCommandLine(t *testing.T) {
	code, out, _ := runCLI("scenarios")
	require.Zero(t, code)
	for _, s := range []string{"chat-nonstream", "chat-stream-256tok", "tools", "mixed-wires", "faults", "many-streams", "soak"} {
		require.Contains(t, out, s)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{}, "usage"},
		{[]string{"nope"}, "unknown command"},
		{[]string{"run"}, "--target is required"},
		{[]string{"compare", "--direct", "http://127.0.0.1:1"}, "--direct and --gateway are required"},
		{[]string{"compare", "--direct", "http://127.0.0.1:1", "--gateway", "http://127.0.0.1:2", "--also", "x"}, "NAME=URL"},
		{[]string{"compare", "--direct", "http://127.0.0.1:1", "--gateway", "http://127.0.0.1:2", "--also", "gateway=http://127.0.0.1:3"}, "already compared"},
		{[]string{"compare", "--direct", "http://127.0.0.1:1", "--gateway", "http://127.0.0.1:2", "--pid", "gateway"}, "NAME=PID"},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--header", "k1"}, "Name: value"},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--scenario", "no-such"}, "--scenario"},
		{[]string{"faults"}, "--gateway is required"},
		{[]string{"refproxy"}, "--upstream is required"},
		{[]string{"local", "--database-url", ""}, "database-url"},
		{[]string{"local", "--budget=false", "--targets", "gateway,bogus"}, `unknown target "bogus"`},
		{[]string{"local", "--budget=false", "--targets", " , "}, "name at least one"},
		{[]string{"local", "--targets", "gateway"}, "--budget needs direct, refproxy and gateway"},
	}
	for _, c := range cases {
		code, _, errOut := runCLI(c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, "%v", c.args)
	}
}

// A short run against a simulator on loopback writes every report.
func TestRunWritesReports(t *testing.T) {
	s, ln, err := sim.Listen("127.0.0.1:0", sim.Config{})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	scenario := filepath.Join(t.TempDir(), "tiny.yaml")
	require.NoError(t, os.WriteFile(scenario, []byte(`name: tiny
wires: {openai: 1}
stream: true
include_usage: true
reply_tokens: 8
mode: closed
concurrency: 2
warmup: 100ms
duration: 500ms
`), 0o600))
	out := filepath.Join(t.TempDir(), "report")
	code, stdout, stderr := runCLI("run", "--scenario", scenario, "--upstream", "--quiet", "--out", out,
		"--target", "http://"+ln.Addr().(*net.TCPAddr).String())
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "tiny")
	for _, f := range []string{"summary.txt", "report.json", "report.html", "latency.svg"} {
		_, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err, f)
	}
	summary, err := os.ReadFile(filepath.Join(out, "summary.txt"))
	require.NoError(t, err)
	require.True(t, strings.Contains(string(summary), "REQUESTS"))
}

func TestParseTargets(t *testing.T) {
	chosen, err := parseTargets("direct,refproxy,nginx,gateway")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"direct": true, "refproxy": true, "nginx": true, "gateway": true}, chosen)
	chosen, err = parseTargets(" gateway , direct,gateway")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"direct": true, "gateway": true}, chosen)

	_, err = parseTargets("gateway,Gateway")
	var ue usageError
	require.ErrorAs(t, err, &ue)
	require.ErrorContains(t, err, `unknown target "Gateway" (direct, refproxy, nginx, gateway)`)
	_, err = parseTargets("")
	require.ErrorAs(t, err, &ue)
}

// A soak against the gateway alone: one target, its memory sampled under
// load and after it, and a report without a baseline to compare with.
func TestSingleTargetSoak(t *testing.T) {
	s, ln, err := sim.Listen("127.0.0.1:0", sim.Config{})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	scenario := filepath.Join(t.TempDir(), "tiny-soak.yaml")
	require.NoError(t, os.WriteFile(scenario, []byte(`name: tiny-soak
wires: {upstream: 1}
stream: true
reply_tokens: 8
mode: closed
concurrency: 2
warmup: -1s
duration: 600ms
sample_rss: 50ms
cooldown: 200ms
`), 0o600))
	sc, err := load.LoadScenario(scenario)
	require.NoError(t, err)
	// This process stands in for the gateway: it is the one with a pid.
	target := load.Target{Name: "gateway", BaseURL: "http://" + ln.Addr().String(), Wire: load.WireUpstream, PID: os.Getpid()}
	cmp, err := compare(context.Background(), sc, []load.Target{target}, true, load.Options{})
	require.NoError(t, err)
	require.Empty(t, cmp.Frontier["gateway"], "no baseline, no frontier")

	dir := filepath.Join(t.TempDir(), "report")
	var stdout bytes.Buffer
	require.NoError(t, write(cmp, dir, &stdout))
	text := stdout.String()
	require.Contains(t, text, "MEMORY VERDICTS")
	require.Contains(t, text, "levels off")
	require.Contains(t, text, "comes back down")
	require.NotContains(t, text, "OVERHEAD")
	require.NotContains(t, text, "baseline")
	for _, f := range []string{"summary.txt", "report.json", "report.html", "latency.svg", "memory.svg"} {
		_, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
	}
	after := 0
	for _, s := range cmp.Results[0].RSS {
		if s.After {
			after++
		}
	}
	require.GreaterOrEqual(t, after, 2)
}
