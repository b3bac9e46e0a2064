package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func ruleTexts(t *testing.T, r resp) []string {
	t.Helper()
	require.Equal(t, 200, r.status, "%s", r.raw)
	out := []string{}
	for _, x := range r.body["rules"].([]any) {
		switch v := x.(type) {
		case string:
			out = append(out, v)
		case map[string]any:
			out = append(out, v["source"].(string)+":"+v["text"].(string))
		}
	}
	return out
}

func TestStandingRules(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	bob := convMember(t, ta, ada.orgID, "bob@example.com", "member")
	adm := convMember(t, ta, ada.orgID, "adm@example.com", "admin")
	eve := convTenant(t, ta, "eve@example.com")
	v := ada.vault(t, map[string]any{"name": "Team"})["id"].(string)
	private := ada.vault(t, map[string]any{"name": "Private"})["id"].(string)
	require.Equal(t, 201, ada.do(t, "POST", "/api/v1/vaults/"+v+"/members",
		map[string]any{"user_id": bob.userID, "can_read": true, "can_write": true}).status)
	eveVault := eve.vault(t, map[string]any{"name": "Eve's"})["id"].(string)

	t.Run("empty until written", func(t *testing.T) {
		r := bob.do(t, "GET", "/api/v1/rules", nil)
		require.Empty(t, ruleTexts(t, r))
		require.Equal(t, "org", r.body["scope"])
		require.Equal(t, false, r.body["permissions"].(map[string]any)["can_write"])
		require.NotContains(t, r.body, "inherit_org_rules")
		r = bob.do(t, "GET", "/api/v1/rules?vault_id="+v, nil)
		require.Empty(t, ruleTexts(t, r))
		require.Equal(t, true, r.body["inherit_org_rules"])
		require.Equal(t, true, ada.do(t, "GET", "/api/v1/rules", nil).body["permissions"].(map[string]any)["can_write"])
	})

	t.Run("authority before the vault id", func(t *testing.T) {
		for _, q := range []string{"", "?vault_id=" + v, "?vault_id=nope", "?vault_id=" + eveVault} {
			requireError(t, bob.do(t, "PUT", "/api/v1/rules"+q, map[string]any{"rules": []string{"x"}}), 403, "rules_forbidden")
			requireError(t, bob.do(t, "DELETE", "/api/v1/rules"+q, nil), 403, "rules_forbidden")
		}
		// Vault can_write does not grant it.
		requireError(t, bob.do(t, "PUT", "/api/v1/vaults/"+v+"/rules", map[string]any{"rules": []string{"x"}}), 403, "rules_forbidden")
		for _, q := range []string{"nope", eveVault, "00000000-0000-0000-0000-000000000000", ""} {
			requireError(t, ada.do(t, "PUT", "/api/v1/rules?vault_id="+q, map[string]any{"rules": []string{"x"}}), 404, "vault_not_found")
			requireError(t, ada.do(t, "GET", "/api/v1/rules?vault_id="+q, nil), 404, "vault_not_found")
			requireError(t, ada.do(t, "GET", "/api/v1/rules/resolved?vault_id="+q, nil), 404, "vault_not_found")
		}
		requireError(t, bob.do(t, "GET", "/api/v1/rules?vault_id="+private, nil), 404, "vault_not_found")
		require.Equal(t, 200, adm.do(t, "GET", "/api/v1/rules?vault_id="+private, nil).status,
			"an organization admin reads any vault's ruleset")
	})

	t.Run("replace trims and validates", func(t *testing.T) {
		r := ada.do(t, "PUT", "/api/v1/rules", map[string]any{"rules": []string{"  Answer in English.\n", "\fCite sources.\u00a0\f"}})
		require.Equal(t, []string{"Answer in English.", "Cite sources."}, ruleTexts(t, r), "every Unicode space is trimmed")
		requireError(t, ada.do(t, "PUT", "/api/v1/rules", map[string]any{"rules": []string{"ok", "   "}}), 400, "invalid_request", "rules[1]")
		for _, blank := range []string{"\v", "\u00a0", "\f", "\u2003\u3000", "\u0085"} {
			requireError(t, ada.do(t, "PUT", "/api/v1/rules", map[string]any{"rules": []string{"ok", blank}}), 400, "invalid_request", "rules[1]")
		}
		requireError(t, ada.do(t, "PUT", "/api/v1/rules", map[string]any{"rules": []any{"ok", 3}}), 400, "invalid_request")
		requireError(t, ada.do(t, "PUT", "/api/v1/rules", map[string]any{"rules": nil}), 400, "invalid_request")
		requireError(t, ada.do(t, "PUT", "/api/v1/rules", map[string]any{}), 400, "invalid_request")
		requireError(t, ada.do(t, "PUT", "/api/v1/rules", map[string]any{"rules": []string{}, "inherit_org_rules": false}),
			400, "invalid_request", "inherit_org_rules")
		require.Equal(t, []string{"Answer in English.", "Cite sources."}, ruleTexts(t, bob.do(t, "GET", "/api/v1/rules", nil)),
			"a refused replace changes nothing")
	})

	t.Run("caps", func(t *testing.T) {
		many := make([]string, 51)
		for i := range many {
			many[i] = "rule"
		}
		long := []string{strings.Repeat("a", 1001)}
		total := make([]string, 9)
		for i := range total {
			total[i] = strings.Repeat("b", 1000)
		}
		for _, tc := range []struct {
			rules []string
			bound string
			limit float64
		}{{many, "rules", 50}, {long, "rule_characters", 1000}, {total, "total_characters", 8000}} {
			r := ada.do(t, "PUT", "/api/v1/rules", map[string]any{"rules": tc.rules})
			requireError(t, r, 400, "rules_too_large")
			require.Equal(t, tc.bound, r.body["bound"])
			require.Equal(t, tc.limit, r.body["limit"])
		}
		exact := make([]string, 8)
		for i := range exact {
			exact[i] = strings.Repeat("é", 1000)
		}
		require.Equal(t, 200, ada.do(t, "PUT", "/api/v1/vaults/"+private+"/rules", map[string]any{"rules": exact}).status,
			"caps count characters, not bytes")
		_, err := ta.db.Pool.Exec(context.Background(), `update rulesets set rules = array_append(rules, 'x') where vault_id = $1`, private)
		require.ErrorContains(t, err, "rulesets_cap_3_total", "the database itself enforces the caps")
		require.Equal(t, 204, ada.do(t, "DELETE", "/api/v1/vaults/"+private+"/rules", nil).status)
	})

	t.Run("personal data is rejected by category and position", func(t *testing.T) {
		for _, tc := range []struct{ rule, category string }{
			{"Send reports to ops@example.com", "email"},
			{"Escalate to +1-202-555-0143", "phone"},
			{"Bill 4111-1111-1111-1111", "card"},
		} {
			r := ada.do(t, "PUT", "/api/v1/rules?vault_id="+v, map[string]any{"rules": []string{"fine", tc.rule}})
			requireError(t, r, 400, "pii_rejected")
			require.Equal(t, tc.category, r.body["category"])
			require.EqualValues(t, 1, r.body["position"])
			require.NotContains(t, string(r.raw), tc.rule[len(tc.rule)-8:])
		}
		require.Empty(t, ruleTexts(t, ada.do(t, "GET", "/api/v1/rules?vault_id="+v, nil)), "nothing stored")
	})

	t.Run("resolved merges per inherit_org_rules", func(t *testing.T) {
		r := ada.do(t, "PUT", "/api/v1/vaults/"+v+"/rules", map[string]any{"rules": []string{"Use metric units."}})
		require.Equal(t, []string{"Use metric units."}, ruleTexts(t, r))
		require.Equal(t, []string{"org:Answer in English.", "org:Cite sources."}, ruleTexts(t, bob.do(t, "GET", "/api/v1/rules/resolved", nil)))
		require.Equal(t, []string{"org:Answer in English.", "org:Cite sources.", "vault:Use metric units."},
			ruleTexts(t, bob.do(t, "GET", "/api/v1/rules/resolved?vault_id="+v, nil)))
		r = ada.do(t, "PUT", "/api/v1/rules?vault_id="+v, map[string]any{"inherit_org_rules": false})
		require.Equal(t, false, r.body["inherit_org_rules"])
		require.Equal(t, []string{"Use metric units."}, ruleTexts(t, r), "rules omitted are kept")
		require.Equal(t, false, ada.do(t, "GET", "/api/v1/vaults/"+v, nil).body["inherit_org_rules"])
		require.Equal(t, []string{"vault:Use metric units."}, ruleTexts(t, bob.do(t, "GET", "/api/v1/rules/resolved?vault_id="+v, nil)))
		requireError(t, eve.do(t, "GET", "/api/v1/rules/resolved?vault_id="+v, nil), 404, "vault_not_found")
	})

	t.Run("delete is idempotent and scoped", func(t *testing.T) {
		for range 2 {
			require.Equal(t, 204, ada.do(t, "DELETE", "/api/v1/rules?vault_id="+v, nil).status)
		}
		r := ada.do(t, "GET", "/api/v1/rules?vault_id="+v, nil)
		require.Empty(t, ruleTexts(t, r))
		require.Equal(t, false, r.body["inherit_org_rules"], "delete does not reset inherit_org_rules")
		require.Equal(t, 200, ada.do(t, "PUT", "/api/v1/rules?vault_id="+v, map[string]any{"rules": []string{"Vault rule."}, "inherit_org_rules": true}).status)
		require.Equal(t, 204, adm.do(t, "DELETE", "/api/v1/rules", nil).status)
		require.Empty(t, ruleTexts(t, bob.do(t, "GET", "/api/v1/rules/resolved", nil)), "empty is a real answer")
		require.Equal(t, []string{"vault:Vault rule."}, ruleTexts(t, bob.do(t, "GET", "/api/v1/rules/resolved?vault_id="+v, nil)),
			"the organization's deletion leaves the vault's rules")
		require.Equal(t, 200, ada.do(t, "PUT", "/api/v1/rules", map[string]any{"rules": []string{}}).status)
		require.Empty(t, ruleTexts(t, ada.do(t, "GET", "/api/v1/rules", nil)))
	})
}
