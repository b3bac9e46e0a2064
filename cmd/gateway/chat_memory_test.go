package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recorder is a simulator behind a proxy that keeps every request body it
// forwards, so a test can read what the gateway sent upstream.
type recorder struct {
	mu     sync.Mutex
	bodies map[string][][]byte // by path
}

func (r *recorder) last(t *testing.T, path string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.bodies[path]) - 1; i >= 0; i-- {
		var m map[string]any
		require.NoError(t, json.Unmarshal(r.bodies[path][i], &m))
		if match == nil || match(m) {
			return m
		}
	}
	t.Fatalf("no %s request matched", path)
	return nil
}

// isChat matches a turn's own upstream request (not the extractor's).
func isChat(m map[string]any) bool { return m["response_format"] == nil }

// startMemoryApp starts the gateway with every tier and the gw-embed tier
// on a recorded simulator, and capture bounded by captureWait.
func startMemoryApp(t *testing.T, captureWait string, embedDown ...bool) (*testApp, *recorder) {
	t.Helper()
	target, _ := url.Parse("http://" + startSimnet(t))
	rec := &recorder{bodies: map[string][][]byte{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.bodies[r.URL.Path] = append(rec.bodies[r.URL.Path], body)
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	// "down" is a provider nothing listens on: the embed tier is down.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, dead.Close())
	embed := "rec"
	if len(embedDown) > 0 && embedDown[0] {
		embed = "down"
	}
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(`
providers:
  rec:
    base_url: `+srv.URL+`/v1
  down:
    base_url: http://`+dead.Addr().String()+`/v1
tiers:
  kavi:  {provider: rec, upstream_model: sim-large, reasons: true}
  vaani: {provider: rec, upstream_model: sim-medium, reasons: true}
  mira:  {provider: rec, upstream_model: sim-small, reasons: false}
aux_tiers:
  gw-embed: {provider: `+embed+`, upstream_model: gw-embed}
memory:
  capture_tier: mira
  embed_dimensions: 512
  capture_wait: `+captureWait+`
`), 0o600))
	return startTestApp(t, func(c *serveConfig) { c.ConfigPath = cfgPath }), rec
}

// signedIn adds a member to orgID with a signed-in credential (memory and
// rules on by default).
func signedIn(t *testing.T, ta *testApp, orgID, email, role string) convClient {
	return convMember(t, ta, orgID, email, role, "--kind", "signed_in")
}

func turnBody(text string, extra ...any) map[string]any {
	b := map[string]any{"model": "mira", "max_tokens": 16, "messages": []any{map[string]any{"role": "user", "content": text}}}
	for i := 0; i+1 < len(extra); i += 2 {
		b[extra[i].(string)] = extra[i+1]
	}
	return b
}

// recallKeys lists "scope:key" of gw.memory_recall.
func recallKeys(gw map[string]any) []string {
	out := []string{}
	recall, _ := gw["memory_recall"].([]any)
	for _, r := range recall {
		m := r.(map[string]any)
		out = append(out, m["scope"].(string)+":"+m["key"].(string))
	}
	return out
}

func (c convClient) chat(t *testing.T, body map[string]any, headers ...string) map[string]any {
	t.Helper()
	r := c.do(t, "POST", "/api/v1/chat", body, headers...)
	require.Equal(t, 200, r.status, "%s", r.raw)
	return r.body["gw"].(map[string]any)
}

// sse reads a stream's frames: each data line decoded, with its event name.
type sseFrame struct {
	event string
	data  map[string]any
}

func (c convClient) stream(t *testing.T, path string, body map[string]any) []sseFrame {
	t.Helper()
	body["stream"] = true
	r := c.do(t, "POST", path, body)
	require.Equal(t, 200, r.status, "%s", r.raw)
	var out []sseFrame
	event := ""
	for _, line := range strings.Split(string(r.raw), "\n") {
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && line != "data: [DONE]":
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m), "%s", line)
			out = append(out, sseFrame{event, m})
			event = ""
		}
	}
	return out
}

