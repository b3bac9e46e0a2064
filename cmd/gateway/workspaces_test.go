package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProfile(t *testing.T) {
	ta := startTestApp(t)
	owner := convTenant(t, ta, "owner@profile.test")
	mem := convMember(t, ta, owner.orgID, "Member@Profile.test", "member")

	r := mem.do(t, "GET", "/api/v1/profile", nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, mem.userID, r.body["id"])
	require.Equal(t, "Member@Profile.test", r.body["email"])
	require.Nil(t, r.body["work_type"])
	require.Equal(t, false, r.body["completed_onboarding"])
	require.Equal(t, map[string]any{"id": owner.orgID, "name": "Org of owner@profile.test", "role": "member"}, r.body["org"])
	for _, f := range []string{"created_at", "updated_at"} {
		require.True(t, strings.HasSuffix(r.body[f].(string), "Z"), "%s is UTC: %s", f, r.body[f])
	}
	before := r.body

	for _, body := range []any{
		map[string]any{"work_type": "astronaut"},
		map[string]any{"work_type": nil},
		map[string]any{"work_type": 3},
		map[string]any{"work_type": "engineering", "completed_onboarding": "yes"},
		map[string]any{"completed_onboarding": nil},
		"[1]",
	} {
		requireError(t, mem.do(t, "PATCH", "/api/v1/profile", body), 400, "invalid_request")
	}
	require.Equal(t, before, mem.do(t, "GET", "/api/v1/profile", nil).body, "a refused patch writes nothing")

	time.Sleep(1100 * time.Millisecond) // updated_at has a resolution of a second
	r = mem.do(t, "PATCH", "/api/v1/profile", map[string]any{"work_type": "data_science", "id": owner.userID,
		"email": "hijack@profile.test", "org": map[string]any{"id": "x"}})
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, mem.userID, r.body["id"], "id in the body is ignored")
	require.Equal(t, "Member@Profile.test", r.body["email"], "email in the body is ignored")
	require.Equal(t, "data_science", r.body["work_type"])
	require.Equal(t, false, r.body["completed_onboarding"], "an absent field is unchanged")
	require.Equal(t, before["org"], r.body["org"])
	require.Equal(t, before["created_at"], r.body["created_at"])
	require.NotEqual(t, before["updated_at"], r.body["updated_at"])

	r = mem.do(t, "PATCH", "/api/v1/profile", map[string]any{"completed_onboarding": true})
	require.Equal(t, "data_science", r.body["work_type"], "an absent field is unchanged")
	require.Equal(t, true, r.body["completed_onboarding"])
	require.Equal(t, r.body, mem.do(t, "GET", "/api/v2/profile", nil).body, "the patch returns the stored row")
	// The owner's profile is the owner's.
	require.Nil(t, owner.do(t, "GET", "/api/v1/profile", nil).body["work_type"])
	require.Equal(t, "owner", owner.do(t, "GET", "/api/v1/profile", nil).body["org"].(map[string]any)["role"])
}

