// Package faults is the failover scorecard: it drives every upstream fault
// the simulator can inject through every chat wire of a gateway, and scores
// each answer against what the README's fault table says a client sees.
//
// # What the gateway under test must look like
//
// Every tier the cases name sits on the upstream simulator (bench/sim),
// which reads the directives the cases append to the user message. The
// hang, stall and slow-first-token cases wait for the gateway's own bounds,
// so the gateway must run with short ones: a tier deadline (the
// non-streaming bound; mira's is 45 s by default) and a stream idle bound
// (stream_idle_timeout, 60 s by default) both well under SlowTTFT, and the
// client's per-request budget (http.Client.Timeout, or Case.Timeout) well
// over them. The harness's faults runs (`gwbench faults`, `gwbench local`)
// configure their gateway that way; against a gateway with the default
// bounds those cases fail, slowly.
//
// Several cases make the upstream fail on every attempt, which a tier's
// circuit breaker counts (by default it opens for ten seconds when, over
// ten seconds, at least five distinct requests reached the tier and half of
// them failed; an explicit tier is then refused with 503
// model_unavailable). So after any answer of 500 or more, Run sends
// healthy requests to the same tier before the next case until one is
// served, which dilutes the window's failure rate, or waits out a cooldown
// the breaker opened and closes it with its probe; a case is one request to
// the breaker, whatever its retries. A gateway behind a load balancer may
// route the healthy request to another process; run the scorecard against
// one process.
package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edgegw/gateway/bench/frameorder"
	"github.com/edgegw/gateway/codec"
)

// SlowTTFT is the time to first token of the slow_first_token cases. The
// gateway's tier deadline and stream idle bound must be shorter.
const SlowTTFT = 8 * time.Second

// Case is one upstream fault, sent to each wire in Want.
type Case struct {
	Name string
	// Directive is appended to the user message, e.g. "[[sim:fault=reset]]".
	Directive string
	Stream    bool
	// Tier is the model requested; empty means mira.
	Tier string
	// Want is the expected answer per wire; a wire absent from it is not
	// sent.
	Want map[frameorder.Wire]Expect
	// Timeout bounds each request of the case, on top of the client's own
	// Timeout; zero adds no bound.
	Timeout time.Duration
}

// Expect is the answer a client should see.
type Expect struct {
	// Status is the HTTP status.
	Status int
	// Code is the error code: in the envelope of a refusal, or in the
	// error frame or event that ends a failed stream. Empty on success,
	// and on a failed /api/v1/chat stream, which carries none.
	Code string
	// Complete is a served answer: a completion body, or a stream that
	// reached its terminator.
	Complete bool
	// Failed is a stream that opened and then ended the wire's failure way.
	Failed bool
}

// String renders e the way Score.Got reads: "503 upstream_overloaded",
// "200 complete", "200 failed upstream_timeout".
func (e Expect) String() string {
	s := strconv.Itoa(e.Status)
	switch {
	case e.Complete:
		s += " complete"
	case e.Failed:
		s += " failed"
	case e.Status >= 200 && e.Status < 300:
		s += " incomplete"
	}
	if e.Code != "" {
		s += " " + e.Code
	}
	return s
}

// Score is the verdict on one case on one wire.
type Score struct {
	Case Case
	Wire frameorder.Wire
	Pass bool
	// Got is what happened, short; Want is what should have.
	Got  string
	Want string
}

// The wires of each mode. OpenAIUsage is a stream option, so it is only a
// streaming wire.
var (
	jsonWires   = []frameorder.Wire{frameorder.V1, frameorder.V2, frameorder.OpenAI, frameorder.Anthropic, frameorder.Responses}
	streamWires = []frameorder.Wire{frameorder.V1, frameorder.V2, frameorder.OpenAI, frameorder.OpenAIUsage,
		frameorder.Anthropic, frameorder.Responses}
	wireOrder = streamWires
)

