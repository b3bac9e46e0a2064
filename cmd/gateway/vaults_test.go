package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func (c convClient) vault(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	r := c.do(t, "POST", "/api/v1/vaults", body)
	require.Equal(t, 201, r.status, "%s", r.raw)
	return r.body
}

func perms(m map[string]any) map[string]any { return m["permissions"].(map[string]any) }

func listNames(t *testing.T, c convClient, query string) []string {
	t.Helper()
	r := c.do(t, "GET", "/api/v1/vaults"+query, nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	var names []string
	for _, v := range r.body["data"].([]any) {
		names = append(names, v.(map[string]any)["name"].(string))
	}
	return names
}

func TestVaultCreateAndRead(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	bob := convMember(t, ta, ada.orgID, "bob@example.com", "member")
	eve := convTenant(t, ta, "eve@example.com")

	v := ada.vault(t, map[string]any{"name": "Launch", "description": "Q3 launch", "icon": "rocket", "color": "teal"})
	require.Equal(t, true, v["created"])
	require.Equal(t, "default", v["memory_scope"])
	require.Equal(t, true, v["inherit_org_rules"])
	require.Equal(t, false, v["archived"])
	require.Equal(t, false, v["pinned"])
	require.Equal(t, map[string]any{"can_read": true, "can_write": true, "can_share": true, "can_administer": true}, perms(v))
	id := v["id"].(string)

	t.Run("read", func(t *testing.T) {
		r := ada.do(t, "GET", "/api/v1/vaults/"+id, nil)
		require.Equal(t, 200, r.status)
		require.Equal(t, "Launch", r.body["name"])
		require.NotContains(t, r.body, "created", "created is on create responses only")
		for _, c := range []convClient{bob, eve} {
			requireError(t, c.do(t, "GET", "/api/v1/vaults/"+id, nil), 404, "vault_not_found")
		}
		requireError(t, ada.do(t, "GET", "/api/v1/vaults/not-a-uuid", nil), 404, "vault_not_found")
		require.Equal(t, 200, ada.do(t, "GET", "/api/v2/vaults/"+id, nil).status, "served on v2 too")
	})

	t.Run("invalid fields", func(t *testing.T) {
		for _, body := range []map[string]any{
			{"name": ""}, {"name": string(make([]byte, 129))}, {}, {"name": "x", "icon": "unicorn"},
			{"name": "x", "color": "chartreuse"}, {"name": "x", "memory_scope": "private"},
			{"name": "x", "memory_scope": nil}, {"name": 7}, {"name": "x", "external_id": ""},
		} {
			requireError(t, ada.do(t, "POST", "/api/v1/vaults", body), 400, "invalid_request")
		}
		requireError(t, ada.do(t, "POST", "/api/v1/vaults", `{"name":`), 400, "invalid_request")
	})

	t.Run("names are unique in the organization", func(t *testing.T) {
		r := ada.do(t, "POST", "/api/v1/vaults", map[string]any{"name": "Launch"})
		requireError(t, r, 409, "vault_name_exists")
		require.NotContains(t, string(r.raw), id, "the conflict carries no vault id")
		require.Equal(t, 201, eve.do(t, "POST", "/api/v1/vaults", map[string]any{"name": "Launch"}).status,
			"another organization may use the name")
	})

	t.Run("concurrent creates of one name make one vault", func(t *testing.T) {
		var wg sync.WaitGroup
		statuses := make([]int, 8)
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i] = ada.do(t, "POST", "/api/v1/vaults", map[string]any{"name": "Race"}).status
			}()
		}
		wg.Wait()
		created := 0
		for _, s := range statuses {
			require.Contains(t, []int{201, 409}, s)
			if s == 201 {
				created++
			}
		}
		require.Equal(t, 1, created)
	})

	t.Run("external id makes create idempotent", func(t *testing.T) {
		first := ada.do(t, "POST", "/api/v1/vaults", map[string]any{"name": "Ext", "external_id": "proj-1"})
		require.Equal(t, 201, first.status, "%s", first.raw)
		again := ada.do(t, "POST", "/api/v1/vaults", map[string]any{"name": "Renamed", "external_id": "proj-1", "color": "red"})
		require.Equal(t, 200, again.status, "%s", again.raw)
		require.Equal(t, false, again.body["created"])
		require.Equal(t, first.body["id"], again.body["id"])
		require.Equal(t, "Ext", again.body["name"], "never a rename")
		require.Nil(t, again.body["color"], "writes nothing")
		requireError(t, bob.do(t, "POST", "/api/v1/vaults", map[string]any{"name": "Bob's", "external_id": "proj-1"}),
			409, "vault_external_id_conflict")
		require.Equal(t, 201, eve.do(t, "POST", "/api/v1/vaults", map[string]any{"name": "Ext", "external_id": "proj-1"}).status)
		var n int
		require.NoError(t, ta.db.Pool.QueryRow(context.Background(),
			`select count(*) from vaults where org_id = $1 and external_id = 'proj-1'`, ada.orgID).Scan(&n))
		require.Equal(t, 1, n)
	})
}

