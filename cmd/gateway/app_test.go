package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/sim"
	"github.com/edgegw/gateway/hotpath/logtest"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

type testApp struct {
	*app
	dbURL string
	logs  *logtest.Buffer
}

func testConfig(dbURL string) serveConfig {
	return serveConfig{
		Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DB: storage.Config{URL: dbURL}, Migrate: true,
		LogLevel: "debug", LogFormat: "json", AccessLog: true, MaxBodySize: 1 << 20,
		ReadTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second, ShutdownTimeout: 5 * time.Second, IdempotencyTTL: time.Hour,
		Eval: evalFlags{Workers: 4, Fleet: 32, Lease: 30 * time.Second, Poll: 100 * time.Millisecond},
	}
}

func startTestApp(t *testing.T, mutate ...func(*serveConfig)) *testApp {
	t.Helper()
	cfg := testConfig(storetest.DatabaseURL(t))
	// Spooled rows belong to their own database: each app spools apart.
	cfg.Ledger.SpoolDir = t.TempDir()
	for _, m := range mutate {
		m(&cfg)
	}
	require.NoError(t, cfg.validate())
	logs := &logtest.Buffer{}
	a, err := startApp(context.Background(), cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	require.NoError(t, err)
	t.Cleanup(a.shutdown)
	ta := &testApp{app: a, dbURL: cfg.DB.URL, logs: logs}
	ta.waitLive(t)
	return ta
}

// waitLive waits until the key invalidation listener is up, so that tests
// about invalidation start from a listening process.
func (ta *testApp) waitLive(t *testing.T) {
	t.Helper()
	require.Eventually(t, ta.verifier.Live, 10*time.Second, 5*time.Millisecond)
}

type resp struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

func call(t *testing.T, addr, method, path, key string, body any, headers ...string) resp {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+addr+path, rd)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return do(t, req)
}

// do sends req and reads the whole answer, decoding a JSON body.
func do(t *testing.T, req *http.Request) resp {
	t.Helper()
	r, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer r.Body.Close()
	out := resp{status: r.StatusCode, header: r.Header}
	out.raw, err = io.ReadAll(r.Body)
	require.NoError(t, err)
	if len(out.raw) > 0 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(out.raw, &out.body), "body %s", out.raw)
	}
	return out
}

// simnetConfig runs a simulator of the test's own on a TCP port, reached as
// a real upstream is, and writes a config file whose provider "simnet" is
// that simulator, followed by rest (the tiers and anything else). It
// returns the file's path.
func simnetConfig(t *testing.T, rest string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, os.WriteFile(path, []byte("providers:\n  simnet:\n    base_url: http://"+startSimnet(t)+"/v1\n"+rest), 0o600))
	return path
}

// startSimnet runs a simulator of the test's own on a loopback TCP port
// until the test ends, and returns its address.
func startSimnet(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := sim.New(sim.Config{})
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Shutdown)
	return ln.Addr().String()
}

// metricsPage reads the admin listener's /metrics; "" when it cannot.
func (ta *testApp) metricsPage(t *testing.T) string {
	t.Helper()
	m, err := http.Get("http://" + ta.adminLn.Addr().String() + "/metrics")
	if err != nil {
		return ""
	}
	defer m.Body.Close()
	page, err := io.ReadAll(m.Body)
	if err != nil {
		return ""
	}
	return string(page)
}

func (ta *testApp) call(t *testing.T, method, path, key string, body any, headers ...string) resp {
	t.Helper()
	return call(t, ta.Addr(), method, path, key, body, headers...)
}

// admin runs `gateway admin ...` against the app's database and decodes
// its JSON output.
func admin(t *testing.T, dbURL string, args ...string) map[string]any {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append(append([]string{"admin"}, args...), "--database-url", dbURL), &out, &errOut)
	require.Zero(t, code, "gateway admin %v: %s", args, errOut.String())
	var v map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &v))
	return v
}

// tenant is an organization with one user holding one developer key.
type tenant struct {
	orgID, userID, keyID, key string
}

func newTenant(t *testing.T, dbURL, email string, keyFlags ...string) tenant {
	t.Helper()
	org := admin(t, dbURL, "org", "create", "--name", "Org of "+email)
	user := admin(t, dbURL, "user", "create", "--email", email, "--org", org["id"].(string), "--role", "owner")
	key := admin(t, dbURL, append([]string{"key", "create", "--user", user["id"].(string), "--org", org["id"].(string)}, keyFlags...)...)
	return tenant{orgID: org["id"].(string), userID: user["id"].(string), keyID: key["key_id"].(string), key: key["access_token"].(string)}
}
