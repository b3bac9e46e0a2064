package hotpath

import "time"

// UsageRecord is one row of the request log and usage ledger: what a request
// cost and how it went. It never holds prompt or reply text, and never the
// key itself, only its id.
type UsageRecord struct {
	RequestID   string
	At          time.Time // when the request arrived
	KeyID       string
	UserID      string
	OrgID       string
	WorkspaceID string // empty when the key belongs to no workspace
	Bucket      string // subscription, apikey or headless
	Route       string // the route's name, such as "chat_v1"
	Tier        string // the serving tier; empty when none was chosen
	Status      int
	ErrorCode   string // empty on success
	// Token counts and what they cost. Estimated marks counts the gateway
	// made itself because the upstream reported none.
	InputTokens    int64
	OutputTokens   int64
	WeightedTokens int64
	CostPico       int64
	Estimated      bool
	// Billed reports whether the request counts against the caller's
	// budgets (a 429, a 504 or a failure before the upstream is not).
	Billed     bool
	Stream     bool
	DurationUS int64 // arrival to when the row is recorded: before the answer's last write
	TTFTUS     int64 // arrival to the first content token; 0 when none
	// TraceID and SpanID name the request's exported span when tracing
	// sampled it, so the ledger write's span links to it; zero otherwise.
	// They are not stored in the row.
	TraceID [16]byte
	SpanID  [8]byte
}

// UsageSink takes ledger rows off the hot path. Record never blocks on
// storage: an implementation buffers, batches and spools to disk while its
// database is unreachable, and drops a row only when that room is used up
// (see UsageSaturation).
type UsageSink interface {
	Record(r *UsageRecord)
}

// UsageSaturation is implemented by a UsageSink whose room is bounded.
// Saturated reports that a row recorded now would be lost, so that
// admission refuses billable work instead of serving it unbilled. It is
// read before every billable request and must cost about an atomic load.
type UsageSaturation interface {
	Saturated() bool
}