func TestWorkspaces(t *testing.T) {
	ta := startTestApp(t)
	owner := convTenant(t, ta, "owner@ws.test")
	adm := convMember(t, ta, owner.orgID, "admin@ws.test", "admin")

	list := adm.do(t, "GET", "/api/v1/workspaces", nil)
	require.Equal(t, 200, list.status, "%s", list.raw)
	require.Len(t, list.body["data"], 1)
	def := list.body["data"].([]any)[0].(map[string]any)
	require.Equal(t, "default", def["slug"])
	require.Equal(t, true, def["is_default"])
	require.Nil(t, def["spend_cap_micros"])

	t.Run("create", func(t *testing.T) {
		r := adm.do(t, "POST", "/api/v1/workspaces", map[string]any{"name": "  Growth & Ops!! 2026 "})
		require.Equal(t, 201, r.status, "%s", r.raw)
		require.Equal(t, "growth-ops-2026", r.body["slug"])
		require.Equal(t, false, r.body["is_default"])
		require.Nil(t, r.body["spend_cap_micros"])
		requireError(t, adm.do(t, "POST", "/api/v1/workspaces", map[string]any{"name": "Growth-Ops 2026"}), 409, "workspace_slug_exists")
		requireError(t, adm.do(t, "POST", "/api/v1/workspaces", map[string]any{"name": "¡¡!!"}), 400, "invalid_request")
		r = adm.do(t, "POST", "/api/v1/workspaces", map[string]any{"name": "¡¡!!", "slug": "bangs", "spend_cap_micros": 5000000})
		require.Equal(t, 201, r.status, "%s", r.raw)
		require.Equal(t, float64(5000000), r.body["spend_cap_micros"])
		for _, body := range []map[string]any{
			{"name": "Default"},
			{"name": "X", "slug": "default"},
			{"name": "X", "slug": "Not A Slug"},
			{"name": "X", "slug": "-x"},
			{"name": ""},
			{"name": strings.Repeat("n", 129)},
			{"name": "X", "spend_cap_micros": 0},
			{"name": "X", "spend_cap_micros": -5},
			{"name": "X", "spend_cap_micros": 1.5},
			{"name": "X", "spend_cap_micros": "5"},
		} {
			requireError(t, adm.do(t, "POST", "/api/v1/workspaces", body), 400, "invalid_request")
		}
	})
	t.Run("list, read, update", func(t *testing.T) {
		list := owner.do(t, "GET", "/api/v1/workspaces", nil)
		data := list.body["data"].([]any)
		require.Len(t, data, 3)
		require.Equal(t, true, data[0].(map[string]any)["is_default"], "the default is listed first")
		ws := data[1].(map[string]any)
		id := ws["id"].(string)
		require.Equal(t, ws, owner.do(t, "GET", "/api/v1/workspaces/"+id, nil).body)
		r := owner.do(t, "PATCH", "/api/v1/workspaces/"+id, map[string]any{"spend_cap_micros": 7})
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, float64(7), r.body["spend_cap_micros"])
		require.Equal(t, ws["name"], r.body["name"], "an omitted field is unchanged")
		r = owner.do(t, "PATCH", "/api/v1/workspaces/"+id, map[string]any{"name": "Renamed"})
		require.Equal(t, "Renamed", r.body["name"])
		require.Equal(t, float64(7), r.body["spend_cap_micros"])
		require.Equal(t, ws["slug"], r.body["slug"], "the slug never changes")
		r = owner.do(t, "PATCH", "/api/v1/workspaces/"+id, map[string]any{"spend_cap_micros": nil})
		require.Nil(t, r.body["spend_cap_micros"], "null clears the cap")
		requireError(t, owner.do(t, "PATCH", "/api/v1/workspaces/"+id, map[string]any{}), 400, "invalid_request")
		requireError(t, owner.do(t, "PATCH", "/api/v1/workspaces/"+id, map[string]any{"slug": "default"}), 400, "invalid_request")
		requireError(t, owner.do(t, "PATCH", "/api/v1/workspaces/"+id, map[string]any{"name": nil}), 400, "invalid_request")
		// The default takes a cap too.
		r = owner.do(t, "PATCH", "/api/v1/workspaces/"+def["id"].(string), map[string]any{"spend_cap_micros": 9})
		require.Equal(t, 200, r.status)
		require.Equal(t, float64(9), r.body["spend_cap_micros"])
	})
	t.Run("delete", func(t *testing.T) {
		requireError(t, owner.do(t, "DELETE", "/api/v1/workspaces/"+def["id"].(string), nil), 409, "workspace_is_default")
		empty := owner.do(t, "POST", "/api/v1/workspaces", map[string]any{"name": "Empty"})
		require.Equal(t, 204, owner.do(t, "DELETE", "/api/v1/workspaces/"+empty.body["id"].(string), nil).status)
		requireError(t, owner.do(t, "DELETE", "/api/v1/workspaces/"+empty.body["id"].(string), nil), 404, "workspace_not_found")
		held := owner.do(t, "POST", "/api/v1/workspaces", map[string]any{"name": "Held"})
		key := admin(t, ta.dbURL, "key", "create", "--user", owner.userID, "--org", owner.orgID, "--workspace", held.body["id"].(string))
		admin(t, ta.dbURL, "key", "revoke", "--key-id", key["key_id"].(string))
		requireError(t, owner.do(t, "DELETE", "/api/v1/workspaces/"+held.body["id"].(string), nil), 409, "workspace_not_empty")
	})
}