func TestVaultUpdateArchivePinDelete(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	bob := convMember(t, ta, ada.orgID, "bob@example.com", "member")
	cat := convMember(t, ta, ada.orgID, "cat@example.com", "member")
	adm := convMember(t, ta, ada.orgID, "adm@example.com", "admin")
	v := ada.vault(t, map[string]any{"name": "Docs", "icon": "book", "description": "manuals"})
	id := v["id"].(string)
	ada.vault(t, map[string]any{"name": "Other"})
	require.Equal(t, 201, ada.do(t, "POST", "/api/v1/vaults/"+id+"/members",
		map[string]any{"user_id": bob.userID, "can_read": true}).status)
	require.Equal(t, 201, ada.do(t, "POST", "/api/v1/vaults/"+id+"/members",
		map[string]any{"user_id": cat.userID, "can_read": true, "can_write": true, "can_share": true}).status)

	t.Run("update", func(t *testing.T) {
		requireError(t, bob.do(t, "PATCH", "/api/v1/vaults/"+id, map[string]any{"name": "X"}), 403, "vault_forbidden")
		requireError(t, adm.do(t, "PATCH", "/api/v1/vaults/"+id, map[string]any{"name": "X"}), 404, "vault_not_found")
		requireError(t, ada.do(t, "PATCH", "/api/v1/vaults/"+id, map[string]any{}), 400, "invalid_request")
		requireError(t, ada.do(t, "PATCH", "/api/v1/vaults/"+id, map[string]any{"name": nil}), 400, "invalid_request")
		requireError(t, ada.do(t, "PATCH", "/api/v1/vaults/"+id, map[string]any{"memory_scope": nil}), 400, "invalid_request")
		requireError(t, ada.do(t, "PATCH", "/api/v1/vaults/"+id, map[string]any{"name": "Other"}), 409, "vault_name_exists")
		r := cat.do(t, "PATCH", "/api/v1/vaults/"+id, map[string]any{"description": nil, "color": "blue", "memory_scope": "vault_only"})
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Nil(t, r.body["description"], "explicit null clears")
		require.Equal(t, "book", r.body["icon"], "omitted is unchanged")
		require.Equal(t, "blue", r.body["color"])
		require.Equal(t, "vault_only", r.body["memory_scope"])
		require.Greater(t, r.body["updated_at"].(string), v["updated_at"].(string), "updated_at advances")
		require.Equal(t, map[string]any{"can_read": true, "can_write": true, "can_share": true, "can_administer": false}, perms(r.body))
	})

	t.Run("archive and restore are idempotent", func(t *testing.T) {
		requireError(t, bob.do(t, "PUT", "/api/v1/vaults/"+id+"/archive", nil), 403, "vault_forbidden")
		for range 2 {
			require.Equal(t, 204, cat.do(t, "PUT", "/api/v1/vaults/"+id+"/archive", nil).status)
		}
		require.Equal(t, []string{"Other"}, listNames(t, ada, ""))
		require.Equal(t, []string{"Docs"}, listNames(t, ada, "?archived=true"))
		require.Equal(t, true, ada.do(t, "GET", "/api/v1/vaults/"+id, nil).body["archived"])
		for range 2 {
			require.Equal(t, 204, cat.do(t, "DELETE", "/api/v1/vaults/"+id+"/archive", nil).status)
		}
		require.Equal(t, false, ada.do(t, "GET", "/api/v1/vaults/"+id, nil).body["archived"])
	})

	t.Run("pins are private", func(t *testing.T) {
		for range 2 {
			require.Equal(t, 204, bob.do(t, "PUT", "/api/v1/vaults/"+id+"/pin", nil).status)
		}
		require.Equal(t, true, bob.do(t, "GET", "/api/v1/vaults/"+id, nil).body["pinned"])
		require.Equal(t, false, ada.do(t, "GET", "/api/v1/vaults/"+id, nil).body["pinned"])
		require.Equal(t, 204, ada.do(t, "PUT", "/api/v1/vaults/"+id+"/pin", nil).status)
		require.Equal(t, 204, ada.do(t, "DELETE", "/api/v1/vaults/"+id+"/pin", nil).status)
		require.Equal(t, true, bob.do(t, "GET", "/api/v1/vaults/"+id, nil).body["pinned"], "unpin never affects another member")
		requireError(t, adm.do(t, "PUT", "/api/v1/vaults/"+id+"/pin", nil), 404, "vault_not_found")
	})

	t.Run("list scopes", func(t *testing.T) {
		require.Equal(t, []string{"Docs", "Other"}, listNames(t, ada, "?scope=owned"))
		require.Empty(t, listNames(t, ada, "?scope=shared"))
		require.Equal(t, []string{"Docs"}, listNames(t, bob, "?scope=shared"))
		require.Empty(t, listNames(t, adm, ""), "admins are not listed into vaults they are not members of")
		requireError(t, ada.do(t, "GET", "/api/v1/vaults?scope=mine", nil), 400, "invalid_request")
		requireError(t, ada.do(t, "GET", "/api/v1/vaults?archived=maybe", nil), 400, "invalid_request")
	})

	t.Run("delete", func(t *testing.T) {
		ctx := context.Background()
		_, err := ta.db.Pool.Exec(ctx, `insert into memories (org_id, scope, vault_id, author_id, key, value, source)
			values ($1, 'vault', $2, $3, 'stack', 'go', 'manual')`, ada.orgID, id, ada.userID)
		require.NoError(t, err)
		requireError(t, cat.do(t, "DELETE", "/api/v1/vaults/"+id, nil), 403, "vault_forbidden")
		requireError(t, ada.do(t, "DELETE", "/api/v1/vaults/"+ta.otherVault(t), nil), 404, "vault_not_found")
		require.Equal(t, 204, adm.do(t, "DELETE", "/api/v1/vaults/"+id, nil).status, "an organization admin may delete")
		requireError(t, ada.do(t, "GET", "/api/v1/vaults/"+id, nil), 404, "vault_not_found")
		var members, memories int
		require.NoError(t, ta.db.Pool.QueryRow(ctx, `select (select count(*) from vault_members where vault_id = $1),
			(select count(*) from memories where vault_id = $1)`, id).Scan(&members, &memories))
		require.Zero(t, members)
		require.Zero(t, memories)
		requireError(t, ada.do(t, "DELETE", "/api/v1/vaults/"+id, nil), 404, "vault_not_found")
	})
}

