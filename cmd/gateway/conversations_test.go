package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// target is where a client's requests go: one app, or a fleet's instance
// whose turn it is.
type target interface{ Addr() string }

// convClient is one caller of the conversation routes: a member of an
// organization with a key bound to it.
type convClient struct {
	ta     target
	key    string
	userID string
	orgID  string
}

func convTenant(t *testing.T, ta *testApp, email string, keyFlags ...string) convClient {
	t.Helper()
	tn := newTenant(t, ta.dbURL, email, keyFlags...)
	return convClient{ta: ta, key: tn.key, userID: tn.userID, orgID: tn.orgID}
}

// convMember adds a user to orgID with a key bound to it.
func convMember(t *testing.T, ta *testApp, orgID, email, role string, keyFlags ...string) convClient {
	t.Helper()
	user := admin(t, ta.dbURL, "user", "create", "--email", email, "--org", orgID, "--role", role)
	key := admin(t, ta.dbURL, append([]string{"key", "create", "--user", user["id"].(string), "--org", orgID}, keyFlags...)...)
	return convClient{ta: ta, key: key["access_token"].(string), userID: user["id"].(string), orgID: orgID}
}

// do calls a route. A string body is sent as it is; anything else is
// encoded as JSON.
func (c convClient) do(t *testing.T, method, path string, body any, headers ...string) resp {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	default:
		var err error
		raw, err = json.Marshal(b)
		require.NoError(t, err)
	}
	req, err := http.NewRequest(method, "http://"+c.ta.Addr()+path, bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return do(t, req)
}

func (c convClient) create(t *testing.T, body any) map[string]any {
	t.Helper()
	r := c.do(t, "POST", "/api/v1/conversations", body)
	require.Equal(t, 201, r.status, "%s", r.raw)
	return r.body
}

// appendMsg appends and returns the response body.
func (c convClient) appendMsg(t *testing.T, convID string, body map[string]any) map[string]any {
	t.Helper()
	if _, ok := body["role"]; !ok {
		body["role"] = "user"
	}
	r := c.do(t, "POST", "/api/v1/conversations/"+convID+"/messages", body)
	require.Equal(t, 201, r.status, "%s", r.raw)
	return r.body
}

// say appends a message with role and content and returns its id.
func (c convClient) say(t *testing.T, convID, role, content string, extra ...any) string {
	t.Helper()
	body := map[string]any{"role": role, "content": content}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	return c.appendMsg(t, convID, body)["message"].(map[string]any)["id"].(string)
}

func (c convClient) read(t *testing.T, convID string, query string) map[string]any {
	t.Helper()
	r := c.do(t, "GET", "/api/v1/conversations/"+convID+query, nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	return r.body
}

// pathIDs returns the ids of the messages a read returned, in order.
func pathIDs(read map[string]any) []string {
	var ids []string
	for _, m := range read["messages"].(map[string]any)["data"].([]any) {
		ids = append(ids, m.(map[string]any)["id"].(string))
	}
	return ids
}

func requireError(t *testing.T, r resp, status int, code string, msgContains ...string) {
	t.Helper()
	require.Equal(t, status, r.status, "%s", r.raw)
	require.Equal(t, code, r.body["code"], "%s", r.raw)
	require.NotEmpty(t, r.body["request_id"])
	for _, s := range msgContains {
		require.Contains(t, r.body["error"], s)
	}
}

func withoutMessages(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if k != "messages" {
			out[k] = v
		}
	}
	return out
}

func TestConversationCreateAndReadAgree(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")

	t.Run("defaults", func(t *testing.T) {
		c := ada.create(t, nil)
		require.Equal(t, "conversation", c["object"])
		require.Nil(t, c["title"])
		require.Nil(t, c["model"])
		require.Nil(t, c["vault_id"])
		require.Equal(t, "chat", c["source"])
		require.Equal(t, map[string]any{}, c["meta"])
		require.Equal(t, false, c["archived"])
		require.Nil(t, c["active_leaf_message_id"])
		require.Equal(t, map[string]any{"can_read": true, "can_write": true}, c["permissions"])
		created, err := time.Parse(time.RFC3339Nano, c["created_at"].(string))
		require.NoError(t, err)
		retention, err := time.Parse(time.RFC3339Nano, c["retention_until"].(string))
		require.NoError(t, err)
		require.Equal(t, 365*24*time.Hour, retention.Sub(created), "365 days from the last activity, its creation")
		require.Equal(t, c["created_at"], c["updated_at"])

		read := ada.read(t, c["id"].(string), "")
		require.Equal(t, c, withoutMessages(read), "the create response agrees field-for-field with the next read")
		page := read["messages"].(map[string]any)
		require.Equal(t, []any{}, page["data"])
		require.Nil(t, page["leaf_id"])
		require.Nil(t, page["next_cursor"])
		require.Equal(t, "asc", page["order"])
	})

	t.Run("every field", func(t *testing.T) {
		// meta is stored and returned verbatim once compacted: key order,
		// escapes and number spelling kept, whitespace gone.
		raw := `{"title":"Trip plan","model":"kavi","source":"cli",
			"meta": { "z": 1.50, "a": [ true, null ], "html": "<b>&</b>", "u": "\u00e9" }}`
		r := ada.do(t, "POST", "/api/v1/conversations", raw)
		require.Equal(t, 201, r.status, "%s", r.raw)
		require.Contains(t, string(r.raw), `"meta":{"z":1.50,"a":[true,null],"html":"<b>&</b>","u":"\u00e9"}`)
		require.Equal(t, "Trip plan", r.body["title"])
		require.Equal(t, "kavi", r.body["model"])
		require.Equal(t, "cli", r.body["source"])

		id := r.body["id"].(string)
		read := ada.do(t, "GET", "/api/v1/conversations/"+id, nil)
		require.Contains(t, string(read.raw), `"meta":{"z":1.50,"a":[true,null],"html":"<b>&</b>","u":"\u00e9"}`)
		require.Equal(t, r.body, withoutMessages(read.body))
	})

	t.Run("meta limit", func(t *testing.T) {
		fill := strings.Repeat("x", 4096-len(`{"k":""}`))
		r := ada.do(t, "POST", "/api/v1/conversations", `{"meta": {"k": "`+fill+`"}}`)
		require.Equal(t, 201, r.status, "exactly 4096 bytes once compacted")
		spaced := `{"meta": {  "k"  :  "` + fill + `"  ,  "n":1 }}`
		requireError(t, ada.do(t, "POST", "/api/v1/conversations", spaced), 400, "invalid_request", "4096")
		padded := `{"meta": {` + strings.Repeat(" ", 5000) + `"k": 1}}`
		require.Equal(t, 201, ada.do(t, "POST", "/api/v1/conversations", padded).status, "whitespace does not count")
		for _, bad := range []string{`[1]`, `"x"`, `3`, `true`} {
			requireError(t, ada.do(t, "POST", "/api/v1/conversations", `{"meta":`+bad+`}`), 400, "invalid_request", "meta")
		}
	})

	t.Run("source", func(t *testing.T) {
		requireError(t, ada.do(t, "POST", "/api/v1/conversations", map[string]any{"source": "agent"}),
			400, "invalid_request", "agent")
		requireError(t, ada.do(t, "POST", "/api/v1/conversations", map[string]any{"source": "web"}),
			400, "invalid_request", "source")
		requireError(t, ada.do(t, "POST", "/api/v1/conversations", map[string]any{"source": 1}),
			400, "invalid_request", "source")
	})

	t.Run("malformed", func(t *testing.T) {
		requireError(t, ada.do(t, "POST", "/api/v1/conversations", `{"title":`), 400, "invalid_request")
		requireError(t, ada.do(t, "POST", "/api/v1/conversations", `[]`), 400, "invalid_request")
		requireError(t, ada.do(t, "POST", "/api/v1/conversations", "{\"title\":\"a\xffb\"}"), 400, "invalid_request", "UTF-8")
		requireError(t, ada.do(t, "POST", "/api/v1/conversations", `{"title":"a\u0000b"}`), 400, "invalid_request", "NUL")
		requireError(t, ada.do(t, "POST", "/api/v1/conversations", map[string]any{"title": strings.Repeat("t", 1001)}),
			400, "invalid_request", "1000")
	})

	t.Run("v2 and scopes", func(t *testing.T) {
		r := ada.do(t, "POST", "/api/v2/conversations", nil)
		require.Equal(t, 201, r.status)
		require.Equal(t, 200, ada.do(t, "GET", "/api/v2/conversations/"+r.body["id"].(string), nil).status)
		chatOnly := convMember(t, ta, ada.orgID, "chatonly@example.com", "member", "--scopes", "chat")
		r = chatOnly.do(t, "GET", "/api/v1/conversations", nil)
		requireError(t, r, 403, "key_scope_forbidden")
		require.Equal(t, "conversations", r.body["required_scope"])
	})
}

