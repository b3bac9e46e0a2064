package hotpath

import (
	"sync/atomic"
	"time"
)

// DefaultLogEvery is how often a LogLimiter with no Every lets a line
// through.
const DefaultLogEvery = 10 * time.Second

// LogLimiter lets one log line through per interval and counts the rest: a
// failure every request runs into (a store that cannot be reached, a
// ledger that cannot be written) is logged every Every, not once per
// request. The zero value is ready to use; it is safe for concurrent use
// and allocates nothing.
type LogLimiter struct {
	// Every is the interval; 0 means DefaultLogEvery.
	Every      time.Duration
	next       atomic.Int64 // Unix ns when the next line may go out
	suppressed atomic.Int64
}

// Allow reports whether a line may be logged now, and if so how many were
// held back since the last one.
func (ll *LogLimiter) Allow() (ok bool, suppressed int64) {
	every := ll.Every
	if every <= 0 {
		every = DefaultLogEvery
	}
	now := time.Now().UnixNano()
	next := ll.next.Load()
	if now < next || !ll.next.CompareAndSwap(next, now+int64(every)) {
		ll.suppressed.Add(1)
		return false, 0
	}
	return true, ll.suppressed.Swap(0)
}