// otherVault makes a vault in a fresh organization.
func (ta *testApp) otherVault(t *testing.T) string {
	t.Helper()
	o := convTenant(t, ta, fmt.Sprintf("other-%p@example.com", t))
	return o.vault(t, map[string]any{"name": "Elsewhere"})["id"].(string)
}

func TestVaultMembership(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	bob := convMember(t, ta, ada.orgID, "bob@example.com", "member")
	cat := convMember(t, ta, ada.orgID, "cat@example.com", "member")
	dan := convMember(t, ta, ada.orgID, "dan@example.com", "member")
	adm := convMember(t, ta, ada.orgID, "adm@example.com", "admin")
	eve := convTenant(t, ta, "eve@example.com")
	id := ada.vault(t, map[string]any{"name": "Team"})["id"].(string)
	members := "/api/v1/vaults/" + id + "/members"

	// bob may read and share, not write.
	r := ada.do(t, "POST", members, map[string]any{"user_id": bob.userID, "can_read": true, "can_share": true})
	require.Equal(t, 201, r.status, "%s", r.raw)
	require.Equal(t, false, r.body["can_write"], "omitted grants default to false")

	t.Run("no escalation when sharing", func(t *testing.T) {
		requireError(t, bob.do(t, "POST", members, map[string]any{"user_id": cat.userID, "can_read": true, "can_write": true}),
			403, "vault_forbidden")
		require.Equal(t, 201, bob.do(t, "POST", members, map[string]any{"user_id": cat.userID, "can_read": true}).status)
		requireError(t, bob.do(t, "PATCH", members+"/"+cat.userID, map[string]any{"can_write": true}), 403, "vault_forbidden")
		r := bob.do(t, "PATCH", members+"/"+cat.userID, map[string]any{"can_share": true})
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, true, r.body["can_read"], "omitted fields keep their value")
		requireError(t, cat.do(t, "POST", members, map[string]any{"user_id": dan.userID, "can_read": true, "can_write": true}),
			403, "vault_forbidden")
		requireError(t, dan.do(t, "POST", members, map[string]any{"user_id": dan.userID, "can_read": true}), 404, "vault_not_found")
		require.Equal(t, 200, ada.do(t, "PATCH", members+"/"+cat.userID, map[string]any{"can_write": true}).status,
			"the owner grants anything")
		requireError(t, ada.do(t, "PATCH", members+"/"+cat.userID, map[string]any{"held": true}), 400, "invalid_request")
		requireError(t, ada.do(t, "PATCH", members+"/"+cat.userID, map[string]any{}), 400, "invalid_request")
	})

	t.Run("users outside the organization", func(t *testing.T) {
		requireError(t, ada.do(t, "POST", members, map[string]any{"user_id": eve.userID, "can_read": true}), 404, "user_not_found")
		requireError(t, ada.do(t, "POST", members, map[string]any{"user_id": "nope", "can_read": true}), 404, "user_not_found")
		requireError(t, ada.do(t, "PATCH", members+"/"+dan.userID, map[string]any{"can_read": true}), 404, "user_not_found")
	})

	t.Run("the owner's membership is fixed", func(t *testing.T) {
		requireError(t, adm.do(t, "PATCH", members+"/"+ada.userID, map[string]any{"can_write": false}), 403, "vault_forbidden")
		requireError(t, adm.do(t, "DELETE", members+"/"+ada.userID, nil), 403, "vault_forbidden")
		requireError(t, adm.do(t, "PUT", members+"/"+ada.userID+"/hold", nil), 403, "vault_forbidden")
		// An id in upper case names the same user, and the same rule.
		upper := strings.ToUpper(ada.userID)
		requireError(t, adm.do(t, "PATCH", members+"/"+upper, map[string]any{"can_write": false}), 403, "vault_forbidden")
		requireError(t, bob.do(t, "DELETE", members+"/"+upper, nil), 403, "vault_forbidden")
		requireError(t, adm.do(t, "PUT", members+"/"+upper+"/hold", nil), 403, "vault_forbidden")
		requireError(t, bob.do(t, "POST", members, map[string]any{"user_id": upper, "can_read": true}), 403, "vault_forbidden")
		r := ada.do(t, "GET", "/api/v1/vaults/"+id, nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, map[string]any{"can_read": true, "can_write": true, "can_share": true, "can_administer": true}, perms(r.body))
	})

	t.Run("holds suspend without losing grants", func(t *testing.T) {
		requireError(t, bob.do(t, "PUT", members+"/"+cat.userID+"/hold", nil), 403, "vault_forbidden")
		conv := cat.create(t, map[string]any{"vault_id": id})["id"].(string)
		for range 2 {
			require.Equal(t, 204, adm.do(t, "PUT", members+"/"+cat.userID+"/hold", nil).status)
		}
		requireError(t, cat.do(t, "GET", "/api/v1/vaults/"+id, nil), 404, "vault_not_found")
		requireError(t, cat.do(t, "PUT", "/api/v1/vaults/"+id+"/archive", nil), 404, "vault_not_found")
		requireError(t, cat.do(t, "POST", members, map[string]any{"user_id": dan.userID, "can_read": true}), 404, "vault_not_found")
		require.Empty(t, listNames(t, cat, ""))
		// Creating a conversation in the vault hides it too: 404, not the
		// 403 a member without write gets.
		requireError(t, cat.do(t, "POST", "/api/v1/conversations", map[string]any{"vault_id": id}), 404, "vault_not_found")
		// The conversations' grants follow the hold.
		requireError(t, cat.do(t, "GET", "/api/v1/conversations/"+conv, nil), 404, "conversation_not_found")
		listed := ada.do(t, "GET", members, nil)
		require.Equal(t, 200, listed.status)
		var held map[string]any
		for _, m := range listed.body["data"].([]any) {
			if m.(map[string]any)["user_id"] == cat.userID {
				held = m.(map[string]any)
			}
		}
		require.Equal(t, true, held["held"])
		require.Equal(t, true, held["can_write"], "held members are listed with their permissions intact")
		require.Equal(t, 204, ada.do(t, "DELETE", members+"/"+cat.userID+"/hold", nil).status)
		r := cat.do(t, "GET", "/api/v1/vaults/"+id, nil)
		require.Equal(t, 200, r.status)
		require.Equal(t, map[string]any{"can_read": true, "can_write": true, "can_share": true, "can_administer": false}, perms(r.body))
		require.Equal(t, 200, cat.do(t, "GET", "/api/v1/conversations/"+conv, nil).status)
		require.Equal(t, id, cat.create(t, map[string]any{"vault_id": id})["vault_id"])
	})

	// The four grants do not imply one another: can_write alone shows the
	// vault and lets its member change it, while its content (memory,
	// rules, pins) stays as if it did not exist, and conversations need
	// both grants (docs/conversations.md).
	t.Run("write without read", func(t *testing.T) {
		wri := convMember(t, ta, ada.orgID, "wri@example.com", "member")
		require.Equal(t, 201, ada.do(t, "POST", members, map[string]any{"user_id": wri.userID, "can_write": true}).status)
		r := wri.do(t, "GET", "/api/v1/vaults/"+id, nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, map[string]any{"can_read": false, "can_write": true, "can_share": false, "can_administer": false}, perms(r.body))
		require.Contains(t, listNames(t, wri, ""), "Team")
		r = wri.do(t, "PATCH", "/api/v1/vaults/"+id, map[string]any{"description": "by a writer"})
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, "by a writer", r.body["description"])
		require.Equal(t, 204, wri.do(t, "PUT", "/api/v1/vaults/"+id+"/archive", nil).status)
		require.Equal(t, 204, wri.do(t, "DELETE", "/api/v1/vaults/"+id+"/archive", nil).status)
		mem := wri.remember(t, map[string]any{"key": "style", "value": "terse", "scope": "vault", "vault_id": id})
		require.Contains(t, ada.memoryKeys(t, "?vault_id="+id), "style")
		requireError(t, wri.do(t, "DELETE", "/api/v1/memories/"+mem, nil), 404, "memory_not_found")

		requireError(t, wri.do(t, "GET", "/api/v1/memories?vault_id="+id, nil), 404, "vault_not_found")
		requireError(t, wri.do(t, "GET", "/api/v1/rules?vault_id="+id, nil), 404, "vault_not_found")
		requireError(t, wri.do(t, "PUT", "/api/v1/vaults/"+id+"/pin", nil), 404, "vault_not_found")
		requireError(t, wri.do(t, "GET", members, nil), 403, "vault_forbidden")
		requireError(t, wri.do(t, "POST", members, map[string]any{"user_id": dan.userID, "can_write": true}), 403, "vault_forbidden")
		requireError(t, wri.do(t, "DELETE", "/api/v1/vaults/"+id, nil), 403, "vault_forbidden")
		requireError(t, wri.do(t, "POST", "/api/v1/conversations", map[string]any{"vault_id": id}), 403, "vault_forbidden")
		require.Equal(t, 204, ada.do(t, "DELETE", members+"/"+wri.userID, nil).status)
	})

	t.Run("remove", func(t *testing.T) {
		requireError(t, cat.do(t, "DELETE", members+"/nope", nil), 404, "user_not_found")
		require.Equal(t, 204, bob.do(t, "DELETE", members+"/"+cat.userID, nil).status, "a member with can_share removes")
		requireError(t, cat.do(t, "GET", "/api/v1/vaults/"+id, nil), 404, "vault_not_found")
		requireError(t, bob.do(t, "DELETE", members+"/"+cat.userID, nil), 404, "user_not_found")
		requireError(t, dan.do(t, "GET", members, nil), 404, "vault_not_found")
		require.Equal(t, 200, adm.do(t, "GET", members, nil).status, "an organization admin administers every vault")
	})
}