// A workspace cap set through the route is enforced by the limits
// machinery from the next request, in this process and in another.
func TestWorkspaceCapEnforcedEverywhere(t *testing.T) {
	ta := startTestApp(t)
	tb := startTestApp(t, func(c *serveConfig) { c.DB.URL = ta.dbURL })
	owner := convTenant(t, ta, "owner@cap.test")
	ws := owner.do(t, "POST", "/api/v1/workspaces", map[string]any{"name": "Capped"})
	require.Equal(t, 201, ws.status)
	key := admin(t, ta.dbURL, "key", "create", "--user", owner.userID, "--org", owner.orgID, "--workspace", ws.body["id"].(string))
	token := key["access_token"].(string)
	for _, addr := range []string{ta.Addr(), tb.Addr()} {
		r := call(t, addr, "POST", "/api/v1/chat", token, chatBody("Hello [[sim:tokens=5]]"))
		require.Equal(t, 200, r.status, "%s", r.raw)
	}
	// The spend is in the ledger (the source the counters start from)
	// before the cap is set, so the very next request is the test.
	waitLedger(t, ta, ws.body["id"].(string), 2)
	r := owner.do(t, "PATCH", "/api/v1/workspaces/"+ws.body["id"].(string), map[string]any{"spend_cap_micros": 1})
	require.Equal(t, 200, r.status)
	for _, addr := range []string{ta.Addr(), tb.Addr()} {
		// The cap reaches the other process through the invalidation
		// channel: allow it that long, then every request is refused.
		require.Eventually(t, func() bool {
			r := call(t, addr, "POST", "/api/v1/chat", token, chatBody("Hello again"))
			return r.status == 429 && r.body["code"] == "workspace_spend_cap_exceeded"
		}, time.Second, 5*time.Millisecond, "a capped workspace is refused at %s", addr)
	}
	waitLedger(t, ta, ws.body["id"].(string), 2)

	// The default workspace's cap applies to keys that name no workspace.
	list := owner.do(t, "GET", "/api/v1/workspaces", nil)
	def := list.body["data"].([]any)[0].(map[string]any)
	require.Equal(t, 200, owner.do(t, "POST", "/api/v1/chat", chatBody("Hi [[sim:tokens=5]]")).status)
	waitLedger(t, ta, def["id"].(string), 1)
	require.Equal(t, 200, owner.do(t, "PATCH", "/api/v1/workspaces/"+def["id"].(string), map[string]any{"spend_cap_micros": 1}).status)
	requireError(t, owner.do(t, "POST", "/api/v1/chat", chatBody("Hi")), 429, "workspace_spend_cap_exceeded")
}

// waitLedger waits until n billed chat rows of the workspace are in the
// request log.
func waitLedger(t *testing.T, ta *testApp, workspaceID string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var got int
		require.NoError(t, ta.db.Pool.QueryRow(context.Background(),
			`select count(*) from request_log where workspace_id = $1 and status = 200`, workspaceID).Scan(&got))
		return got >= n
	}, 5*time.Second, 10*time.Millisecond)
}

