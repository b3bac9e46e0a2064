package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
)

// remember writes a memory and returns its id.
func (c convClient) remember(t *testing.T, body map[string]any) string {
	t.Helper()
	r := c.do(t, "POST", "/api/v1/memories", body)
	require.Equal(t, 201, r.status, "%s", r.raw)
	require.Equal(t, true, r.body["stored"])
	return r.body["memory"].(map[string]any)["id"].(string)
}

// memoryKeys lists the keys of the resolved view for query.
func (c convClient) memoryKeys(t *testing.T, query string) []string {
	t.Helper()
	r := c.do(t, "GET", "/api/v1/memories"+query, nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	keys := []string{}
	for _, m := range r.body["data"].([]any) {
		keys = append(keys, m.(map[string]any)["key"].(string))
	}
	return keys
}

func TestMemoryScopesAndResolvedView(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	bob := convMember(t, ta, ada.orgID, "bob@example.com", "member")
	eve := convTenant(t, ta, "eve@example.com")
	shared := ada.vault(t, map[string]any{"name": "Shared"})["id"].(string)
	secret := ada.vault(t, map[string]any{"name": "Secret", "memory_scope": "vault_only"})["id"].(string)
	require.Equal(t, 201, ada.do(t, "POST", "/api/v1/vaults/"+shared+"/members",
		map[string]any{"user_id": bob.userID, "can_read": true}).status)

	ada.remember(t, map[string]any{"key": "tone", "value": "terse answers"})
	ada.remember(t, map[string]any{"key": "stack", "value": "Go and PostgreSQL", "scope": "org"})
	ada.remember(t, map[string]any{"key": "launch", "value": "ships in March", "scope": "vault", "vault_id": shared})
	ada.remember(t, map[string]any{"key": "codename", "value": "bluebird", "scope": "vault", "vault_id": secret})
	bob.remember(t, map[string]any{"key": "editor", "value": "vim"})
	eve.remember(t, map[string]any{"key": "eve-only", "value": "x", "scope": "org"})

	t.Run("the resolved view", func(t *testing.T) {
		require.ElementsMatch(t, []string{"tone", "stack", "launch"}, ada.memoryKeys(t, ""),
			"a vault_only vault contributes nothing outside it")
		require.ElementsMatch(t, []string{"codename"}, ada.memoryKeys(t, "?vault_id="+secret),
			"inside a vault_only vault only its memory")
		require.ElementsMatch(t, []string{"tone", "stack", "launch"}, ada.memoryKeys(t, "?vault_id="+shared))
		require.ElementsMatch(t, []string{"editor", "stack", "launch"}, bob.memoryKeys(t, ""))
		require.ElementsMatch(t, []string{"eve-only"}, eve.memoryKeys(t, ""))
		require.ElementsMatch(t, []string{"launch"}, ada.memoryKeys(t, "?scope=vault"))
		requireError(t, bob.do(t, "GET", "/api/v1/memories?vault_id="+secret, nil), 404, "vault_not_found")
		requireError(t, ada.do(t, "GET", "/api/v1/memories?scope=team", nil), 400, "invalid_request")
		r := ada.do(t, "GET", "/api/v1/memories?scope=vault", nil)
		m := r.body["data"].([]any)[0].(map[string]any)
		require.Equal(t, shared, m["vault_id"])
		require.Equal(t, "Shared", m["vault_name"])
	})

	t.Run("pages", func(t *testing.T) {
		r := ada.do(t, "GET", "/api/v1/memories?limit=2", nil)
		require.Len(t, r.body["data"], 2)
		cursor := r.body["next_cursor"].(string)
		r2 := ada.do(t, "GET", "/api/v1/memories?limit=2&cursor="+cursor, nil)
		require.Len(t, r2.body["data"], 1)
		require.Nil(t, r2.body["next_cursor"])
		requireError(t, ada.do(t, "GET", "/api/v1/memories?cursor=garbage", nil), 400, "invalid_request")
		// An empty cursor is no cursor, as on every list: the first page.
		r3 := ada.do(t, "GET", "/api/v1/memories?limit=2&cursor=", nil)
		require.Equal(t, 200, r3.status, "%s", r3.raw)
		require.Equal(t, r.body["data"], r3.body["data"])
	})

	t.Run("writes need the grant of their scope", func(t *testing.T) {
		requireError(t, bob.do(t, "POST", "/api/v1/memories", map[string]any{"key": "k", "value": "v", "scope": "org"}),
			403, "org_forbidden")
		requireError(t, bob.do(t, "POST", "/api/v1/memories", map[string]any{"key": "k", "value": "v", "scope": "vault", "vault_id": shared}),
			403, "vault_forbidden")
		requireError(t, bob.do(t, "POST", "/api/v1/memories", map[string]any{"key": "k", "value": "v", "scope": "vault", "vault_id": secret}),
			404, "vault_not_found")
		requireError(t, eve.do(t, "POST", "/api/v1/memories", map[string]any{"key": "k", "value": "v", "scope": "vault", "vault_id": shared}),
			404, "vault_not_found")
		for _, body := range []map[string]any{
			{"value": "v"}, {"key": "k"}, {"key": " ", "value": "v"}, {"key": "k", "value": "v", "scope": "team"},
			{"key": "k", "value": "v", "scope": "vault"}, {"key": "k", "value": "v", "vault_id": shared},
			{"key": strings.Repeat("k", 129), "value": "v"}, {"key": "k", "value": strings.Repeat("v", 2001)},
		} {
			requireError(t, ada.do(t, "POST", "/api/v1/memories", body), 400, "invalid_request")
		}
	})

	t.Run("a second write of a key replaces its value", func(t *testing.T) {
		first := ada.remember(t, map[string]any{"key": "tone", "value": "warm answers"})
		r := ada.do(t, "GET", "/api/v1/memories?scope=personal", nil)
		require.Len(t, r.body["data"], 1)
		m := r.body["data"].([]any)[0].(map[string]any)
		require.Equal(t, first, m["id"])
		require.Equal(t, "warm answers", m["value"])
	})

	t.Run("personal data is dropped, never echoed", func(t *testing.T) {
		cases := []struct{ value, pii, category string }{
			{"mail me at ada@example.com", "ada@example.com", "email"},
			{"call +44 20 7946 0958", "+44 20 7946 0958", "phone"},
			{"card 4111 1111 1111 1111", "4111 1111 1111 1111", "card"},
		}
		for _, tc := range cases {
			r := ada.do(t, "POST", "/api/v1/memories", map[string]any{"key": "contact", "value": tc.value})
			require.Equal(t, 200, r.status, "%s", r.raw)
			require.Equal(t, false, r.body["stored"])
			require.Equal(t, "pii_detected", r.body["reason"])
			require.Equal(t, tc.category, r.body["category"])
			require.Equal(t, "value", r.body["field"])
			require.NotContains(t, string(r.raw), tc.pii)
		}
		var n int
		require.NoError(t, ta.db.Pool.QueryRow(context.Background(), `select count(*) from memories where key = 'contact'`).Scan(&n))
		require.Zero(t, n, "nothing was stored")
		// Whole values: a bare "7946" also turns up in a request's duration.
		for _, tc := range cases {
			require.NotContains(t, ta.logs.String(), tc.pii)
		}
		require.NotContains(t, ta.logs.String(), "7946 0958")
	})

	t.Run("delete", func(t *testing.T) {
		launch := ada.do(t, "GET", "/api/v1/memories?scope=vault", nil).body["data"].([]any)[0].(map[string]any)["id"].(string)
		stack := ada.do(t, "GET", "/api/v1/memories?scope=org", nil).body["data"].([]any)[0].(map[string]any)["id"].(string)
		bobs := bob.do(t, "GET", "/api/v1/memories?scope=personal", nil).body["data"].([]any)[0].(map[string]any)["id"].(string)
		requireError(t, ada.do(t, "DELETE", "/api/v1/memories/"+bobs, nil), 404, "memory_not_found")
		requireError(t, eve.do(t, "DELETE", "/api/v1/memories/"+stack, nil), 404, "memory_not_found")
		requireError(t, ada.do(t, "DELETE", "/api/v1/memories/nope", nil), 404, "memory_not_found")
		requireError(t, bob.do(t, "DELETE", "/api/v1/memories/"+stack, nil), 403, "org_forbidden")
		requireError(t, bob.do(t, "DELETE", "/api/v1/memories/"+launch, nil), 403, "vault_forbidden")
		require.Equal(t, 204, bob.do(t, "DELETE", "/api/v1/memories/"+bobs, nil).status)
		require.Equal(t, 204, ada.do(t, "DELETE", "/api/v1/memories/"+launch, nil).status)
		requireError(t, ada.do(t, "DELETE", "/api/v1/memories/"+launch, nil), 404, "memory_not_found")
		require.NotContains(t, ada.memoryKeys(t, ""), "launch")
	})
}

// departureTeam is an organization of ada (owner), bob (admin), cat and dan
// (members who read and write the vault v it returns).
func departureTeam(t *testing.T) (ta *testApp, ada, bob, cat, dan convClient, v string) {
	t.Helper()
	ta = startTestApp(t)
	ada = convTenant(t, ta, "ada@example.com")
	bob = convMember(t, ta, ada.orgID, "bob@example.com", "admin")
	cat = convMember(t, ta, ada.orgID, "cat@example.com", "member")
	dan = convMember(t, ta, ada.orgID, "dan@example.com", "member")
	v = ada.vault(t, map[string]any{"name": "Team"})["id"].(string)
	for _, u := range []convClient{cat, dan} {
		require.Equal(t, 201, ada.do(t, "POST", "/api/v1/vaults/"+v+"/members",
			map[string]any{"user_id": u.userID, "can_read": true, "can_write": true}).status)
	}
	return ta, ada, bob, cat, dan, v
}

func TestDepartedMemorySettlement(t *testing.T) {
	ta, ada, bob, cat, dan, v := departureTeam(t)
	bob.remember(t, map[string]any{"key": "bob-org", "value": "x", "scope": "org"})
	bob.remember(t, map[string]any{"key": "bob-personal", "value": "x"})
	cat.remember(t, map[string]any{"key": "cat-vault", "value": "x", "scope": "vault", "vault_id": v})
	dan.remember(t, map[string]any{"key": "dan-vault", "value": "x", "scope": "vault", "vault_id": v})

	settle := func(c convClient, user string, body any) resp {
		return c.do(t, "POST", "/api/v1/memories/departed/"+user, body)
	}
	// Authority comes first: a member is refused whatever the id or body.
	requireError(t, settle(cat, dan.userID, map[string]any{"decision": "keep"}), 403, "org_forbidden")
	requireError(t, settle(cat, "nope", "garbage"), 403, "org_forbidden")
	requireError(t, settle(ada, dan.userID, map[string]any{"decision": "keep"}), 404, "user_not_found", "departed")

	require.Equal(t, 204, ada.do(t, "DELETE", "/api/v1/org/members/"+bob.userID, nil).status)
	require.Equal(t, 204, ada.do(t, "DELETE", "/api/v1/org/members/"+cat.userID, nil).status)
	require.Equal(t, 204, dan.do(t, "DELETE", "/api/v1/org/memberships/"+ada.orgID, nil).status)

	view := ada.do(t, "GET", "/api/v1/memories", nil).body["data"].([]any)
	frozen := map[string]bool{}
	for _, m := range view {
		frozen[m.(map[string]any)["key"].(string)] = m.(map[string]any)["frozen"].(bool)
	}
	require.Equal(t, map[string]bool{"bob-org": true, "cat-vault": true, "dan-vault": true}, frozen,
		"departed members' shared memory is retained and frozen")

	requireError(t, settle(ada, cat.userID, map[string]any{"decision": "maybe"}), 400, "invalid_request")
	requireError(t, settle(ada, cat.userID, nil), 400, "invalid_request")

	r := settle(ada, cat.userID, map[string]any{"decision": "purge"})
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, "purge", r.body["decision"])
	require.EqualValues(t, 1, r.body["purged"])
	again := settle(ada, cat.userID, map[string]any{"decision": "purge"})
	require.Equal(t, 200, again.status)
	require.Equal(t, r.body["settled_at"], again.body["settled_at"], "settling again returns the recorded settlement")
	requireError(t, settle(ada, cat.userID, map[string]any{"decision": "keep"}), 400, "invalid_request")

	r = settle(ada, dan.userID, map[string]any{"decision": "keep"})
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.EqualValues(t, 0, r.body["purged"])
	require.Equal(t, 200, settle(ada, bob.userID, map[string]any{"decision": "purge"}).status)

	require.ElementsMatch(t, []string{"dan-vault"}, ada.memoryKeys(t, ""))
	require.Equal(t, false, ada.do(t, "GET", "/api/v1/memories", nil).body["data"].([]any)[0].(map[string]any)["frozen"])
	var personal, decided int
	require.NoError(t, ta.db.Pool.QueryRow(context.Background(), `select
		(select count(*) from memories where key = 'bob-personal'),
		(select count(*) from membership_departures where org_id = $1 and not memory_frozen and memory_settled_at is not null)`,
		ada.orgID).Scan(&personal, &decided))
	require.Equal(t, 1, personal, "purge never touches personal memory")
	require.Equal(t, 3, decided)
}

