package proxy

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"
)

// DefaultProbePrompt is the text of a status probe's one message.
const DefaultProbePrompt = "ping"

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
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(u.url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if u.auth != "" {
		req.Header.Set("Authorization", u.auth)
	}
	req.SetBody(body)
	// A probe always runs under a deadline (its component's timeout).
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	err = u.plain.DoDeadline(req, resp, deadline)
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return &ProbeFailure{Class: "timeout"}
	case err != nil:
		return &ProbeFailure{Class: "connect"}
	case resp.StatusCode() != fasthttp.StatusOK:
		return &ProbeFailure{Class: "status_" + strconv.Itoa(resp.StatusCode())}
	}
	if _, err := sonic.Get(resp.Body(), "choices", 0); err != nil {
		return &ProbeFailure{Class: "malformed"}
	}
	return nil
}