func TestConversationPrivacy(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	// The organization's owner and an admin are other members: they see
	// nothing of Ada's.
	owner := convMember(t, ta, ada.orgID, "owner@example.com", "owner")
	adminM := convMember(t, ta, ada.orgID, "admin@example.com", "admin")
	stranger := convTenant(t, ta, "eve@example.com")

	conv := ada.create(t, map[string]any{"title": "Private"})
	id := conv["id"].(string)
	msg := ada.say(t, id, "user", "my private zebra question")

	for _, other := range []convClient{owner, adminM, stranger} {
		for _, rt := range []struct{ method, path, body string }{
			{"GET", "/api/v1/conversations/" + id, ""},
			{"GET", "/api/v1/conversations/" + id + "?message_branch=" + msg, ""},
			{"PATCH", "/api/v1/conversations/" + id, `{"title":"mine now"}`},
			{"DELETE", "/api/v1/conversations/" + id, ""},
			{"PUT", "/api/v1/conversations/" + id + "/archive", ""},
			{"DELETE", "/api/v1/conversations/" + id + "/archive", ""},
			{"POST", "/api/v1/conversations/" + id + "/messages", `{"role":"user","content":"hi"}`},
			{"POST", "/api/v1/conversations/" + id + "/switch", `{"message_id":"` + msg + `"}`},
		} {
			var body any
			if rt.body != "" {
				body = rt.body
			}
			requireError(t, other.do(t, rt.method, rt.path, body), 404, "conversation_not_found")
		}
		list := other.do(t, "GET", "/api/v1/conversations", nil)
		require.Equal(t, 200, list.status)
		require.Empty(t, list.body["data"])
		hits := other.do(t, "GET", "/api/v1/conversations/search?q=zebra", nil)
		require.Equal(t, 200, hits.status)
		require.Empty(t, hits.body["data"])
	}

	// The organization is the key's: Ada's key for her personal
	// organization does not reach the conversation either.
	var personal string
	require.NoError(t, ta.db.Pool.QueryRow(context.Background(), `select personal_org_id from users where id = $1`,
		ada.userID).Scan(&personal))
	key := admin(t, ta.dbURL, "key", "create", "--user", ada.userID, "--org", personal)
	adaPersonal := convClient{ta: ta, key: key["access_token"].(string), userID: ada.userID, orgID: personal}
	requireError(t, adaPersonal.do(t, "GET", "/api/v1/conversations/"+id, nil), 404, "conversation_not_found")
	require.Empty(t, adaPersonal.do(t, "GET", "/api/v1/conversations", nil).body["data"])
	require.Empty(t, adaPersonal.do(t, "GET", "/api/v1/conversations/search?q=zebra", nil).body["data"])
	// A conversation created under that key belongs to that organization.
	mine := adaPersonal.create(t, nil)
	requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+mine["id"].(string), nil), 404, "conversation_not_found")

	// Malformed and missing ids are the same 404.
	for _, bad := range []string{"nope", "00000000-0000-0000-0000-000000000000", "%27%3B--"} {
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+bad, nil), 404, "conversation_not_found")
		requireError(t, ada.do(t, "POST", "/api/v1/conversations/"+bad+"/messages", `{"role":"user","content":"x"}`),
			404, "conversation_not_found")
	}

	// And Ada still has it all.
	require.Equal(t, "Private", ada.read(t, id, "")["title"])
	require.Len(t, ada.do(t, "GET", "/api/v1/conversations", nil).body["data"], 1)
	require.Len(t, ada.do(t, "GET", "/api/v1/conversations/search?q=zebra", nil).body["data"], 1)
}

func TestConversationList(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	var ids []string
	for i := range 7 {
		ids = append(ids, ada.create(t, map[string]any{"title": fmt.Sprintf("c%d", i)})["id"].(string))
	}
	// Activity reorders: the oldest becomes the most recently active.
	ada.say(t, ids[0], "user", "bump")
	want := []string{ids[0], ids[6], ids[5], ids[4], ids[3], ids[2], ids[1]}

	var got []string
	cursor := ""
	pages := 0
	for {
		path := "/api/v1/conversations?limit=3"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := ada.do(t, "GET", path, nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, "list", r.body["object"])
		pages++
		for _, c := range r.body["data"].([]any) {
			cm := c.(map[string]any)
			got = append(got, cm["id"].(string))
			require.Equal(t, true, cm["permissions"].(map[string]any)["can_write"])
			require.NotContains(t, cm, "messages", "no messages in the list")
		}
		if r.body["next_cursor"] == nil {
			break
		}
		cursor = r.body["next_cursor"].(string)
	}
	require.Equal(t, want, got, "most recently active first, every conversation once")
	require.Equal(t, 3, pages)

	r := ada.do(t, "GET", "/api/v1/conversations", nil)
	require.Len(t, r.body["data"], 7, "default limit 50")
	require.Nil(t, r.body["next_cursor"])

	t.Run("shelves and sources", func(t *testing.T) {
		require.Equal(t, 204, ada.do(t, "PUT", "/api/v1/conversations/"+ids[3]+"/archive", nil).status)
		cli := ada.create(t, map[string]any{"source": "cli"})["id"].(string)
		live := ada.do(t, "GET", "/api/v1/conversations", nil).body["data"].([]any)
		require.Len(t, live, 6, "archived hidden, cli not in the chat list")
		archived := ada.do(t, "GET", "/api/v1/conversations?archived=true", nil).body["data"].([]any)
		require.Len(t, archived, 1)
		require.Equal(t, ids[3], archived[0].(map[string]any)["id"])
		require.Equal(t, true, archived[0].(map[string]any)["archived"])
		clis := ada.do(t, "GET", "/api/v1/conversations?source=cli", nil).body["data"].([]any)
		require.Len(t, clis, 1)
		require.Equal(t, cli, clis[0].(map[string]any)["id"])
		require.Empty(t, ada.do(t, "GET", "/api/v1/conversations?source=agent", nil).body["data"])
	})

	t.Run("bad parameters", func(t *testing.T) {
		for _, q := range []string{"limit=0", "limit=101", "limit=abc", "limit=-1"} {
			requireError(t, ada.do(t, "GET", "/api/v1/conversations?"+q, nil), 400, "invalid_request", "100")
		}
		requireError(t, ada.do(t, "GET", "/api/v1/conversations?source=web", nil), 400, "invalid_request", "source")
		requireError(t, ada.do(t, "GET", "/api/v1/conversations?archived=maybe", nil), 400, "invalid_request", "archived")
		requireError(t, ada.do(t, "GET", "/api/v1/conversations?cursor=garbage", nil), 400, "invalid_request", "cursor")
		first := ada.do(t, "GET", "/api/v1/conversations?limit=1", nil)
		next := url.QueryEscape(first.body["next_cursor"].(string))
		requireError(t, ada.do(t, "GET", "/api/v1/conversations?limit=1&archived=true&cursor="+next, nil),
			400, "invalid_request", "filters")
		require.Equal(t, 200, ada.do(t, "GET", "/api/v1/conversations?limit=100&cursor="+next, nil).status,
			"the page size may change between pages")
		empty := ada.do(t, "GET", "/api/v1/conversations?limit=1&cursor=", nil)
		require.Equal(t, first.body["data"], empty.body["data"], "an empty cursor is the first page")
	})
}

// withCursorTime rewrites the instant of a list cursor (version, kind,
// filter hash, varint microseconds, id) to us, keeping the rest.
func withCursorTime(t *testing.T, cursor string, us int64) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	require.NoError(t, err)
	_, n := binary.Varint(b[10:])
	require.Positive(t, n)
	out := binary.AppendVarint(append([]byte{}, b[:10]...), us)
	return base64.RawURLEncoding.EncodeToString(append(out, b[10+n:]...))
}