// The bounds hold for the stored text: surrounding whitespace is trimmed
// before a key or value is measured.
func TestMemoryBoundsAfterTrimming(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	key, value := strings.Repeat("k", 128), strings.Repeat("é", 2000)
	r := ada.do(t, "POST", "/api/v1/memories", map[string]any{"key": "  " + key + "\t", "value": "\n " + value + "  "})
	require.Equal(t, 201, r.status, "%s", r.raw)
	m := r.body["memory"].(map[string]any)
	require.Equal(t, key, m["key"])
	require.Equal(t, value, m["value"])
	for _, body := range []map[string]any{
		{"key": " " + key + "k ", "value": "v"},
		{"key": "k", "value": " " + value + "é "},
		{"key": " \t ", "value": "v"},
		{"key": "k", "value": " \n "},
	} {
		requireError(t, ada.do(t, "POST", "/api/v1/memories", body), 400, "invalid_request")
	}
}

// memoryByKey finds key in c's resolved view.
func (c convClient) memoryByKey(t *testing.T, key string) map[string]any {
	t.Helper()
	r := c.do(t, "GET", "/api/v1/memories?limit=100", nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	for _, m := range r.body["data"].([]any) {
		if m.(map[string]any)["key"] == key {
			return m.(map[string]any)
		}
	}
	return nil
}

// A departed member's memory cannot be replaced or deleted before it is
// settled: the settlement decides over exactly what they left.
func TestFrozenMemoryIsUnchangeable(t *testing.T) {
	_, ada, bob, cat, dan, v := departureTeam(t)
	bobOrg := bob.remember(t, map[string]any{"key": "bob-org", "value": "from bob", "scope": "org"})
	danVault := dan.remember(t, map[string]any{"key": "dep-fact", "value": "from dan", "scope": "vault", "vault_id": v})
	require.Equal(t, 204, ada.do(t, "DELETE", "/api/v1/org/members/"+bob.userID, nil).status)
	require.Equal(t, 204, dan.do(t, "DELETE", "/api/v1/org/memberships/"+ada.orgID, nil).status)

	overwrite := map[string]any{"key": "dep-fact", "value": "from cat", "scope": "vault", "vault_id": v}
	requireError(t, cat.do(t, "POST", "/api/v1/memories", overwrite), 409, "memory_frozen")
	requireError(t, ada.do(t, "POST", "/api/v1/memories", map[string]any{"key": "bob-org", "value": "from ada", "scope": "org"}),
		409, "memory_frozen")
	requireError(t, cat.do(t, "DELETE", "/api/v1/memories/"+danVault, nil), 409, "memory_frozen")
	requireError(t, ada.do(t, "DELETE", "/api/v1/memories/"+bobOrg, nil), 409, "memory_frozen")
	// Authority is still checked first.
	requireError(t, cat.do(t, "DELETE", "/api/v1/memories/"+bobOrg, nil), 403, "org_forbidden")
	requireError(t, cat.do(t, "POST", "/api/v1/memories", map[string]any{"key": "bob-org", "value": "x", "scope": "org"}),
		403, "org_forbidden")
	// Other keys in the same places are written as usual.
	cat.remember(t, map[string]any{"key": "cat-fact", "value": "x", "scope": "vault", "vault_id": v})
	for key, value := range map[string]string{"dep-fact": "from dan", "bob-org": "from bob"} {
		m := ada.memoryByKey(t, key)
		require.Equal(t, value, m["value"])
		require.Equal(t, true, m["frozen"])
	}

	// keep unfreezes: the memory is ordinary again.
	require.Equal(t, 200, ada.do(t, "POST", "/api/v1/memories/departed/"+dan.userID, map[string]any{"decision": "keep"}).status)
	r := cat.do(t, "POST", "/api/v1/memories", overwrite)
	require.Equal(t, 201, r.status, "%s", r.raw)
	require.Equal(t, danVault, r.body["memory"].(map[string]any)["id"])
	require.Equal(t, false, r.body["memory"].(map[string]any)["frozen"])
	require.Equal(t, 204, cat.do(t, "DELETE", "/api/v1/memories/"+danVault, nil).status)

	// purge finds everything the member left.
	r = ada.do(t, "POST", "/api/v1/memories/departed/"+bob.userID, map[string]any{"decision": "purge"})
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.EqualValues(t, 1, r.body["purged"])
	ada.remember(t, map[string]any{"key": "bob-org", "value": "from ada", "scope": "org"})
}

// Rejoining ends the departure, whichever path inserts the membership.
func TestRejoinEndsDeparture(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	cat := convMember(t, ta, ada.orgID, "cat@example.com", "member")
	dan := convMember(t, ta, ada.orgID, "dan@example.com", "member")
	v := ada.vault(t, map[string]any{"name": "Team"})["id"].(string)
	grant := func(user string) {
		require.Equal(t, 201, ada.do(t, "POST", "/api/v1/vaults/"+v+"/members",
			map[string]any{"user_id": user, "can_read": true, "can_write": true}).status)
	}
	grant(cat.userID)
	grant(dan.userID)
	cat.remember(t, map[string]any{"key": "cat-old", "value": "x", "scope": "vault", "vault_id": v})
	dan.remember(t, map[string]any{"key": "dan-old", "value": "x", "scope": "vault", "vault_id": v})
	require.Equal(t, 204, ada.do(t, "DELETE", "/api/v1/org/members/"+cat.userID, nil).status)
	require.Equal(t, 204, ada.do(t, "DELETE", "/api/v1/org/members/"+dan.userID, nil).status)
	require.Equal(t, true, ada.memoryByKey(t, "cat-old")["frozen"])

	// Back by invitation.
	inv := ada.do(t, "POST", "/api/v1/org/invitations", map[string]any{"user_id": cat.userID})
	require.Equal(t, 202, inv.status, "%s", inv.raw)
	personal := admin(t, ta.dbURL, "key", "create", "--user", cat.userID, "--org", personalOrg(t, ta, cat.userID))
	r := call(t, ta.Addr(), "POST", "/api/v1/invitations/"+inv.body["id"].(string)+"/accept", personal["access_token"].(string), nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	cat.key = admin(t, ta.dbURL, "key", "create", "--user", cat.userID, "--org", ada.orgID)["access_token"].(string)
	grant(cat.userID)
	cat.remember(t, map[string]any{"key": "cat-new", "value": "x", "scope": "vault", "vault_id": v})
	require.Equal(t, false, ada.memoryByKey(t, "cat-old")["frozen"], "the old memory is theirs again")
	require.Equal(t, false, ada.memoryByKey(t, "cat-new")["frozen"])
	require.Equal(t, 201, cat.do(t, "POST", "/api/v1/memories",
		map[string]any{"key": "cat-old", "value": "y", "scope": "vault", "vault_id": v}).status)
	requireError(t, ada.do(t, "POST", "/api/v1/memories/departed/"+cat.userID, map[string]any{"decision": "purge"}),
		404, "user_not_found")
	require.NotNil(t, ada.memoryByKey(t, "cat-new"), "a current member's memory is never purged")

	// Back by any other insert of the membership: the same.
	_, err := ta.db.Pool.Exec(context.Background(), `insert into memberships (org_id, user_id, role) values ($1, $2, 'member')`,
		ada.orgID, dan.userID)
	require.NoError(t, err)
	require.Equal(t, false, ada.memoryByKey(t, "dan-old")["frozen"])
	_, err = ta.db.Departed(context.Background(), ada.orgID, dan.userID)
	require.ErrorIs(t, err, storage.ErrNotFound)

	// Leaving again freezes again.
	require.Equal(t, 204, cat.do(t, "DELETE", "/api/v1/org/memberships/"+ada.orgID, nil).status)
	require.Equal(t, true, ada.memoryByKey(t, "cat-new")["frozen"])
	require.Equal(t, true, ada.memoryByKey(t, "cat-old")["frozen"])
}
