package control

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// routeTable records what Register adds.
type routeTable map[string]struct {
	access  hotpath.Access
	handler func(*fasthttp.RequestCtx, *hotpath.Call) error
}

func (rt routeTable) Handle(method, path string, a hotpath.Access, h func(*fasthttp.RequestCtx, *hotpath.Call) error) {
	rt[method+" "+path] = struct {
		access  hotpath.Access
		handler func(*fasthttp.RequestCtx, *hotpath.Call) error
	}{a, h}
}

type logsFixture struct {
	api    *API
	get    func(*fasthttp.RequestCtx, *hotpath.Call) error
	ledger *storage.Ledger
	ada    *hotpath.Principal // org Acme
	bob    *hotpath.Principal // org Acme, another user
	adaGlo *hotpath.Principal // Ada's key in her other organization
}

func newLogsFixture(t *testing.T, cfg ...storage.LedgerConfig) *logsFixture {
	t.Helper()
	ctx := context.Background()
	db := storetest.DB(t)
	acme, err := db.CreateOrg(ctx, "Acme")
	require.NoError(t, err)
	ada, err := db.CreateUser(ctx, "ada@example.com", acme.ID, hotpath.RoleOwner)
	require.NoError(t, err)
	bob, err := db.CreateUser(ctx, "bob@example.com", acme.ID, hotpath.RoleMember)
	require.NoError(t, err)
	lc := storage.LedgerConfig{}
	if len(cfg) > 0 {
		lc = cfg[0]
	}
	lc.SpoolDir = t.TempDir()
	l, err := storage.NewLedger(db, lc, metrics.NewSet(),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close(context.Background()) })

	rt := routeTable{}
	a := &API{DB: db}
	a.registerLogs(rt)
	route, ok := rt["GET /api/v1/logs/{request_id}"]
	require.True(t, ok)
	require.Equal(t, hotpath.AuthUser, route.access.Auth)
	require.Equal(t, hotpath.FamilyLogs, route.access.Family, "the logs scope guards the route")
	return &logsFixture{api: a, get: route.handler, ledger: l,
		ada:    &hotpath.Principal{KeyID: "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a71", UserID: ada.ID, OrgID: acme.ID},
		bob:    &hotpath.Principal{KeyID: "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a72", UserID: bob.ID, OrgID: acme.ID},
		adaGlo: &hotpath.Principal{KeyID: "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a73", UserID: ada.ID, OrgID: ada.PersonalOrgID},
	}
}

func (f *logsFixture) record(p *hotpath.Principal, r hotpath.UsageRecord) {
	r.KeyID, r.UserID, r.OrgID = p.KeyID, p.UserID, p.OrgID
	f.ledger.Record(&r)
}

func (f *logsFixture) flush(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, f.ledger.Flush(ctx))
}

// read calls the route as p and returns the decoded body, or the error the
// handler returned.
func (f *logsFixture) read(t *testing.T, p *hotpath.Principal, id string) (map[string]any, error) {
	t.Helper()
	var ctx fasthttp.RequestCtx
	ctx.SetUserValue("request_id", id)
	if err := f.get(&ctx, &hotpath.Call{User: p}); err != nil {
		return nil, err
	}
	require.Equal(t, fasthttp.StatusOK, ctx.Response.StatusCode())
	require.Equal(t, "application/json", string(ctx.Response.Header.ContentType()))
	var body map[string]any
	d := json.NewDecoder(bytes.NewReader(ctx.Response.Body()))
	d.UseNumber()
	require.NoError(t, d.Decode(&body))
	return body, nil
}

func requireNotFound(t *testing.T, err error) {
	t.Helper()
	var cerr *codec.Error
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, codec.CodeRequestNotFound, cerr.Code)
	require.Equal(t, 404, cerr.Status())
}

