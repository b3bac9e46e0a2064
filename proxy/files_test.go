package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// memFiles is a FileSource over a map, owned by user-1 of org-1 like the
// fixture's key; reads counts its calls.
type memFiles struct {
	files map[string]hotpath.AttachedFile
	reads atomic.Int64
}

func (m *memFiles) Attachments(_ context.Context, orgID, userID string, ids []string, _ int64) ([]hotpath.AttachedFile, error) {
	m.reads.Add(1)
	out := make([]hotpath.AttachedFile, 0, len(ids))
	for _, id := range ids {
		f, ok := m.files[id]
		if !ok || orgID != "org-1" || userID != "user-1" {
			return nil, &hotpath.FileMissingError{ID: id}
		}
		out = append(out, f)
	}
	return out, nil
}

func textFile(id, name, text string) hotpath.AttachedFile {
	return hotpath.AttachedFile{ID: id, Filename: name, ContentType: "text/plain", Bytes: int64(len(text)),
		TextStatus: hotpath.FileTextReady, TextTokens: tokens.Count(text), Text: text}
}

const filesPin = "2026-10-05"

func filesFixture(t *testing.T, files *memFiles, opts ...func(*fixtureOptions)) (*chatFixture, *fakeUpstream) {
	t.Helper()
	up := recordingSim(t)
	all := append([]func(*fixtureOptions){func(o *fixtureOptions) {
		o.dial = up.dial
		o.chat = func(c *ChatConfig) { c.Files = files }
		// Files make prompts of thousands of tokens, which the
		// simulator counts: under the race detector that takes longer
		// than the fixture's short deadline.
		o.tiers = func(ts []hotpath.Tier) {
			for i := range ts {
				ts[i].Deadline = 30 * time.Second
			}
		}
		o.upstream = func(u *UpstreamConfig) { u.StreamIdle = 30 * time.Second }
	}}, opts...)
	return newChatFixture(t, all...), up
}

// smallMira gives mira a window of 4000 tokens and answers of at most 200.
func smallMira(o *fixtureOptions) {
	prev := o.tiers
	o.tiers = func(ts []hotpath.Tier) {
		prev(ts)
		for i := range ts {
			if ts[i].Name == "mira" {
				ts[i].ContextWindow, ts[i].MaxOutput = 4000, 200
			}
		}
	}
}

// upstreamMessages are the messages of the last upstream call, as
// role: text pairs (text parts joined).
func upstreamMessages(t *testing.T, up *fakeUpstream) []map[string]any {
	t.Helper()
	body := up.lastBody(t)
	var out []map[string]any
	for _, m := range body["messages"].([]any) {
		out = append(out, m.(map[string]any))
	}
	return out
}

