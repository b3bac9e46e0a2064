package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/memory"
	"github.com/edgegw/gateway/hotpath/pii"
)

// MemoryConfig wires memory recall, capture and standing rules into the
// native chat routes. A turn that asks for none of them never touches it.
type MemoryConfig struct {
	// Store reads and writes memory and rules. Required.
	Store memory.Store
	// Embedder is the gw-embed tier; nil ranks recall by full text only.
	Embedder memory.Embedder
	// Extractor finds durable facts in a finished turn; nil stores none.
	Extractor memory.Extractor
	// RecallTimeout bounds recall and rules before the upstream call; past
	// it the turn goes on without them. Default 1s.
	RecallTimeout time.Duration
	// CaptureWait bounds capture after the answer: extraction, embedding
	// and the write all run under it, and what did not finish is not
	// stored (and not reported). Default 2s.
	CaptureWait time.Duration
	// Log receives failures, never content. Required.
	Log *slog.Logger
}

func (c *MemoryConfig) defaults() {
	if c.RecallTimeout == 0 {
		c.RecallTimeout = time.Second
	}
	if c.CaptureWait == 0 {
		c.CaptureWait = 2 * time.Second
	}
}

// Bounds of capture.
const (
	captureFactsMax  = 5
	captureAnswerMax = 16 << 10 // bytes of the answer the extractor reads
	captureKeyMax    = 128      // bytes
	captureValueMax  = 500      // characters
)

// turnMemory is one turn's memory state; a turn that uses no memory and
// no rules has none.
type turnMemory struct {
	cfg      *MemoryConfig
	caller   memory.Caller
	userText string
	// fields are the recall and rules signals (`,"memory_recall":…`).
	fields  []byte
	capture bool
	answer  strings.Builder
	done    chan []memory.Captured
}

// lastUserText is the text of the last user message: its string content
// or its text parts, never attached files.
func lastUserText(msgs []codec.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return strings.Clone(contentText(msgs[i].Content))
		}
	}
	return ""
}

// prepareMemory recalls, resolves the rules and injects them as one framed
// context message before the first user message, where the user's own
// words come after it and override it. It reports whether it injected
// anything. It never fails the turn: a store or embed tier that cannot
// answer in time leaves the turn without them. It runs after admission, so
// a refused request never reaches the store.
func (t *turn) prepareMemory(c *hotpath.Call) bool {
	cfg := t.ch.cfg.Memory
	in := &t.intent
	if cfg == nil || !(in.MemoryRecall || in.MemoryCapture || in.Rules) {
		return false
	}
	m := &turnMemory{cfg: cfg, capture: in.MemoryCapture && cfg.Extractor != nil,
		caller: memory.Caller{OrgID: c.User.OrgID, UserID: c.User.UserID}}
	if v := t.req.VaultID; v != nil {
		m.caller.VaultID = *v
	}
	m.userText = lastUserText(t.req.Messages)
	t.mem = m
	if !in.MemoryRecall && !in.Rules {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RecallTimeout)
	defer cancel()
	var rules []memory.Rule
	if in.Rules {
		var err error
		if rules, err = cfg.Store.Rules(ctx, m.caller); err != nil {
			cfg.Log.Warn("cannot read standing rules; the turn goes on without them",
				"request_id", string(t.requestID), "err", err)
			rules = nil
		}
	}
	var recalled []memory.Recalled
	if in.MemoryRecall {
		recalled = t.recall(ctx, m)
	}
	if len(rules) == 0 && len(recalled) == 0 {
		return false
	}
	t.injectContext(rules, recalled)
	if len(recalled) > 0 {
		sig := make([]codec.MemorySignal, len(recalled))
		for i, r := range recalled {
			sig[i] = codec.MemorySignal{Scope: r.Scope, Key: r.Key, VaultID: r.VaultID, VaultName: r.VaultName}
		}
		m.fields = codec.AppendRecallField(m.fields, sig)
	}
	if len(rules) > 0 {
		var sources []string
		for _, r := range rules {
			if len(sources) == 0 || sources[len(sources)-1] != r.Source {
				sources = append(sources, r.Source)
			}
		}
		m.fields = codec.AppendRulesField(m.fields, len(rules), sources)
	}
	return true
}

