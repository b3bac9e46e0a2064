package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/child"
	bench "github.com/edgegw/gateway/bench/load"
	"github.com/edgegw/gateway/storage/storetest"
)

// balancer is a small TCP load balancer, as a fleet has in front of it: it
// sends each new connection to the next backend whose /api/ready answered
// 200 at its last check, tries the next one when a dial fails, and pipes
// bytes both ways until either side closes. It knows nothing of HTTP
// beyond its readiness checks, so a kept connection stays with its backend.
type balancer struct {
	ln       net.Listener
	mu       sync.Mutex
	backends []*lbBackend
	next     atomic.Uint64
	refused  atomic.Int64 // connections no backend took
}

type lbBackend struct {
	addr  string
	ready atomic.Bool
}

func startBalancer(t *testing.T, n int) *balancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &balancer{ln: ln, backends: make([]*lbBackend, n)}
	for i := range b.backends {
		b.backends[i] = &lbBackend{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { b.check(ctx) })
	wg.Go(b.serve)
	t.Cleanup(func() { cancel(); _ = ln.Close(); wg.Wait() })
	return b
}

// set points slot i at addr, not ready until its first check passes.
func (b *balancer) set(i int, addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends[i] = &lbBackend{addr: addr}
}

func (b *balancer) snapshot() []*lbBackend {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*lbBackend(nil), b.backends...)
}

// check polls every backend's /api/ready every 25 ms, on a new connection
// each time, as load balancers' health checks do.
func (b *balancer) check(ctx context.Context) {
	client := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for {
		for _, be := range b.snapshot() {
			if be.addr == "" {
				continue
			}
			ok := false
			if resp, err := client.Get("http://" + be.addr + "/api/ready"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				ok = resp.StatusCode == http.StatusOK
			}
			be.ready.Store(ok)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (b *balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		go b.handle(c)
	}
}

func (b *balancer) handle(c net.Conn) {
	bes := b.snapshot()
	start := int(b.next.Add(1))
	for i := range bes {
		be := bes[(start+i)%len(bes)]
		if !be.ready.Load() {
			continue
		}
		up, err := net.DialTimeout("tcp", be.addr, time.Second)
		if err != nil {
			continue
		}
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
		go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
		<-done
		_ = c.Close()
		_ = up.Close()
		<-done
		return
	}
	b.refused.Add(1)
	_ = c.Close()
}

func (b *balancer) ready(i int) bool { return b.snapshot()[i].ready.Load() }

// fleetRounds is how many times every process is restarted:
// GATEWAY_FLEET_ROUNDS (make fleet), else one.
func fleetRounds(t *testing.T) int {
	if s := os.Getenv("GATEWAY_FLEET_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "GATEWAY_FLEET_ROUNDS")
		require.Positive(t, n, "GATEWAY_FLEET_ROUNDS")
		return n
	}
	return 1
}

// Three gateway processes on one PostgreSQL and one Redis behind the
// balancer are restarted one after another (SIGINT, the same path as
// SIGTERM) under streaming and non-streaming load: no request fails, and
// every request the load generator sent has its ledger row.
func TestRollingRestartLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: this test builds and starts gateway processes")
	}
	dbURL := storetest.DatabaseURL(t)
	redisURL := storetest.RedisURL(t)
	bin := buildGateway(t)
	out, err := exec.Command(bin, "migrate", "--database-url", dbURL).CombinedOutput()
	require.NoError(t, err, "%s", out)
	tn := newTenant(t, dbURL, "fleet@example.com")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(`
plans:
  default:
    requests_per_minute: 10000000
    org_requests_per_minute: 10000000
    max_concurrent_requests: 10000
`), 0o600))

	const n = 3
	lb := startBalancer(t, n)
	procs := make([]*child.Process, n)
	start := func(i, gen int) {
		p, err := child.Start(context.Background(), fmt.Sprintf("gateway-%d.%d", i, gen), bin, nil, []string{"listening"},
			"serve", "--addr", "127.0.0.1:0", "--admin-addr", "", "--database-url", dbURL, "--redis-url", redisURL,
			"--config", cfgPath, "--drain-delay", "300ms", "--shutdown-timeout", "20s", "--sim-itl", "5ms",
			"--ledger-spool-dir", filepath.Join(dir, fmt.Sprintf("spool-%d-%d", i, gen)))
		require.NoError(t, err)
		procs[i] = p
		lb.set(i, p.Addr)
		require.Eventually(t, func() bool { return lb.ready(i) }, 30*time.Second, 10*time.Millisecond, "process %d never became ready", i)
	}
	for i := range n {
		start(i, 0)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.Stop()
		}
	})

	// Load in segments of a second, streaming and not, until the restarts
	// are done; every segment waits for its requests to end.
	var stop atomic.Bool
	var mu sync.Mutex
	total := map[string]*bench.Result{}
	var wg sync.WaitGroup
	target := bench.Target{Name: "fleet", BaseURL: "http://" + lb.ln.Addr().String(), Key: tn.key}
	for _, stream := range []bool{false, true} {
		sc := &bench.Scenario{Name: fmt.Sprintf("stream=%v", stream), Wires: map[bench.Wire]float64{bench.WireOpenAI: 1, bench.WireV1: 1},
			Tiers: map[string]float64{"mira": 1}, Stream: stream, ReplyTokens: 8, Mode: bench.ModeClosed, Concurrency: 4,
			Warmup: -1, Duration: time.Second, Timeout: 30 * time.Second}
		wg.Go(func() {
			for !stop.Load() {
				res, err := bench.Run(context.Background(), sc, target, bench.Options{})
				require.NoError(t, err)
				mu.Lock()
				if acc := total[sc.Name]; acc == nil {
					total[sc.Name] = res
				} else {
					acc.Requests += res.Requests
					acc.Completed += res.Completed
					acc.Errors += res.Errors
					for k, v := range res.ByCode {
						acc.ByCode[k] += v
					}
					for k, v := range res.ByStatus {
						acc.ByStatus[k] += v
					}
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	for round := 1; round <= fleetRounds(t); round++ {
		for i := range n {
			procs[i].Stop()
			start(i, round)
			time.Sleep(300 * time.Millisecond) // load on the renewed fleet before the next restart
		}
	}
	stop.Store(true)
	wg.Wait()
	for _, p := range procs {
		p.Stop() // each writes its queued ledger rows on the way out
	}

	var sent int64
	for name, r := range total {
		t.Logf("%s: %d requests, %d completed, %d errors, by status %v, by code %v", name, r.Requests, r.Completed, r.Errors, r.ByStatus, r.ByCode)
		require.Zero(t, r.Errors, "%s: failed requests (by code %v, by status %v)", name, r.ByCode, r.ByStatus)
		require.Equal(t, r.Requests, r.Completed, name)
		require.Positive(t, r.Requests, name)
		sent += r.Requests
	}
	require.Zero(t, lb.refused.Load(), "connections no backend took")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var rows, ok int64
	require.NoError(t, conn.QueryRow(ctx, `select count(*), count(*) filter (where status = 200) from request_log where key_id = $1`,
		tn.keyID).Scan(&rows, &ok))
	t.Logf("ledger: %d rows for %d requests sent", rows, sent)
	require.Equal(t, sent, rows, "one ledger row per request, none lost")
	require.Equal(t, sent, ok)
}