// onWire is want as wire w says it: Anthropic's API names an error by its
// type, and answers an overloaded model (every 503) with 529.
func onWire(w frameorder.Wire, want Expect) Expect {
	if w != frameorder.Anthropic || want.Code == "" {
		return want
	}
	code, ok := codec.LookupCode(want.Code)
	if !ok {
		return want
	}
	typ, status := code.AnthropicType()
	want.Code = typ
	if want.Status != http.StatusOK {
		want.Status = status
	}
	return want
}

// every expects want on every wire of the mode.
func every(stream bool, want Expect) map[frameorder.Wire]Expect {
	wires := jsonWires
	if stream {
		wires = streamWires
	}
	m := make(map[frameorder.Wire]Expect, len(wires))
	for _, w := range wires {
		m[w] = onWire(w, want)
	}
	return m
}

// ended expects a stream that opened and then failed with code: an error
// frame or event carrying it, except on /api/v1/chat, which just stops.
func ended(code string) map[frameorder.Wire]Expect {
	m := every(true, Expect{Status: http.StatusOK, Code: code, Failed: true})
	m[frameorder.V1] = Expect{Status: http.StatusOK, Failed: true}
	return m
}

func refused(stream bool, status int, code string) map[frameorder.Wire]Expect {
	return every(stream, Expect{Status: status, Code: code})
}

func served(stream bool) map[frameorder.Wire]Expect {
	return every(stream, Expect{Status: http.StatusOK, Complete: true})
}

// Cases returns every upstream fault the simulator injects, non-streaming
// and streaming, with what the README's fault table says each wire answers:
//
//	5xx, 429 (with or without Retry-After)   retried, then 503 upstream_overloaded
//	connection reset                         retried, then 503 model_unavailable; after the stream opened, an upstream_overloaded ending
//	no answer within the deadline/idle bound 504 upstream_timeout; after the stream opened, an upstream_timeout ending
//	400 context_length_exceeded              400 context_overflow
//	400 content_filter                       400 moderation_rejected
//	a chunk that is not JSON                 an upstream_error ending
//	finish without [DONE]                    completed normally
//
// Two answers the table leaves open follow the gateway's recorded
// transcripts: a non-streaming body cut in half (drop_after) is a reset,
// 503 model_unavailable; a non-streaming body that is not JSON
// (malformed_after) is 503 upstream_overloaded. A stream opens when the
// upstream's response head arrives, so a first token slower than the idle
// bound is an upstream_timeout ending, while a hang (no head at all) is a
// 504 on both modes.
func Cases() []Case {
	slow := "[[sim:tokens=2]] [[sim:ttft_ms=" + strconv.Itoa(int(SlowTTFT/time.Millisecond)) + "]]"
	var cs []Case
	add := func(name, directive string, stream bool, want map[frameorder.Wire]Expect) {
		mode := "/json"
		if stream {
			mode = "/sse"
		}
		cs = append(cs, Case{Name: name + mode, Directive: directive, Stream: stream, Tier: "mira", Want: want})
	}
	for _, stream := range []bool{false, true} {
		add("healthy", "[[sim:tokens=3]]", stream, served(stream))
		add("rate_limited", "[[sim:fault=rate_limited]]", stream, refused(stream, 503, "upstream_overloaded"))
		add("rate_limited_bare", "[[sim:fault=rate_limited_bare]]", stream, refused(stream, 503, "upstream_overloaded"))
		add("fail_first", "[[sim:tokens=3]] [[sim:fail_first=1]]", stream, served(stream))
		add("status_503", "[[sim:status=503]]", stream, refused(stream, 503, "upstream_overloaded"))
		add("status_500", "[[sim:status=500]]", stream, refused(stream, 503, "upstream_overloaded"))
		add("reset", "[[sim:fault=reset]]", stream, refused(stream, 503, "model_unavailable"))
		add("hang", "[[sim:fault=hang]]", stream, refused(stream, 504, "upstream_timeout"))
		add("context_length", "[[sim:fault=context_length]]", stream, refused(stream, 400, "context_overflow"))
		add("content_filter", "[[sim:fault=content_filter]]", stream, refused(stream, 400, "moderation_rejected"))
		if !stream {
			add("slow_first_token", slow, stream, refused(stream, 504, "upstream_timeout"))
			add("drop_after", "[[sim:tokens=6]] [[sim:drop_after=2]]", stream, refused(stream, 503, "model_unavailable"))
			add("stall_after", "[[sim:tokens=6]] [[sim:fault=stall_after=2]]", stream, refused(stream, 504, "upstream_timeout"))
			add("malformed_after", "[[sim:tokens=6]] [[sim:fault=malformed_after=2]]", stream, refused(stream, 503, "upstream_overloaded"))
			continue
		}
		add("slow_first_token", slow, stream, ended("upstream_timeout"))
		add("drop_after", "[[sim:tokens=6]] [[sim:drop_after=2]]", stream, ended("upstream_overloaded"))
		add("stall_after", "[[sim:tokens=6]] [[sim:fault=stall_after=2]]", stream, ended("upstream_timeout"))
		add("malformed_after", "[[sim:tokens=6]] [[sim:fault=malformed_after=2]]", stream, ended("upstream_error"))
		add("no_done", "[[sim:tokens=3]] [[sim:fault=no_done]]", stream, served(stream))
	}
	return cs
}