// recall ranks the caller's candidates against the turn's text: by
// embedding when the embed tier answers, else by full text.
func (t *turn) recall(ctx context.Context, m *turnMemory) []memory.Recalled {
	cfg := m.cfg
	caller := m.caller
	caller.Mentions = t.req.MentionedVaultIDs
	if m.userText == "" {
		return nil
	}
	var query []float32
	if cfg.Embedder != nil {
		vs, err := cfg.Embedder.Embed(ctx, []string{m.userText})
		if err == nil && len(vs) == 1 {
			query = vs[0]
		}
	}
	cands, err := cfg.Store.Candidates(ctx, caller, m.userText)
	if err != nil {
		cfg.Log.Warn("cannot recall memory; the turn goes on without it", "request_id", string(t.requestID), "err", err)
		return nil
	}
	return memory.Rank(cands, query, memory.BudgetTokens)
}

// contextPreamble frames the injected block: context the model reads, and
// rules it treats as defaults the user's messages override.
const contextPreamble = "[Context supplied by the gateway, not written by the user in this turn. " +
	"Standing rules are defaults: whenever the user's own messages ask for something different, follow the user. " +
	"Memories are facts saved earlier; use them only where relevant.]"

// injectContext inserts the framed block as a user-role message before the
// first user message (after any system messages), so it never outranks
// the system prompt or the user's own later words.
func (t *turn) injectContext(rules []memory.Rule, recalled []memory.Recalled) {
	var b strings.Builder
	b.WriteString(contextPreamble)
	if len(rules) > 0 {
		b.WriteString("\n\nStanding rules (defaults):")
		for i, r := range rules {
			b.WriteString("\n")
			b.WriteString(strconv.Itoa(i + 1))
			b.WriteString(". ")
			b.WriteString(r.Text)
		}
	}
	if len(recalled) > 0 {
		b.WriteString("\n\nMemories:")
		for _, r := range recalled {
			b.WriteString("\n- [")
			b.WriteString(r.Scope)
			if r.VaultName != "" {
				b.WriteString(": ")
				b.WriteString(r.VaultName)
			}
			b.WriteString("] ")
			b.WriteString(r.Key)
			b.WriteString(": ")
			b.WriteString(r.Value)
		}
	}
	content, _ := sonic.Marshal(b.String())
	msg := codec.Message{Role: "user", Content: content}
	msgs := t.req.Messages
	at := 0
	for at < len(msgs) && msgs[at].Role == "system" {
		at++
	}
	out := make([]codec.Message, 0, len(msgs)+1)
	out = append(append(append(out, msgs[:at]...), msg), msgs[at:]...)
	t.req.Messages = out
}

// keepAnswer keeps a delivered content fragment (a JSON string literal)
// for capture, up to captureAnswerMax bytes.
func (m *turnMemory) keepAnswer(frag []byte) {
	if !m.capture || m.answer.Len() >= captureAnswerMax {
		return
	}
	m.answer.WriteString(contentText(frag))
}

// startCapture runs capture off the request path, bounded by CaptureWait.
func (t *turn) startCapture() {
	m := t.mem
	if m == nil || !m.capture || m.done != nil {
		return
	}
	m.done = make(chan []memory.Captured, 1)
	answer := m.answer.String()
	rid := string(t.requestID)
	go func() {
		var out []memory.Captured
		defer func() {
			if p := recover(); p != nil {
				m.cfg.Log.Error("memory capture panicked; nothing stored", "request_id", rid)
				out = nil
			}
			m.done <- out
		}()
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.CaptureWait)
		defer cancel()
		out = m.captureFacts(ctx, answer, rid)
	}()
}