func TestPrompts(t *testing.T) {
	ta := startTestApp(t)
	owner := convTenant(t, ta, "owner@prompts.test")
	mem := convMember(t, ta, owner.orgID, "member@prompts.test", "member")
	ws := owner.do(t, "POST", "/api/v1/workspaces", map[string]any{"name": "Other"})
	otherWS := admin(t, ta.dbURL, "key", "create", "--user", owner.userID, "--org", owner.orgID, "--workspace", ws.body["id"].(string))
	inOther := convClient{ta: ta, key: otherWS["access_token"].(string), userID: owner.userID, orgID: owner.orgID}
	stranger := convTenant(t, ta, "stranger@prompts.test")

	content := "  You are terse.\r\n\tAnswer in <b>one</b> line — ünïcödé \\n  "
	r := mem.do(t, "POST", "/api/v1/prompts", map[string]any{"name": "Support Bot", "content": content})
	require.Equal(t, 201, r.status, "%s", r.raw)
	id := r.body["id"].(string)
	require.Equal(t, "support-bot", r.body["slug"])
	require.Equal(t, float64(1), r.body["latest_version"])
	v1 := r.body["version"].(map[string]any)
	require.Equal(t, float64(1), v1["version"])
	require.Equal(t, content, v1["content"], "content is stored verbatim")
	require.Equal(t, mem.userID, v1["author_id"])

	requireError(t, owner.do(t, "POST", "/api/v1/prompts", map[string]any{"name": "support  bot", "content": "x"}), 409, "prompt_slug_exists")
	r = inOther.do(t, "POST", "/api/v1/prompts", map[string]any{"name": "Support Bot", "content": "x"})
	require.Equal(t, 201, r.status, "a slug is unique per workspace: %s", r.raw)
	for _, body := range []any{
		map[string]any{"name": "A"},
		map[string]any{"name": "A", "content": ""},
		map[string]any{"name": "A", "content": strings.Repeat("x", 102401)},
		map[string]any{"content": "x"},
		map[string]any{"name": "???", "content": "x"},
		map[string]any{"name": "A", "content": "x", "workspace_id": ws.body["id"]},
		map[string]any{"name": "A", "content": "NUL \u0000 cannot be stored"},
	} {
		requireError(t, owner.do(t, "POST", "/api/v1/prompts", body), 400, "invalid_request")
	}
	r = owner.do(t, "POST", "/api/v1/prompts", map[string]any{"name": "Big", "content": strings.Repeat("é", 51200)})
	require.Equal(t, 201, r.status, "102400 bytes is allowed")
	bigID := r.body["id"].(string)

	// Concurrent appends get distinct consecutive numbers.
	const n = 24
	var wg sync.WaitGroup
	got := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := owner.do(t, "POST", "/api/v1/prompts/"+id+"/versions", map[string]any{"content": fmt.Sprintf("v%d", i)})
			require.Equal(t, 201, r.status, "%s", r.raw)
			got[i] = int(r.body["version"].(float64))
		}()
	}
	wg.Wait()
	sort.Ints(got)
	for i, v := range got {
		require.Equal(t, i+2, v)
	}

	list := mem.do(t, "GET", "/api/v1/prompts", nil)
	require.Equal(t, 200, list.status)
	data := list.body["data"].([]any)
	require.Len(t, data, 2)
	first := data[0].(map[string]any)
	require.Equal(t, id, first["id"], "oldest first")
	require.Equal(t, float64(n+1), first["latest_version"])
	require.Equal(t, float64(n+1), first["version_count"])
	require.NotContains(t, first, "version")
	require.NotContains(t, string(list.raw), "terse", "the list carries no content")
	require.Equal(t, bigID, data[1].(map[string]any)["id"])

	r = mem.do(t, "GET", "/api/v1/prompts/"+id, nil)
	require.Equal(t, float64(n+1), r.body["version"].(map[string]any)["version"])
	r = mem.do(t, "GET", "/api/v1/prompts/"+id+"?version=1", nil)
	require.Equal(t, content, r.body["version"].(map[string]any)["content"])
	requireError(t, mem.do(t, "GET", "/api/v1/prompts/"+id+"?version=99", nil), 404, "prompt_version_not_found")
	requireError(t, mem.do(t, "GET", "/api/v1/prompts/"+id+"?version=zero", nil), 400, "invalid_request")
	for _, v := range []string{"0", "-1", "-99999999999999999999"} {
		requireError(t, mem.do(t, "GET", "/api/v1/prompts/"+id+"?version="+v, nil), 400, "invalid_request")
	}
	// A number beyond the int4 column is a version the prompt does not have.
	for _, v := range []string{"2147483647", "2147483648", "4294967296", "99999999999999999999"} {
		requireError(t, mem.do(t, "GET", "/api/v1/prompts/"+id+"?version="+v, nil), 404, "prompt_version_not_found")
		requireError(t, stranger.do(t, "GET", "/api/v1/prompts/"+id+"?version="+v, nil), 404, "prompt_not_found")
	}

	// Versions newest first, keyset-paginated.
	var seen []int
	cursor := ""
	for page := 0; ; page++ {
		require.Less(t, page, 10)
		r := mem.do(t, "GET", "/api/v1/prompts/"+id+"/versions?limit=10"+cursor, nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		for _, v := range r.body["data"].([]any) {
			seen = append(seen, int(v.(map[string]any)["version"].(float64)))
		}
		if r.body["next_cursor"] == nil {
			break
		}
		cursor = "&cursor=" + r.body["next_cursor"].(string)
	}
	require.Len(t, seen, n+1)
	for i, v := range seen {
		require.Equal(t, n+1-i, v)
	}
	requireError(t, mem.do(t, "GET", "/api/v1/prompts/"+id+"/versions?cursor=bogus", nil), 400, "invalid_request")
	// An empty cursor is no cursor, as on every list: the first page.
	r = mem.do(t, "GET", "/api/v1/prompts/"+id+"/versions?limit=1&cursor=", nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, float64(n+1), r.body["data"].([]any)[0].(map[string]any)["version"])
	// 'v' + uvarint(2^31), one past the int4 maximum, was never issued;
	// 'v' + uvarint(2^31-1) is the largest cursor and pages from the newest.
	requireError(t, mem.do(t, "GET", "/api/v1/prompts/"+id+"/versions?cursor=doCAgIAI", nil), 400, "invalid_request")
	r = mem.do(t, "GET", "/api/v1/prompts/"+id+"/versions?cursor=dv____8H", nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, float64(n+1), r.body["data"].([]any)[0].(map[string]any)["version"])
	requireError(t, mem.do(t, "GET", "/api/v1/prompts/"+id+"/versions?limit=101", nil), 400, "invalid_request")

	// Another workspace or organization sees nothing, identically.
	var first404 resp
	for _, c := range []convClient{inOther, stranger} {
		for _, path := range []string{id, id + "/versions", unknownUUID, "nope"} {
			r := c.do(t, "GET", "/api/v1/prompts/"+path, nil)
			requireError(t, r, 404, "prompt_not_found")
			if path == id { // windows are per key: compare within one caller
				first404 = r
				continue
			}
			sameRefusal(t, first404, r)
		}
		requireError(t, c.do(t, "POST", "/api/v1/prompts/"+id+"/versions", map[string]any{"content": "x"}), 404, "prompt_not_found")
		requireError(t, c.do(t, "DELETE", "/api/v1/prompts/"+id, nil), 404, "prompt_not_found")
	}

	require.Equal(t, 204, mem.do(t, "DELETE", "/api/v1/prompts/"+id, nil).status)
	requireError(t, mem.do(t, "GET", "/api/v1/prompts/"+id, nil), 404, "prompt_not_found")
	var left int
	require.NoError(t, ta.db.Pool.QueryRow(context.Background(), `select count(*) from prompt_versions where prompt_id = $1`, id).Scan(&left))
	require.Zero(t, left, "versions cascade")

	// A key whose scopes omit prompts is refused.
	scoped := convMember(t, ta, owner.orgID, "scoped@prompts.test", "member", "--scopes", "chat")
	requireError(t, scoped.do(t, "GET", "/api/v1/prompts", nil), 403, "key_scope_forbidden")
}

