package proxy

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// Bounds of token counting (spec: Limits). A request holding more text, or
// one unbroken run longer than tokens.MaxRun, is refused rather than counted.
const (
	countMaxText = 262144 // bytes of text in one request
	countMaxRun  = tokens.MaxRun
)

var (
	errCountAuto = invalidRequest("model: auto is resolved per request and cannot be counted; count against kavi, vaani or mira.")
	errCountText = &codec.Error{Code: codec.CodeInputNotCountable,
		Message: "The request holds more than 262144 bytes of text; it is not counted.", Detail: codec.Detail{Bound: "text_bytes"}}
	errCountRun = &codec.Error{Code: codec.CodeInputNotCountable,
		Message: "The request holds an unbroken run of more than 1024 bytes (no word, digit or punctuation boundary); it is not counted.",
		Detail:  codec.Detail{Bound: "run_bytes"}}
)

// counting is one token-count request's decoded body, pooled.
type counting struct {
	req codec.ChatRequest
	out []byte
}

var countingPool = sync.Pool{New: func() any { return new(counting) }}

// countTokens serves POST /api/v1/tokens/count: the input tokens
// POST /api/v1/chat would bill for the same body, counted here with the
// tier's tokenizer, chat template and injected system prompt (countPrompt,
// the function chat's own window check and local billing use). It calls no
// upstream, bills nothing and writes no ledger row; the edge counts it in
// its own rate bucket.
func (ch *Chat) countTokens(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	body := ctx.PostBody()
	if len(body) == 0 {
		return errEmptyBody
	}
	k := countingPool.Get().(*counting)
	defer func() {
		out := k.out[:0]
		if cap(out) > 4<<10 {
			out = nil
		}
		*k = counting{out: out}
		countingPool.Put(k)
	}()
	r := &k.req
	if cerr := decodeChatBody(body, r); cerr != nil {
		return cerr
	}
	if r.Model == "auto" {
		return errCountAuto
	}
	// Only the core fields are read: tool_choice, response_format, the
	// native switches and sampling settings do not change the prompt, and
	// attached files are not counted (spec: Chat and tokens).
	r.ToolChoice, r.ResponseFormat, r.Memory, r.Rules, r.VaultID, r.MentionedVaultIDs = nil, nil, nil, nil, nil, nil
	r.Stream, r.StreamOptions, r.Temperature, r.TopP, r.MaxTokens, r.ReasoningEffort = false, nil, nil, nil, nil, nil
	for i := range r.Messages {
		r.Messages[i].FileIDs = nil
	}
	intent, cerr := validateChat(r, chatV1, ch.tiers, c.User, c.Version, c.Pinned)
	if cerr != nil {
		return cerr
	}
	if cerr := checkCountable(r); cerr != nil {
		return cerr
	}
	up := ch.upstreamFor(intent.Tier.Name)
	n := countPrompt(r, up, math.MaxInt, nil) // bounded: at most countMaxText bytes
	k.out = append(k.out[:0], `{"object":"token_count","model":`...)
	k.out = codec.AppendJSONString(k.out, intent.Tier.Name)
	k.out = append(k.out, `,"input_tokens":`...)
	k.out = strconv.AppendInt(k.out, int64(n), 10)
	k.out = append(k.out, '}')
	ctx.SetContentType("application/json")
	ctx.SetBody(k.out)
	return nil
}

// checkCountable refuses a request with more text than countMaxText bytes
// or an unbroken run longer than countMaxRun bytes. Text is everything the
// template renders from the client: message contents, names, tool calls'
// names and arguments, and the tools' names, descriptions and schemas.
func checkCountable(r *codec.ChatRequest) *codec.Error {
	total := 0
	check := func(s string) *codec.Error {
		if total += len(s); total > countMaxText {
			return errCountText
		}
		if longestRun(s) > countMaxRun {
			return errCountRun
		}
		return nil
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		if parts := contentParts(m.Content); parts != nil {
			// Each part's own bytes: the line the template joins them
			// with is not the client's text.
			for _, p := range parts {
				if e := check(p); e != nil {
					return e
				}
			}
		} else if e := check(contentText(m.Content)); e != nil {
			return e
		}
		if e := check(m.Name); e != nil {
			return e
		}
		for j := range m.ToolCalls {
			if e := check(m.ToolCalls[j].Function.Name); e != nil {
				return e
			}
			if e := check(m.ToolCalls[j].Function.Arguments); e != nil {
				return e
			}
		}
	}
	for i := range r.Tools {
		f := &r.Tools[i].Function
		if e := check(f.Name); e != nil {
			return e
		}
		if e := check(f.Description); e != nil {
			return e
		}
		// The schema as the template renders it, compact: whitespace
		// between its tokens is not text.
		schema := f.Parameters
		var compact bytes.Buffer
		if json.Compact(&compact, schema) == nil {
			schema = compact.Bytes()
		}
		if e := check(string(schema)); e != nil {
			return e
		}
	}
	return nil
}

// longestRun is the length in bytes of the longest stretch of s with no
// word, digit or punctuation boundary: letters and combining marks only,
// broken by anything else (space, digit, punctuation, symbol, control).
// Invalid UTF-8 bytes extend a run. It allocates nothing.
func longestRun(s string) int {
	longest, run := 0, 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if 'a' <= c|0x20 && c|0x20 <= 'z' {
				run++
			} else {
				run = 0
			}
			i++
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError || unicode.IsLetter(r) || unicode.IsMark(r) {
				run += size
			} else {
				run = 0
			}
			i += size
		}
		longest = max(longest, run)
	}
	return longest
}