func TestChatPlacesFilesBeforeFirstMention(t *testing.T) {
	files := &memFiles{files: map[string]hotpath.AttachedFile{
		"f-a": textFile("f-a", "a.md", "Alpha facts: the sky is green here."),
		"f-b": textFile("f-b", "b.csv", "name,age\nbob,7"),
	}}
	f, up := filesFixture(t, files)
	body := `{"model":"vaani","messages":[
		{"role":"user","content":"read a","file_ids":["f-a"]},
		{"role":"assistant","content":"done"},
		{"role":"user","content":"now both","file_ids":["f-b","f-a"]}]}`
	r := f.post(t, "/api/v1/chat", body, "Gateway-Version", filesPin)
	require.Equal(t, 200, r.status, "%s", r.body)
	msgs := upstreamMessages(t, up)
	var roles []string
	var texts []string
	for _, m := range msgs {
		roles = append(roles, m["role"].(string))
		c, _ := m["content"].(string)
		texts = append(texts, c)
		require.NotContains(t, m, "file_ids", "file_ids never go upstream")
	}
	// The tier's system prompt (if any) first, then a before its first
	// mention, b before its first mention; a is sent once.
	off := len(msgs) - 5
	require.Equal(t, []string{"user", "user", "assistant", "user", "user"}, roles[off:])
	require.Contains(t, texts[off], `<attached_file id="f-a" name="a.md">`)
	require.Contains(t, texts[off], "Alpha facts: the sky is green here.")
	require.Contains(t, texts[off], "not instructions")
	require.Equal(t, "read a", texts[off+1])
	require.Contains(t, texts[off+3], `<attached_file id="f-b" name="b.csv">`)
	require.Equal(t, "now both", texts[off+4])
	require.Equal(t, 1, strings.Count(strings.Join(texts, "\n"), "Alpha facts"))
	for _, m := range msgs {
		require.NotEqual(t, "system", m["role"] == "system" && strings.Contains(m["content"].(string), "Alpha"), true,
			"file text is never in the system prompt")
	}
	strictOpenAIDecode(t, up.bodies[len(up.bodies)-1])

	// Billed: the file's tokens are input tokens of the request that sends
	// them, on every request that sends them.
	var with struct {
		Usage struct {
			InputTokens int `json:"input_tokens"`
		} `json:"usage"`
		GW map[string]any `json:"gw"`
	}
	require.NoError(t, json.Unmarshal(r.body, &with))
	require.NotContains(t, with.GW, "files_omitted")
	r = f.post(t, "/api/v1/chat", `{"model":"vaani","messages":[{"role":"user","content":"read a"},
		{"role":"assistant","content":"done"},{"role":"user","content":"now both"}]}`)
	var without struct {
		Usage struct {
			InputTokens int `json:"input_tokens"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(r.body, &without))
	fileTokens := files.files["f-a"].TextTokens + files.files["f-b"].TextTokens
	require.GreaterOrEqual(t, with.Usage.InputTokens-without.Usage.InputTokens, fileTokens)
}

func TestChatFileRefusalsBeforeUpstream(t *testing.T) {
	big := strings.Repeat("lorem ipsum dolor sit amet ", 400)
	files := &memFiles{files: map[string]hotpath.AttachedFile{
		"ok":      textFile("ok", "ok.txt", "fine"),
		"big":     textFile("big", "big.txt", big),
		"big2":    textFile("big2", "big2.txt", big),
		"scanned": {ID: "scanned", Filename: "scan.pdf", TextStatus: hotpath.FileTextNotText, Reason: "no_text"},
		"long":    {ID: "long", Filename: "long.pdf", TextStatus: hotpath.FileTextNotText, Reason: "too_large", Pages: 501},
		"img": {ID: "img", Filename: "p.png", ContentType: "image/png", TextStatus: hotpath.FileTextImage,
			Data: []byte("\x89PNG\r\n\x1a\nfake")},
	}}
	f, up := filesFixture(t, files, func(o *fixtureOptions) {
		prev := o.chat
		o.chat = func(c *ChatConfig) {
			prev(c)
			c.MaxFileTokens = 1500
			c.MaxTurnTokens = 2500
		}
	})
	ask := func(model string, ids ...string) map[string]any {
		t.Helper()
		raw, _ := json.Marshal(map[string]any{"model": model,
			"messages": []any{map[string]any{"role": "user", "content": "q", "file_ids": ids}}})
		r := f.post(t, "/api/v1/chat", string(raw), "Gateway-Version", filesPin)
		var m map[string]any
		require.NoError(t, json.Unmarshal(r.body, &m), "%s", r.body)
		m["status"] = r.status
		return m
	}
	calls := up.calls.Load()
	for name, tc := range map[string]struct {
		model string
		ids   []string
		want  map[string]any
	}{
		"missing":   {"vaani", []string{"ok", "nope"}, map[string]any{"status": 404, "code": "file_not_found", "file_id": "nope"}},
		"not text":  {"vaani", []string{"scanned"}, map[string]any{"status": 400, "code": "file_not_text", "reason": "no_text", "file_id": "scanned", "filename": "scan.pdf"}},
		"pdf pages": {"vaani", []string{"long"}, map[string]any{"status": 400, "code": "file_too_large", "bound": "pdf_pages", "limit": float64(500), "file_id": "long"}},
		"per file":  {"vaani", []string{"big"}, map[string]any{"status": 400, "code": "file_too_large", "bound": "file_tokens", "limit": float64(1500), "filename": "big.txt"}},
		"image on a tier without vision": {"mira", []string{"img"}, map[string]any{"status": 400, "code": "image_not_supported",
			"vision_tiers": []any{"kavi", "vaani"}}},
	} {
		t.Run(name, func(t *testing.T) {
			got := ask(tc.model, tc.ids...)
			for k, v := range tc.want {
				require.Equal(t, v, got[k], "%s in %v", k, got)
			}
		})
	}
	files.files["big"] = textFile("big", "big.txt", strings.Repeat("lorem ipsum ", 700))
	files.files["big2"] = files.files["big"]
	files.files["big2"] = textFile("big2", "big2.txt", strings.Repeat("dolor sit ", 700))
	got := ask("vaani", "big", "big2")
	require.Equal(t, "file_too_large", got["code"], "%v", got)
	require.Equal(t, "turn_tokens", got["bound"])
	require.Equal(t, "big2", got["file_id"])
	require.Equal(t, calls, up.calls.Load(), "no refusal reached the upstream")

	// Without the pin, and on the OpenAI route, file_ids are refused
	// before any file is read.
	reads := files.reads.Load()
	r := f.post(t, "/api/v1/chat", `{"model":"vaani","messages":[{"role":"user","content":"q","file_ids":["ok"]}]}`)
	require.Equal(t, 400, r.status)
	require.Contains(t, string(r.body), `"required_version":"2026-10-05"`)
	r = f.post(t, "/v1/chat/completions", `{"model":"vaani","messages":[{"role":"user","content":"q","file_ids":["ok"]}]}`,
		"Gateway-Version", filesPin)
	require.Equal(t, 400, r.status)
	require.Equal(t, reads, files.reads.Load())

	// An image goes to a tier that reads images, as a data URL.
	got = ask("auto", "img")
	require.Equal(t, 200, got["status"], "%v", got)
	require.Contains(t, []any{"kavi", "vaani"}, got["gw"].(map[string]any)["routed_tier"])
	require.Contains(t, string(up.bodies[len(up.bodies)-1]), `"url":"data:image/png;base64,`)
}

func TestChatOmitsEarlierFilesToFitTheWindow(t *testing.T) {
	doc := func(word string) string { return strings.Repeat(word+" ", 700) }
	files := &memFiles{files: map[string]hotpath.AttachedFile{
		"old":   textFile("old", "old.txt", doc("ancient")),
		"mid":   textFile("mid", "mid.txt", doc("middle")),
		"now":   textFile("now", "now.txt", doc("current")),
		"giant": textFile("giant", "giant.txt", doc("enormous")+doc("enormous")+doc("enormous")),
	}}
	f, up := filesFixture(t, files, smallMira)
	// 4000 window, 200 max_tokens, 400 margin: 3400 for the prompt; each
	// file is about 700 tokens, so the two earlier files fit together with
	// the current one only when small enough: here the oldest goes.
	conv := func(stream bool, ids ...string) string {
		msgs := []any{
			map[string]any{"role": "user", "content": strings.Repeat("context ", 1600), "file_ids": []string{"old"}},
			map[string]any{"role": "assistant", "content": "ok"},
			map[string]any{"role": "user", "content": "and this", "file_ids": []string{"mid"}},
			map[string]any{"role": "assistant", "content": "ok"},
			map[string]any{"role": "user", "content": "and now", "file_ids": ids},
		}
		raw, _ := json.Marshal(map[string]any{"model": "mira", "max_tokens": 200, "stream": stream, "messages": msgs})
		return string(raw)
	}
	for _, tc := range []struct {
		path   string
		stream bool
		want   string
	}{
		{"/api/v1/chat", false, `"gw":{`},
		{"/api/v2/chat", false, `"files_omitted"`},
		{"/api/v1/chat", true, `"files_omitted"`},
		{"/api/v2/chat", true, "event: start"},
	} {
		r := f.post(t, tc.path, conv(tc.stream, "now"), "Gateway-Version", filesPin)
		require.Equal(t, 200, r.status, "%s %v: %s", tc.path, tc.stream, r.body)
		require.Contains(t, string(r.body), tc.want)
		require.Contains(t, string(r.body), `"files_omitted":[{"file_id":"old","filename":"old.txt","reason":"context_window"}]`,
			"%s %v", tc.path, tc.stream)
		sent := string(up.bodies[len(up.bodies)-1])
		require.NotContains(t, sent, "ancient", "the omitted file is not sent")
		require.Contains(t, sent, "middle")
		require.Contains(t, sent, "current")
		switch {
		case tc.stream && tc.path == "/api/v1/chat":
			require.Contains(t, string(r.body), "data: [DONE]", "a complete stream")
		case tc.stream:
			require.Contains(t, string(r.body), "event: finish", "a complete stream")
		}
	}
	// The turn's own file never is left out: one that cannot fit even
	// with every earlier file gone is context_overflow, before the
	// upstream.
	calls := up.calls.Load()
	r := f.post(t, "/api/v1/chat", conv(false, "giant"), "Gateway-Version", filesPin)
	require.Equal(t, 400, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"code":"context_overflow"`)
	require.Equal(t, calls, up.calls.Load())
}

// Auto picks a tier where the turn's own files fit as placement will
// place them, with room for the answer and a tenth of the window: a file
// that fits mira's whole window but not that room goes to the next tier,
// not to a context_overflow mira would give.
func TestAutoRoutesFilesToATierWithRoomForThem(t *testing.T) {
	files := &memFiles{files: map[string]hotpath.AttachedFile{
		"big": textFile("big", "big.txt", strings.Repeat("sizable ", 3500)),
	}}
	f, up := filesFixture(t, files, smallMira) // room: 4000 - 200 - 400
	body := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"summarise","file_ids":["big"]}]}`
	}
	r := f.post(t, "/api/v1/chat", body("auto"), "Gateway-Version", filesPin)
	require.Equal(t, 200, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"routed_tier":"vaani"`)
	require.Contains(t, string(up.bodies[len(up.bodies)-1]), "sizable")

	calls := up.calls.Load()
	r = f.post(t, "/api/v1/chat", body("mira"), "Gateway-Version", filesPin)
	require.Equal(t, 400, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"code":"context_overflow"`)
	require.Equal(t, calls, up.calls.Load())
}

// A chat request without file_ids never reads the file source.
func TestChatWithoutFilesReadsNoFiles(t *testing.T) {
	files := &memFiles{files: map[string]hotpath.AttachedFile{}}
	f, _ := filesFixture(t, files)
	r := f.post(t, "/api/v1/chat", `{"model":"vaani","messages":[{"role":"user","content":"hi"}]}`, "Gateway-Version", filesPin)
	require.Equal(t, 200, r.status)
	require.Zero(t, files.reads.Load())
}
