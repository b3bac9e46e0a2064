package control

import (
	"encoding/json"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// registerLogs adds the request-log route.
func (a *API) registerLogs(r Registrar) {
	r.Handle(fasthttp.MethodGet, "/api/v1/logs/{request_id}",
		hotpath.Access{Name: "logs_get", Auth: hotpath.AuthUser, Family: hotpath.FamilyLogs}, a.getLog)
}

var errRequestNotFound = codec.NewError(codec.CodeRequestNotFound, "No such request.")

// requestLog is the body of GET /api/v1/logs/{request_id} (docs/ledger.md).
type requestLog struct {
	Object      string         `json:"object"`
	RequestID   string         `json:"request_id"`
	CreatedAt   string         `json:"created_at"`
	KeyID       *string        `json:"key_id"`
	WorkspaceID *string        `json:"workspace_id"`
	Route       string         `json:"route"`
	Model       *string        `json:"model"`
	Bucket      *string        `json:"bucket"`
	Status      int            `json:"status"`
	ErrorCode   *string        `json:"error_code"`
	Stream      bool           `json:"stream"`
	Billed      bool           `json:"billed"`
	Usage       requestUsage   `json:"usage"`
	Cost        requestCost    `json:"cost"`
	Timing      requestTimings `json:"timing"`
	// Feedback lists the feedback types the caller recorded on the
	// request (POST /api/v1/feedback), in name order; never null.
	Feedback []string `json:"feedback"`
}

type requestUsage struct {
	InputTokens    int64 `json:"input_tokens"`
	OutputTokens   int64 `json:"output_tokens"`
	WeightedTokens int64 `json:"weighted_tokens"`
	Estimated      bool  `json:"estimated"`
}

type requestCost struct {
	Amount   json.Number `json:"amount"`
	Currency string      `json:"currency"`
}

type requestTimings struct {
	DurationMs json.Number  `json:"duration_ms"`
	TTFTMs     *json.Number `json:"ttft_ms"`
}

// getLog reads one request of the caller's own: a request made with any key
// of the caller's user in the caller's organization. Another user's, another
// organization's, an unknown and a malformed request id are the same 404,
// and so is a request whose row the ledger has not written yet.
func (a *API) getLog(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	id, _ := ctx.UserValue("request_id").(string)
	if !codec.ValidRequestID([]byte(id)) {
		return errRequestNotFound
	}
	qctx, cancel := queryContext()
	defer cancel()
	r, err := a.DB.RequestLog(qctx, id, c.User.UserID, c.User.OrgID)
	if err != nil {
		return storageError(err, errRequestNotFound)
	}
	out := requestLog{
		Object:      "request_log",
		RequestID:   r.RequestID,
		CreatedAt:   r.CreatedAt.UTC().Format(time.RFC3339),
		KeyID:       optString(r.KeyID),
		WorkspaceID: optString(r.WorkspaceID),
		Route:       r.Route,
		Model:       optString(r.Tier),
		Bucket:      optString(r.Bucket),
		Status:      r.Status,
		ErrorCode:   optString(r.ErrorCode),
		Stream:      r.Stream,
		Billed:      r.Billed,
		Usage: requestUsage{InputTokens: r.InputTokens, OutputTokens: r.OutputTokens,
			WeightedTokens: r.WeightedTokens, Estimated: r.Estimated},
		Cost:   requestCost{Amount: json.Number(codec.AppendDecimal(nil, r.CostPico, 12)), Currency: "USD"},
		Timing: requestTimings{DurationMs: millis(r.DurationUS)},
	}
	if out.Feedback, err = a.DB.FeedbackTypes(qctx, c.User.OrgID, c.User.UserID, r.RequestID); err != nil {
		return storageError(err, errRequestNotFound)
	}
	if r.TTFTUS > 0 {
		t := millis(r.TTFTUS)
		out.Timing.TTFTMs = &t
	}
	return writeJSON(ctx, fasthttp.StatusOK, out)
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// millis shows microseconds as exact decimal milliseconds.
func millis(us int64) json.Number { return json.Number(codec.AppendDecimal(nil, us, 3)) }
