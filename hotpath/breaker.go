package hotpath

import (
	"errors"
	"sync/atomic"
	"time"
)

// BreakerState is where a Breaker stands, for metrics and /api/status.
type BreakerState uint8

// The three states of a Breaker.
const (
	// BreakerClosed lets every request through.
	BreakerClosed BreakerState = iota
	// BreakerOpen refuses every request while the tier cools down.
	BreakerOpen
	// BreakerHalfOpen lets one probe through at a time; its outcome closes
	// or re-opens the breaker.
	BreakerHalfOpen
)

// String returns closed, open or half_open.
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return "unknown"
}

// BreakerConfig configures a Breaker.
type BreakerConfig struct {
	// Failures is how many consecutive failures open the breaker. Default 5.
	Failures int
	// Cooldown is how long an open breaker refuses everything before it
	// lets a probe through. Default 10s.
	Cooldown time.Duration
	// ProbeTimeout is how long a half-open breaker waits for its probe to
	// report before it lets another one through, so that a probe whose
	// outcome never arrives (the client left, the caller forgot) cannot
	// hold the tier closed for good. Default: Cooldown.
	ProbeTimeout time.Duration
}

// Validate checks the configuration and fills in defaults.
func (c *BreakerConfig) Validate() error {
	if c.Failures < 0 || c.Cooldown < 0 || c.ProbeTimeout < 0 {
		return errors.New("breaker failures and durations must not be negative")
	}
	if c.Failures == 0 {
		c.Failures = 5
	}
	if c.Cooldown == 0 {
		c.Cooldown = 10 * time.Second
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = c.Cooldown
	}
	return nil
}

// Breaker is the circuit breaker of one upstream tier (spec: Chat,
// "Timeouts, retries, reasoning", rule 3: an explicit tier that kept failing
// is refused at once with 503 model_unavailable while it cools down; auto
// picks a tier whose breaker allows it).
//
// Closed, it counts consecutive failures; Failures of them in a row open it.
// Open, it refuses everything for Cooldown. Then it is half-open: one
// request at a time goes through as a probe; the probe's success closes the
// breaker, its failure opens it for another Cooldown, and a probe that has
// not reported after ProbeTimeout is given up and the next request probes.
//
// Every request that Allow admitted reports Success or Failure once its
// outcome is known; a request that ends with no verdict on the tier (the
// client left) reports nothing. Outcomes are not matched to the requests
// that produced them: a success from a request admitted before the breaker
// opened closes it too (the tier answered), while a failure arriving while
// it cools down is ignored (it says nothing new).
//
// All methods are safe for concurrent use, take no lock and allocate
// nothing; a closed breaker costs Allow one atomic load.
type Breaker struct {
	// state is 0 while closed. Otherwise it is deadline<<1 | probe: with
	// probe 0, the deadline ends the cooldown (open before it, half-open
	// after it); with probe 1, a probe is out and may be replaced after the
	// deadline. Deadlines are clock readings. One word, so that every
	// transition is a single compare-and-swap.
	state    atomic.Int64
	failures atomic.Int64 // consecutive, while closed

	threshold    int64
	cooldown     int64
	probeTimeout int64
	now          func() time.Time
	base         time.Time
}

// NewBreaker returns a closed breaker. Fields of cfg that are not positive
// take their defaults; now nil means time.Now.
func NewBreaker(cfg BreakerConfig, now func() time.Time) *Breaker {
	cfg.Failures = max(cfg.Failures, 0)
	cfg.Cooldown = max(cfg.Cooldown, 0)
	cfg.ProbeTimeout = max(cfg.ProbeTimeout, 0)
	_ = cfg.Validate() // cannot fail: nothing is negative
	if now == nil {
		now = time.Now
	}
	return &Breaker{
		threshold:    int64(cfg.Failures),
		cooldown:     int64(cfg.Cooldown),
		probeTimeout: int64(cfg.ProbeTimeout),
		now:          now,
		base:         now(),
	}
}

// clock reads nanoseconds since the breaker was made, plus one so that a
// deadline is never 0; with time.Now that is monotonic, whatever the wall
// clock does.
func (b *Breaker) clock() int64 { return max(int64(b.now().Sub(b.base)), 0) + 1 }

// opened is the state of a breaker that opens at now.
func (b *Breaker) opened(now int64) int64 { return (now + b.cooldown) << 1 }

// Allow reports whether a request may go to the tier now.
func (b *Breaker) Allow() bool {
	s := b.state.Load()
	if s == 0 {
		return true
	}
	now := b.clock()
	if now < s>>1 {
		return false // cooling down, or a probe is out
	}
	// Half-open, or the probe out never reported: the next probe goes to
	// whoever takes the slot first.
	return b.state.CompareAndSwap(s, (now+b.probeTimeout)<<1|1)
}

// Success records a request the tier served. It closes the breaker.
func (b *Breaker) Success() {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.state.Load() != 0 {
		b.state.Store(0)
	}
}

// Failure records a request the tier failed. The Failures-th in a row opens
// the breaker; a failure while half-open (the probe's) opens it for another
// Cooldown; one while it cools down changes nothing.
func (b *Breaker) Failure() {
	s := b.state.Load()
	if s == 0 {
		if b.failures.Add(1) >= b.threshold && b.state.CompareAndSwap(0, b.opened(b.clock())) {
			b.failures.Store(0)
		}
		return
	}
	now := b.clock()
	if s&1 == 0 && now < s>>1 {
		return
	}
	b.state.CompareAndSwap(s, b.opened(now))
}

// State returns the breaker's state now.
func (b *Breaker) State() BreakerState {
	s := b.state.Load()
	switch {
	case s == 0:
		return BreakerClosed
	case s&1 == 0 && b.clock() < s>>1:
		return BreakerOpen
	}
	return BreakerHalfOpen
}
