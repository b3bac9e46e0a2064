package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const unknownUUID = "0b7e8a53-4d6f-4a8e-9c1d-2f3e4a5b6c7d"

// sameRefusal checks that two refusals are identical in status, body and
// headers except the request id (and the request window's remaining count,
// which every request moves).
func sameRefusal(t *testing.T, a, b resp) {
	t.Helper()
	require.Equal(t, a.status, b.status, "%s | %s", a.raw, b.raw)
	strip := func(r resp) map[string]any {
		out := map[string]any{}
		for k, v := range r.body {
			if k != "request_id" {
				out[k] = v
			}
		}
		return out
	}
	require.Equal(t, strip(a), strip(b))
	headers := func(h http.Header) http.Header {
		out := h.Clone()
		out.Del("X-Request-Id")
		out.Del("Date")
		// The window counts every request, refused or not: it moves by one
		// whatever the id was.
		out.Del("X-Ratelimit-Remaining")
		return out
	}
	require.Equal(t, headers(a.header), headers(b.header))
}

// A member calling an owner-or-admin route is refused before any id in the
// request is examined: a real id, a missing one and a malformed one get the
// one 403.
func TestOrgAuthorityBeforeExistence(t *testing.T) {
	ta := startTestApp(t)
	owner := convTenant(t, ta, "owner@acme.test")
	member := convMember(t, ta, owner.orgID, "member@acme.test", "member")
	other := convMember(t, ta, owner.orgID, "other@acme.test", "member")
	inv := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "new@acme.test"})
	require.Equal(t, 202, inv.status, "%s", inv.raw)
	ws := owner.do(t, "POST", "/api/v1/workspaces", map[string]any{"name": "Ops"})
	require.Equal(t, 201, ws.status, "%s", ws.raw)

	for _, tc := range []struct {
		name, method, path, code string
		body                     any
	}{
		{"list members", "GET", "/api/v1/org/members", "org_forbidden", nil},
		{"list invitations", "GET", "/api/v1/org/invitations", "org_forbidden", nil},
		{"invite", "POST", "/api/v1/org/invitations", "org_forbidden", map[string]any{"email": "x@acme.test"}},
		{"remove", "DELETE", "/api/v1/org/members/{id}", "org_forbidden", nil},
		{"role", "PATCH", "/api/v1/org/members/{id}", "org_forbidden", map[string]any{"role": "admin"}},
		{"revoke", "DELETE", "/api/v1/org/invitations/{inv}", "org_forbidden", nil},
		{"list workspaces", "GET", "/api/v1/workspaces", "workspace_forbidden", nil},
		{"create workspace", "POST", "/api/v1/workspaces", "workspace_forbidden", map[string]any{"name": "X"}},
		{"read workspace", "GET", "/api/v1/workspaces/{ws}", "workspace_forbidden", nil},
		{"update workspace", "PATCH", "/api/v1/workspaces/{ws}", "workspace_forbidden", map[string]any{"name": "Y"}},
		{"delete workspace", "DELETE", "/api/v1/workspaces/{ws}", "workspace_forbidden", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first resp
			for i, id := range []string{other.userID, unknownUUID, "not-an-id"} {
				path := strings.NewReplacer("{id}", id, "{inv}", pick(id == other.userID, inv.body["id"], id),
					"{ws}", pick(id == other.userID, ws.body["id"], id)).Replace(tc.path)
				r := member.do(t, tc.method, path, tc.body)
				requireError(t, r, 403, tc.code)
				if i == 0 {
					first = r
					continue
				}
				sameRefusal(t, first, r)
			}
		})
	}
	// Nothing was changed by the refusals.
	r := owner.do(t, "GET", "/api/v1/org/members", nil)
	require.Equal(t, 200, r.status)
	require.Len(t, r.body["data"], 3)
}

func pick(cond bool, a any, b string) string {
	if cond {
		return a.(string)
	}
	return b
}

