package hotpath

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/edgegw/gateway/codec"
)

// Effort is a reasoning effort.
type Effort string

// The four reasoning efforts a request may ask for.
const (
	EffortNone   Effort = "none"
	EffortLow    Effort = "low"
	EffortMedium Effort = "medium"
	EffortHigh   Effort = "high"
)

// ParseEffort accepts exactly the four efforts; `minimal` and anything else
// are refused.
func ParseEffort(s string) (Effort, bool) {
	switch e := Effort(s); e {
	case EffortNone, EffortLow, EffortMedium, EffortHigh:
		return e, true
	}
	return "", false
}

// Prices are a tier's prices in micro-USD per one million tokens: integers,
// so that arithmetic on money is exact. What a request costs at them is
// worked out in one place, meter.Cost.
type Prices struct {
	InputPerM     int64
	OutputPerM    int64
	CacheReadPerM int64
}

// Tier is one public model tier as the catalogue shows it and as accounting
// prices it. The upstream behind it belongs to the proxy's configuration and
// never appears here.
type Tier struct {
	Name            string
	Label           string
	Profile         string
	Created         int64
	OwnedBy         string
	ContextWindow   int
	MaxOutput       int
	LatencyTargetMs int
	DefaultEffort   Effort
	Graded          bool // whether effort changes behaviour (a reasoning tier)
	SupportsTools   bool
	SupportsVision  bool
	// SupportsStructured tells whether the upstream does constrained
	// decoding (response_format json_object and json_schema).
	SupportsStructured bool
	// Deadline bounds a non-streaming attempt.
	Deadline time.Duration
	Prices   Prices
	// PoolWeight is how many weighted tokens one token served on the tier
	// draws from a subscription's token pools.
	PoolWeight int64
	// RequestCapped tiers draw nothing from the token pools: each request
	// counts once against the plan's monthly request allowance instead
	// (hotpath/meter reads both fields; nothing else decides it by name).
	RequestCapped bool
}

// Validate reports the first field that is out of range, naming it.
func (t *Tier) Validate() error {
	switch {
	case t.Name == "":
		return errors.New("name: must be set")
	case t.Name == "auto":
		return errors.New("name: auto is the router, not a tier")
	case t.ContextWindow <= 0:
		return errors.New("context_window: must be positive")
	case t.MaxOutput <= 0 || t.MaxOutput > t.ContextWindow:
		return errors.New("max_output: must be positive and at most context_window")
	case t.LatencyTargetMs < 0:
		return errors.New("latency_target_ms: must not be negative")
	case t.Deadline <= 0:
		return errors.New("deadline: must be positive")
	case t.Prices.InputPerM < 0 || t.Prices.OutputPerM < 0 || t.Prices.CacheReadPerM < 0:
		return errors.New("prices: must not be negative")
	case t.PoolWeight < 0:
		return errors.New("pool_weight: must not be negative")
	}
	if _, ok := ParseEffort(string(t.DefaultEffort)); !ok {
		return fmt.Errorf("reasoning.default_effort: %q is not one of none, low, medium, high", t.DefaultEffort)
	}
	return nil
}