func (m *turnMemory) captureFacts(ctx context.Context, answer, rid string) []memory.Captured {
	cfg := m.cfg
	facts, err := cfg.Extractor.Extract(ctx, m.userText, answer)
	if err != nil {
		cfg.Log.Warn("memory capture: the extractor failed; nothing stored", "request_id", rid, "err", err)
		return nil
	}
	facts = keepFacts(facts)
	if len(facts) == 0 {
		return nil
	}
	var vectors [][]float32
	if cfg.Embedder != nil {
		texts := make([]string, len(facts))
		for i, f := range facts {
			texts[i] = f.Key + ": " + f.Value
		}
		if vs, err := cfg.Embedder.Embed(ctx, texts); err == nil && len(vs) == len(facts) {
			vectors = vs
		}
	}
	out, err := cfg.Store.Capture(ctx, m.caller, facts, vectors)
	if err != nil {
		cfg.Log.Warn("memory capture: cannot store; nothing stored", "request_id", rid, "err", err)
		return nil
	}
	return out
}

// keepFacts drops facts that are malformed (not UTF-8, or holding a NUL,
// which no text column stores), too long or carry personal data, and keeps
// at most captureFactsMax. A key given twice is one
// memory, holding the later value, as storing both in turn would leave
// it: memory_capture reports what was stored, each key once.
func keepFacts(facts []memory.Fact) []memory.Fact {
	out := facts[:0]
next:
	for _, f := range facts {
		f.Key, f.Value = strings.TrimSpace(f.Key), strings.TrimSpace(f.Value)
		if f.Key == "" || f.Value == "" || len(f.Key) > captureKeyMax || utf8.RuneCountInString(f.Value) > captureValueMax ||
			!utf8.ValidString(f.Key) || !utf8.ValidString(f.Value) ||
			strings.IndexByte(f.Key, 0) >= 0 || strings.IndexByte(f.Value, 0) >= 0 {
			continue
		}
		if _, _, found := pii.Find(f.Key); found {
			continue
		}
		if _, _, found := pii.Find(f.Value); found {
			continue
		}
		for i := range out {
			if out[i].Key == f.Key {
				out[i].Value = f.Value
				continue next
			}
		}
		out = append(out, f)
		if len(out) == captureFactsMax {
			break
		}
	}
	return out
}

// captureField waits for capture (never past its bound, plus a little for
// the goroutine to report) and returns the memory_capture field, or nil
// when nothing was stored.
func (t *turn) captureField() []byte {
	m := t.mem
	if m == nil || m.done == nil {
		return nil
	}
	timer := time.NewTimer(m.cfg.CaptureWait + 250*time.Millisecond)
	defer timer.Stop()
	var got []memory.Captured
	select {
	case got = <-m.done:
	case <-timer.C:
		m.cfg.Log.Warn("memory capture did not report in time; reported as not stored", "request_id", string(t.requestID))
	}
	m.done = nil
	if len(got) == 0 {
		return nil
	}
	sig := make([]codec.MemorySignal, len(got))
	for i, c := range got {
		sig[i] = codec.MemorySignal{Scope: c.Scope, Key: c.Key, VaultID: c.VaultID}
	}
	return codec.AppendCaptureField(nil, sig)
}

// memoryFields returns the recall and rules signals, nil when none apply.
func (t *turn) memoryFields() []byte {
	if t.mem == nil {
		return nil
	}
	return t.mem.fields
}

// Extractor finds durable facts with a chat tier that honours a JSON
// schema (structured output).
type Extractor struct {
	up *Upstream
}

// NewExtractor runs extraction on up's tier.
func NewExtractor(up *Upstream) *Extractor { return &Extractor{up: up} }

var _ memory.Extractor = (*Extractor)(nil)

// extractorPrompt asks for durable facts only.
const extractorPrompt = "You extract durable facts about the user from one chat turn, for a memory the assistant " +
	"keeps across conversations. Keep only lasting preferences, stable settings and standing constraints the user " +
	"stated about themselves or their work; never one-off requests, questions, secrets, contact details or anything " +
	"from the assistant alone. Return {\"facts\": []} when there is none. Each fact has kind (preference, setting or " +
	"constraint), a short snake_case key and a one-sentence value."

var extractorSchema = []byte(`{"type":"object","additionalProperties":false,"required":["facts"],"properties":{"facts":{"type":"array","maxItems":5,"items":{"type":"object","additionalProperties":false,"required":["kind","key","value"],"properties":{"kind":{"type":"string","enum":["preference","setting","constraint"]},"key":{"type":"string"},"value":{"type":"string"}}}}}}`)

