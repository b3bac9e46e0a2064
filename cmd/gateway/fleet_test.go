package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/child"
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