// DefaultTiers returns the advertised catalogue: the spec's sizes, caps,
// deadlines and indicative prices, and how each meters: one weighted token
// per token on mira, two on vaani, four on kavi, and mira's requests
// counted against the plan's monthly mira allowance instead of the pools.
func DefaultTiers() []Tier {
	const created = 1767225600 // 2026-01-01T00:00:00Z
	return []Tier{
		{
			Name: "kavi", Label: "Kavi", Profile: "deepest reasoning, largest output budget",
			Created: created, OwnedBy: "gateway", ContextWindow: 262144, MaxOutput: 8192,
			LatencyTargetMs: 2500, DefaultEffort: EffortHigh, Graded: true,
			SupportsTools: true, SupportsVision: true, SupportsStructured: true, Deadline: 90 * time.Second,
			Prices: Prices{InputPerM: 760_000, OutputPerM: 1_520_000, CacheReadPerM: 190_000}, PoolWeight: 4,
		},
		{
			Name: "vaani", Label: "Vaani", Profile: "balanced",
			Created: created, OwnedBy: "gateway", ContextWindow: 131072, MaxOutput: 4096,
			LatencyTargetMs: 1200, DefaultEffort: EffortLow, Graded: true,
			SupportsTools: true, SupportsVision: true, SupportsStructured: true, Deadline: 90 * time.Second,
			Prices: Prices{InputPerM: 650_000, OutputPerM: 1_300_000, CacheReadPerM: 162_500}, PoolWeight: 2,
		},
		{
			Name: "mira", Label: "Mira", Profile: "fastest",
			Created: created, OwnedBy: "gateway", ContextWindow: 65536, MaxOutput: 2048,
			LatencyTargetMs: 400, DefaultEffort: EffortNone, Graded: false,
			SupportsTools: true, SupportsVision: false, SupportsStructured: true, Deadline: 45 * time.Second,
			Prices: Prices{InputPerM: 200_000, OutputPerM: 400_000, CacheReadPerM: 50_000}, PoolWeight: 1, RequestCapped: true,
		},
	}
}

// ParseMicroUSD parses a decimal amount of US dollars such as "0.76" into
// micro-USD, exactly: at most six decimal places, no exponent, no sign.
func ParseMicroUSD(s string) (int64, error) {
	whole, frac := s, ""
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			whole, frac = s[:i], s[i+1:]
			break
		}
	}
	if whole == "" && frac == "" || len(frac) > 6 || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("%q is not a dollar amount with at most six decimals", s)
	}
	var w, f int64
	var err error
	if whole != "" {
		if w, err = strconv.ParseInt(whole, 10, 64); err != nil || w > 1<<43 {
			return 0, fmt.Errorf("%q is too large", s)
		}
	}
	for i := 0; i < 6; i++ {
		f *= 10
		if i < len(frac) {
			f += int64(frac[i] - '0')
		}
	}
	return w*1_000_000 + f, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// AppendMicroUSD appends micro-USD as a plain decimal number of dollars with
// no trailing zeros ("0.76", "12", "0.000001"); it allocates nothing.
func AppendMicroUSD(dst []byte, micros int64) []byte {
	return codec.AppendDecimal(dst, micros, 6)
}

// IsTierName reports whether s names one of the three public tiers.
func IsTierName(s string) bool { return s == "kavi" || s == "vaani" || s == "mira" }

// The auxiliary tiers: each serves one specialised route and is named by
// that route's model field.
const (
	TierEmbed  = "gw-embed"
	TierRerank = "gw-rerank"
	TierGuard  = "gw-guard"
)

// DefaultAuxTiers returns the auxiliary tiers with their prices (micro-USD
// per million tokens; README, "Specialised routes"): embeddings 0.02 input,
// rerank 0.05 input, the guard 0.20 input and output. ContextWindow bounds
// one input; MaxOutput is what one call may generate (the guard's verdict).
// Embeddings and rerank draw one weighted token per token from a
// subscription's pools; the guard draws nothing (moderation is exempt).
func DefaultAuxTiers() []Tier {
	const created = 1767225600
	return []Tier{
		{Name: TierEmbed, Label: "Embeddings", Profile: "text embeddings", Created: created, OwnedBy: "gateway",
			ContextWindow: 8192, MaxOutput: 1, DefaultEffort: EffortNone, Deadline: 30 * time.Second,
			Prices: Prices{InputPerM: 20_000}, PoolWeight: 1},
		{Name: TierRerank, Label: "Rerank", Profile: "relevance ranking", Created: created, OwnedBy: "gateway",
			ContextWindow: 8192, MaxOutput: 1, DefaultEffort: EffortNone, Deadline: 30 * time.Second,
			Prices: Prices{InputPerM: 50_000}, PoolWeight: 1},
		{Name: TierGuard, Label: "Guard", Profile: "content moderation", Created: created, OwnedBy: "gateway",
			ContextWindow: 8192, MaxOutput: 64, DefaultEffort: EffortNone, Deadline: 30 * time.Second,
			Prices: Prices{InputPerM: 200_000, OutputPerM: 200_000}},
	}
}