// A developer key rotates to a new secret with the same id, restrictions and
// workspace; the old secret is refused from the next request in every
// process. A signed-in credential is not rotated by its holder.
func TestKeyRotation(t *testing.T) {
	ta := startTestApp(t)
	tb := startTestApp(t, func(c *serveConfig) { c.DB.URL = ta.dbURL })
	owner := convTenant(t, ta, "owner@rotate.test")
	ws := owner.do(t, "POST", "/api/v1/workspaces", map[string]any{"name": "Rot"})
	key := admin(t, ta.dbURL, "key", "create", "--user", owner.userID, "--org", owner.orgID, "--workspace", ws.body["id"].(string),
		"--scopes", "org,prompts", "--models", "kavi")
	old := key["access_token"].(string)
	for _, addr := range []string{ta.Addr(), tb.Addr()} {
		require.Equal(t, 200, call(t, addr, "GET", "/api/v1/me", old, nil).status)
	}
	r := call(t, ta.Addr(), "POST", "/api/v1/keys/"+key["key_id"].(string)+"/rotate", old, nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	fresh := r.body["access_token"].(string)
	require.NotEqual(t, old, fresh)
	require.Equal(t, key["key_id"], r.body["key_id"])
	require.Equal(t, 401, call(t, ta.Addr(), "GET", "/api/v1/me", old, nil).status)
	require.Eventually(t, func() bool { return call(t, tb.Addr(), "GET", "/api/v1/me", old, nil).status == 401 },
		time.Second, 2*time.Millisecond, "the other process still accepts the old secret")
	for _, addr := range []string{ta.Addr(), tb.Addr()} {
		me := call(t, addr, "GET", "/api/v1/me", fresh, nil)
		require.Equal(t, 200, me.status)
		require.Equal(t, key["key_id"], me.body["api_key_id"])
	}
	// Same restrictions: scopes, models and workspace.
	requireError(t, call(t, ta.Addr(), "GET", "/api/v1/workspaces", fresh, nil), 403, "key_scope_forbidden")
	p := call(t, ta.Addr(), "POST", "/api/v1/prompts", fresh, map[string]any{"name": "In Rot", "content": "x"})
	require.Equal(t, 201, p.status, "%s", p.raw)
	require.Equal(t, ws.body["id"], p.body["workspace_id"])
	keys := call(t, ta.Addr(), "GET", "/api/v1/keys", fresh, nil)
	k := keys.body["data"].([]any)
	var listed map[string]any
	for _, v := range k {
		if v.(map[string]any)["id"] == key["key_id"] {
			listed = v.(map[string]any)
		}
	}
	require.Equal(t, []any{"kavi"}, listed["models"])
	require.NotNil(t, listed["rotated_at"])
	require.Nil(t, listed["revoked_at"])

	signed := admin(t, ta.dbURL, "key", "create", "--user", owner.userID, "--org", owner.orgID, "--kind", "signed_in")
	requireError(t, call(t, ta.Addr(), "POST", "/api/v1/keys/"+signed["key_id"].(string)+"/rotate", signed["access_token"].(string), nil),
		400, "invalid_request")
	requireError(t, call(t, ta.Addr(), "DELETE", "/api/v1/keys/"+signed["key_id"].(string), signed["access_token"].(string), nil),
		400, "invalid_request")
	requireError(t, call(t, ta.Addr(), "POST", "/api/v1/keys/"+unknownUUID+"/rotate", fresh, nil), 404, "not_found")
	requireError(t, call(t, ta.Addr(), "POST", "/api/v1/keys/nope/rotate", fresh, nil), 404, "not_found")
	// Somebody else's key is as unknown as a missing one.
	stranger := convTenant(t, ta, "stranger@rotate.test")
	requireError(t, stranger.do(t, "POST", "/api/v1/keys/"+key["key_id"].(string)+"/rotate", nil), 404, "not_found")
	require.Equal(t, 200, call(t, ta.Addr(), "GET", "/api/v1/me", fresh, nil).status)
}