// An id that is malformed, missing or another organization's gets the one
// 404 the spec names, identical except the request id.
func TestOrgNotFoundIsOneAnswer(t *testing.T) {
	ta := startTestApp(t)
	owner := convTenant(t, ta, "owner@one.test")
	stranger := convTenant(t, ta, "owner@two.test")
	strangerInv := stranger.do(t, "POST", "/api/v1/org/invitations", map[string]any{"email": "z@two.test"})
	require.Equal(t, 202, strangerInv.status)
	strangerWS := stranger.do(t, "POST", "/api/v1/workspaces", map[string]any{"name": "Theirs"})
	require.Equal(t, 201, strangerWS.status)

	for _, tc := range []struct {
		name, method, prefix, code, foreign string
		body                                any
	}{
		{"remove member", "DELETE", "/api/v1/org/members/", "org_member_not_found", stranger.userID, nil},
		{"change role", "PATCH", "/api/v1/org/members/", "org_member_not_found", stranger.userID, map[string]any{"role": "admin"}},
		{"leave", "DELETE", "/api/v1/org/memberships/", "org_member_not_found", stranger.orgID, nil},
		{"revoke invitation", "DELETE", "/api/v1/org/invitations/", "invitation_not_found", strangerInv.body["id"].(string), nil},
		{"read workspace", "GET", "/api/v1/workspaces/", "workspace_not_found", strangerWS.body["id"].(string), nil},
		{"update workspace", "PATCH", "/api/v1/workspaces/", "workspace_not_found", strangerWS.body["id"].(string), map[string]any{"name": "N"}},
		{"delete workspace", "DELETE", "/api/v1/workspaces/", "workspace_not_found", strangerWS.body["id"].(string), nil},
		{"accept invitation", "POST", "/api/v1/invitations/", "invitation_not_found", strangerInv.body["id"].(string) + "/accept", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			suffix := ""
			if strings.HasSuffix(tc.foreign, "/accept") {
				suffix = "/accept"
			}
			var first resp
			for i, id := range []string{tc.foreign, unknownUUID + suffix, "nope" + suffix, strings.ToUpper(unknownUUID) + suffix} {
				r := owner.do(t, tc.method, tc.prefix+id, tc.body)
				requireError(t, r, 404, tc.code)
				if i == 0 {
					first = r
					continue
				}
				sameRefusal(t, first, r)
			}
		})
	}
	// The stranger's things are untouched.
	r := stranger.do(t, "GET", "/api/v1/org/invitations", nil)
	require.Equal(t, "live", r.body["data"].([]any)[0].(map[string]any)["status"])
}

