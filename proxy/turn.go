package proxy

import (
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

var errTurnStream = codec.NewError(codec.CodeInvalidRequest, "stream: a turn run inside the gateway cannot stream.")

// Complete runs one non-streaming chat turn for p through the chat
// pipeline — validation, routing, the context check, admission (request
// window, concurrency slot, budgets, spend caps, credits), the upstream call
// with its retries and breaker, the structured-output check and billing —
// exactly as POST /api/v1/chat would for that key, and records the turn's
// ledger row under route with requestID. body is a chat request without
// stream. The caller has checked that the key may be used
// (Principal.Refusal); Complete blocks until the turn ends, which the
// tier's non-streaming deadline bounds.
//
// It is how work the gateway does on a key's behalf (eval runs) reaches a
// model: never a second pipeline, never an HTTP call to itself.
func (ch *Chat) Complete(p *hotpath.Principal, body []byte, requestID, route string) hotpath.TurnResult {
	var res hotpath.TurnResult
	ctx := new(fasthttp.RequestCtx)
	ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	ctx.Request.SetBody(body)
	c := hotpath.AcquireCall()
	defer hotpath.ReleaseCall(c)
	// The gateway's own work speaks the current contract, pinned: what it
	// runs was checked under its writer's pin when it was stored (Check).
	c.Start, c.User, c.Version, c.Pinned = time.Now(), p, codec.CurrentVersion, true
	c.SetID([]byte(requestID))
	c.SetTrace(nil) // a trace of its own, as a request without traceparent gets
	err := ch.serveTurn(ctx, c, chatV1, &res)
	status := fasthttp.StatusOK
	if err != nil {
		var cerr *codec.Error
		if !errors.As(err, &cerr) {
			ch.cfg.Log.Error("in-process chat turn failed", "request_id", requestID, "err", err)
			cerr = codec.ErrInternal
		}
		res.Err, status = cerr, cerr.Code.Status()
	}
	u := &c.Usage
	res.Tier, res.Billed = u.Tier, u.Billed
	res.InputTokens, res.OutputTokens, res.CostPico = u.InputTokens, u.OutputTokens, u.CostPico
	res.Latency = time.Since(c.Start)
	if ch.cfg.Usage != nil {
		fillUsage(u, c, route)
		u.Status, u.DurationUS = status, res.Latency.Microseconds()
		if res.Err != nil {
			u.ErrorCode = res.Err.Code.String()
		}
		ch.cfg.Usage.Record(u)
	}
	return res
}

// Check validates a chat request body as the chat routes do (decoding,
// messages, tools, tool_choice, response_format, attachments), for key p
// and a request under version (pinned: the client sent that pin), and
// calls nothing. Stored requests (eval cases) are checked with it when
// they are written, so a refusal names the field then, not at run time.
func (ch *Chat) Check(p *hotpath.Principal, body []byte, version codec.Version, pinned bool) *codec.Error {
	var req codec.ChatRequest
	if cerr := decodeChatBody(body, &req); cerr != nil {
		return cerr
	}
	_, cerr := validateChat(&req, chatV1, ch.tiers, p, version, pinned)
	return cerr
}

// Models lists the model ids a chat request may name: every tier, then
// auto.
func (ch *Chat) Models() []string {
	out := make([]string, 0, len(ch.tiers)+1)
	for i := range ch.tiers {
		out = append(out, ch.tiers[i].Name)
	}
	return append(out, "auto")
}

// Schema is a JSON schema checked and compiled as a response_format
// json_schema is — the same bounds, keywords and validator — for checking
// stored expectations (eval assertions) against a reply.
type Schema struct{ s *compiledSchema }

// CompileSchema compiles raw; a refusal is 400 invalid_schema saying why.
func CompileSchema(raw []byte) (*Schema, *codec.Error) {
	s, cerr := compileSchema(raw)
	if cerr != nil {
		return nil, cerr
	}
	return &Schema{s: s}, nil
}

// Check reports whether output is JSON that satisfies the schema; a
// refusal is 422 structured_output_unsatisfied naming where it fails,
// without quoting the output.
func (s *Schema) Check(output []byte) *codec.Error { return s.s.Check(output) }