// A list cursor whose instant no list could have issued is an unreadable
// cursor, refused before it reaches the database.
func TestConversationListForgedCursorTimes(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	ada.create(t, nil)
	ada.create(t, nil)
	issued := ada.do(t, "GET", "/api/v1/conversations?limit=1", nil).body["next_cursor"].(string)

	// 7538 BC, out of PostgreSQL's range.
	requireError(t, ada.do(t, "GET",
		"/api/v1/conversations?cursor=AWynHhh2S_pIMf__74mjmuipCDAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMA", nil),
		400, "invalid_request", "cursor: not a cursor")
	y2k := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, us := range []int64{math.MinInt64, -300_000_000_000_000_000, -1, 0, y2k - 1,
		time.Now().Add(48 * time.Hour).UnixMicro(), 1 << 62, math.MaxInt64} {
		r := ada.do(t, "GET", "/api/v1/conversations?limit=1&cursor="+withCursorTime(t, issued, us), nil)
		requireError(t, r, 400, "invalid_request", "cursor: not a cursor")
	}
	for _, us := range []int64{y2k, time.Now().UnixMicro()} {
		r := ada.do(t, "GET", "/api/v1/conversations?limit=1&cursor="+withCursorTime(t, issued, us), nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
	}
}

func TestConversationMessageTree(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	id := ada.create(t, nil)["id"].(string)
	msgs := "/api/v1/conversations/" + id + "/messages"

	// A chain: u1 → a1 → u2 → a2. Never branched, so no active leaf.
	first := ada.appendMsg(t, id, map[string]any{"content": "u1"})
	u1 := first["message"].(map[string]any)
	require.EqualValues(t, 1, u1["sequence"])
	require.Nil(t, u1["parent_id"])
	require.Equal(t, []any{}, u1["sibling_ids"])
	require.Equal(t, []any{}, u1["file_ids"])
	require.Equal(t, "complete", u1["status"])
	require.Equal(t, true, first["leaf_moved"])
	require.Nil(t, first["conversation"].(map[string]any)["active_leaf_message_id"])
	a1 := ada.say(t, id, "assistant", "a1")
	u2 := ada.say(t, id, "user", "u2")
	second := ada.appendMsg(t, id, map[string]any{"role": "assistant", "content": "a2"})
	a2 := second["message"].(map[string]any)["id"].(string)
	require.Equal(t, u2, second["message"].(map[string]any)["parent_id"], "answers the current leaf")
	require.EqualValues(t, 4, second["message"].(map[string]any)["sequence"])
	read := ada.read(t, id, "")
	require.Equal(t, []string{u1["id"].(string), a1, u2, a2}, pathIDs(read))
	require.Equal(t, a2, read["messages"].(map[string]any)["leaf_id"])
	require.Nil(t, read["active_leaf_message_id"])

	t.Run("switch on a never-branched conversation changes nothing", func(t *testing.T) {
		r := ada.do(t, "POST", "/api/v1/conversations/"+id+"/switch", map[string]any{"message_id": a1})
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, a2, r.body["leaf_id"])
		require.Nil(t, ada.read(t, id, "")["active_leaf_message_id"])
	})

	// Edit u2: a new branch under a1, which becomes the active one.
	edit := ada.appendMsg(t, id, map[string]any{"content": "u2 edited", "parent_id": a1})
	u2b := edit["message"].(map[string]any)["id"].(string)
	require.Equal(t, true, edit["leaf_moved"])
	require.Equal(t, []any{u2}, edit["message"].(map[string]any)["sibling_ids"])
	require.Equal(t, u2b, edit["conversation"].(map[string]any)["active_leaf_message_id"])
	a2b := ada.say(t, id, "assistant", "a2 edited")
	read = ada.read(t, id, "")
	require.Equal(t, a2b, read["active_leaf_message_id"])
	require.Equal(t, []string{u1["id"].(string), a1, u2b, a2b}, pathIDs(read))
	data := read["messages"].(map[string]any)["data"].([]any)
	require.Equal(t, []any{u2}, data[2].(map[string]any)["sibling_ids"], "siblings on every read")

	t.Run("read another branch without switching", func(t *testing.T) {
		other := ada.read(t, id, "?message_branch="+u2)
		require.Equal(t, []string{u1["id"].(string), a1, u2, a2}, pathIDs(other))
		require.Equal(t, a2, other["messages"].(map[string]any)["leaf_id"])
		require.Equal(t, a2b, other["active_leaf_message_id"], "reading switches nothing")
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_branch=00000000-0000-0000-0000-000000000000", nil),
			404, "message_not_found")
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_branch=zzz", nil), 404, "message_not_found")
	})

	t.Run("stale expected_leaf stores the message but keeps the leaf", func(t *testing.T) {
		r := ada.appendMsg(t, id, map[string]any{"content": "late reply", "parent_id": a2, "expected_leaf": a2})
		require.Equal(t, false, r["leaf_moved"])
		require.Equal(t, a2, r["message"].(map[string]any)["parent_id"], "stored under its parent")
		require.Equal(t, a2b, r["conversation"].(map[string]any)["active_leaf_message_id"])
		late := r["message"].(map[string]any)["id"].(string)
		// With the current leaf as expected_leaf the leaf moves.
		r = ada.appendMsg(t, id, map[string]any{"content": "u3", "expected_leaf": a2b})
		require.Equal(t, true, r["leaf_moved"])
		u3 := r["message"].(map[string]any)["id"].(string)
		require.Equal(t, a2b, r["message"].(map[string]any)["parent_id"])
		require.Equal(t, u3, r["conversation"].(map[string]any)["active_leaf_message_id"])
		// Switch to the late reply's branch, then back.
		sw := ada.do(t, "POST", "/api/v1/conversations/"+id+"/switch", map[string]any{"message_id": u2})
		require.Equal(t, late, sw.body["leaf_id"], "deepest descendant, newest child at each level")
		require.Equal(t, late, ada.read(t, id, "")["active_leaf_message_id"])
		sw = ada.do(t, "POST", "/api/v1/conversations/"+id+"/switch", map[string]any{"message_id": u2b})
		require.Equal(t, u3, sw.body["leaf_id"])
		// Switching to a message of the branch already active changes nothing.
		sw = ada.do(t, "POST", "/api/v1/conversations/"+id+"/switch", map[string]any{"message_id": a1})
		require.Equal(t, u3, sw.body["leaf_id"])
		sw = ada.do(t, "POST", "/api/v1/conversations/"+id+"/switch", map[string]any{"message_id": u3})
		require.Equal(t, u3, sw.body["leaf_id"])
	})

	t.Run("a new root beside the first message", func(t *testing.T) {
		r := ada.appendMsg(t, id, map[string]any{"content": "u1 edited", "root": true})
		root := r["message"].(map[string]any)
		require.Nil(t, root["parent_id"])
		require.Equal(t, []any{u1["id"]}, root["sibling_ids"])
		require.Equal(t, []string{root["id"].(string)}, pathIDs(ada.read(t, id, "")))
		first := ada.read(t, id, "?message_branch="+u1["id"].(string))
		require.Equal(t, []any{root["id"]}, first["messages"].(map[string]any)["data"].([]any)[0].(map[string]any)["sibling_ids"])
	})

	t.Run("tree field errors", func(t *testing.T) {
		otherConv := ada.create(t, nil)["id"].(string)
		foreign := ada.say(t, otherConv, "user", "elsewhere")
		requireError(t, ada.do(t, "POST", msgs, map[string]any{"role": "user", "content": "x", "root": true, "parent_id": a1}),
			400, "invalid_request", "root")
		requireError(t, ada.do(t, "POST", msgs, map[string]any{"role": "user", "content": "x", "parent_id": foreign}),
			400, "invalid_request", "parent_id")
		requireError(t, ada.do(t, "POST", msgs, map[string]any{"role": "user", "content": "x", "parent_id": "nope"}),
			400, "invalid_request", "parent_id")
		requireError(t, ada.do(t, "POST", msgs, map[string]any{"role": "user", "content": "x", "expected_leaf": foreign}),
			400, "invalid_request", "expected_leaf")
		requireError(t, ada.do(t, "POST", "/api/v1/conversations/"+id+"/switch", map[string]any{"message_id": foreign}),
			404, "message_not_found")
		requireError(t, ada.do(t, "POST", "/api/v1/conversations/"+id+"/switch", map[string]any{"message_id": "x"}),
			404, "message_not_found")
		requireError(t, ada.do(t, "POST", "/api/v1/conversations/"+id+"/switch", nil), 400, "invalid_request", "message_id")
	})
}