type extractorRequest struct {
	Model          string                `json:"model"`
	Messages       []codec.Message       `json:"messages"`
	MaxTokens      int                   `json:"max_tokens"`
	Temperature    float64               `json:"temperature"`
	ResponseFormat *codec.ResponseFormat `json:"response_format"`
}

// Extract implements memory.Extractor.
func (e *Extractor) Extract(ctx context.Context, user, answer string) ([]memory.Fact, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	strict := true
	turnText, _ := sonic.Marshal("User: " + user + "\n\nAssistant: " + answer)
	sys, _ := sonic.Marshal(extractorPrompt)
	body, err := sonic.Marshal(&extractorRequest{
		Model: e.up.cfg.Model, MaxTokens: 512,
		Messages: []codec.Message{{Role: "system", Content: sys}, {Role: "user", Content: turnText}},
		ResponseFormat: &codec.ResponseFormat{Type: "json_schema",
			JSONSchema: &codec.JSONSchema{Name: "memory_facts", Strict: &strict, Schema: extractorSchema}},
	})
	if err != nil {
		return nil, fmt.Errorf("cannot encode extractor request: %w", err)
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(e.up.url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if e.up.auth != "" {
		req.Header.Set("Authorization", e.up.auth)
	}
	req.SetBodyRaw(body)
	if _, err := doFresh(e.up.plain, req, resp, deadline); err != nil {
		return nil, fmt.Errorf("cannot call extractor: %w", err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, fmt.Errorf("extractor answered %d", resp.StatusCode())
	}
	var c codec.Completion
	if err := codec.ParseCompletion(resp.Body(), &c); err != nil || c.Error != nil || c.Content == nil {
		return nil, errors.New("extractor answer is not a completion")
	}
	var content string
	if err := sonic.Unmarshal(c.Content, &content); err != nil {
		return nil, errors.New("extractor content is not a string")
	}
	var out struct {
		Facts []struct {
			Kind  string `json:"kind"`
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"facts"`
	}
	if err := sonic.UnmarshalString(content, &out); err != nil {
		return nil, errors.New("extractor content is not the facts object")
	}
	facts := make([]memory.Fact, 0, len(out.Facts))
	for _, f := range out.Facts {
		switch f.Kind {
		case "preference", "setting", "constraint":
			facts = append(facts, memory.Fact{Key: f.Key, Value: f.Value})
		}
	}
	return facts, nil
}

// Embedder calls the gw-embed tier's OpenAI-compatible /embeddings
// endpoint for memory: its binding is the auxiliary tier's, one owner.
type Embedder struct {
	up   *Upstream
	dims int
}

var _ memory.Embedder = (*Embedder)(nil)

// NewEmbedder embeds on up, the gw-embed tier's upstream; dims, when
// positive, asks for vectors of that length (the OpenAI dimensions
// parameter).
func NewEmbedder(up *Upstream, dims int) *Embedder { return &Embedder{up: up, dims: dims} }

// Embed implements memory.Embedder.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	req0 := map[string]any{"model": e.up.cfg.Model, "input": texts}
	if e.dims > 0 {
		req0["dimensions"] = e.dims
	}
	body, err := sonic.Marshal(req0)
	if err != nil {
		return nil, err
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(e.up.url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if e.up.auth != "" {
		req.Header.Set("Authorization", e.up.auth)
	}
	req.SetBodyRaw(body)
	if _, err := doFresh(e.up.plain, req, resp, deadline); err != nil {
		return nil, fmt.Errorf("cannot call the embed tier: %w", err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, fmt.Errorf("the embed tier answered %d", resp.StatusCode())
	}
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := sonic.Unmarshal(resp.Body(), &out); err != nil || len(out.Data) != len(texts) {
		return nil, errors.New("the embed tier's answer is not one embedding per input")
	}
	vs := make([][]float32, len(texts))
	for _, d := range out.Data {
		if d.Index < 0 || d.Index >= len(vs) || len(d.Embedding) == 0 {
			return nil, errors.New("the embed tier's answer has a bad index")
		}
		vs[d.Index] = d.Embedding
	}
	return vs, nil
}
