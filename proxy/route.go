package proxy

import (
	"bytes"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bytedance/sonic"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// route binds the turn to an upstream. An explicit tier whose breaker is
// open is refused at once; auto picks a healthy tier the key may use, by the
// rule documented in docs/routing.md:
//
//   - reasoning_effort high: kavi, then vaani, then mira;
//   - tools, or effort low or medium: vaani, then kavi, then mira;
//   - otherwise mira, then vaani, then kavi;
//
// skipping tiers whose context window cannot hold the prompt's upper bound
// and tiers the key's allowlist excludes. The tier is chosen before the
// call and never changes after it.
func (t *turn) route(p *hotpath.Principal) *codec.Error {
	ch := t.ch
	if !t.intent.Auto {
		up := ch.upstreamFor(t.intent.Tier.Name)
		if !up.Breaker.Allow() {
			return unavailableFor(up.Breaker.RetryAfter())
		}
		t.up = up
		t.routing.Mode = "explicit"
	} else {
		order := t.autoOrder()
		candidates, fitting := 0, 0
		for pass := 0; pass < 2 && t.up == nil; pass++ {
			for _, name := range order {
				up := ch.upstreamFor(name)
				if up == nil || !p.AllowsModel(name) || t.capability(up.Tier) != nil {
					continue
				}
				candidates++
				if !t.fits(up) {
					continue
				}
				fitting++
				// First pass: only tiers known healthy; second: any the
				// breaker lets through (a half-open probe).
				if pass == 0 && up.Breaker.State() != hotpath.BreakerClosed || pass == 1 && !up.Breaker.Allow() {
					continue
				}
				t.up = up
				break
			}
		}
		if t.up == nil {
			if candidates > 0 && fitting == 0 {
				// No tier the key may use can hold the prompt: the
				// client's to fix, not a reason to retry.
				return errContextOverflow
			}
			// Retry when the first tier that cools down allows it.
			wait := time.Duration(0)
			for _, up := range ch.ups {
				if d := up.Breaker.RetryAfter(); d > 0 && (wait == 0 || d < wait) {
					wait = d
				}
			}
			return unavailableFor(wait)
		}
		t.routing.Mode = "auto"
	}
	tier := t.up.Tier
	if cerr := t.capability(tier); cerr != nil {
		return cerr
	}
	t.routing.Tier = tier.Name
	switch {
	case !tier.Graded:
		t.routing.Effort = string(hotpath.EffortNone)
	case t.intent.EffortSet:
		t.routing.Effort = string(t.intent.Effort)
	default:
		t.routing.Effort = string(tier.DefaultEffort)
	}
	if t.intent.Auto || t.intent.MaxTokens == 0 {
		t.intent.MaxTokens = maxTokensOn(tier, t.req.MaxTokens)
	}
	return nil
}

// fileRoom is the room up's window leaves the prompt and the turn's own
// files: the window less the answer's max_tokens and a tenth of it.
func (t *turn) fileRoom(up *Upstream) int {
	w := up.Tier.ContextWindow
	return w - int(maxTokensOn(up.Tier, t.req.MaxTokens)) - w/10
}

// autoOrder is the order auto tries the tiers in, by the request's shape.
func (t *turn) autoOrder() [3]string {
	switch {
	case t.poolsLow:
		// The plan's pools are running out: mira first, whatever the
		// request's shape.
	case t.intent.EffortSet && t.intent.Effort == hotpath.EffortHigh:
		return [3]string{"kavi", "vaani", "mira"}
	case t.intent.HasTools || t.intent.EffortSet && t.intent.Effort != hotpath.EffortNone:
		return [3]string{"vaani", "kavi", "mira"}
	}
	return [3]string{"mira", "vaani", "kavi"}
}

// capability refuses a request the tier cannot serve: images on a tier
// that does not read them, tools on one without tool calling, and
// structured output on one without constrained decoding.
func (t *turn) capability(tier *hotpath.Tier) *codec.Error {
	if !tier.SupportsVision && t.images {
		return t.ch.errImages
	}
	if t.intent.HasTools && !tier.SupportsTools {
		return codec.NewError(codec.CodeInvalidRequest, "tools: the "+tier.Name+" tier does not call tools.")
	}
	return checkStructuredSupport(tier, tier.SupportsStructured, t.intent)
}

// hasImages reports an image part in any message's content.
func hasImages(r *codec.ChatRequest) bool {
	for i := range r.Messages {
		c := r.Messages[i].Content
		if len(c) > 0 && c[0] == '[' && bytes.Contains(c, []byte(`"image_url"`)) {
			return true
		}
	}
	return false
}

func (ch *Chat) upstreamFor(name string) *Upstream {
	for _, up := range ch.ups {
		if up.Tier.Name == name {
			return up
		}
	}
	return nil
}

// reasons reports whether this turn produces a reasoning trace.
func (t *turn) reasons() bool {
	return t.up.cfg.Reasons && t.routing.Effort != string(hotpath.EffortNone)
}

// checkContext refuses a prompt over the tier's window. Every token is at
// least one byte, so a byte bound that fits needs no tokenizer; only a
// prompt near the window is counted exactly.
func (t *turn) checkContext() *codec.Error {
	if !t.fits(t.up) {
		return errContextOverflow
	}
	return nil
}

// watchCountAbove is the prompt size, in bytes, above which counting it may
// take long enough (tens of milliseconds) that a client which leaves
// meanwhile is watched for, and its count abandoned.
const watchCountAbove = 256 << 10

// fits reports whether the prompt, with up's system prompt, fits up's
// window: by the byte bound when it can, else by a count that stops as soon
// as it passes the window. Until they are placed, the turn's own files
// must fit as placeFiles will demand, with room for the answer and a tenth
// of the window, so that auto never picks a tier placement refuses.
func (t *turn) fits(up *Upstream) bool {
	window := up.Tier.ContextWindow
	if t.fileFloor > 0 {
		window = t.fileRoom(up)
	}
	if t.bound+t.fileFloor+len(up.cfg.SystemPrompt)+16 <= window {
		return true
	}
	limit := window
	if t.intent.Auto {
		// Auto may try every tier: one count to the largest window
		// serves them all.
		limit = t.ch.maxWindow
	}
	return t.promptTokens(up, limit)+t.fileFloor <= window
}

// promptTokens counts the prompt under up's system prompt, stopping once
// the count passes limit (the result is then only known to be above it),
// and remembers the count: routing, the window check and local billing may
// each need it, and tokenizing is the slow part. A count that stopped
// early is redone only for a larger limit.
func (t *turn) promptTokens(up *Upstream, limit int) int {
	if !t.counted || t.countSys != up.cfg.SystemPrompt || t.count > t.countLimit && limit > t.countLimit {
		t.count, t.countSys, t.countLimit, t.counted = countPrompt(&t.req, up, limit, &t.departed), up.cfg.SystemPrompt, limit, true
	}
	return t.count
}

// billedPromptTokens is the prompt's count for a bill the upstream sent no
// usage for. The window check passed, so a count to the window is exact,
// and it runs to its end even when the client has left: a departure stops
// only the counts that decide whether to serve (which then read as over
// the limit), while a bill must be the count itself.
func (t *turn) billedPromptTokens() int {
	up, limit := t.up, t.up.Tier.ContextWindow
	if t.counted && t.countSys == up.cfg.SystemPrompt && t.count <= t.countLimit && t.count <= limit {
		return t.count
	}
	t.count, t.countSys, t.countLimit, t.counted = countPrompt(&t.req, up, limit, nil), up.cfg.SystemPrompt, limit, true
	return t.count
}

// promptBound is an upper bound on the prompt's tokens under the template.
func promptBound(r *codec.ChatRequest) int {
	n := 16
	for i := range r.Messages {
		m := &r.Messages[i]
		n += 8 + len(m.Role) + len(m.Content) + len(m.Name) + len(m.ToolCallID)
		for _, tc := range m.ToolCalls {
			n += 16 + len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
		}
	}
	for i := range r.Tools {
		f := &r.Tools[i].Function
		n += 16 + len(f.Name) + len(f.Description) + len(f.Parameters)
	}
	return n
}

// countPrompt counts the prompt, with the tier's system prompt, as the
// tokenizer and template the simulator reports usage with, stopping once the
// count passes limit or stop is set.
func countPrompt(r *codec.ChatRequest, up *Upstream, limit int, stop *atomic.Bool) int {
	msgs := make([]tokens.Message, 0, len(r.Messages)+1)
	if up.cfg.SystemPrompt != "" {
		msgs = append(msgs, tokens.Message{Role: "system", Content: up.cfg.SystemPrompt})
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		tm := tokens.Message{Role: m.Role, Content: contentText(m.Content), Name: m.Name, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			tm.ToolCalls = append(tm.ToolCalls, tokens.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		msgs = append(msgs, tm)
	}
	tools := make([]tokens.Tool, 0, len(r.Tools))
	for i := range r.Tools {
		f := &r.Tools[i].Function
		tools = append(tools, tokens.Tool{Name: f.Name, Description: f.Description, Parameters: f.Parameters})
	}
	return tokens.CountChatUntil(msgs, tools, limit, stop)
}

// contentText is a message's text: the string, or its text parts joined.
func contentText(raw []byte) string {
	if len(raw) == 0 || raw[0] == 'n' {
		return ""
	}
	if raw[0] != '"' {
		return strings.Join(contentParts(raw), "\n")
	}
	// Counting only reads the text, within the handler that holds the
	// body: an unescaped string is read where it lies.
	if s, ok := codec.StringLiteralView(raw); ok {
		return s
	}
	var s string
	if sonic.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

// contentParts is the text of a message's content parts, part by part (a
// string content is not parts: nil).
func contentParts(raw []byte) []string {
	if len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if sonic.Unmarshal(raw, &parts) != nil {
		return nil
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return texts
}

// settleBill fills the bill from the upstream's usage or, when it sent
// none, from counting the prompt and what was delivered.
func (t *turn) settleBill(u *codec.Usage, has bool, delivered ...[]byte) {
	tier := t.up.Tier
	b := &t.bill
	*b = codec.Bill{Tier: tier.Name, InputPerM: tier.Prices.InputPerM, OutputPerM: tier.Prices.OutputPerM,
		CacheReadPerM: tier.Prices.CacheReadPerM}
	t.billed = true
	if has {
		b.InputTokens, b.OutputTokens, b.CacheReadTokens = u.PromptTokens, u.CompletionTokens, u.CachedTokens
		b.PromptCacheActive = u.CachedTokens > 0
	} else {
		t.estimated = true
		t.ch.m.estimated.Inc()
		b.InputTokens = int64(t.billedPromptTokens())
		b.OutputTokens = t.foldedTokens()
		for _, d := range delivered {
			b.OutputTokens += int64(countLiterals(d))
		}
	}
	b.AmountPico = meter.Cost(&tier.Prices, b.InputTokens, b.CacheReadTokens, b.OutputTokens)
	m := &t.up.meter
	m.input.Add(int(b.InputTokens))
	m.output.Add(int(b.OutputTokens))
	m.cost.Add(int(b.AmountPico))
}

// countLiterals counts the tokens of a run of concatenated JSON string
// literals (the content fragments a stream delivered), joined.
func countLiterals(raw []byte) int {
	var text []byte
	for i := 0; i < len(raw); {
		if raw[i] != '"' {
			i++
			continue
		}
		j := i + 1
		for j < len(raw) && raw[j] != '"' {
			if raw[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(raw) {
			break
		}
		if s, ok := unquote(raw[i : j+1]); ok {
			text = append(text, s...)
		}
		i = j + 1
	}
	return tokens.Count(string(text))
}