// An id names the same conversation, message or vault in any case, and
// every rule that compares ids holds whichever case a client sends.
func TestConversationIDsInAnyCase(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	up := strings.ToUpper
	id := ada.create(t, nil)["id"].(string)
	msgs := "/api/v1/conversations/" + up(id) + "/messages"
	appendUp := func(t *testing.T, body map[string]any, headers ...string) resp {
		t.Helper()
		r := ada.do(t, "POST", msgs, body, headers...)
		require.Equal(t, 201, r.status, "%s", r.raw)
		return r
	}
	msg := func(r resp) map[string]any { return r.body["message"].(map[string]any) }
	conv := func(r resp) map[string]any { return r.body["conversation"].(map[string]any) }

	u1 := ada.say(t, id, "user", "u1")
	// expected_leaf naming the current leaf moves it, and the conversation
	// stays one chain.
	r := appendUp(t, map[string]any{"role": "assistant", "content": "a1", "expected_leaf": up(u1)})
	require.Equal(t, true, r.body["leaf_moved"])
	require.Equal(t, u1, msg(r)["parent_id"])
	require.Nil(t, conv(r)["active_leaf_message_id"])
	a1 := msg(r)["id"].(string)
	// parent_id naming the newest message keeps it one chain too.
	r = appendUp(t, map[string]any{"role": "user", "content": "u2", "parent_id": up(a1)})
	require.Equal(t, true, r.body["leaf_moved"])
	require.Equal(t, a1, msg(r)["parent_id"])
	require.Nil(t, conv(r)["active_leaf_message_id"])
	u2 := msg(r)["id"].(string)

	// A retry spelled in the other case is the same request: it replays.
	first := appendUp(t, map[string]any{"role": "assistant", "content": "a2", "parent_id": u2}, "Idempotency-Key", "k-case")
	again := appendUp(t, map[string]any{"role": "assistant", "content": "a2", "parent_id": up(u2)}, "Idempotency-Key", "k-case")
	require.Equal(t, string(first.raw), string(again.raw))
	a2 := msg(first)["id"].(string)
	read := ada.read(t, up(id), "")
	require.Equal(t, id, read["id"])
	require.EqualValues(t, 4, read["message_count"])
	require.Nil(t, read["active_leaf_message_id"])

	// Branch under a1, then read, switch and append by ids in upper case.
	u2b := ada.say(t, id, "user", "u2 edited", "parent_id", up(a1))
	other := ada.read(t, up(id), "?message_branch="+up(u2))
	require.Equal(t, []string{u1, a1, u2, a2}, pathIDs(other))
	require.Equal(t, a2, other["messages"].(map[string]any)["leaf_id"])
	r = appendUp(t, map[string]any{"role": "assistant", "content": "a2b", "expected_leaf": up(u2b)})
	require.Equal(t, true, r.body["leaf_moved"], "the current leaf in upper case is not stale")
	a2b := msg(r)["id"].(string)
	require.Equal(t, a2b, conv(r)["active_leaf_message_id"])
	r = appendUp(t, map[string]any{"role": "assistant", "content": "late", "parent_id": up(a2), "expected_leaf": up(a2)})
	require.Equal(t, false, r.body["leaf_moved"], "a stale leaf is stale in any case")
	require.Equal(t, a2b, conv(r)["active_leaf_message_id"])
	sw := ada.do(t, "POST", "/api/v1/conversations/"+up(id)+"/switch", map[string]any{"message_id": up(u2)})
	require.Equal(t, 200, sw.status, "%s", sw.raw)
	require.Equal(t, msg(r)["id"], sw.body["leaf_id"])

	// A message cursor whose leaf is spelled in upper case pages the same
	// path and answers the leaf as stored.
	page := ada.read(t, id, "?message_limit=1")["messages"].(map[string]any)
	raw, err := base64.RawURLEncoding.DecodeString(page["next_cursor"].(string))
	require.NoError(t, err)
	_, n := binary.Uvarint(raw[3:])
	forged := base64.RawURLEncoding.EncodeToString(append(raw[:3+n:3+n], bytes.ToUpper(raw[3+n:])...))
	next := ada.read(t, id, "?message_limit=1&message_cursor="+forged)["messages"].(map[string]any)
	require.Equal(t, page["leaf_id"], next["leaf_id"])
	require.Equal(t, []string{a1}, pathIDs(map[string]any{"messages": next}))

	// A vault in any case: created in it, and a list cursor issued under
	// the filter in one case pages under the other.
	vault := insertVault(t, ta, ada.orgID, map[string][2]bool{ada.userID: {true, true}})
	require.Equal(t, vault, ada.create(t, map[string]any{"vault_id": up(vault)})["vault_id"])
	ada.create(t, map[string]any{"vault_id": vault})
	list := ada.do(t, "GET", "/api/v1/conversations?limit=1&vault_id="+vault, nil)
	require.Equal(t, 200, list.status, "%s", list.raw)
	rest := ada.do(t, "GET", "/api/v1/conversations?limit=1&vault_id="+up(vault)+"&cursor="+list.body["next_cursor"].(string), nil)
	require.Equal(t, 200, rest.status, "%s", rest.raw)
	require.Len(t, rest.body["data"], 1)
}

func TestConversationMessagePages(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	id := ada.create(t, nil)["id"].(string)
	var chain []string
	for i := range 7 {
		chain = append(chain, ada.say(t, id, "user", fmt.Sprintf("m%d", i)))
	}
	pageAll := func(t *testing.T, query string) (ids []string, pages int) {
		t.Helper()
		cursor := ""
		for {
			q := query
			if cursor != "" {
				q += "&message_cursor=" + url.QueryEscape(cursor)
			}
			r := ada.read(t, id, q)
			page := r["messages"].(map[string]any)
			ids = append(ids, pathIDs(r)...)
			pages++
			if page["next_cursor"] == nil {
				return ids, pages
			}
			cursor = page["next_cursor"].(string)
		}
	}
	reversed := func(s []string) []string {
		out := make([]string, len(s))
		for i, v := range s {
			out[len(s)-1-i] = v
		}
		return out
	}

	ids, pages := pageAll(t, "?message_limit=3")
	require.Equal(t, chain, ids)
	require.Equal(t, 3, pages)
	ids, _ = pageAll(t, "?message_limit=3&message_order=desc")
	require.Equal(t, reversed(chain), ids, "desc is newest first")
	require.Equal(t, "desc", ada.read(t, id, "?message_order=desc")["messages"].(map[string]any)["order"])

	// Branch it, then page the branch: the cursor keeps the path it started on
	// even when the active branch changes between pages.
	alt := ada.say(t, id, "user", "alt", "parent_id", chain[2])
	altPath := append(append([]string{}, chain[:3]...), alt)
	first := ada.read(t, id, "?message_limit=2&message_branch="+chain[6])
	require.Equal(t, chain[:2], pathIDs(first))
	cursor := first["messages"].(map[string]any)["next_cursor"].(string)
	second := ada.read(t, id, "?message_limit=10&message_cursor="+url.QueryEscape(cursor))
	require.Equal(t, chain[2:], pathIDs(second))
	ids, _ = pageAll(t, "?message_limit=1&message_order=desc")
	require.Equal(t, reversed(altPath), ids)

	t.Run("cursor rules", func(t *testing.T) {
		r := ada.read(t, id, "?message_limit=1&message_order=desc")
		desc := url.QueryEscape(r["messages"].(map[string]any)["next_cursor"].(string))
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_cursor="+desc, nil),
			400, "invalid_request", "message_order")
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_order=asc&message_cursor="+desc, nil),
			400, "invalid_request", "message_order")
		require.Equal(t, 200, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_order=desc&message_cursor="+desc, nil).status)
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_order=desc&message_branch="+chain[0]+"&message_cursor="+desc, nil),
			400, "invalid_request", "message_branch")
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_cursor=bogus", nil), 400, "invalid_request")
		// A cursor of another conversation does not page this one.
		other := ada.create(t, nil)["id"].(string)
		ada.say(t, other, "user", "o1")
		ada.say(t, other, "user", "o2")
		oc := ada.read(t, other, "?message_limit=1")["messages"].(map[string]any)["next_cursor"].(string)
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_cursor="+url.QueryEscape(oc), nil),
			400, "invalid_request")
		// A list cursor is not a message cursor.
		ada.create(t, nil)
		lc := ada.do(t, "GET", "/api/v1/conversations?limit=1", nil).body["next_cursor"].(string)
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_cursor="+url.QueryEscape(lc), nil),
			400, "invalid_request")
	})

	t.Run("limits", func(t *testing.T) {
		for _, q := range []string{"message_limit=0", "message_limit=201", "message_limit=x"} {
			requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id+"?"+q, nil), 400, "invalid_request", "200")
		}
		require.Equal(t, 200, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_limit=200", nil).status)
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_order=newest", nil), 400, "invalid_request", "message_order")
	})

	t.Run("default page is 100", func(t *testing.T) {
		big := ada.create(t, nil)["id"].(string)
		for range 101 {
			ada.say(t, big, "user", "more")
		}
		r := ada.read(t, big, "")
		require.Len(t, r["messages"].(map[string]any)["data"], 100)
		require.NotNil(t, r["messages"].(map[string]any)["next_cursor"])
	})
}

func TestConversationConcurrentAppendsOverHTTP(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	id := ada.create(t, nil)["id"].(string)
	const writers, each = 16, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	seqs := map[float64]bool{}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := ada.do(t, "POST", "/api/v1/conversations/"+id+"/messages",
					map[string]any{"role": "user", "content": fmt.Sprintf("w%d-%d", w, i)})
				if r.status != 201 {
					t.Errorf("append: %d %s", r.status, r.raw)
					return
				}
				mu.Lock()
				seqs[r.body["message"].(map[string]any)["sequence"].(float64)] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seqs, writers*each, "every sequence distinct")
	for i := 1; i <= writers*each; i++ {
		require.True(t, seqs[float64(i)], "sequence %d assigned", i)
	}
	read := ada.read(t, id, "?message_limit=200")
	require.Len(t, pathIDs(read), writers*each, "one chain, nothing lost")
	require.EqualValues(t, writers*each, read["message_count"])
}

