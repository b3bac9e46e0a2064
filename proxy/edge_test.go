package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/logtest"
)

// mapSource is a KeySource over fixed maps.
type mapSource struct {
	users map[hotpath.TokenHash]*hotpath.Principal
	svcs  map[hotpath.TokenHash]*hotpath.ServiceToken
}

func (m *mapSource) LookupKey(_ context.Context, h hotpath.TokenHash) (*hotpath.Principal, error) {
	if p, ok := m.users[h]; ok {
		c := *p // a record of its own, as from the database
		return &c, nil
	}
	return nil, hotpath.ErrKeyNotFound
}

func (m *mapSource) LookupServiceToken(_ context.Context, h hotpath.TokenHash) (*hotpath.ServiceToken, error) {
	if s, ok := m.svcs[h]; ok {
		return s, nil
	}
	return nil, hotpath.ErrKeyNotFound
}

type edgeFixture struct {
	client  *http.Client
	logs    *logtest.Buffer
	user    string // a key holding only the memory family
	full    string // an unscoped key
	service string
	ln      *fasthttputil.InmemoryListener
}

func newEdgeFixture(t *testing.T) *edgeFixture {
	t.Helper()
	f := &edgeFixture{logs: &logtest.Buffer{}}
	src := &mapSource{users: map[hotpath.TokenHash]*hotpath.Principal{}, svcs: map[hotpath.TokenHash]*hotpath.ServiceToken{}}
	var h hotpath.TokenHash
	f.user, h = hotpath.GenerateToken(hotpath.TokenUser)
	memory, _ := hotpath.ParseScopes([]string{"memory"})
	src.users[h] = &hotpath.Principal{KeyID: "k-memory", Scopes: memory}
	f.full, h = hotpath.GenerateToken(hotpath.TokenUser)
	src.users[h] = &hotpath.Principal{KeyID: "k-full"}
	f.service, h = hotpath.GenerateToken(hotpath.TokenService)
	src.svcs[h] = &hotpath.ServiceToken{ID: "s1", Name: "billing"}
	v, err := hotpath.NewVerifier(hotpath.VerifierConfig{}, src)
	require.NoError(t, err)
	v.SetLive(true)
	t.Cleanup(v.Close)

	edge := NewEdge(EdgeConfig{Verifier: v, Log: slog.New(slog.NewJSONHandler(f.logs, nil)), Metrics: metrics.NewSet(), AccessLog: true})
	rt := NewRouter(edge)
	ok := func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		ctx.SetBodyString(`{"ok":true}`)
		return nil
	}
	rt.Handle("GET", "/api/v1/open", hotpath.Access{Name: "open"}, ok)
	rt.Handle("GET", "/api/v1/user", hotpath.Access{Name: "user", Auth: hotpath.AuthUser}, ok)
	rt.Handle("GET", "/api/v1/org-only", hotpath.Access{Name: "org", Auth: hotpath.AuthUser, Family: hotpath.FamilyOrg}, ok)
	rt.Handle("GET", "/api/v1/svc", hotpath.Access{Name: "svc", Auth: hotpath.AuthService}, ok)
	rt.HandleOnly("GET", "/v1/thing", hotpath.Access{Name: "thing", Auth: hotpath.AuthUser}, ok)
	rt.Handle("GET", "/api/v1/panic", hotpath.Access{Name: "panic"}, func(*fasthttp.RequestCtx, *hotpath.Call) error {
		panic("boom")
	})
	rt.Handle("GET", "/api/v1/fail", hotpath.Access{Name: "fail"}, func(*fasthttp.RequestCtx, *hotpath.Call) error {
		return io.ErrUnexpectedEOF
	})

	f.ln = fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: rt.Handler(), ErrorHandler: edge.ParseError}
	go func() { _ = srv.Serve(f.ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	f.client = &http.Client{Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return f.ln.Dial() },
	}}
	return f
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
}

func (f *edgeFixture) do(t *testing.T, method, path string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, "http://gw"+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := reply{status: resp.StatusCode, header: resp.Header}
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &r.body), "body %q", raw)
	}
	return r
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func requireEnvelope(t *testing.T, r reply, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.status)
	require.Equal(t, code, r.body["code"], "body %v", r.body)
	require.NotEmpty(t, r.body["error"])
	require.Equal(t, r.header.Get("X-Request-Id"), r.body["request_id"])
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
}