// maxBody bounds how much of one answer is read.
const maxBody = 16 << 20

// answer is what one request got.
type answer struct {
	err         error // no answer at all
	status      int
	contentType string
	body        []byte
	readErr     error // the body broke off
}

// Run sends every case to the gateway at baseURL (e.g.
// http://127.0.0.1:8080) with key, one wire at a time in the order V1, V2,
// OpenAI, OpenAIUsage, Anthropic, Responses, reads each whole answer and
// scores it: the envelope's
// code (Anthropic's error type on its wire) for a refusal,
// frameorder.CheckStream for a stream, the completion's
// shape for a served non-streaming answer. Cases left when ctx ends are
// scored as not run. Run never panics on an answer.
func Run(ctx context.Context, client *http.Client, baseURL, key string, cases []Case) []Score {
	if client == nil {
		client = http.DefaultClient
	}
	r := runner{ctx: ctx, client: client, base: strings.TrimSuffix(baseURL, "/"), key: key,
		nonce: strconv.FormatInt(time.Now().UnixNano(), 36), heal: map[string]bool{}}
	var scores []Score
	for _, c := range cases {
		for _, w := range wireOrder {
			want, ok := c.Want[w]
			if !ok {
				continue
			}
			scores = append(scores, r.score(c, w, want))
		}
	}
	return scores
}

type runner struct {
	ctx     context.Context
	client  *http.Client
	base    string
	key     string
	nonce   string          // makes every run's bodies new to the simulator's fail_first count
	heal    map[string]bool // tiers whose breaker may have counted failures
	checker frameorder.Checker
}

func (r *runner) score(c Case, w frameorder.Wire, want Expect) (s Score) {
	s = Score{Case: c, Wire: w, Want: want.String()}
	defer func() {
		if p := recover(); p != nil {
			s.Pass, s.Got = false, fmt.Sprintf("panic: %v", p)
		}
	}()
	if err := r.ctx.Err(); err != nil {
		s.Got = "not run: " + err.Error()
		return s
	}
	tier := c.Tier
	if tier == "" {
		tier = "mira"
	}
	if r.heal[tier] {
		r.healTier(tier)
		r.heal[tier] = false
	}
	a := r.send(c, w, tier)
	if a.err != nil || a.status >= 500 {
		r.heal[tier] = true
	}
	s.Pass, s.Got = r.judge(c, w, want, &a)
	return s
}

