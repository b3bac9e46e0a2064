package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/child"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/storage/storetest"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// buildGateway compiles this command once per test binary.
func buildGateway(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gateway-test-bin")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "gateway")
		cmd := exec.Command("go", "build", "-o", builtBin, ".")
		cmd.Stderr = os.Stderr
		buildErr = cmd.Run()
	})
	require.NoError(t, buildErr, "cannot build the gateway")
	return builtBin
}

// process is one `gateway serve` started as its own OS process.
type process struct {
	addr string
}

// startChild runs bin with args as a child process, stopped when the test
// ends, once it has logged every message in wait; it returns the "addr" of
// the first.
func startChild(t *testing.T, bin string, env []string, wait []string, args ...string) string {
	t.Helper()
	p, err := child.Start(context.Background(), filepath.Base(bin), bin, env, wait, args...)
	require.NoError(t, err)
	t.Cleanup(p.Stop)
	return p.Addr
}

// startProcess runs `gateway serve` on a free loopback port and returns once
// it listens and its key invalidation channel is live, so the revocation
// below can only reach it as a notification.
func startProcess(t *testing.T, bin, dbURL string) *process {
	t.Helper()
	addr := startChild(t, bin, []string{"DATABASE_URL=" + dbURL, "GATEWAY_DEMO=false"},
		[]string{"listening", "key invalidation channel listening"},
		"serve", "--addr", "127.0.0.1:0", "--admin-addr", "", "--log-level", "debug")
	return &process{addr: addr}
}

// Two gateway processes share one database; a key revoked through one is
// refused by the other within a second, carried by PostgreSQL notifications.
func TestRevocationReachesEveryProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: this test builds and starts two gateway processes")
	}
	dbURL := storetest.DatabaseURL(t)
	bin := buildGateway(t)
	var out, errOut strings.Builder
	cmd := exec.Command(bin, "migrate", "--database-url", dbURL)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), errOut.String())

	a := startProcess(t, bin, dbURL)
	b := startProcess(t, bin, dbURL)
	tn := newTenant(t, dbURL, "fleet@example.com")

	// Both processes have the key cached.
	for range 3 {
		require.Equal(t, 200, call(t, a.addr, "GET", "/api/v1/me", tn.key, nil).status)
		require.Equal(t, 200, call(t, b.addr, "GET", "/api/v1/me", tn.key, nil).status)
	}
	start := time.Now()
	r := call(t, a.addr, "DELETE", "/api/v1/keys/"+tn.keyID, tn.key, nil)
	require.Equal(t, 204, r.status)
	require.Equal(t, 401, call(t, a.addr, "GET", "/api/v1/me", tn.key, nil).status, "the revoking process refuses at once")
	var took time.Duration
	for {
		if call(t, b.addr, "GET", "/api/v1/me", tn.key, nil).status == 401 {
			took = time.Since(start)
			break
		}
		require.Less(t, time.Since(start), time.Second, "the other process still accepts the revoked key")
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("revocation reached the other process in %v", took)
}

// fleetSizes are the sizes the limits and idempotency suites run over: one
// process on its in-process stores (the single-process default) and three
// on one Redis. Both sizes make the same assertions.
var fleetSizes = []int{1, 3}

// fleet is n gateway instances in this test process, each with its own
// counters client, key cache, idempotency store and ledger writer, on one
// PostgreSQL database and, when n > 1, one Redis: what n processes of a
// deployment share. Requests go round-robin across the instances, as a
// balancer sends them.
type fleet struct {
	apps  []*testApp
	dbURL string
	next  atomic.Uint64
}

// startFleet starts a fleet of n; mutate applies to every instance's
// configuration after the fleet's own settings.
func startFleet(t *testing.T, n int, mutate ...func(*serveConfig)) *fleet {
	t.Helper()
	f := &fleet{dbURL: storetest.DatabaseURL(t)}
	redisURL := ""
	if n > 1 {
		redisURL = storetest.RedisURL(t)
	}
	shared := func(c *serveConfig) { c.DB.URL, c.RedisURL = f.dbURL, redisURL }
	for range n {
		f.apps = append(f.apps, startTestApp(t, append([]func(*serveConfig){shared}, mutate...)...))
	}
	return f
}

// eachFleet runs test once per fleet size, as subtests named after it.
func eachFleet(t *testing.T, test func(t *testing.T, n int)) {
	for _, n := range fleetSizes {
		t.Run(fmt.Sprintf("processes=%d", n), func(t *testing.T) { test(t, n) })
	}
}

// Addr is the address of the instance whose turn it is: each call moves
// the turn on.
func (f *fleet) Addr() string {
	return f.apps[int((f.next.Add(1)-1)%uint64(len(f.apps)))].Addr()
}

// call sends one request to the instance whose turn it is.
func (f *fleet) call(t *testing.T, method, path, key string, body any, headers ...string) resp {
	t.Helper()
	return call(t, f.Addr(), method, path, key, body, headers...)
}

// counters is the fleet's counter store, as any instance sees it.
func (f *fleet) counters() meter.Counters { return f.apps[0].limits.Counters() }

// TestRevocationAcrossFleet: a key revoked through one instance is refused
// by that instance from the next request and by every other within a
// second, though every instance had it cached.
func TestRevocationAcrossFleet(t *testing.T) {
	eachFleet(t, func(t *testing.T, n int) {
		f := startFleet(t, n)
		tn := newTenant(t, f.dbURL, "revoke@example.com")
		for _, a := range f.apps {
			require.Equal(t, 200, a.call(t, "GET", "/api/v1/me", tn.key, nil).status)
		}
		// Rotated through one instance: the old secret is refused by every
		// instance from the next request, the new one served.
		r := f.apps[0].call(t, "POST", "/api/v1/keys/"+tn.keyID+"/rotate", tn.key, nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		rotated := r.body["access_token"].(string)
		for i, a := range f.apps {
			require.Equal(t, 401, a.call(t, "GET", "/api/v1/me", tn.key, nil).status, "instance %d accepts the old secret", i)
			require.Equal(t, 200, a.call(t, "GET", "/api/v1/me", rotated, nil).status, "instance %d", i)
		}
		// Revoked through another: refused everywhere from the next request
		// (spec: key validity, "401 from the next request").
		require.Equal(t, 204, f.apps[n-1].call(t, "DELETE", "/api/v1/keys/"+tn.keyID, rotated, nil).status)
		for i, a := range f.apps {
			require.Equal(t, 401, a.call(t, "GET", "/api/v1/me", rotated, nil).status, "instance %d accepts the revoked key", i)
		}
		r = f.call(t, "POST", "/api/v1/chat", rotated, chatBody("Hello"))
		require.Equal(t, 401, r.status, "chat is refused too: %s", r.raw)
	})
}
