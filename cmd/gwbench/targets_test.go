package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/bench/load"
	"github.com/edgegw/gateway/bench/refproxy"
	"github.com/edgegw/gateway/bench/sim"
)

func TestParseAlso(t *testing.T) {
	got, err := parseAlso("peer=http://127.0.0.1:4000/openai,model=openai/sim-{tier},path=/chat/completions," +
		"header=x-api-key: k1,pid=42")
	require.NoError(t, err)
	require.Equal(t, load.Target{Name: "peer", BaseURL: "http://127.0.0.1:4000/openai", Wire: load.WireUpstream,
		Model: "openai/sim-{tier}", Path: "/chat/completions", AuthHeader: "x-api-key: k1",
		Procs: []load.Proc{{Name: "peer", PID: 42, Own: true}}}, got)

	got, err = parseAlso("b=http://127.0.0.1:8081,wire=openai,key=gw_live_x")
	require.NoError(t, err)
	require.Equal(t, load.Target{Name: "b", BaseURL: "http://127.0.0.1:8081", Wire: load.WireOpenAI, Key: "gw_live_x"}, got)

	for bad, want := range map[string]string{
		"x":                                  "want NAME=URL",
		"p=http://127.0.0.1:1,model":         `option "model"`,
		"p=http://127.0.0.1:1,header=k1":     `want "Name: value"`,
		"p=http://127.0.0.1:1,wire=v3":       "upstream, openai, v1 or v2",
		"p=http://127.0.0.1:1,pid=-1":        "want a process id",
		"p=http://127.0.0.1:1,colour=blue":   `unknown option "colour"`,
		"p=http://127.0.0.1:1,pid=forty-two": "want a process id",
	} {
		_, err := parseAlso(bad)
		var ue usageError
		require.ErrorAs(t, err, &ue, bad)
		require.ErrorContains(t, err, want, bad)
	}
}

func TestAttachProcs(t *testing.T) {
	procs, err := parsePIDs([]string{"gateway=10", "postgres=20", "peer=30", "simulator=40"})
	require.NoError(t, err)
	targets := []load.Target{
		{Name: "direct", Procs: []load.Proc{{Name: "simulator", PID: 40, Own: true}}},
		{Name: "peer"},
		{Name: "gateway", PID: 10},
		{Name: "none"},
	}
	attachProcs(targets, procs)
	// The load generator, this process without its children, is beside
	// every target that has a process measured.
	loadgen := load.Proc{Name: "load generator", PID: os.Getpid(), Alone: true}
	shared := []load.Proc{{Name: "postgres", PID: 20}, {Name: "simulator", PID: 40}, loadgen}
	require.Equal(t, []load.Proc{{Name: "simulator", PID: 40, Own: true}, {Name: "postgres", PID: 20}, loadgen}, targets[0].Procs,
		"the simulator once, as direct's own")
	require.Equal(t, append([]load.Proc{{Name: "peer", PID: 30, Own: true}}, shared...), targets[1].Procs)
	require.Equal(t, append([]load.Proc{{Name: "gateway", PID: 10, Own: true}}, shared...), targets[2].Procs)
	require.Equal(t, shared, targets[3].Procs)

	bare := []load.Target{{Name: "bare"}}
	attachProcs(bare, nil)
	require.Empty(t, bare[0].Procs, "nothing measured: not the load generator alone either")

	for _, bad := range []string{"gateway", "gateway=", "=1", "gateway=0", "gateway=x"} {
		_, err := parsePIDs([]string{bad})
		require.ErrorContains(t, err, "want NAME=PID", bad)
	}
}

// gwbench compare drives a target that is not this gateway, addressed its
// own way: the bare reference proxy, under a path prefix, with a provider
// style model name and an x-api-key header. What reaches the simulator
// behind it is exactly that, and the target's own process (this one) has
// its CPU in the report, while a target without a pid has none.
func TestCompareDrivesAPeerItsOwnWay(t *testing.T) {
	type arrival struct{ path, apiKey, authorization, model string }
	var (
		mu   sync.Mutex
		seen []arrival
	)
	simulator := sim.New(sim.Config{})
	recorded := serveLoopback(t, func(ctx *fasthttp.RequestCtx) {
		var body struct{ Model string }
		_ = json.Unmarshal(ctx.PostBody(), &body)
		mu.Lock()
		seen = append(seen, arrival{string(ctx.Path()), string(ctx.Request.Header.Peek("x-api-key")),
			string(ctx.Request.Header.Peek("Authorization")), body.Model})
		mu.Unlock()
		simulator.Handler()(ctx)
	})
	proxy, err := refproxy.New(refproxy.Config{Upstream: recorded})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = proxy.Serve(ln) }()
	t.Cleanup(proxy.Shutdown)
	s, simLn, err := sim.Listen("127.0.0.1:0", sim.Config{})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	plain := "http://" + simLn.Addr().String()

	scenario := filepath.Join(t.TempDir(), "tiny.yaml")
	require.NoError(t, os.WriteFile(scenario, []byte(`name: tiny
wires: {openai: 1}
stream: true
include_usage: true
reply_tokens: 8
concurrency: 2
warmup: 100ms
duration: 600ms
`), 0o600))
	out := filepath.Join(t.TempDir(), "report")
	code, stdout, stderr := runCLI("compare", "--scenario", scenario, "--quiet", "--out", out,
		"--direct", plain, "--gateway", plain, "--key", "gw-key",
		"--also", "peer=http://"+ln.Addr().String()+"/v1,path=/chat/completions,model=openai/sim-{tier},"+
			"header=x-api-key: peer-key,pid="+strconv.Itoa(os.Getpid()))
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "CPU AND MEMORY")

	raw, err := os.ReadFile(filepath.Join(out, "report.json"))
	require.NoError(t, err)
	var doc struct {
		Targets []struct {
			Name      string
			Requests  int64
			Completed int64
			Errors    int64
			CPU       []load.ProcCost `json:"cpu"`
		}
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Len(t, doc.Targets, 3)
	peer := doc.Targets[1]
	require.Equal(t, "peer", peer.Name)
	require.Positive(t, peer.Completed)
	require.Zero(t, peer.Errors)
	require.Len(t, peer.CPU, 1)
	require.Equal(t, os.Getpid(), peer.CPU[0].PID)
	require.Positive(t, peer.CPU[0].PerKRequests)
	require.Positive(t, peer.CPU[0].PerKFrames)
	require.Equal(t, "gateway", doc.Targets[2].Name)
	require.Nil(t, doc.Targets[2].CPU, "no pid given: no figures")

	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, int64(len(seen)), peer.Requests, "the measured requests and the warm-up's")
	for _, a := range seen {
		require.Equal(t, arrival{"/v1/chat/completions", "peer-key", "", "openai/sim-mira"}, a)
	}
}

// serveLoopback serves h on a loopback port and returns its base URL.
func serveLoopback(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &fasthttp.Server{Handler: h, CloseOnShutdown: true}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}