// send makes the case's request on wire w and reads the whole answer.
func (r *runner) send(c Case, w frameorder.Wire, tier string) answer {
	ctx := r.ctx
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	text := "Scorecard " + c.Name + " on " + w.String() + " (" + r.nonce + ") " + c.Directive
	body, err := wireBody(w, tier, text, c.Stream)
	if err != nil {
		return answer{err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+w.Path(), strings.NewReader(string(body)))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+r.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", requestID(c.Name, w, r.nonce))
	resp, err := r.client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	a.body, a.readErr = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	return a
}

// healTier sends healthy requests to tier until one is served (at most for
// a breaker's default cooldown and a half): a success in the breaker's
// window, or the probe that closes it.
func (r *runner) healTier(tier string) {
	body, _ := chatBody(tier, "Scorecard heal ("+r.nonce+") [[sim:tokens=1]]", false, false)
	deadline := time.Now().Add(15 * time.Second)
	for r.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+frameorder.OpenAI.Path(), strings.NewReader(string(body)))
		if err != nil {
			cancel()
			return
		}
		req.Header.Set("Authorization", "Bearer "+r.key)
		req.Header.Set("Content-Type", "application/json")
		status := 0
		if resp, err := r.client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
			_ = resp.Body.Close()
			status = resp.StatusCode
		}
		cancel()
		if status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return
		}
		select { // the breaker is open: wait for its cooldown to end
		case <-r.ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// judge compares the answer with want and says what happened.
func (r *runner) judge(c Case, w frameorder.Wire, want Expect, a *answer) (bool, string) {
	if a.err != nil {
		return false, "no answer: " + short(a.err)
	}
	if a.status < 200 || a.status > 299 {
		code, ok := envelopeCode(w, a.body)
		got := strconv.Itoa(a.status) + " " + code
		if !ok {
			got = strconv.Itoa(a.status) + " (no " + envelopeName(w) + " envelope)"
		}
		if a.readErr != nil {
			got += "; read error: " + short(a.readErr)
		}
		return ok && a.readErr == nil && a.status == want.Status && code == want.Code, got
	}
	got := Expect{Status: a.status}
	var notes []string
	if c.Stream {
		if !strings.HasPrefix(a.contentType, "text/event-stream") {
			notes = append(notes, "content-type "+strconv.Quote(a.contentType)+", not a stream")
		} else {
			out := r.checker.Check(w, a.body)
			got.Complete, got.Failed, got.Code = out.Complete, out.Failed, out.ErrorCode
			if out.Violation != "" {
				notes = append(notes, "violation: "+out.Violation)
			}
		}
	} else {
		if completion(w, a.body) {
			got.Complete = true
		} else {
			notes = append(notes, "no completion in the body")
		}
	}
	if a.readErr != nil {
		notes = append(notes, "read error: "+short(a.readErr))
	}
	s := got.String()
	if len(notes) > 0 {
		s += "; " + strings.Join(notes, "; ")
	}
	return len(notes) == 0 && got == want, s
}

// envelopeName names the error envelope of w's route.
func envelopeName(w frameorder.Wire) string {
	switch w {
	case frameorder.V1, frameorder.V2:
		return "/api"
	case frameorder.Anthropic:
		return "Anthropic"
	}
	return "OpenAI"
}

// envelopeCode reads the code of w's error envelope: {"code": …} on the
// /api routes, {"error": {"code": …}} on the OpenAI route.
func envelopeCode(w frameorder.Wire, body []byte) (string, bool) {
	var env struct {
		Code  *string         `json:"code"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &env) != nil {
		return "", false
	}
	if w == frameorder.V1 || w == frameorder.V2 {
		if env.Code == nil || *env.Code == "" {
			return "", false
		}
		return *env.Code, true
	}
	var e struct {
		Code *string `json:"code"`
		Type *string `json:"type"`
	}
	if env.Code != nil || json.Unmarshal(env.Error, &e) != nil {
		return "", false
	}
	if w == frameorder.Anthropic {
		// {"type":"error","error":{"type":…,"message":…}}
		if e.Type == nil || *e.Type == "" {
			return "", false
		}
		return *e.Type, true
	}
	if e.Code == nil || *e.Code == "" {
		return "", false
	}
	return *e.Code, true
}

// completion reports whether body is a served non-streaming answer of w:
// a message and a finish_reason, top-level on the /api routes, in
// choices[0] on the OpenAI route.
func completion(w frameorder.Wire, body []byte) bool {
	switch w {
	case frameorder.Anthropic:
		var m struct {
			Type       string            `json:"type"`
			Content    []json.RawMessage `json:"content"`
			StopReason string            `json:"stop_reason"`
		}
		return json.Unmarshal(body, &m) == nil && m.Type == "message" && m.Content != nil && m.StopReason != ""
	case frameorder.Responses:
		var r struct {
			Object string            `json:"object"`
			Status string            `json:"status"`
			Output []json.RawMessage `json:"output"`
		}
		return json.Unmarshal(body, &r) == nil && r.Object == "response" && len(r.Output) > 0 &&
			(r.Status == "completed" || r.Status == "incomplete")
	}
	type answer struct {
		Message      map[string]json.RawMessage `json:"message"`
		FinishReason string                     `json:"finish_reason"`
	}
	var c struct {
		answer
		Choices []answer `json:"choices"`
	}
	if json.Unmarshal(body, &c) != nil {
		return false
	}
	a := c.answer
	if w == frameorder.OpenAI || w == frameorder.OpenAIUsage {
		if len(c.Choices) == 0 || c.Message != nil {
			return false
		}
		a = c.Choices[0]
	}
	return a.Message != nil && a.FinishReason != ""
}

// wireBody is the request on wire w: one user message on tier.
func wireBody(w frameorder.Wire, tier, text string, stream bool) ([]byte, error) {
	switch w {
	case frameorder.Anthropic:
		type message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		return json.Marshal(struct {
			Model     string    `json:"model"`
			MaxTokens int       `json:"max_tokens"`
			Stream    bool      `json:"stream"`
			Messages  []message `json:"messages"`
		}{Model: tier, MaxTokens: 1024, Stream: stream, Messages: []message{{Role: "user", Content: text}}})
	case frameorder.Responses:
		return json.Marshal(struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
			Input  string `json:"input"`
		}{Model: tier, Stream: stream, Input: text})
	}
	return chatBody(tier, text, stream, w == frameorder.OpenAIUsage)
}

// chatBody is the request: one user message on tier.
func chatBody(tier, text string, stream, includeUsage bool) ([]byte, error) {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type options struct {
		IncludeUsage bool `json:"include_usage"`
	}
	b := struct {
		Model         string    `json:"model"`
		Stream        bool      `json:"stream"`
		StreamOptions *options  `json:"stream_options,omitempty"`
		Messages      []message `json:"messages"`
	}{Model: tier, Stream: stream, Messages: []message{{Role: "user", Content: text}}}
	if includeUsage {
		b.StreamOptions = &options{IncludeUsage: true}
	}
	return json.Marshal(b)
}

// requestID names a request for the gateway's logs: faults-<case>-<wire>-<nonce>,
// cut to the 128 characters of [A-Za-z0-9_-] a request id may hold.
func requestID(name string, w frameorder.Wire, nonce string) string {
	raw := "faults-" + name + "-" + w.String() + "-" + nonce
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw) && len(b) < 128; i++ {
		c := raw[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b = append(b, c)
		default:
			b = append(b, '_')
		}
	}
	return string(b)
}

// short cuts an error's text for a table cell, without the request's URL.
func short(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	s := err.Error()
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// WriteTable writes the scores as an aligned table (case, wire, want, got,
// PASS or FAIL), then a line "N passed, M failed", and returns the counts.
func WriteTable(w io.Writer, scores []Score) (pass, fail int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tWIRE\tWANT\tGOT\tRESULT")
	for _, s := range scores {
		verdict := "FAIL"
		if s.Pass {
			verdict = "PASS"
			pass++
		} else {
			fail++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Case.Name, s.Wire, s.Want, s.Got, verdict)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d passed, %d failed\n", pass, fail)
	return pass, fail
}