func TestOrgRoles(t *testing.T) {
	ta := startTestApp(t)
	owner := convTenant(t, ta, "owner@roles.test")
	adm := convMember(t, ta, owner.orgID, "admin@roles.test", "admin")
	adm2 := convMember(t, ta, owner.orgID, "admin2@roles.test", "admin")
	mem := convMember(t, ta, owner.orgID, "member@roles.test", "member")

	t.Run("owners are immutable", func(t *testing.T) {
		requireError(t, adm.do(t, "DELETE", "/api/v1/org/members/"+owner.userID, nil), 403, "org_forbidden")
		requireError(t, adm.do(t, "DELETE", "/api/v1/org/members/"+strings.ToUpper(owner.userID), nil), 403, "org_forbidden")
		requireError(t, adm.do(t, "PATCH", "/api/v1/org/members/"+owner.userID, map[string]any{"role": "member"}), 403, "org_forbidden")
		requireError(t, owner.do(t, "PATCH", "/api/v1/org/members/"+owner.userID, map[string]any{"role": "admin"}), 403, "org_forbidden")
		requireError(t, owner.do(t, "DELETE", "/api/v1/org/memberships/"+owner.orgID, nil), 403, "org_forbidden")
		requireError(t, owner.do(t, "DELETE", "/api/v1/org/members/"+owner.userID, nil), 403, "org_forbidden")
	})
	t.Run("only an owner grants owner", func(t *testing.T) {
		requireError(t, adm.do(t, "PATCH", "/api/v1/org/members/"+adm2.userID, map[string]any{"role": "owner"}), 403, "org_forbidden")
		requireError(t, adm.do(t, "PATCH", "/api/v1/org/members/"+mem.userID, map[string]any{"role": "owner"}), 403, "org_forbidden")
		r := owner.do(t, "PATCH", "/api/v1/org/members/"+adm2.userID, map[string]any{"role": "owner"})
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, "owner", r.body["role"])
		// An owner membership is immutable at once, even to another owner.
		requireError(t, owner.do(t, "PATCH", "/api/v1/org/members/"+adm2.userID, map[string]any{"role": "admin"}), 403, "org_forbidden")
	})
	t.Run("bad roles", func(t *testing.T) {
		requireError(t, adm.do(t, "PATCH", "/api/v1/org/members/"+mem.userID, map[string]any{"role": "boss"}), 400, "invalid_request")
		requireError(t, adm.do(t, "PATCH", "/api/v1/org/members/"+mem.userID, map[string]any{}), 400, "invalid_request")
		requireError(t, adm.do(t, "PATCH", "/api/v1/org/members/"+mem.userID, "{"), 400, "invalid_request")
	})
	t.Run("admin promotes and demotes", func(t *testing.T) {
		r := adm.do(t, "PATCH", "/api/v1/org/members/"+mem.userID, map[string]any{"role": "admin"})
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, "admin", r.body["role"])
		// The promoted member's key carries the new role on its next request.
		require.Equal(t, 200, mem.do(t, "GET", "/api/v1/org/members", nil).status)
		// An id in upper case names the same member.
		r = adm.do(t, "PATCH", "/api/v1/org/members/"+strings.ToUpper(mem.userID), map[string]any{"role": "member"})
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, "member", r.body["role"])
		require.Equal(t, mem.userID, r.body["user_id"])
		requireError(t, mem.do(t, "GET", "/api/v1/org/members", nil), 403, "org_forbidden")
	})
	t.Run("memberships and leaving", func(t *testing.T) {
		r := mem.do(t, "GET", "/api/v1/org/memberships", nil)
		require.Equal(t, 200, r.status)
		require.Len(t, r.body["data"], 2, "the personal organization and this one")
		var roles []string
		for _, o := range r.body["data"].([]any) {
			roles = append(roles, o.(map[string]any)["role"].(string))
		}
		require.ElementsMatch(t, []string{"owner", "member"}, roles)
		require.Equal(t, 204, mem.do(t, "DELETE", "/api/v1/org/memberships/"+owner.orgID, nil).status)
		require.Equal(t, 401, mem.do(t, "GET", "/api/v1/org/memberships", nil).status, "leaving revoked the key bound there")
		dep, err := ta.db.Departed(context.Background(), owner.orgID, mem.userID)
		require.NoError(t, err)
		require.Equal(t, "left", dep.Reason)
		require.True(t, dep.MemoryFrozen)
	})
}

// Two admins demote each other at the same moment: the row locks serialise
// the two changes, so exactly one wins and the loser, already a member when
// its change runs, is refused. The organization never ends up with both
// demoted.
func TestOrgConcurrentRoleChanges(t *testing.T) {
	ta := startTestApp(t)
	owner := convTenant(t, ta, "owner@race.test")
	for round := range 3 {
		a := convMember(t, ta, owner.orgID, "a"+string(rune('0'+round))+"@race.test", "admin")
		b := convMember(t, ta, owner.orgID, "b"+string(rune('0'+round))+"@race.test", "admin")
		// Both keys are cached before the race.
		require.Equal(t, 200, a.do(t, "GET", "/api/v1/org/members", nil).status)
		require.Equal(t, 200, b.do(t, "GET", "/api/v1/org/members", nil).status)
		var wg sync.WaitGroup
		var ra, rb resp
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			ra = a.do(t, "PATCH", "/api/v1/org/members/"+b.userID, map[string]any{"role": "member"})
		}()
		go func() {
			defer wg.Done()
			<-start
			rb = b.do(t, "PATCH", "/api/v1/org/members/"+a.userID, map[string]any{"role": "member"})
		}()
		close(start)
		wg.Wait()
		statuses := []int{ra.status, rb.status}
		require.ElementsMatch(t, []int{200, 403}, statuses, "%s | %s", ra.raw, rb.raw)
		roles := map[string]string{}
		for _, m := range owner.do(t, "GET", "/api/v1/org/members", nil).body["data"].([]any) {
			mm := m.(map[string]any)
			roles[mm["user_id"].(string)] = mm["role"].(string)
		}
		if ra.status == 200 {
			require.Equal(t, "admin", roles[a.userID])
			require.Equal(t, "member", roles[b.userID])
		} else {
			require.Equal(t, "member", roles[a.userID])
			require.Equal(t, "admin", roles[b.userID])
		}
	}
	// Many admins setting one member's role at once: every change lands
	// whole, and the final role is the one the last committed change wrote.
	target := convMember(t, ta, owner.orgID, "target@race.test", "member")
	var admins []convClient
	for i := range 4 {
		admins = append(admins, convMember(t, ta, owner.orgID, "x"+string(rune('0'+i))+"@race.test", "admin"))
	}
	var wg sync.WaitGroup
	for i, ad := range admins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			role := []string{"admin", "member"}[i%2]
			r := ad.do(t, "PATCH", "/api/v1/org/members/"+target.userID, map[string]any{"role": role})
			require.Equal(t, 200, r.status, "%s", r.raw)
		}()
	}
	wg.Wait()
	n := 0
	for _, m := range owner.do(t, "GET", "/api/v1/org/members", nil).body["data"].([]any) {
		if m.(map[string]any)["user_id"] == target.userID {
			n++
			require.Contains(t, []string{"admin", "member"}, m.(map[string]any)["role"])
		}
	}
	require.Equal(t, 1, n)
}