func TestChatMemoryRecall(t *testing.T) {
	ta, rec := startMemoryApp(t, "2s")
	owner := convTenant(t, ta, "owner@example.com")
	ada := signedIn(t, ta, owner.orgID, "ada@example.com", "admin")
	bob := signedIn(t, ta, owner.orgID, "bob@example.com", "member")
	eve := convTenant(t, ta, "eve@example.com")
	team := ada.vault(t, map[string]any{"name": "Team"})["id"].(string)
	secret := ada.vault(t, map[string]any{"name": "Secret", "memory_scope": "vault_only"})["id"].(string)
	eveVault := eve.vault(t, map[string]any{"name": "Eve"})["id"].(string)
	require.Equal(t, 201, ada.do(t, "POST", "/api/v1/vaults/"+team+"/members", map[string]any{"user_id": bob.userID, "can_read": true}).status)

	ada.remember(t, map[string]any{"key": "tea", "value": "brew oolong tea each morning"})
	ada.remember(t, map[string]any{"key": "kettle", "value": "brew tea with the floor kettle in the morning", "scope": "org"})
	ada.remember(t, map[string]any{"key": "tea_budget", "value": "the team tea budget covers morning tea to brew", "scope": "vault", "vault_id": team})
	ada.remember(t, map[string]any{"key": "tea_secret", "value": "brew the secret tea blend each morning", "scope": "vault", "vault_id": secret})
	ada.remember(t, map[string]any{"key": "bikes", "value": "bicycles are parked in the basement"})
	question := "which tea should I brew this morning"

	t.Run("recall from each scope, framed before the user's words", func(t *testing.T) {
		gw := ada.chat(t, turnBody(question))
		require.ElementsMatch(t, []string{"personal:tea", "org:kettle", "vault:tea_budget"}, recallKeys(gw),
			"relevant memory from every scope; irrelevant and vault_only memory left out")
		for _, r := range gw["memory_recall"].([]any) {
			m := r.(map[string]any)
			require.NotContains(t, m, "value")
			if m["scope"] == "vault" {
				require.Equal(t, team, m["vault_id"])
				require.Equal(t, "Team", m["vault_name"])
			}
		}
		up := rec.last(t, "/v1/chat/completions", isChat)
		msgs := up["messages"].([]any)
		block := msgs[len(msgs)-2].(map[string]any)
		require.Equal(t, "user", block["role"])
		require.Contains(t, block["content"], "oolong")
		require.Contains(t, block["content"], "follow the user")
		require.Equal(t, question, msgs[len(msgs)-1].(map[string]any)["content"], "the user's message comes last")
		require.NotContains(t, ta.logs.String(), "oolong", "memory values never reach the logs")
	})

	t.Run("vault_only isolates both ways", func(t *testing.T) {
		require.Equal(t, []string{"vault:tea_secret"}, recallKeys(ada.chat(t, turnBody(question, "vault_id", secret))))
		require.ElementsMatch(t, []string{"personal:tea", "org:kettle", "vault:tea_budget"},
			recallKeys(ada.chat(t, turnBody(question, "vault_id", team))))
	})

	t.Run("an unreadable vault_id is none, silently", func(t *testing.T) {
		for _, v := range []string{eveVault, "garbage", secret} {
			require.ElementsMatch(t, []string{"org:kettle", "vault:tea_budget"}, recallKeys(bob.chat(t, turnBody(question, "vault_id", v))))
		}
	})

	t.Run("dropped mentions change nothing", func(t *testing.T) {
		strip := func(r resp) map[string]any {
			b := r.body
			delete(b, "id")
			delete(b, "created")
			delete(b["gw"].(map[string]any), "request_id")
			return b
		}
		plain := ada.do(t, "POST", "/api/v1/chat", turnBody(question, "vault_id", team))
		upPlain := rec.last(t, "/v1/chat/completions", isChat)
		mentioned := ada.do(t, "POST", "/api/v1/chat", turnBody(question, "vault_id", team,
			"mentioned_vault_ids", []string{eveVault, "garbage", team, secret + "x", eveVault}))
		upMentioned := rec.last(t, "/v1/chat/completions", isChat)
		require.Equal(t, strip(plain), strip(mentioned))
		require.Equal(t, upPlain, upMentioned, "the upstream saw the same request")
	})

	t.Run("recall off reads nothing", func(t *testing.T) {
		gw := ada.chat(t, turnBody(question, "memory", map[string]any{"recall": false, "capture": false}, "rules", false))
		require.NotContains(t, gw, "memory_recall")
		up := rec.last(t, "/v1/chat/completions", isChat)
		require.Len(t, up["messages"], 1, "nothing injected")
		dev := convMember(t, ta, owner.orgID, "dev@example.com", "member")
		dev.remember(t, map[string]any{"key": "tea", "value": "brew green tea each morning"})
		require.NotContains(t, dev.chat(t, turnBody(question)), "memory_recall", "a developer key recalls only when asked")
		headless := convMember(t, ta, owner.orgID, "headless@example.com", "member", "--kind", "headless", "--credits-usd", "5")
		headless.remember(t, map[string]any{"key": "tea", "value": "brew black tea each morning"})
		require.NotContains(t, headless.chat(t, turnBody(question)), "memory_recall", "nor does a headless key")
		require.ElementsMatch(t, []string{"personal:tea", "org:kettle"},
			recallKeys(dev.chat(t, turnBody(question, "memory", map[string]any{"recall": true}))))
	})

	t.Run("the OpenAI route ignores memory", func(t *testing.T) {
		r := ada.do(t, "POST", "/v1/chat/completions", turnBody(question, "memory", map[string]any{"recall": true}))
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Len(t, rec.last(t, "/v1/chat/completions", isChat)["messages"], 1)
	})

	t.Run("scopes and the version pin", func(t *testing.T) {
		narrow := convMember(t, ta, owner.orgID, "narrow@example.com", "member", "--kind", "signed_in", "--scopes", "chat")
		r := narrow.do(t, "POST", "/api/v1/chat", turnBody(question, "memory", map[string]any{"recall": true}))
		requireError(t, r, 403, "key_scope_forbidden")
		require.Equal(t, "memory", r.body["required_scope"])
		r = narrow.do(t, "POST", "/api/v1/chat", turnBody(question, "rules", true))
		require.Equal(t, "rules", r.body["required_scope"])
		require.Equal(t, 200, narrow.do(t, "POST", "/api/v1/chat", turnBody(question)).status,
			"a signed-in key without the scopes chats without memory")
		r = ada.do(t, "POST", "/api/v1/chat", turnBody(question, "memory", map[string]any{"recall": false}), "Gateway-Version", "2026-09-01")
		requireError(t, r, 400, "invalid_request")
		require.Equal(t, "2026-09-26", r.body["required_version"])
		require.Equal(t, 200, ada.do(t, "POST", "/api/v1/chat", turnBody(question, "memory", map[string]any{"recall": false}),
			"Gateway-Version", "2026-09-26").status)
	})
}