func TestConversationTitles(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	titleAfter := func(t *testing.T, contents ...string) any {
		t.Helper()
		id := ada.create(t, nil)["id"].(string)
		var last map[string]any
		for _, c := range contents {
			last = ada.appendMsg(t, id, map[string]any{"content": c})
		}
		require.Equal(t, last["conversation"].(map[string]any)["title"], ada.read(t, id, "")["title"],
			"the echoed title is the stored one")
		return last["conversation"].(map[string]any)["title"]
	}

	long := strings.Repeat("word ", 30) // 150 characters
	cases := []struct {
		name    string
		content []string
		want    any
	}{
		{"first line", []string{"How do I bake bread?\nI have flour."}, "How do I bake bread?"},
		{"whitespace collapsed", []string{"  Plan \t a   trip  "}, "Plan a trip"},
		{"control characters dropped", []string{"Hel\x07lo\x1b there"}, "Hello there"},
		{"blank lines skipped", []string{"\n\n   \nActual question"}, "Actual question"},
		{"cut on a word boundary", []string{long}, strings.TrimSpace(strings.Repeat("word ", 16)) + "…"},
		{"one long word is cut inside it", []string{strings.Repeat("x", 100)}, strings.Repeat("x", 79) + "…"},
		{"exactly 80 stays whole", []string{strings.Repeat("y", 80)}, strings.Repeat("y", 80)},
		{"counted in characters", []string{strings.Repeat("é", 81)}, strings.Repeat("é", 79) + "…"},
		{"symbols name it", []string{"🎉"}, "🎉"},
		{"no words, no title", []string{"...   ?!"}, nil},
		{"the next user message with words names it", []string{"?!", "Second try"}, "Second try"},
		{"the first user message wins", []string{"First", "Second"}, "First"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := titleAfter(t, tc.content...)
			require.Equal(t, tc.want, got)
			if s, ok := got.(string); ok {
				require.LessOrEqual(t, len([]rune(s)), 80)
			}
		})
	}

	t.Run("an assistant message never names it", func(t *testing.T) {
		id := ada.create(t, nil)["id"].(string)
		r := ada.appendMsg(t, id, map[string]any{"role": "assistant", "content": "Hello, how can I help?"})
		require.Nil(t, r["conversation"].(map[string]any)["title"])
		r = ada.appendMsg(t, id, map[string]any{"role": "system", "content": "You are terse."})
		require.Nil(t, r["conversation"].(map[string]any)["title"])
		r = ada.appendMsg(t, id, map[string]any{"content": "Now the user speaks"})
		require.Equal(t, "Now the user speaks", r["conversation"].(map[string]any)["title"])
	})

	t.Run("an explicit title is never overwritten", func(t *testing.T) {
		id := ada.create(t, map[string]any{"title": "Mine"})["id"].(string)
		r := ada.appendMsg(t, id, map[string]any{"content": "Something else"})
		require.Equal(t, "Mine", r["conversation"].(map[string]any)["title"])

		id = ada.create(t, nil)["id"].(string)
		p := ada.do(t, "PATCH", "/api/v1/conversations/"+id, map[string]any{"title": "Set later"})
		require.Equal(t, 200, p.status)
		r = ada.appendMsg(t, id, map[string]any{"content": "Would be derived"})
		require.Equal(t, "Set later", r["conversation"].(map[string]any)["title"])

		// A derived title stays too, whatever comes next.
		id = ada.create(t, nil)["id"].(string)
		ada.say(t, id, "user", "Derived")
		ada.say(t, id, "user", "Later words")
		require.Equal(t, "Derived", ada.read(t, id, "")["title"])
	})
}

func TestConversationUpdate(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	c := ada.create(t, map[string]any{"title": "T", "model": "mira"})
	id := c["id"].(string)
	path := "/api/v1/conversations/" + id

	r := ada.do(t, "PATCH", path, map[string]any{"model": "kavi"})
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, "T", r.body["title"], "an omitted field is unchanged")
	require.Equal(t, "kavi", r.body["model"])
	require.Equal(t, c["updated_at"], r.body["updated_at"], "an update is not activity")
	require.Equal(t, c["retention_until"], r.body["retention_until"])
	require.Equal(t, r.body, withoutMessages(ada.read(t, id, "")))

	r = ada.do(t, "PATCH", path, `{"title": null}`)
	require.Equal(t, 200, r.status)
	require.Nil(t, r.body["title"], "explicit null clears")
	require.Equal(t, "kavi", r.body["model"])

	requireError(t, ada.do(t, "PATCH", path, `{}`), 400, "invalid_request", "at least one")
	requireError(t, ada.do(t, "PATCH", path, nil), 400, "invalid_request")
	requireError(t, ada.do(t, "PATCH", path, `{"unknown": 1}`), 400, "invalid_request")
	requireError(t, ada.do(t, "PATCH", path, map[string]any{"vault_id": nil}), 400, "invalid_request", "vault_id")
	requireError(t, ada.do(t, "PATCH", path, map[string]any{"title": "x", "vault_id": "00000000-0000-0000-0000-000000000000"}),
		400, "invalid_request", "vault_id")
	requireError(t, ada.do(t, "PATCH", path, map[string]any{"title": 5}), 400, "invalid_request", "title")
}