// Removing a member revokes every key bound to the organization in the same
// transaction, as a recorded fact: the key is refused by this process at
// once and by another process through the invalidation channel, and
// re-adding the member does not bring it back.
func TestRemovalRevokesKeysEverywhere(t *testing.T) {
	ta := startTestApp(t)
	tb := startTestApp(t, func(c *serveConfig) { c.DB.URL = ta.dbURL })
	owner := convTenant(t, ta, "owner@rm.test")
	mem := convMember(t, ta, owner.orgID, "member@rm.test", "member")
	second := admin(t, ta.dbURL, "key", "create", "--user", mem.userID, "--org", owner.orgID)
	// Both processes have both keys cached.
	for range 2 {
		require.Equal(t, 200, call(t, ta.Addr(), "GET", "/api/v1/me", mem.key, nil).status)
		require.Equal(t, 200, call(t, tb.Addr(), "GET", "/api/v1/me", mem.key, nil).status)
		require.Equal(t, 200, call(t, tb.Addr(), "GET", "/api/v1/me", second["access_token"].(string), nil).status)
	}
	start := time.Now()
	require.Equal(t, 204, owner.do(t, "DELETE", "/api/v1/org/members/"+mem.userID, nil).status)
	require.Equal(t, 401, call(t, ta.Addr(), "GET", "/api/v1/me", mem.key, nil).status, "the removing process refuses at once")
	for _, key := range []string{mem.key, second["access_token"].(string)} {
		require.Eventually(t, func() bool {
			return call(t, tb.Addr(), "GET", "/api/v1/me", key, nil).status == 401
		}, time.Second, 2*time.Millisecond, "the other process still accepts a removed member's key")
	}
	t.Logf("removal reached the other process in %v", time.Since(start))

	var reasons []string
	rows, err := ta.db.Pool.Query(context.Background(), `select revoked_reason from api_keys where user_id = $1 and org_id = $2`,
		mem.userID, owner.orgID)
	require.NoError(t, err)
	for rows.Next() {
		var r string
		require.NoError(t, rows.Scan(&r))
		reasons = append(reasons, r)
	}
	require.Equal(t, []string{"member_removed", "member_removed"}, reasons)
	dep, err := ta.db.Departed(context.Background(), owner.orgID, mem.userID)
	require.NoError(t, err)
	require.Equal(t, "removed", dep.Reason)
	require.True(t, dep.MemoryFrozen)

	// Re-added by invitation, the member is back; the old keys are not.
	inv := owner.do(t, "POST", "/api/v1/org/invitations", map[string]any{"user_id": mem.userID})
	require.Equal(t, 202, inv.status, "%s", inv.raw)
	personal := admin(t, ta.dbURL, "key", "create", "--user", mem.userID, "--org", personalOrg(t, ta, mem.userID))
	r := call(t, ta.Addr(), "POST", "/api/v1/invitations/"+inv.body["id"].(string)+"/accept", personal["access_token"].(string), nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, 401, call(t, ta.Addr(), "GET", "/api/v1/me", mem.key, nil).status)
	require.Equal(t, 401, call(t, tb.Addr(), "GET", "/api/v1/me", second["access_token"].(string), nil).status)
}

func personalOrg(t *testing.T, ta *testApp, userID string) string {
	t.Helper()
	var org string
	require.NoError(t, ta.db.Pool.QueryRow(context.Background(), `select personal_org_id from users where id = $1`, userID).Scan(&org))
	return org
}
