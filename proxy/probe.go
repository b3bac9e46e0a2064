package proxy

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
)

// DefaultProbePrompt is the text of a status probe: a chat tier's or the
// guard's one message, the embeddings tier's one input, the rerank tier's
// query.
const DefaultProbePrompt = "ping"

// ProbeDocument is the one document a rerank probe scores.
const ProbeDocument = "pong"

// ProbeFailure classes a failed probe: Class is short and fixed
// (timeout, connect, status_503, malformed), never an upstream's body.
type ProbeFailure struct{ Class string }

func (e *ProbeFailure) Error() string { return "probe failed: " + e.Class }

// ProbeClass is the class the status document stores.
func (e *ProbeFailure) ProbeClass() string { return e.Class }

type probeMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type probeRequest struct {
	Model     string         `json:"model"`
	Messages  []probeMessage `json:"messages"`
	MaxTokens int            `json:"max_tokens"`
	Stream    bool           `json:"stream"`
}

// Probe sends the tier's upstream the smallest chat request there is (one
// message, one output token, not streamed) for the status document. It
// goes around the breaker, admission and the ledger: a probe measures the
// upstream and is not a customer's request. It succeeds when the upstream
// answers 200 with a JSON completion before ctx ends.
func (u *Upstream) Probe(ctx context.Context, prompt string) error {
	body, err := sonic.Marshal(probeRequest{Model: u.cfg.Model, Messages: []probeMessage{{Role: "user", Content: prompt}}, MaxTokens: 1})
	if err != nil {
		return err
	}
	return u.probe(ctx, body, func(b []byte) bool {
		_, err := sonic.Get(b, "choices", 0)
		return err == nil
	})
}

// ProbeEmbeddings sends the embeddings tier's upstream one input, as the
// embeddings route does, for the status document. It succeeds when the
// upstream answers 200 with exactly one vector (of numbers) for it.
func (u *Upstream) ProbeEmbeddings(ctx context.Context, input string) error {
	body := appendEmbedRequest(nil, u.cfg.Model, []string{input}, "", 0)
	return u.probe(ctx, body, func(b []byte) bool {
		var e codec.Embeddings
		return codec.ParseEmbeddings(b, 1, false, &e)
	})
}

// ProbeRerank sends the rerank tier's upstream a query and one document in
// the tier's wire (RerankCohere or RerankTEI; empty is cohere), as the
// rerank route does, for the status document. It succeeds when the
// upstream answers 200 with exactly one scored result.
func (u *Upstream) ProbeRerank(ctx context.Context, shape, query, document string) error {
	tei := shape == RerankTEI
	body := appendRerankRequest(nil, tei, u.cfg.Model, query, []string{document})
	return u.probe(ctx, body, func(b []byte) bool {
		_, _, ok := codec.ParseRerank(b, 1, tei, nil)
		return ok
	})
}

// ProbeGuard asks the guard tier's upstream about input, as the
// moderation route does, for the status document. It succeeds when the
// upstream answers 200 with a verdict the route would read (safe or
// unsafe alike).
func (u *Upstream) ProbeGuard(ctx context.Context, input string) error {
	body := appendGuardRequest(nil, u.cfg.Model, u.Tier.MaxOutput, input)
	return u.probe(ctx, body, func(b []byte) bool {
		var c codec.Completion
		_, _, ok := readGuard(b, &c)
		return ok
	})
}

// probe makes one call of body on the connections non-streaming requests
// use, with none of a route's retries, breaker or metering, and classes
// its failure; answered reports whether a 200 body is the answer the
// probe asked for (else the failure is malformed).
func (u *Upstream) probe(ctx context.Context, body []byte, answered func([]byte) bool) error {
	req, resp := u.newRequest(body), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	// A probe always runs under a deadline (its component's timeout).
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	_, err := doFresh(u.plain, req, resp, deadline)
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return &ProbeFailure{Class: "timeout"}
	case err != nil:
		return &ProbeFailure{Class: "connect"}
	case resp.StatusCode() != fasthttp.StatusOK:
		return &ProbeFailure{Class: "status_" + strconv.Itoa(resp.StatusCode())}
	case !answered(resp.Body()):
		return &ProbeFailure{Class: "malformed"}
	}
	return nil
}