func TestConversationAppendRules(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	id := ada.create(t, nil)["id"].(string)
	path := "/api/v1/conversations/" + id + "/messages"
	bad := func(t *testing.T, body any, want string, headers ...string) {
		t.Helper()
		requireError(t, ada.do(t, "POST", path, body, headers...), 400, "invalid_request", want)
	}

	t.Run("roles and content", func(t *testing.T) {
		bad(t, map[string]any{"content": "x"}, "role")
		bad(t, map[string]any{"role": "developer", "content": "x"}, "role")
		bad(t, map[string]any{"role": "user"}, "content")
		bad(t, map[string]any{"role": "user", "content": ""}, "content")
		bad(t, map[string]any{"role": "user", "content": 5}, "content")
		bad(t, map[string]any{"role": "assistant", "content": ""}, "content")
		bad(t, `{"role":"user","content":"a\u0000b"}`, "NUL")
		bad(t, `not json`, "JSON")
		bad(t, nil, "role")
		// Whitespace-only content is content.
		ada.say(t, id, "user", "   ")
	})

	t.Run("status", func(t *testing.T) {
		for _, s := range []string{"complete", "incomplete", "cancelled"} {
			r := ada.appendMsg(t, id, map[string]any{"role": "assistant", "content": "x", "status": s})
			require.Equal(t, s, r["message"].(map[string]any)["status"])
		}
		bad(t, map[string]any{"role": "assistant", "content": "x", "status": "failed"}, "status")
	})

	t.Run("tool fields", func(t *testing.T) {
		calls := []any{map[string]any{"id": "lookup_1", "type": "function",
			"function": map[string]any{"name": "lookup", "arguments": `{"q":"weather"}`}}}
		r := ada.appendMsg(t, id, map[string]any{"role": "assistant", "tool_calls": calls})
		m := r["message"].(map[string]any)
		require.Equal(t, "", m["content"], "an assistant message with tool_calls may have no content")
		require.Equal(t, calls, m["tool_calls"])
		r = ada.appendMsg(t, id, map[string]any{"role": "tool", "content": "sunny", "tool_call_id": "lookup_1"})
		require.Equal(t, "lookup_1", r["message"].(map[string]any)["tool_call_id"])
		require.NotContains(t, r["message"], "tool_calls")
		read := ada.read(t, id, "?message_order=desc&message_limit=2")["messages"].(map[string]any)["data"].([]any)
		require.Equal(t, "lookup_1", read[0].(map[string]any)["tool_call_id"], "tool fields read back")
		require.Equal(t, calls, read[1].(map[string]any)["tool_calls"])

		bad(t, map[string]any{"role": "user", "content": "x", "tool_calls": calls}, "tool_calls")
		bad(t, map[string]any{"role": "tool", "content": "x", "tool_calls": calls}, "tool_calls")
		bad(t, map[string]any{"role": "tool", "content": "x"}, "tool_call_id")
		bad(t, map[string]any{"role": "tool", "content": "x", "tool_call_id": ""}, "tool_call_id")
		bad(t, map[string]any{"role": "assistant", "content": "x", "tool_call_id": "c1"}, "tool_call_id")
		bad(t, map[string]any{"role": "user", "content": "x", "tool_call_id": "c1"}, "tool_call_id")
		bad(t, map[string]any{"role": "assistant", "tool_calls": "nope"}, "tool_calls")
		bad(t, map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "c", "type": "function",
			"function": map[string]any{"name": "f", "arguments": map[string]any{}}}}}, "tool_calls")
		bad(t, map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "", "type": "function",
			"function": map[string]any{"name": "f", "arguments": "{}"}}}}, "tool_calls[0].id")
		bad(t, map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "c", "type": "code",
			"function": map[string]any{"name": "f", "arguments": "{}"}}}}, "tool_calls[0].type")
		bad(t, map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "c", "type": "function",
			"function": map[string]any{"name": "", "arguments": "{}"}}}}, "tool_calls[0].function.name")
		bad(t, map[string]any{"role": "assistant", "tool_calls": []any{}}, "content")
	})

	t.Run("file_ids", func(t *testing.T) {
		pin := []string{"Gateway-Version", "2026-10-06"}
		fa, fb, fc := ada.uploadText(t, "a.txt", "a"), ada.uploadText(t, "b.txt", "b"), ada.uploadText(t, "c.txt", "c")
		r := ada.do(t, "POST", path, map[string]any{"role": "user", "content": "see files",
			"file_ids": []string{fb, fa, fb, fc}}, pin...)
		require.Equal(t, 201, r.status, "%s", r.raw)
		require.Equal(t, []any{fb, fa, fc}, r.body["message"].(map[string]any)["file_ids"],
			"in the order sent, a repeat attached once")
		mid := r.body["message"].(map[string]any)["id"].(string)
		read := ada.read(t, id, "?message_order=desc&message_limit=1")
		require.Equal(t, mid, pathIDs(read)[0])
		require.Equal(t, []any{fb, fa, fc},
			read["messages"].(map[string]any)["data"].([]any)[0].(map[string]any)["file_ids"])

		r = ada.do(t, "POST", path, map[string]any{"role": "user", "content": "no pin", "file_ids": []string{"f"}})
		requireError(t, r, 400, "invalid_request", "2026-10-06")
		require.Equal(t, "2026-10-06", r.body["required_version"])
		r = ada.do(t, "POST", path, map[string]any{"role": "user", "content": "old pin", "file_ids": []string{"f"}},
			"Gateway-Version", "2026-10-05")
		require.Equal(t, "2026-10-06", r.body["required_version"])
		require.Equal(t, 201, ada.do(t, "POST", path, map[string]any{"role": "user", "content": "none", "file_ids": []string{}}).status)

		many := make([]string, 21)
		for i := range many {
			many[i] = fmt.Sprintf("file-%d", i)
		}
		bad(t, map[string]any{"role": "user", "content": "x", "file_ids": many}, "20", pin...)
		real := make([]string, 20)
		for i := range real {
			real[i] = ada.uploadText(t, fmt.Sprintf("f%d.txt", i), "text")
		}
		twenty := append(append([]string{}, real...), real[0]) // 21 ids, 20 distinct
		require.Equal(t, 201, ada.do(t, "POST", path, map[string]any{"role": "user", "content": "x", "file_ids": twenty}, pin...).status)
		// An id in upper case is the same file, and counts once.
		twenty[20] = strings.ToUpper(real[0])
		r = ada.do(t, "POST", path, map[string]any{"role": "user", "content": "x", "file_ids": twenty}, pin...)
		require.Equal(t, 201, r.status, "%s", r.raw)
		require.Len(t, r.body["message"].(map[string]any)["file_ids"], 20)
		r = ada.do(t, "POST", path, map[string]any{"role": "user", "content": "x", "file_ids": []string{real[1], strings.ToUpper(real[1])}}, pin...)
		require.Equal(t, []any{real[1]}, r.body["message"].(map[string]any)["file_ids"])
		bad(t, map[string]any{"role": "assistant", "content": "x", "file_ids": []string{"f"}}, "file_ids", pin...)
		bad(t, map[string]any{"role": "user", "content": "x", "file_ids": []any{1}}, "file_ids", pin...)

		noFiles := convMember(t, ta, ada.orgID, "nofiles@example.com", "member", "--scopes", "conversations")
		nid := noFiles.create(t, nil)["id"].(string)
		r = noFiles.do(t, "POST", "/api/v1/conversations/"+nid+"/messages",
			map[string]any{"role": "user", "content": "x", "file_ids": []string{"f"}}, pin...)
		requireError(t, r, 403, "key_scope_forbidden")
		require.Equal(t, "files", r.body["required_scope"])
		require.Empty(t, r.header.Get("X-RateLimit-Limit"), "a key check's 403 carries no rate-limit headers")
	})
}

// The idempotency suite runs over a fleet of one and of three: a retry on
// any process replays, and concurrent retries spread over the fleet write
// once.
func TestConversationIdempotentAppend(t *testing.T) {
	eachFleet(t, testConversationIdempotentAppend)
}

func testConversationIdempotentAppend(t *testing.T, n int) {
	f := startFleet(t, n)
	tn := newTenant(t, f.dbURL, "ada@example.com")
	ada := convClient{ta: f, key: tn.key, userID: tn.userID, orgID: tn.orgID}
	id := ada.create(t, nil)["id"].(string)
	path := "/api/v1/conversations/" + id + "/messages"

	first := ada.do(t, "POST", path, `{"role":"user","content":"pay the invoice"}`, "Idempotency-Key", "k-1")
	require.Equal(t, 201, first.status)
	// The same request, spelled differently, replays the stored 201.
	again := ada.do(t, "POST", path, `{ "content": "pay the invoice", "role": "user" }`, "Idempotency-Key", "k-1")
	require.Equal(t, 201, again.status)
	require.Equal(t, string(first.raw), string(again.raw))
	require.EqualValues(t, 1, ada.read(t, id, "")["message_count"], "written once")

	r := ada.do(t, "POST", path, `{"role":"user","content":"pay it twice"}`, "Idempotency-Key", "k-1")
	requireError(t, r, 409, "idempotency_conflict")
	require.EqualValues(t, 1, ada.read(t, id, "")["message_count"])

	// Another key, or no key, writes again.
	require.Equal(t, 201, ada.do(t, "POST", path, `{"role":"user","content":"pay the invoice"}`, "Idempotency-Key", "k-2").status)
	require.Equal(t, 201, ada.do(t, "POST", path, `{"role":"user","content":"pay the invoice"}`).status)
	require.EqualValues(t, 3, ada.read(t, id, "")["message_count"])

	// The replay is the stored response, even after the conversation moved on.
	again = ada.do(t, "POST", path, `{"role":"user","content":"pay the invoice"}`, "Idempotency-Key", "k-1")
	require.Equal(t, string(first.raw), string(again.raw))

	// Concurrent retries write once.
	var wg sync.WaitGroup
	statuses := make([]int, 10)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = ada.do(t, "POST", path, `{"role":"assistant","content":"done"}`, "Idempotency-Key", "k-3").status
		}()
	}
	wg.Wait()
	for _, s := range statuses {
		require.Equal(t, 201, s)
	}
	require.EqualValues(t, 4, ada.read(t, id, "")["message_count"])

	requireError(t, ada.do(t, "POST", path, `{"role":"user","content":"x"}`, "Idempotency-Key", strings.Repeat("k", 256)),
		400, "invalid_request", "Idempotency-Key")
	// A key belongs to its conversation.
	other := ada.create(t, nil)["id"].(string)
	r = ada.do(t, "POST", "/api/v1/conversations/"+other+"/messages", `{"role":"user","content":"pay the invoice"}`,
		"Idempotency-Key", "k-1")
	require.Equal(t, 201, r.status)
	require.NotEqual(t, string(first.raw), string(r.raw))
}

func TestConversationArchive(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	id := ada.create(t, nil)["id"].(string)
	ada.say(t, id, "user", "archived words stay searchable")
	before := ada.read(t, id, "")
	archive := "/api/v1/conversations/" + id + "/archive"

	r := ada.do(t, "PUT", archive, nil)
	require.Equal(t, 204, r.status, "%s", r.raw)
	require.Empty(t, r.raw)
	a1 := ada.read(t, id, "")
	require.Equal(t, true, a1["archived"])
	require.NotNil(t, a1["archived_at"])
	require.Equal(t, before["updated_at"], a1["updated_at"], "archiving is not activity")
	require.Equal(t, before["retention_until"], a1["retention_until"], "the retention deadline is not extended")

	require.Equal(t, 204, ada.do(t, "PUT", archive, nil).status, "archiving again")
	require.Equal(t, a1["archived_at"], ada.read(t, id, "")["archived_at"], "the first archive instant stays")

	require.Empty(t, ada.do(t, "GET", "/api/v1/conversations", nil).body["data"])
	require.Len(t, ada.do(t, "GET", "/api/v1/conversations?archived=true", nil).body["data"], 1)
	hits := ada.do(t, "GET", "/api/v1/conversations/search?q=searchable", nil).body["data"].([]any)
	require.Len(t, hits, 1, "still searched")
	require.Equal(t, true, hits[0].(map[string]any)["archived"])

	require.Equal(t, 204, ada.do(t, "DELETE", archive, nil).status)
	restored := ada.read(t, id, "")
	require.Equal(t, false, restored["archived"])
	require.Nil(t, restored["archived_at"])
	require.Equal(t, 204, ada.do(t, "DELETE", archive, nil).status, "restoring a live conversation")
	require.Len(t, ada.do(t, "GET", "/api/v1/conversations", nil).body["data"], 1)
}

