package control

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// feedbackFixture is the logs fixture with the feedback route beside it.
type feedbackFixture struct {
	*logsFixture
	post func(*fasthttp.RequestCtx, *hotpath.Call) error
}

func newFeedbackFixture(t *testing.T) *feedbackFixture {
	f := newLogsFixture(t)
	rt := routeTable{}
	f.api.registerFeedback(rt)
	route, ok := rt["POST /api/v1/feedback"]
	require.True(t, ok)
	require.Equal(t, hotpath.AuthUser, route.access.Auth)
	require.Equal(t, hotpath.FamilyFeedback, route.access.Family, "the feedback scope guards the route")
	require.False(t, route.access.Billable, "feedback costs nothing")
	return &feedbackFixture{logsFixture: f, post: route.handler}
}

// send posts body as p; it returns the status and decoded body, or the
// handler's error.
func (f *feedbackFixture) send(t *testing.T, p *hotpath.Principal, body string) (int, map[string]any, error) {
	t.Helper()
	var ctx fasthttp.RequestCtx
	ctx.Request.SetBodyString(body)
	if err := f.post(&ctx, &hotpath.Call{User: p}); err != nil {
		return 0, nil, err
	}
	var out map[string]any
	require.NoError(t, json.Unmarshal(ctx.Response.Body(), &out))
	return ctx.Response.StatusCode(), out, nil
}

func (f *feedbackFixture) types(t *testing.T, p *hotpath.Principal, id string) []any {
	t.Helper()
	body, err := f.read(t, p, id)
	require.NoError(t, err)
	return body["feedback"].([]any)
}

func TestFeedbackStoresReplacesAndShowsInLogs(t *testing.T) {
	f := newFeedbackFixture(t)
	f.record(f.ada, hotpath.UsageRecord{RequestID: "req-1", At: time.Now(), Route: "chat_v1", Status: 200})
	f.flush(t)
	require.Equal(t, []any{}, f.types(t, f.ada, "req-1"))

	status, body, err := f.send(t, f.ada, `{"request_id":"req-1","type":"thumbs","payload":{"value":"down","comment":"too long"}}`)
	require.NoError(t, err)
	require.Equal(t, fasthttp.StatusCreated, status)
	require.Equal(t, "feedback", body["object"])
	require.Equal(t, "req-1", body["request_id"])
	require.Equal(t, "thumbs", body["type"])
	require.Equal(t, map[string]any{"value": "down", "comment": "too long"}, body["payload"])
	require.Equal(t, false, body["replaced"])

	// The same type again replaces the earlier report.
	status, body, err = f.send(t, f.ada, `{"request_id":"req-1","type":"thumbs","payload":{"value":"up"}}`)
	require.NoError(t, err)
	require.Equal(t, fasthttp.StatusOK, status)
	require.Equal(t, true, body["replaced"])
	require.Equal(t, map[string]any{"value": "up"}, body["payload"])
	var stored string
	require.NoError(t, f.api.DB.Pool.QueryRow(t.Context(),
		`select payload::text from feedback where request_id = 'req-1' and type = 'thumbs'`).Scan(&stored))
	require.JSONEq(t, `{"value":"up"}`, stored, "the replacement, not a merge")
	var n int
	require.NoError(t, f.api.DB.Pool.QueryRow(t.Context(), `select count(*) from feedback`).Scan(&n))
	require.Equal(t, 1, n)

	status, _, err = f.send(t, f.ada, `{"request_id":"req-1","type":"test_result","payload":{"passed":false,"name":"unit","details":"1 failed"}}`)
	require.NoError(t, err)
	require.Equal(t, fasthttp.StatusCreated, status)
	status, _, err = f.send(t, f.ada, `{"request_id":"req-1","type":"edit_rejected"}`)
	require.NoError(t, err, "edit payloads have no required field; payload may be omitted")
	require.Equal(t, fasthttp.StatusCreated, status)
	require.Equal(t, []any{"edit_rejected", "test_result", "thumbs"}, f.types(t, f.ada, "req-1"))
}