// With the embed tier down, memories are stored without vectors and
// recall ranks by full text.
func TestChatRecallFullTextFallback(t *testing.T) {
	ta, _ := startMemoryApp(t, "2s", true)
	ada := signedIn(t, ta, convTenant(t, ta, "owner@example.com").orgID, "ada@example.com", "member")
	ada.remember(t, map[string]any{"key": "tea", "value": "brew oolong tea each morning"})
	ada.remember(t, map[string]any{"key": "bikes", "value": "bicycles are parked in the basement"})
	var n int
	require.NoError(t, ta.db.Pool.QueryRow(context.Background(), `select count(*) from memories where embedding is null`).Scan(&n))
	require.Equal(t, 2, n)
	gw := ada.chat(t, turnBody("which tea should I brew", "memory", map[string]any{"capture": false}))
	require.Equal(t, []string{"personal:tea"}, recallKeys(gw))
}

func TestChatStandingRules(t *testing.T) {
	ta, rec := startMemoryApp(t, "2s")
	ada := convTenant(t, ta, "ada@example.com")
	bob := signedIn(t, ta, ada.orgID, "bob@example.com", "member")
	v := ada.vault(t, map[string]any{"name": "Team"})["id"].(string)
	require.Equal(t, 201, ada.do(t, "POST", "/api/v1/vaults/"+v+"/members", map[string]any{"user_id": bob.userID, "can_read": true}).status)
	require.Equal(t, 200, ada.do(t, "PUT", "/api/v1/rules", map[string]any{"rules": []string{"Answer in French."}}).status)
	require.Equal(t, 200, ada.do(t, "PUT", "/api/v1/vaults/"+v+"/rules", map[string]any{"rules": []string{"Use metric units.", "Be brief."}}).status)
	upstreamBlock := func() string {
		msgs := rec.last(t, "/v1/chat/completions", isChat)["messages"].([]any)
		if len(msgs) < 2 {
			return ""
		}
		return msgs[len(msgs)-2].(map[string]any)["content"].(string)
	}

	gw := bob.chat(t, turnBody("Answer in English please: how far is the moon"))
	require.Equal(t, map[string]any{"count": 1.0, "rulesets": []any{"org"}}, gw["rules_applied"])
	block := upstreamBlock()
	require.Contains(t, block, "Answer in French.")
	require.Contains(t, block, "whenever the user's own messages ask for something different, follow the user")
	require.Equal(t, "Answer in English please: how far is the moon",
		rec.last(t, "/v1/chat/completions", isChat)["messages"].([]any)[1].(map[string]any)["content"],
		"the user's own words come after the defaults and override them")
	require.NotContains(t, ta.logs.String(), "Answer in French", "rule texts never reach the logs")

	gw = bob.chat(t, turnBody("how far is the moon", "vault_id", v))
	require.Equal(t, map[string]any{"count": 3.0, "rulesets": []any{"org", "vault"}}, gw["rules_applied"], "inherited")
	require.Less(t, strings.Index(upstreamBlock(), "French"), strings.Index(upstreamBlock(), "metric"), "organization first")

	require.Equal(t, 200, ada.do(t, "PUT", "/api/v1/rules?vault_id="+v, map[string]any{"inherit_org_rules": false}).status)
	gw = bob.chat(t, turnBody("how far is the moon", "vault_id", v))
	require.Equal(t, map[string]any{"count": 2.0, "rulesets": []any{"vault"}}, gw["rules_applied"], "not inherited")
	require.NotContains(t, upstreamBlock(), "French")

	gw = bob.chat(t, turnBody("how far is the moon", "vault_id", "garbage"))
	require.Equal(t, map[string]any{"count": 1.0, "rulesets": []any{"org"}}, gw["rules_applied"], "an unreadable vault gives org rules")

	r := bob.do(t, "POST", "/api/v2/chat", turnBody("how far is the moon", "vault_id", v))
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, map[string]any{"count": 2.0, "rulesets": []any{"vault"}}, r.body["rules_applied"], "v2: top level")
	start := bob.stream(t, "/api/v2/chat", turnBody("how far is the moon", "vault_id", v))[0]
	require.Equal(t, "start", start.event)
	require.Equal(t, map[string]any{"count": 2.0, "rulesets": []any{"vault"}}, start.data["rules_applied"], "v2 stream: the start event")
	primer := bob.stream(t, "/api/v1/chat", turnBody("how far is the moon", "vault_id", v))[0]
	require.Equal(t, map[string]any{"count": 2.0, "rulesets": []any{"vault"}}, primer.data["gw"].(map[string]any)["rules_applied"],
		"v1 stream: the role primer")

	gw = bob.chat(t, turnBody("how far is the moon", "rules", false))
	require.NotContains(t, gw, "rules_applied")
	require.Len(t, rec.last(t, "/v1/chat/completions", isChat)["messages"], 1)
}

