package proxy

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// ModerationCategories are the categories of a moderation result, in the
// order they are written: the spec's five and their subtypes, as OpenAI's
// moderation API names them.
var ModerationCategories = [...]string{
	"harassment", "harassment/threatening",
	"hate", "hate/threatening",
	"self-harm", "self-harm/instructions", "self-harm/intent",
	"sexual", "sexual/minors",
	"violence", "violence/graphic",
}

// HazardCategories maps each guard hazard code (the Llama Guard 3
// taxonomy, S1 to S14) to the categories it sets; README, "Moderation",
// has the table and its reasons. Codes that map to nothing — S6, S7, S8
// and S13 as the spec says, and S2 and S14, whose nearest OpenAI category
// (illicit) is not among the spec's — leave every category false, and the
// result's gw.hazard_codes explains the flag. An unknown code maps to
// nothing too.
var HazardCategories = map[string][]string{
	"S1":  {"violence"},                // violent crimes
	"S2":  nil,                         // non-violent crimes
	"S3":  {"sexual"},                  // sex-related crimes
	"S4":  {"sexual", "sexual/minors"}, // child sexual exploitation
	"S5":  {"harassment"},              // defamation
	"S6":  nil,                         // specialized advice
	"S7":  nil,                         // privacy
	"S8":  nil,                         // intellectual property
	"S9":  {"violence"},                // indiscriminate weapons
	"S10": {"hate"},                    // hate
	"S11": {"self-harm"},               // suicide and self-harm
	"S12": {"sexual"},                  // sexual content
	"S13": nil,                         // elections
	"S14": nil,                         // code interpreter abuse
}

var hazardBits = func() map[string]uint16 {
	m := make(map[string]uint16, len(HazardCategories))
	for code, cats := range HazardCategories {
		var b uint16
		for _, c := range cats {
			for i, name := range ModerationCategories {
				if name == c {
					b |= 1 << i
				}
			}
		}
		m[code] = b
	}
	return m
}()

// verdict is the guard's reading of one input.
type guardVerdict struct {
	flagged bool
	codes   []string
	cats    uint16
}

// parseGuard reads a Llama-Guard-style reply: "safe", or "unsafe"
// optionally followed by one line of comma-separated hazard codes (S and
// one or two digits). Surrounding whitespace is allowed; anything else is
// not a verdict, and ok is false: the gateway never guesses one.
func parseGuard(text string) (v guardVerdict, ok bool) {
	text = strings.TrimSpace(text)
	first, rest, _ := strings.Cut(text, "\n")
	switch strings.ToLower(strings.TrimSpace(first)) {
	case "safe":
		return v, strings.TrimSpace(rest) == ""
	case "unsafe":
	default:
		return v, false
	}
	v.flagged, v.codes = true, []string{}
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return v, true
	}
	if strings.ContainsAny(rest, "\n\r") {
		return v, false
	}
	for more := true; more; {
		var c string
		c, rest, more = strings.Cut(rest, ",")
		c = strings.TrimSpace(c)
		if len(c) < 2 || len(c) > 3 || c[0]|0x20 != 's' {
			return v, false
		}
		if c[1] < '1' || c[1] > '9' || len(c) == 3 && c[2]-'0' > 9 {
			return v, false
		}
		n := int(c[1] - '0')
		if len(c) == 3 {
			n = 10*n + int(c[2]-'0')
		}
		// The code's own string, never a view of the reply's bytes,
		// which go back to their pool before the answer is written.
		c = hazardCodes[n]
		if !slices.Contains(v.codes, c) {
			v.codes = append(v.codes, c)
			v.cats |= hazardBits[c]
		}
	}
	return v, true
}

// hazardCodes[n] is the hazard code Sn, for the one or two digits a code
// has.
var hazardCodes = func() (out [100]string) {
	for n := 1; n < len(out); n++ {
		out[n] = "S" + strconv.Itoa(n)
	}
	return out
}()

