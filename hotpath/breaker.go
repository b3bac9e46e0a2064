package hotpath

import (
	"errors"
	"math/rand/v2"
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

// BreakerConfig configures a Breaker. The zero value takes every default.
type BreakerConfig struct {
	// Window is the span over which the tier's failure rate is measured,
	// kept as ten buckets of a tenth each. Default 10s.
	Window time.Duration
	// MinRequests is the least number of distinct requests the window must
	// hold before their failure rate can open the breaker, so that a few
	// failures on a quiet tier say nothing about it. Default 5.
	MinRequests int
	// FailurePercent is the share of the window's distinct requests that
	// must have failed to open the breaker. Default 50.
	FailurePercent int
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
	if c.Window < 0 || c.MinRequests < 0 || c.Cooldown < 0 || c.ProbeTimeout < 0 {
		return errors.New("breaker window, requests and durations must not be negative")
	}
	if c.FailurePercent < 0 || c.FailurePercent > 100 {
		return errors.New("breaker failure percent must be within 0 and 100")
	}
	if c.Window == 0 {
		c.Window = 10 * time.Second
	}
	if c.MinRequests == 0 {
		c.MinRequests = 5
	}
	if c.FailurePercent == 0 {
		c.FailurePercent = 50
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
// It measures the tier, not one request, as Envoy's outlier detection does:
// closed, it counts the distinct requests the tier served and failed over a
// sliding Window, and opens when the window holds at least MinRequests of
// them and FailurePercent or more failed. A request counts once whatever
// happened inside it: the caller reports one outcome per request, after its
// own retries. Identical requests count once too: a failure reported with a
// key (a hash of the request body) that already failed within the window
// and the cooldown after it is a client retrying the same request and is
// not counted again, so one
// failing request retried by a client's default policy cannot open the
// breaker for everyone.
//
// Open, it refuses everything for Cooldown. Then it is half-open: one
// request at a time goes through as a probe; the probe's success closes the
// breaker, its failure opens it for another Cooldown (unless it repeats a
// request that already failed, which gives the probe slot back), and a
// probe that has not reported after ProbeTimeout is given up and the next
// request probes.
//
// Every request that Allow admitted reports Success or Failure once its
// outcome is known; a request that ends with no verdict on the tier (the
// client left) reports nothing. Outcomes are not matched to the requests
// that produced them: a success from a request admitted before the breaker
// opened closes it too (the tier answered), while a failure arriving while
// it cools down is ignored (it says nothing new).
//
// All methods are safe for concurrent use, take no lock and allocate
// nothing; a closed breaker costs Allow one atomic load, and Success a
// clock reading and one compare-and-swap.
type Breaker struct {
	// state is 0 while closed. Otherwise it is deadline<<1 | probe: with
	// probe 0, the deadline ends the cooldown (open before it, half-open
	// after it); with probe 1, a probe is out and may be replaced after the
	// deadline. Deadlines are clock readings. One word, so that every
	// transition is a single compare-and-swap.
	state atomic.Int64
	// buckets are the window's tenths, each spread over stripes a request
	// picks at random so that concurrent requests rarely share a cache
	// line. A stripe is one word: the low bits of the bucket's number, its
	// requests and its failures.
	buckets [windowBuckets][stripes]stripe
	// seen remembers the keys of failed requests, each slot a key's high
	// bits and the bucket number it last failed in.
	seen [seenSlots]atomic.Uint64

	minRequests  uint64
	percent      uint64
	seenSpan     uint64 // buckets a failed key is remembered
	bucketLen    int64
	cooldown     int64
	probeTimeout int64
	now          func() time.Time
	base         time.Time
}

// stripe is one counter word alone on its cache line.
type stripe struct {
	w atomic.Uint64
	_ [56]byte
}

const (
	windowBuckets = 10
	stripes       = 8
	seenSlots     = 256
	// A bucket word holds the bucket's number modulo 2^20 and two 22-bit
	// counts.
	epochBits = 20
	countBits = 22
	countMask = 1<<countBits - 1
	epochMask = 1<<epochBits - 1
	// A seen slot holds a key's top 40 bits and a 24-bit bucket number.
	seenEpochBits = 24
	seenEpochMask = 1<<seenEpochBits - 1
)

// NewBreaker returns a closed breaker. Fields of cfg that are not positive
// take their defaults; now nil means time.Now.
func NewBreaker(cfg BreakerConfig, now func() time.Time) *Breaker {
	cfg.Window = max(cfg.Window, 0)
	cfg.MinRequests = max(cfg.MinRequests, 0)
	cfg.FailurePercent = min(max(cfg.FailurePercent, 0), 100)
	cfg.Cooldown = max(cfg.Cooldown, 0)
	cfg.ProbeTimeout = max(cfg.ProbeTimeout, 0)
	_ = cfg.Validate() // cannot fail: everything is in range
	if now == nil {
		now = time.Now
	}
	bucketLen := max(int64(cfg.Window)/windowBuckets, 1)
	return &Breaker{
		seenSpan:     uint64(min(windowBuckets+int64(cfg.Cooldown)/bucketLen+1, seenEpochMask/2)),
		minRequests:  uint64(cfg.MinRequests),
		percent:      uint64(cfg.FailurePercent),
		bucketLen:    bucketLen,
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

// Success records a request the tier served. While closed it counts in the
// window; otherwise it closes the breaker with an empty window.
func (b *Breaker) Success() {
	now := b.clock()
	if b.state.Load() == 0 {
		b.count(now, false)
		return
	}
	b.state.Store(0)
	b.clearWindow()
}

// Failure records a request the tier failed, with no key: it always counts
// as a distinct request.
func (b *Breaker) Failure() { b.FailureOf(0) }

// FailureOf records a request the tier failed; key identifies the request
// (a hash of its body; 0 for none). A failure whose key already failed
// within the window is a retry of the same request and counts for nothing.
// While closed, a counted failure that brings the window to MinRequests
// requests and FailurePercent failures opens the breaker; the probe's
// failure while half-open opens it for another Cooldown; one while it
// cools down changes nothing.
func (b *Breaker) FailureOf(key uint64) {
	now := b.clock()
	repeat := b.repeated(key, now)
	s := b.state.Load()
	if s == 0 {
		if repeat {
			return
		}
		if requests, failures := b.count(now, true); requests >= b.minRequests && failures*100 >= requests*b.percent &&
			b.state.CompareAndSwap(0, b.opened(now)) {
			b.clearWindow()
		}
		return
	}
	if s&1 == 0 && now < s>>1 {
		return // cooling down
	}
	if repeat && s&1 == 1 {
		// The probe repeated a request that had failed already: it says
		// nothing new about the tier, so the next request probes.
		b.state.CompareAndSwap(s, now<<1)
		return
	}
	b.state.CompareAndSwap(s, b.opened(now))
}

// RetryAfter is how long the breaker will still refuse requests: the rest
// of its cooldown, or of the probe's time while a probe is out; 0 when
// closed or when the next request may probe.
func (b *Breaker) RetryAfter() time.Duration {
	s := b.state.Load()
	if s == 0 {
		return 0
	}
	return time.Duration(max(s>>1-b.clock(), 0))
}

// count adds one request, failed or not, to the bucket of now and, for a
// failure, returns the window's requests and failures.
func (b *Breaker) count(now int64, failed bool) (requests, failures uint64) {
	epoch := uint64(now / b.bucketLen)
	slot := &b.buckets[epoch%windowBuckets][rand.Uint32()%stripes].w
	add := uint64(1) << countBits
	if failed {
		add |= 1
	}
	for {
		w := slot.Load()
		next := w
		if w>>(2*countBits) != epoch&epochMask {
			next = (epoch & epochMask) << (2 * countBits) // a new tenth: the old one left the window
		}
		if next&(countMask<<countBits) == countMask<<countBits || next&countMask == countMask {
			break // saturated; the rate is what matters
		}
		if slot.CompareAndSwap(w, next+add) {
			break
		}
	}
	if !failed {
		return 0, 0
	}
	for i := range b.buckets {
		for j := range b.buckets[i] {
			w := b.buckets[i][j].w.Load()
			if e := w >> (2 * countBits); (epoch-e)&epochMask < windowBuckets {
				requests += w >> countBits & countMask
				failures += w & countMask
			}
		}
	}
	return requests, failures
}

// clearWindow forgets every outcome counted.
func (b *Breaker) clearWindow() {
	for i := range b.buckets {
		for j := range b.buckets[i] {
			b.buckets[i][j].w.Store(0)
		}
	}
}

// repeated reports whether key already failed within the window and the
// cooldown after it (a client retrying after the Retry-After it was given
// is still retrying), and remembers that it failed now. Key 0 is never a
// repeat.
func (b *Breaker) repeated(key uint64, now int64) bool {
	if key == 0 {
		return false
	}
	epoch := uint64(now/b.bucketLen) & seenEpochMask
	tag := key &^ seenEpochMask
	slot := &b.seen[key%seenSlots]
	old := slot.Swap(tag | epoch)
	return old&^seenEpochMask == tag && old != 0 && (epoch-old&seenEpochMask)&seenEpochMask < b.seenSpan
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
