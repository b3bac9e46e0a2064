package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFeedbackRoute reports on a real chat request through the HTTP
// routes: stored, replaced, shown by the logs route, refused for another
// tenant's request with the same 404 as an unknown one, and guarded by the
// feedback scope.
func TestFeedbackRoute(t *testing.T) {
	ta := startTestApp(t)
	ada := newTenant(t, ta.dbURL, "ada@example.com")
	eve := newTenant(t, ta.dbURL, "eve@example.com")
	noScope := newTenant(t, ta.dbURL, "nos@example.com", "--scopes", "chat,logs")

	chat := ta.call(t, "POST", "/api/v1/chat", ada.key, map[string]any{"model": "mira",
		"messages": []any{map[string]any{"role": "user", "content": "hello"}}})
	require.Equal(t, 200, chat.status, "%s", chat.raw)
	id := chat.header.Get("X-Request-Id")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, ta.ledger.Flush(ctx))

	for _, path := range []string{"/api/v1/feedback", "/api/v2/feedback"} {
		r := ta.call(t, "POST", path, eve.key, map[string]any{"request_id": id, "type": "thumbs", "payload": map[string]any{"value": "up"}})
		require.Equal(t, 404, r.status)
		require.Equal(t, "request_not_found", r.body["code"])
		unknown := ta.call(t, "POST", path, ada.key, map[string]any{"request_id": "no-such-request", "type": "thumbs", "payload": map[string]any{"value": "up"}})
		require.Equal(t, r.status, unknown.status, "another tenant's id answers as an unknown one")
		require.Equal(t, r.body["code"], unknown.body["code"])
		require.Equal(t, r.body["error"], unknown.body["error"])
	}

	r := ta.call(t, "POST", "/api/v1/feedback", ada.key, map[string]any{"request_id": id, "type": "thumbs", "payload": map[string]any{"value": "up"}})
	require.Equal(t, 201, r.status, "%s", r.raw)
	r = ta.call(t, "POST", "/api/v2/feedback", ada.key, map[string]any{"request_id": id, "type": "thumbs", "payload": map[string]any{"value": "down", "comment": "wrong"}})
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, true, r.body["replaced"])
	r = ta.call(t, "POST", "/api/v1/feedback", ada.key, map[string]any{"request_id": id, "type": "test_result", "payload": map[string]any{"passed": true}})
	require.Equal(t, 201, r.status, "%s", r.raw)

	r = ta.call(t, "POST", "/api/v1/feedback", ada.key, map[string]any{"request_id": id, "type": "thumbs", "payload": map[string]any{"value": "up", "extra": 1}})
	require.Equal(t, 400, r.status)
	require.Equal(t, "invalid_request", r.body["code"])

	logs := ta.call(t, "GET", "/api/v1/logs/"+id, ada.key, nil)
	require.Equal(t, 200, logs.status, "%s", logs.raw)
	require.Equal(t, []any{"test_result", "thumbs"}, logs.body["feedback"])

	r = ta.call(t, "POST", "/api/v1/feedback", noScope.key, map[string]any{"request_id": id, "type": "thumbs", "payload": map[string]any{"value": "up"}})
	require.Equal(t, 403, r.status)
	require.Equal(t, "key_scope_forbidden", r.body["code"])
	require.Equal(t, "feedback", r.body["required_scope"])
}