func requireOpenAIEnvelope(t *testing.T, r reply, status int, code, typ string) {
	t.Helper()
	require.Equal(t, status, r.status)
	e, ok := r.body["error"].(map[string]any)
	require.True(t, ok, "body %v", r.body)
	require.Equal(t, code, e["code"])
	require.Equal(t, typ, e["type"])
	require.Contains(t, e, "param")
	require.Nil(t, e["param"])
	require.NotEmpty(t, e["message"])
	require.NotContains(t, r.body, "request_id")
}

func TestEveryResponseCarriesVersionAndRequestID(t *testing.T) {
	f := newEdgeFixture(t)
	for _, path := range []string{"/api/v1/open", "/api/v2/open", "/api/v1/user", "/nowhere", "/v1/nowhere", "/api/v1/panic"} {
		r := f.do(t, "GET", path)
		require.Equal(t, "2026-10-07", r.header.Get("Gateway-Version"), path)
		require.Regexp(t, uuidRE, r.header.Get("X-Request-Id"), path)
	}
}

func TestRequestIDReuse(t *testing.T) {
	f := newEdgeFixture(t)
	long := strings.Repeat("a", 128)
	cases := map[string]bool{"abc-DEF_123": true, long: true, long + "a": false, "has space": false, "semi;colon": false, "ünï": false}
	for id, reused := range cases {
		r := f.do(t, "GET", "/api/v1/open", "X-Request-Id", id)
		if reused {
			require.Equal(t, id, r.header.Get("X-Request-Id"))
		} else {
			require.Regexp(t, uuidRE, r.header.Get("X-Request-Id"), "invalid id %q is replaced", id)
		}
	}
	r := f.do(t, "GET", "/api/v1/user", "X-Request-Id", "trace-1")
	requireEnvelope(t, r, 401, "unauthorized")
	require.Equal(t, "trace-1", r.body["request_id"])
}

func TestVersionPins(t *testing.T) {
	f := newEdgeFixture(t)
	r := f.do(t, "GET", "/api/v1/open", "Gateway-Version", "2026-09-26")
	require.Equal(t, 200, r.status)
	require.Equal(t, "2026-09-26", r.header.Get("Gateway-Version"), "the pin is echoed")

	r = f.do(t, "GET", "/api/v1/open")
	require.Equal(t, "2026-10-07", r.header.Get("Gateway-Version"), "no pin: the current version")
	r = f.do(t, "GET", "/api/v1/open", "Gateway-Version", "")
	require.Equal(t, 200, r.status)
	require.Equal(t, "2026-10-07", r.header.Get("Gateway-Version"), "an empty pin is no pin")

	for _, bad := range []string{"2026-9-26", "20260926", "2026-02-30", "yesterday", "2026-10-07x", "2026-13-01"} {
		r = f.do(t, "GET", "/api/v1/open", "Gateway-Version", bad)
		requireEnvelope(t, r, 400, "invalid_request")
	}
	r = f.do(t, "GET", "/api/v1/open", "Gateway-Version", "2026-10-08")
	requireEnvelope(t, r, 400, "unknown_version")
	r = f.do(t, "GET", "/v1/thing", "Gateway-Version", "2027-01-01", "Authorization", "Bearer "+f.full)
	requireOpenAIEnvelope(t, r, 400, "unknown_version", "invalid_request_error")
}