// A member who leaves loses their grants in the organization's vaults with
// the membership, as they lose their keys: re-invited, they start without
// them. A vault they own stays theirs.
func TestLeavingEndsVaultGrants(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@leave.test")
	bob := convTenant(t, ta, "bob@leave.test")
	join := func() convClient {
		t.Helper()
		inv := ada.do(t, "POST", "/api/v1/org/invitations", map[string]any{"user_id": bob.userID})
		require.Equal(t, 202, inv.status, "%s", inv.raw)
		r := bob.do(t, "POST", "/api/v1/invitations/"+inv.body["id"].(string)+"/accept", nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		key := admin(t, ta.dbURL, "key", "create", "--user", bob.userID, "--org", ada.orgID)
		return convClient{ta: ta, key: key["access_token"].(string), userID: bob.userID, orgID: ada.orgID}
	}
	inOrg := join()
	shared := ada.vault(t, map[string]any{"name": "Shared"})["id"].(string)
	require.Equal(t, 201, ada.do(t, "POST", "/api/v1/vaults/"+shared+"/members",
		map[string]any{"user_id": bob.userID, "can_read": true, "can_write": true}).status)
	own := inOrg.vault(t, map[string]any{"name": "Bob's"})["id"].(string)
	require.Equal(t, 200, inOrg.do(t, "GET", "/api/v1/vaults/"+shared, nil).status)

	require.Equal(t, 204, inOrg.do(t, "DELETE", "/api/v1/org/memberships/"+ada.orgID, nil).status)
	r := ada.do(t, "GET", "/api/v1/vaults/"+shared+"/members", nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.NotContains(t, string(r.raw), bob.userID, "the departed member's grant ended with the membership")
	var owner string
	require.NoError(t, ta.db.Pool.QueryRow(context.Background(),
		`select owner_id::text from vaults where id = $1`, own).Scan(&owner))
	require.Equal(t, bob.userID, owner)

	again := join()
	requireError(t, again.do(t, "GET", "/api/v1/vaults/"+shared, nil), 404, "vault_not_found")
	r = again.do(t, "GET", "/api/v1/vaults/"+own, nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, true, perms(r.body)["can_administer"], "the vault the member owns is still theirs")
}