func TestLogsRouteBody(t *testing.T) {
	f := newLogsFixture(t)
	at := time.Date(2026, 10, 7, 9, 15, 30, 250_000_000, time.UTC)
	f.record(f.ada, hotpath.UsageRecord{RequestID: "req-stream", At: at, WorkspaceID: "5b1f0c8e-1d2a-4c3b-8e4f-6a7b8c9d0e11",
		Bucket: "subscription", Route: "chat_v2", Tier: "kavi", Status: 200, InputTokens: 1200, OutputTokens: 345,
		WeightedTokens: 2890, CostPico: 1_234_567_890, Estimated: true, Billed: true, Stream: true,
		DurationUS: 1_234_567, TTFTUS: 89_001})
	f.record(f.ada, hotpath.UsageRecord{RequestID: "req-refused", At: at, Bucket: "subscription", Route: "chat_v1",
		Status: 429, ErrorCode: "budget_exhausted", DurationUS: 800})
	f.flush(t)

	body, err := f.read(t, f.ada, "req-stream")
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"object":       "request_log",
		"request_id":   "req-stream",
		"created_at":   "2026-10-07T09:15:30Z",
		"key_id":       f.ada.KeyID,
		"workspace_id": "5b1f0c8e-1d2a-4c3b-8e4f-6a7b8c9d0e11",
		"route":        "chat_v2",
		"model":        "kavi",
		"bucket":       "subscription",
		"status":       json.Number("200"),
		"error_code":   nil,
		"stream":       true,
		"billed":       true,
		"usage": map[string]any{"input_tokens": json.Number("1200"), "output_tokens": json.Number("345"),
			"weighted_tokens": json.Number("2890"), "estimated": true},
		"cost":     map[string]any{"amount": json.Number("0.00123456789"), "currency": "USD"},
		"timing":   map[string]any{"duration_ms": json.Number("1234.567"), "ttft_ms": json.Number("89.001")},
		"feedback": []any{},
	}, body)

	body, err = f.read(t, f.ada, "req-refused")
	require.NoError(t, err)
	require.Nil(t, body["model"])
	require.Nil(t, body["workspace_id"])
	require.Equal(t, "budget_exhausted", body["error_code"])
	require.Equal(t, json.Number("429"), body["status"])
	require.Equal(t, false, body["billed"])
	require.Equal(t, map[string]any{"amount": json.Number("0"), "currency": "USD"}, body["cost"])
	require.Equal(t, map[string]any{"duration_ms": json.Number("0.8"), "ttft_ms": nil}, body["timing"])
}

func TestLogsRouteReadsOnlyTheCallersOwn(t *testing.T) {
	f := newLogsFixture(t)
	// Three callers send the same X-Request-Id.
	f.record(f.ada, hotpath.UsageRecord{RequestID: "shared", At: time.Now(), Route: "chat_v1", Status: 200, OutputTokens: 1})
	f.record(f.bob, hotpath.UsageRecord{RequestID: "shared", At: time.Now(), Route: "chat_v1", Status: 200, OutputTokens: 2})
	f.record(f.adaGlo, hotpath.UsageRecord{RequestID: "shared", At: time.Now(), Route: "chat_v1", Status: 200, OutputTokens: 3})
	f.record(f.bob, hotpath.UsageRecord{RequestID: "bobs-only", At: time.Now(), Route: "chat_v1", Status: 200})
	f.flush(t)

	for _, c := range []struct {
		who  *hotpath.Principal
		want string
	}{{f.ada, "1"}, {f.bob, "2"}, {f.adaGlo, "3"}} {
		body, err := f.read(t, c.who, "shared")
		require.NoError(t, err)
		require.Equal(t, json.Number(c.want), body["usage"].(map[string]any)["output_tokens"])
		require.Equal(t, c.who.KeyID, body["key_id"])
	}

	// Any key of the same user in the same organization reads it.
	otherKey := *f.bob
	otherKey.KeyID = "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7f"
	_, err := f.read(t, &otherKey, "bobs-only")
	require.NoError(t, err)

	for name, c := range map[string]struct {
		who *hotpath.Principal
		id  string
	}{
		"another user's request":            {f.ada, "bobs-only"},
		"the same user in another org":      {f.adaGlo, "bobs-only"},
		"an unknown request id":             {f.ada, "never-sent"},
		"a request id that cannot be valid": {f.ada, "bad id!"},
		"an overlong request id":            {f.ada, string(make([]byte, 129))},
		"an empty request id":               {f.ada, ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.read(t, c.who, c.id)
			requireNotFound(t, err)
		})
	}
}

func TestLogsRouteQueuedRowIsNotFoundUntilWritten(t *testing.T) {
	f := newLogsFixture(t, storage.LedgerConfig{FlushInterval: time.Hour, RetryMax: time.Hour})
	f.record(f.ada, hotpath.UsageRecord{RequestID: "in-flight", At: time.Now(), Route: "chat_v1", Status: 200})
	_, err := f.read(t, f.ada, "in-flight")
	requireNotFound(t, err)
	f.flush(t)
	_, err = f.read(t, f.ada, "in-flight")
	require.NoError(t, err)
}
