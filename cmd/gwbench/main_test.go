package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
		{[]string{"run", "--target", "http://127.0.0.1:1", "--scenario", "no-such"}, "--scenario"},
		{[]string{"faults"}, "--gateway is required"},
		{[]string{"refproxy"}, "--upstream is required"},
		{[]string{"local", "--database-url", ""}, "database-url"},
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