func TestAuthentication(t *testing.T) {
	f := newEdgeFixture(t)
	unknown, _ := hotpath.GenerateToken(hotpath.TokenUser)
	for name, auth := range map[string]string{
		"missing": "", "malformed": "Bearer gw_live_", "not bearer": "Token " + f.full,
		"unknown": "Bearer " + unknown, "service token on a user route": "Bearer " + f.service,
	} {
		t.Run(name, func(t *testing.T) {
			r := f.do(t, "GET", "/api/v1/user", "Authorization", auth)
			requireEnvelope(t, r, 401, "unauthorized")
			require.Equal(t, "Bearer", r.header.Get("WWW-Authenticate"))
			r = f.do(t, "GET", "/v1/thing", "Authorization", auth)
			requireOpenAIEnvelope(t, r, 401, "unauthorized", "authentication_error")
			require.Equal(t, "Bearer", r.header.Get("WWW-Authenticate"))
		})
	}
	r := f.do(t, "GET", "/api/v1/svc", "Authorization", "Bearer "+f.full)
	requireEnvelope(t, r, 401, "unauthorized")
	r = f.do(t, "GET", "/api/v1/svc", "Authorization", "Bearer "+f.service)
	require.Equal(t, 200, r.status)
	r = f.do(t, "GET", "/api/v2/user", "Authorization", "Bearer "+f.full)
	require.Equal(t, 200, r.status, "every /api/v1 route is served under /api/v2")
}

func TestScopeForbidden(t *testing.T) {
	f := newEdgeFixture(t)
	r := f.do(t, "GET", "/api/v1/org-only", "Authorization", "Bearer "+f.user)
	requireEnvelope(t, r, 403, "key_scope_forbidden")
	require.Equal(t, "org", r.body["required_scope"])
	require.Empty(t, r.header.Get("WWW-Authenticate"))
	r = f.do(t, "GET", "/api/v1/org-only", "Authorization", "Bearer "+f.full)
	require.Equal(t, 200, r.status, "an unscoped key holds every family")
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	f := newEdgeFixture(t)
	requireEnvelope(t, f.do(t, "GET", "/api/v1/nope"), 404, "not_found")
	requireEnvelope(t, f.do(t, "GET", "/api/v1/open/"), 404, "not_found")
	requireOpenAIEnvelope(t, f.do(t, "GET", "/v1/nope"), 404, "not_found", "not_found_error")
	r := f.do(t, "POST", "/api/v1/open")
	requireEnvelope(t, r, 405, "method_not_allowed")
	require.Contains(t, r.header.Get("Allow"), "GET")
	requireOpenAIEnvelope(t, f.do(t, "DELETE", "/v1/thing"), 405, "method_not_allowed", "invalid_request_error")
}

func TestPanicIsRecoveredAndLogged(t *testing.T) {
	f := newEdgeFixture(t)
	r := f.do(t, "GET", "/api/v1/panic", "X-Request-Id", "panic-1")
	requireEnvelope(t, r, 500, "internal_error")
	require.Contains(t, f.logs.String(), `"request_id":"panic-1"`)
	require.Contains(t, f.logs.String(), "handler panicked")
	// The server is still serving.
	require.Equal(t, 200, f.do(t, "GET", "/api/v1/open").status)

	r = f.do(t, "GET", "/api/v1/fail", "X-Request-Id", "fail-1")
	requireEnvelope(t, r, 500, "internal_error")
	require.NotContains(t, r.body["error"], "unexpected EOF", "internal detail stays in the log")
}

func TestMalformedRequestsGetTheEnvelope(t *testing.T) {
	f := newEdgeFixture(t)
	for name, raw := range map[string]string{
		"bad header line":    "GET /api/v1/open HTTP/1.1\r\nHost: gw\r\nBroken header\r\n\r\n",
		"bad content length": "POST /api/v1/open HTTP/1.1\r\nHost: gw\r\nContent-Length: zz\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := f.ln.Dial()
			require.NoError(t, err)
			defer conn.Close()
			require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
			_, err = conn.Write([]byte(raw))
			require.NoError(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, 400, resp.StatusCode)
			var body map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			require.Equal(t, "invalid_request", body["code"])
			require.Equal(t, resp.Header.Get("X-Request-Id"), body["request_id"])
			require.Equal(t, "2026-10-07", resp.Header.Get("Gateway-Version"))
		})
	}
}

func TestOpenAITypesFollowStatus(t *testing.T) {
	cases := map[codec.Code]string{
		codec.CodeInvalidRequest: "invalid_request_error", codec.CodeUnauthorized: "authentication_error",
		codec.CodeKeyScopeForbidden: "permission_error", codec.CodeNotFound: "not_found_error",
		codec.CodeRateLimited: "rate_limit_error", codec.CodeUpstreamOverloaded: "server_error",
	}
	for c, want := range cases {
		require.Equal(t, want, c.OpenAIType(), c.String())
	}
}