func TestChatMemoryCapture(t *testing.T) {
	ta, rec := startMemoryApp(t, "700ms")
	ada := signedIn(t, ta, convTenant(t, ta, "owner@example.com").orgID, "ada@example.com", "member")
	writable := ada.vault(t, map[string]any{"name": "Mine"})["id"].(string)
	other := convMember(t, ta, ada.orgID, "other@example.com", "admin")
	readOnly := other.vault(t, map[string]any{"name": "Theirs"})["id"].(string)
	require.Equal(t, 201, other.do(t, "POST", "/api/v1/vaults/"+readOnly+"/members", map[string]any{"user_id": ada.userID, "can_read": true}).status)

	captured := func(gw map[string]any) []string {
		c, ok := gw["memory_capture"].(map[string]any)
		if !ok {
			return nil
		}
		out := []string{}
		for _, m := range c["memories"].([]any) {
			mm := m.(map[string]any)
			require.NotContains(t, mm, "value")
			out = append(out, mm["scope"].(string)+":"+mm["key"].(string))
		}
		require.EqualValues(t, len(out), c["count"])
		return out
	}

	t.Run("v1 non-streaming", func(t *testing.T) {
		gw := ada.chat(t, turnBody("I always use vim keybindings [[sim:facts=editor:uses vim keybindings]]"))
		require.Equal(t, []string{"personal:editor"}, captured(gw))
		require.Contains(t, ada.memoryKeys(t, "?scope=personal"), "editor")
		ex := rec.last(t, "/v1/chat/completions", func(m map[string]any) bool { return m["response_format"] != nil })
		require.Equal(t, "memory_facts", ex["response_format"].(map[string]any)["json_schema"].(map[string]any)["name"])
	})

	t.Run("v1 stream reports in the usage frame", func(t *testing.T) {
		frames := ada.stream(t, "/api/v1/chat", turnBody("[[sim:facts=shell:prefers zsh]] hello"))
		usage := frames[len(frames)-1].data
		require.Empty(t, usage["choices"])
		require.Equal(t, []string{"personal:shell"}, captured(usage["gw"].(map[string]any)))
		require.NotContains(t, frames[0].data["gw"], "memory_capture")
	})

	t.Run("v2 both modes", func(t *testing.T) {
		r := ada.do(t, "POST", "/api/v2/chat", turnBody("[[sim:facts=os:runs debian]] hi"))
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, []string{"personal:os"}, captured(r.body))
		frames := ada.stream(t, "/api/v2/chat", turnBody("[[sim:facts=font:likes large fonts]] hi"))
		finish := frames[len(frames)-1]
		require.Equal(t, "finish", finish.event)
		require.Equal(t, []string{"personal:font"}, captured(finish.data))
	})

	t.Run("vault capture, and a read-only vault demotes to personal", func(t *testing.T) {
		gw := ada.chat(t, turnBody("[[sim:facts=units:metric only]] hi", "vault_id", writable))
		require.Equal(t, []string{"vault:units"}, captured(gw))
		gw = ada.chat(t, turnBody("[[sim:facts=lang:british spelling]] hi", "vault_id", readOnly))
		require.Equal(t, []string{"personal:lang"}, captured(gw))
		require.NotContains(t, other.memoryKeys(t, "?vault_id="+readOnly), "lang")
		// can_write alone may be written: the grants do not imply one another.
		writeOnly := other.vault(t, map[string]any{"name": "Drop box"})["id"].(string)
		require.Equal(t, 201, other.do(t, "POST", "/api/v1/vaults/"+writeOnly+"/members", map[string]any{"user_id": ada.userID, "can_write": true}).status)
		gw = ada.chat(t, turnBody("[[sim:facts=paper:a4]] hi", "vault_id", writeOnly))
		require.Equal(t, []string{"vault:paper"}, captured(gw))
		require.Contains(t, other.memoryKeys(t, "?vault_id="+writeOnly), "paper")
	})

	t.Run("a key given twice is one memory, reported once", func(t *testing.T) {
		gw := ada.chat(t, turnBody("[[sim:facts=tz:utc|desk:standing|tz:cet]] hi"))
		require.Equal(t, []string{"personal:tz", "personal:desk"}, captured(gw))
		r := ada.do(t, "GET", "/api/v1/memories?scope=personal", nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		var tz []string
		for _, m := range r.body["data"].([]any) {
			if mm := m.(map[string]any); mm["key"] == "tz" {
				tz = append(tz, mm["value"].(string))
			}
		}
		require.Equal(t, []string{"cet"}, tz, "the later value, stored once")
	})

	t.Run("a fact holding a NUL is dropped and the others stored", func(t *testing.T) {
		gw := ada.chat(t, turnBody("[[sim:facts=nul:a\x00b|chair:ergonomic]] hi"))
		require.Equal(t, []string{"personal:chair"}, captured(gw))
		require.NotContains(t, ada.memoryKeys(t, ""), "nul")
	})

	t.Run("personal data is dropped and capture off stores nothing", func(t *testing.T) {
		gw := ada.chat(t, turnBody("[[sim:facts=contact:write to ada@example.com]] hi"))
		require.NotContains(t, gw, "memory_capture")
		gw = ada.chat(t, turnBody("[[sim:facts=pet:has a cat]] hi", "memory", map[string]any{"capture": false}))
		require.NotContains(t, gw, "memory_capture")
		require.NotContains(t, ada.memoryKeys(t, ""), "contact")
		require.NotContains(t, ada.memoryKeys(t, ""), "pet")
	})

	t.Run("a failing or hanging extractor never touches the turn", func(t *testing.T) {
		for _, fault := range []string{"error", "hang"} {
			for _, streamed := range []bool{false, true} {
				body := turnBody("[[sim:facts_fault=" + fault + "]] [[sim:facts=never:stored]] hi")
				began := time.Now()
				if streamed {
					frames := ada.stream(t, "/api/v1/chat", body)
					gw, _ := frames[len(frames)-1].data["gw"].(map[string]any)
					require.Nil(t, gw["memory_capture"])
				} else {
					require.NotContains(t, ada.chat(t, body), "memory_capture")
				}
				require.Less(t, time.Since(began), 2*time.Second, "capture is bounded by capture_wait")
			}
		}
		require.NotContains(t, ada.memoryKeys(t, ""), "never")
	})
}