func TestFeedbackOnlyOnTheCallersOwnRequests(t *testing.T) {
	f := newFeedbackFixture(t)
	f.record(f.bob, hotpath.UsageRecord{RequestID: "bobs", At: time.Now(), Route: "chat_v1", Status: 200})
	f.record(f.adaGlo, hotpath.UsageRecord{RequestID: "other-org", At: time.Now(), Route: "chat_v1", Status: 200})
	f.flush(t)
	for name, id := range map[string]string{
		"another user's request":        "bobs",
		"her own id in another org":     "other-org",
		"an unknown id":                 "no-such-request",
		"a malformed id":                "not a request id!",
		"an id longer than request ids": strings.Repeat("a", 129),
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := f.send(t, f.ada, `{"request_id":`+quote(id)+`,"type":"thumbs","payload":{"value":"up"}}`)
			requireNotFound(t, err)
		})
	}
	var n int
	require.NoError(t, f.api.DB.Pool.QueryRow(t.Context(), `select count(*) from feedback`).Scan(&n))
	require.Zero(t, n, "nothing written")
	require.Equal(t, []any{}, f.types(t, f.bob, "bobs"))
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestFeedbackValidation(t *testing.T) {
	f := newFeedbackFixture(t)
	f.record(f.ada, hotpath.UsageRecord{RequestID: "req-v", At: time.Now(), Route: "chat_v1", Status: 200})
	f.flush(t)
	long := func(n int) string { return quote(strings.Repeat("é", n)) } // 2 bytes a character
	bytesLong := func(n int) string { return quote(strings.Repeat("a", n)) }
	ok := func(typ, payload string) string {
		return `{"request_id":"req-v","type":"` + typ + `","payload":` + payload + `}`
	}
	bad := map[string]string{
		"malformed JSON":          `{"request_id":`,
		"not an object":           `["req-v"]`,
		"unknown top-level field": `{"request_id":"req-v","type":"thumbs","payload":{"value":"up"},"rating":5}`,
		"missing request_id":      `{"type":"thumbs","payload":{"value":"up"}}`,
		"request_id not a string": `{"request_id":7,"type":"thumbs","payload":{"value":"up"}}`,
		"missing type":            `{"request_id":"req-v","payload":{"value":"up"}}`,
		"unknown type":            ok("stars", `{"value":"up"}`),
		"payload not an object":   ok("thumbs", `"up"`),
		"thumbs without value":    ok("thumbs", `{}`),
		"thumbs without payload":  `{"request_id":"req-v","type":"thumbs"}`,
		"thumbs value sideways":   ok("thumbs", `{"value":"sideways"}`),
		"thumbs value null":       ok("thumbs", `{"value":null}`),
		"thumbs unknown field":    ok("thumbs", `{"value":"up","score":1}`),
		"thumbs comment too long": ok("thumbs", `{"value":"up","comment":`+long(2001)+`}`),
		"edit unknown field":      ok("edit_accepted", `{"text":"x"}`),
		"edited_text too long":    ok("edit_accepted", `{"edited_text":`+bytesLong(100<<10+1)+`}`),
		"reason too long":         ok("edit_rejected", `{"reason":`+long(2001)+`}`),
		"reason not a string":     ok("edit_rejected", `{"reason":3}`),
		"test without passed":     ok("test_result", `{"name":"t"}`),
		"passed not a boolean":    ok("test_result", `{"passed":"yes"}`),
		"details too long":        ok("test_result", `{"passed":true,"details":`+bytesLong(10<<10+1)+`}`),
		"name too long":           ok("test_result", `{"passed":true,"name":`+long(257)+`}`),
	}
	for name, body := range bad {
		t.Run(name, func(t *testing.T) {
			_, _, err := f.send(t, f.ada, body)
			var cerr *codec.Error
			require.ErrorAs(t, err, &cerr)
			require.Equal(t, codec.CodeInvalidRequest, cerr.Code)
			require.Equal(t, 400, cerr.Status())
		})
	}
	require.Equal(t, []any{}, f.types(t, f.ada, "req-v"), "nothing written by a refused report")

	good := map[string]string{
		"comment at its bound":     ok("thumbs", `{"value":"up","comment":`+long(2000)+`}`),
		"edited_text at its bound": ok("edit_accepted", `{"edited_text":`+bytesLong(100<<10)+`,"reason":"ok"}`),
		"details at its bound":     ok("test_result", `{"passed":true,"details":`+bytesLong(10<<10)+`}`),
		"null payload on edit":     ok("edit_rejected", `null`),
	}
	for name, body := range good {
		t.Run(name, func(t *testing.T) {
			status, _, err := f.send(t, f.ada, body)
			require.NoError(t, err)
			require.Contains(t, []int{fasthttp.StatusOK, fasthttp.StatusCreated}, status)
		})
	}
}

// PostgreSQL holds no NUL in jsonb: a payload text with one is refused
// naming the field, not stored.
func TestFeedbackRefusesNUL(t *testing.T) {
	f := newFeedbackFixture(t)
	f.record(f.ada, hotpath.UsageRecord{RequestID: "req-nul", At: time.Now(), Route: "chat_v1", Status: 200})
	f.flush(t)
	for _, tc := range []struct{ typ, payload, field string }{
		{"thumbs", `{"value":"up","comment":"a\u0000b"}`, "payload.comment"},
		{"edit_accepted", `{"edited_text":"a\u0000b"}`, "payload.edited_text"},
		{"edit_rejected", `{"reason":"\u0000"}`, "payload.reason"},
		{"test_result", `{"passed":true,"name":"a\u0000"}`, "payload.name"},
		{"test_result", `{"passed":false,"details":"\u0000b"}`, "payload.details"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, _, err := f.send(t, f.ada, `{"request_id":"req-nul","type":"`+tc.typ+`","payload":`+tc.payload+`}`)
			var cerr *codec.Error
			require.ErrorAs(t, err, &cerr)
			require.Equal(t, codec.CodeInvalidRequest, cerr.Code)
			require.Equal(t, tc.field+": must not contain NUL characters.", cerr.Message)
		})
	}
	require.Equal(t, []any{}, f.types(t, f.ada, "req-nul"), "nothing written by a refused report")
	// An escaped backslash before u0000 is text.
	status, body, err := f.send(t, f.ada, `{"request_id":"req-nul","type":"thumbs","payload":{"value":"up","comment":"a\\u0000b"}}`)
	require.NoError(t, err)
	require.Equal(t, fasthttp.StatusCreated, status)
	require.Equal(t, `a\u0000b`, body["payload"].(map[string]any)["comment"])
}