func TestConversationActivity(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	c := ada.create(t, nil)
	id := c["id"].(string)
	// Pretend the conversation is old, so that a moved deadline shows.
	_, err := ta.db.Pool.Exec(context.Background(), `update conversations
		set created_at = created_at - interval '10 days', updated_at = updated_at - interval '10 days',
			retention_until = retention_until - interval '10 days' where id = $1`, id)
	require.NoError(t, err)
	old := ada.read(t, id, "")

	m1 := ada.say(t, id, "user", "first")
	ada.say(t, id, "assistant", "second")
	ada.say(t, id, "user", "branch", "parent_id", m1)
	after := ada.read(t, id, "")
	oldUpdated, _ := time.Parse(time.RFC3339Nano, old["updated_at"].(string))
	newUpdated, _ := time.Parse(time.RFC3339Nano, after["updated_at"].(string))
	newRetention, _ := time.Parse(time.RFC3339Nano, after["retention_until"].(string))
	require.True(t, newUpdated.After(oldUpdated.Add(9*24*time.Hour)), "appending advances updated_at")
	require.Equal(t, 365*24*time.Hour, newRetention.Sub(newUpdated), "and re-stamps the deadline")

	sw := ada.do(t, "POST", "/api/v1/conversations/"+id+"/switch", map[string]any{"message_id": m1})
	require.Equal(t, 200, sw.status)
	p := ada.do(t, "PATCH", "/api/v1/conversations/"+id, map[string]any{"title": "t"})
	require.Equal(t, 200, p.status)
	ada.do(t, "PUT", "/api/v1/conversations/"+id+"/archive", nil)
	ada.do(t, "DELETE", "/api/v1/conversations/"+id+"/archive", nil)
	final := ada.read(t, id, "")
	require.Equal(t, after["updated_at"], final["updated_at"], "switch, update, archive and restore are not activity")
	require.Equal(t, after["retention_until"], final["retention_until"])
	require.Equal(t, old["created_at"], final["created_at"])
}

func TestConversationSearch(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	bob := convMember(t, ta, ada.orgID, "bob@example.com", "owner")

	trip := ada.create(t, map[string]any{"title": "Trip"})["id"].(string)
	u1 := ada.say(t, trip, "user", "Plan a trip to Lisbon with cheap flights")
	a1 := ada.say(t, trip, "assistant", "Lisbon is lovely in spring. Flights from Berlin are cheap in March.")
	// An edited question: the old branch is inactive.
	oldQ := ada.say(t, trip, "user", "What about Porto trains?")
	ada.say(t, trip, "user", "What about Madrid museums?", "parent_id", a1)
	code := ada.create(t, map[string]any{"source": "cli"})["id"].(string)
	ada.say(t, code, "user", "refactor the lisbon parser")
	bobConv := bob.create(t, nil)["id"].(string)
	bob.say(t, bobConv, "user", "Lisbon flights for Bob")

	search := func(t *testing.T, q string, extra ...string) []map[string]any {
		t.Helper()
		path := "/api/v1/conversations/search?q=" + url.QueryEscape(q)
		for _, e := range extra {
			path += "&" + e
		}
		r := ada.do(t, "GET", path, nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		var out []map[string]any
		for _, h := range r.body["data"].([]any) {
			out = append(out, h.(map[string]any))
		}
		return out
	}

	hits := search(t, "lisbon flights")
	require.Len(t, hits, 2, "chat source by default; Bob's never")
	require.Equal(t, u1, hits[0]["message_id"], "the closer match ranks first")
	require.Equal(t, trip, hits[0]["conversation_id"])
	require.Equal(t, "Trip", hits[0]["conversation_title"])
	require.Equal(t, true, hits[0]["on_active_path"])
	require.Contains(t, hits[0]["snippet"], "[[hl]]Lisbon[[/hl]]")
	require.Contains(t, hits[0]["snippet"], "[[hl]]flights[[/hl]]")
	require.GreaterOrEqual(t, hits[0]["rank"].(float64), hits[1]["rank"].(float64))

	t.Run("websearch syntax", func(t *testing.T) {
		require.Len(t, search(t, `"cheap flights"`), 1, "a quoted phrase")
		require.Len(t, search(t, `porto or madrid`), 2)
		require.Len(t, search(t, `lisbon -spring`), 1)
		require.Len(t, search(t, `flight`), 2, "stemmed")
		require.Len(t, search(t, `lisbon`, "source=cli"), 1)
		require.Empty(t, search(t, `lisbon`, "source=agent"))
	})

	t.Run("inactive branches are searched", func(t *testing.T) {
		porto := search(t, "porto")
		require.Len(t, porto, 1)
		require.Equal(t, oldQ, porto[0]["message_id"])
		require.Equal(t, false, porto[0]["on_active_path"])
		madrid := search(t, "madrid")
		require.Equal(t, true, madrid[0]["on_active_path"])
		// Switching to the hit makes it active.
		sw := ada.do(t, "POST", "/api/v1/conversations/"+trip+"/switch", map[string]any{"message_id": oldQ})
		require.Equal(t, oldQ, sw.body["leaf_id"])
		require.Equal(t, true, search(t, "porto")[0]["on_active_path"])
		require.Equal(t, false, search(t, "madrid")[0]["on_active_path"])
	})

	t.Run("no input is a syntax error", func(t *testing.T) {
		for _, q := range []string{"", "   ", `"unterminated`, "or", "-", "- -- or", "a & b | !c", "((", "it's", "'; drop table x; --",
			"\x00nul", "the", "-lisbon", `:*`, "<b>", strings.Repeat("lisbon ", 250)} {
			r := ada.do(t, "GET", "/api/v1/conversations/search?q="+url.QueryEscape(q), nil)
			require.Equal(t, 200, r.status, "q=%q: %s", q, r.raw)
		}
		require.Empty(t, search(t, "the"), "only stop words match nothing")
		require.Empty(t, search(t, "-lisbon"), "only exclusions match nothing")
		r := ada.do(t, "GET", "/api/v1/conversations/search", nil)
		require.Equal(t, 200, r.status)
		require.Empty(t, r.body["data"])
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/search?q="+strings.Repeat("x", 2001), nil),
			400, "invalid_request", "2000")
	})

	t.Run("limits", func(t *testing.T) {
		many := ada.create(t, nil)["id"].(string)
		for i := range 25 {
			ada.say(t, many, "user", fmt.Sprintf("repeated keyword number %d", i))
		}
		require.Len(t, search(t, "keyword"), 20, "default 20")
		require.Len(t, search(t, "keyword", "limit=50"), 25)
		require.Len(t, search(t, "keyword", "limit=3"), 3)
		for _, l := range []string{"0", "51", "x"} {
			requireError(t, ada.do(t, "GET", "/api/v1/conversations/search?q=keyword&limit="+l, nil), 400, "invalid_request", "50")
		}
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/search?q=keyword&source=web", nil), 400, "invalid_request", "source")
	})

	t.Run("snippets are not HTML", func(t *testing.T) {
		c := ada.create(t, nil)["id"].(string)
		// (A fragment starts and ends on a word of more than three letters:
		// what comes before it, a "<" included, falls outside it.)
		ada.say(t, c, "user", "consider <script>alert(1)</script> tangerine & coconut")
		h := search(t, "tangerine")
		require.Len(t, h, 1)
		require.Contains(t, h[0]["snippet"], "<script>")
		require.Contains(t, h[0]["snippet"], "[[hl]]tangerine[[/hl]] & coconut")
	})
}

// insertVault makes a vault in orgID with members: userID → {read, write}.
func insertVault(t *testing.T, ta *testApp, orgID string, members map[string][2]bool) string {
	t.Helper()
	ctx := context.Background()
	var id string
	require.NoError(t, ta.db.Pool.QueryRow(ctx, `insert into vaults (org_id, name) values ($1, 'vault ' || gen_random_uuid())
		returning id`, orgID).Scan(&id))
	for user, g := range members {
		_, err := ta.db.Pool.Exec(ctx, `insert into vault_members (vault_id, user_id, can_read, can_write) values ($1, $2, $3, $4)`,
			id, user, g[0], g[1])
		require.NoError(t, err)
	}
	return id
}