// Capture never replaces a departed member's frozen memory: the fact is
// skipped and not reported; the other facts of the turn are stored.
func TestChatCaptureSkipsFrozenMemory(t *testing.T) {
	ta, _ := startMemoryApp(t, "700ms")
	owner := convTenant(t, ta, "owner@example.com")
	ada := signedIn(t, ta, owner.orgID, "ada@example.com", "member")
	dan := convMember(t, ta, owner.orgID, "dan@example.com", "member")
	v := owner.vault(t, map[string]any{"name": "Team"})["id"].(string)
	for _, u := range []convClient{ada, dan} {
		require.Equal(t, 201, owner.do(t, "POST", "/api/v1/vaults/"+v+"/members",
			map[string]any{"user_id": u.userID, "can_read": true, "can_write": true}).status)
	}
	dan.remember(t, map[string]any{"key": "units", "value": "imperial", "scope": "vault", "vault_id": v})
	require.Equal(t, 204, owner.do(t, "DELETE", "/api/v1/org/members/"+dan.userID, nil).status)

	gw := ada.chat(t, turnBody("[[sim:facts=units:metric only|lang:british spelling]] hi", "vault_id", v))
	capture := gw["memory_capture"].(map[string]any)
	require.EqualValues(t, 1, capture["count"])
	require.Equal(t, "lang", capture["memories"].([]any)[0].(map[string]any)["key"])
	units := owner.memoryByKey(t, "units")
	require.Equal(t, "imperial", units["value"])
	require.Equal(t, true, units["frozen"])
	require.Equal(t, false, owner.memoryByKey(t, "lang")["frozen"])
}