// appendModerationResult appends one result: flagged, every category as
// a boolean, every score 1 or 0, and, when flagged and withGW, gw with
// the hazard codes (never null).
func appendModerationResult(dst []byte, v *guardVerdict, withGW bool) []byte {
	dst = append(dst, `{"flagged":`...)
	dst = strconv.AppendBool(dst, v.flagged)
	dst = append(dst, `,"categories":{`...)
	for i, name := range ModerationCategories {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = codec.AppendJSONString(dst, name)
		dst = append(dst, ':')
		dst = strconv.AppendBool(dst, v.cats&(1<<i) != 0)
	}
	dst = append(dst, `},"category_scores":{`...)
	for i, name := range ModerationCategories {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = codec.AppendJSONString(dst, name)
		if v.cats&(1<<i) != 0 {
			dst = append(dst, ":1.0"...)
		} else {
			dst = append(dst, ":0.0"...)
		}
	}
	dst = append(dst, '}')
	if v.flagged && withGW {
		dst = append(dst, `,"gw":{"hazard_codes":[`...)
		for i, c := range v.codes {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = codec.AppendJSONString(dst, c)
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, '}')
}

// appendGuardRequest appends the guard's chat request judging input.
func appendGuardRequest(dst []byte, model string, maxTokens int, input string) []byte {
	dst = append(dst, `{"model":`...)
	dst = codec.AppendJSONString(dst, model)
	dst = append(dst, `,"messages":[{"role":"user","content":`...)
	dst = codec.AppendJSONString(dst, input)
	dst = append(dst, `}],"max_tokens":`...)
	dst = strconv.AppendInt(dst, int64(maxTokens), 10)
	return append(dst, `,"temperature":0}`...)
}

// readGuard reads body, the guard's chat completion, into c and as a
// verdict; text is the reply's content, which may be a view of body. ok is
// false when the body is not a completion or its content not a verdict: a
// verdict cut at the token budget may have lost codes, so it is not one.
func readGuard(body []byte, c *codec.Completion) (v guardVerdict, text string, ok bool) {
	if codec.ParseCompletion(body, c) != nil || c.Error != nil || string(c.FinishReason) == "length" {
		return v, "", false
	}
	if text, ok = codec.StringLiteralView(c.Content); !ok {
		if len(c.Content) == 0 || sonic.UnmarshalString(codec.BytesView(c.Content), &text) != nil {
			return v, "", false
		}
	}
	v, ok = parseGuard(text)
	return v, text, ok
}

// judged is one input's outcome.
type judged struct {
	v       guardVerdict
	in, out int64
	err     *codec.Error
}

// moderate judges every input and answers the moderation route.
func (a *auxCall) moderate(ctx *fasthttp.RequestCtx) error {
	results, cerr := a.judgeAll()
	if cerr != nil {
		return cerr
	}
	var in, out int64
	for i := range results {
		in, out = in+results[i].in, out+results[i].out
	}
	a.bill(in, out)

	b := auxBody(ctx, 64+len(results)*420)
	b = append(b, `{"id":"modr-`...)
	b = append(b, a.rid...)
	b = append(b, `","model":`...)
	b = codec.AppendJSONString(b, a.up.Tier.Name)
	b = append(b, `,"results":[`...)
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendModerationResult(b, &results[i].v, !a.openai)
	}
	b = append(b, "]}"...)
	return writeAux(ctx, b)
}

// judgeAll judges every input with one guard call each, at most
// GuardConcurrency at once; the first failure stops calls not yet made
// and is returned. A reply the gateway cannot read as a verdict is
// retried like an upstream failure and then answered 503.
func (a *auxCall) judgeAll() ([]judged, *codec.Error) {
	if len(a.inputs) == 1 { // the common case, without a goroutine
		r := make([]judged, 1)
		if r[0] = a.judge(a.inputs[0]); r[0].err != nil {
			return nil, r[0].err
		}
		return r, nil
	}
	results := make([]judged, len(a.inputs))
	sem := make(chan struct{}, a.ch.cfg.Aux.GuardConcurrency)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for i := range a.inputs {
		sem <- struct{}{}
		if failed.Load() {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = a.judge(a.inputs[i])
			if results[i].err != nil {
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	for i := range results {
		if results[i].err != nil {
			return nil, results[i].err
		}
	}
	return results, nil
}

// judge asks the guard about one input. The upstream exchange retries and
// maps failures as chat's does; an unreadable verdict is retried up to the
// tier's Retries more times, then answered as an upstream failure.
func (a *auxCall) judge(input string) judged {
	req := a.newRequest(nil)
	defer fasthttp.ReleaseRequest(req)
	b := req.SwapBody(nil)[:0]
	req.SwapBody(appendGuardRequest(b, a.up.cfg.Model, a.up.Tier.MaxOutput, input))
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	backoff := a.up.cfg.Backoff
	for attempt := 0; ; attempt++ {
		if cerr := a.exchange(req, resp); cerr != nil {
			return judged{err: cerr}
		}
		var c codec.Completion
		if v, text, ok := readGuard(resp.Body(), &c); ok {
			a.up.Breaker.Success()
			j := judged{v: v}
			if c.HasUsage {
				j.in, j.out = c.Usage.PromptTokens, c.Usage.CompletionTokens
			} else {
				j.in = int64(tokens.CountChat([]tokens.Message{{Role: "user", Content: input}}, nil))
				j.out = int64(tokens.Count(text))
			}
			return j
		}
		if attempt >= a.up.cfg.Retries {
			a.ch.cfg.Log.Warn("guard reply is not a verdict", "request_id", string(a.rid), "tier", a.up.Tier.Name,
				"bytes", len(resp.Body()))
			return judged{err: a.unreadable(req)}
		}
		a.ch.m.retries.Inc()
		time.Sleep(backoff)
		backoff *= 2
	}
}