func setVaultGrant(t *testing.T, ta *testApp, vaultID, userID string, read, write bool) {
	t.Helper()
	_, err := ta.db.Pool.Exec(context.Background(), `update vault_members set can_read = $3, can_write = $4
		where vault_id = $1 and user_id = $2`, vaultID, userID, read, write)
	require.NoError(t, err)
}

func TestConversationVaults(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	eve := convTenant(t, ta, "eve@example.com")
	bob := convMember(t, ta, ada.orgID, "bob@example.com", "member")
	vault := insertVault(t, ta, ada.orgID, map[string][2]bool{ada.userID: {true, true}, bob.userID: {true, false}})
	otherOrgVault := insertVault(t, ta, eve.orgID, map[string][2]bool{eve.userID: {true, true}})
	notMine := insertVault(t, ta, ada.orgID, map[string][2]bool{bob.userID: {true, true}})

	t.Run("create needs write on the vault", func(t *testing.T) {
		for _, v := range []string{otherOrgVault, notMine, "00000000-0000-0000-0000-000000000000", "not-a-uuid"} {
			requireError(t, ada.do(t, "POST", "/api/v1/conversations", map[string]any{"vault_id": v}), 404, "vault_not_found")
		}
		requireError(t, bob.do(t, "POST", "/api/v1/conversations", map[string]any{"vault_id": vault}), 403, "vault_forbidden")
		c := ada.create(t, map[string]any{"vault_id": vault})
		require.Equal(t, vault, c["vault_id"])
		require.Equal(t, map[string]any{"can_read": true, "can_write": true}, c["permissions"])
	})

	c := ada.create(t, map[string]any{"vault_id": vault, "title": "In the vault"})
	id := c["id"].(string)
	msg := ada.say(t, id, "user", "vaulted quokka notes")
	plain := ada.create(t, nil)["id"].(string)

	t.Run("list filter", func(t *testing.T) {
		inVault := ada.do(t, "GET", "/api/v1/conversations?vault_id="+vault, nil).body["data"].([]any)
		require.Len(t, inVault, 2)
		require.Len(t, ada.do(t, "GET", "/api/v1/conversations", nil).body["data"], 3)
		require.Empty(t, ada.do(t, "GET", "/api/v1/conversations?vault_id="+notMine, nil).body["data"],
			"a vault the caller cannot read matches nothing")
		require.Empty(t, ada.do(t, "GET", "/api/v1/conversations?vault_id=garbage", nil).body["data"])
		require.Empty(t, bob.do(t, "GET", "/api/v1/conversations?vault_id="+vault, nil).body["data"],
			"a vault member does not see another member's conversations")
		requireError(t, bob.do(t, "GET", "/api/v1/conversations/"+id, nil), 404, "conversation_not_found")
	})

	t.Run("read but not write", func(t *testing.T) {
		setVaultGrant(t, ta, vault, ada.userID, true, false)
		read := ada.read(t, id, "")
		require.Equal(t, map[string]any{"can_read": true, "can_write": false}, read["permissions"])
		listed := ada.do(t, "GET", "/api/v1/conversations?vault_id="+vault, nil).body["data"].([]any)
		require.Equal(t, false, listed[0].(map[string]any)["permissions"].(map[string]any)["can_write"])
		require.Len(t, ada.do(t, "GET", "/api/v1/conversations/search?q=quokka", nil).body["data"], 1)
		for _, rt := range []struct{ method, path, body string }{
			{"PATCH", "/api/v1/conversations/" + id, `{"title":"x"}`},
			{"DELETE", "/api/v1/conversations/" + id, ""},
			{"PUT", "/api/v1/conversations/" + id + "/archive", ""},
			{"DELETE", "/api/v1/conversations/" + id + "/archive", ""},
			{"POST", "/api/v1/conversations/" + id + "/messages", `{"role":"user","content":"hi"}`},
			{"POST", "/api/v1/conversations/" + id + "/switch", `{"message_id":"` + msg + `"}`},
		} {
			var body any
			if rt.body != "" {
				body = rt.body
			}
			requireError(t, ada.do(t, rt.method, rt.path, body), 403, "conversation_forbidden")
		}
		require.Equal(t, 200, ada.do(t, "GET", "/api/v1/conversations/"+id+"?message_branch="+msg, nil).status,
			"reading a branch needs no write permission")
		require.Equal(t, 200, ada.do(t, "PATCH", "/api/v1/conversations/"+plain, map[string]any{"title": "x"}).status)
	})

	t.Run("no longer readable", func(t *testing.T) {
		setVaultGrant(t, ta, vault, ada.userID, false, false)
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id, nil), 404, "conversation_not_found")
		requireError(t, ada.do(t, "DELETE", "/api/v1/conversations/"+id, nil), 404, "conversation_not_found")
		require.Len(t, ada.do(t, "GET", "/api/v1/conversations", nil).body["data"], 1, "only the plain one")
		require.Empty(t, ada.do(t, "GET", "/api/v1/conversations/search?q=quokka", nil).body["data"])
		_, err := ta.db.Pool.Exec(context.Background(), `delete from vault_members where vault_id = $1 and user_id = $2`,
			vault, ada.userID)
		require.NoError(t, err)
		requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id, nil), 404, "conversation_not_found")
		_, err = ta.db.Pool.Exec(context.Background(), `insert into vault_members (vault_id, user_id, can_read, can_write)
			values ($1, $2, true, true)`, vault, ada.userID)
		require.NoError(t, err)
		require.Equal(t, "In the vault", ada.read(t, id, "")["title"], "visible again with the grant")
	})
}

func TestConversationDelete(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	id := ada.create(t, map[string]any{"title": "Top secret title"})["id"].(string)
	ada.say(t, id, "user", "classified walrus text")
	ada.say(t, id, "assistant", "noted")

	r := ada.do(t, "DELETE", "/api/v1/conversations/"+id, nil, "X-Request-Id", "delete-req-1")
	require.Equal(t, 204, r.status, "%s", r.raw)
	require.Empty(t, r.raw)
	requireError(t, ada.do(t, "GET", "/api/v1/conversations/"+id, nil), 404, "conversation_not_found")
	requireError(t, ada.do(t, "DELETE", "/api/v1/conversations/"+id, nil), 404, "conversation_not_found")
	require.Empty(t, ada.do(t, "GET", "/api/v1/conversations/search?q=walrus", nil).body["data"])
	require.Empty(t, ada.do(t, "GET", "/api/v1/conversations", nil).body["data"])

	ctx := context.Background()
	var left int
	require.NoError(t, ta.db.Pool.QueryRow(ctx, `select count(*) from conversation_messages where conversation_id = $1`,
		id).Scan(&left))
	require.Zero(t, left, "every message deleted at once")
	var rec map[string]any
	require.NoError(t, ta.db.Pool.QueryRow(ctx, `select row_to_json(d) from conversation_deletions d
		where conversation_id = $1`, id).Scan(&rec))
	require.Equal(t, ada.userID, rec["user_id"])
	require.Equal(t, ada.orgID, rec["org_id"])
	require.Nil(t, rec["vault_id"])
	require.EqualValues(t, 2, rec["message_count"])
	require.Equal(t, "delete-req-1", rec["request_id"])
	require.NotNil(t, rec["conversation_created_at"])
	raw, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "secret")
	require.NotContains(t, string(raw), "walrus")
	require.NotContains(t, ta.logs.String(), "walrus", "no message text in the logs")
	require.NotContains(t, ta.logs.String(), "Top secret title")
}

// The retention job runs in the serving process: an expired conversation
// disappears without anyone asking.
func TestConversationRetentionJob(t *testing.T) {
	ta := startTestApp(t, func(c *serveConfig) { c.RetentionInterval = 20 * time.Millisecond })
	ada := convTenant(t, ta, "ada@example.com")
	expired := ada.create(t, nil)["id"].(string)
	ada.say(t, expired, "user", "old")
	live := ada.create(t, nil)["id"].(string)
	_, err := ta.db.Pool.Exec(context.Background(), `update conversations set retention_until = now() - interval '1 second'
		where id = $1`, expired)
	require.NoError(t, err)
	require.Equal(t, 404, ada.do(t, "GET", "/api/v1/conversations/"+expired, nil).status, "gone at its deadline")
	require.Eventually(t, func() bool {
		var rows, records int
		require.NoError(t, ta.db.Pool.QueryRow(context.Background(), `select
			(select count(*) from conversations where id = $1),
			(select count(*) from conversation_deletions where conversation_id = $1 and request_id is null)`,
			expired).Scan(&rows, &records))
		return rows == 0 && records == 1
	}, 10*time.Second, 20*time.Millisecond, "the job deleted its rows, recorded once")
	require.Equal(t, 200, ada.do(t, "GET", "/api/v1/conversations/"+live, nil).status)
}
