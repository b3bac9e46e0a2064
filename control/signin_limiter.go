package control

import (
	"sync"
	"time"
)

// MemoryLoginLimiter is the in-process LoginLimiter: a token bucket per
// key that holds limit tokens and refills one every window/limit. It is
// exact for one process; a fleet shares nothing through it.
type MemoryLoginLimiter struct {
	limit float64
	every time.Duration // refill period of one token

	mu      sync.Mutex
	buckets map[string]*loginBucket
	// maxKeys bounds memory: past it, full buckets are forgotten (a full
	// bucket is what a new one starts as, so nothing is lost).
	maxKeys int
}

type loginBucket struct {
	tokens float64
	at     time.Time
}

var _ LoginLimiter = (*MemoryLoginLimiter)(nil)

// NewMemoryLoginLimiter allows limit events per window per key, in bursts
// of up to limit.
func NewMemoryLoginLimiter(limit int, window time.Duration) *MemoryLoginLimiter {
	if limit < 1 {
		limit = 1
	}
	return &MemoryLoginLimiter{limit: float64(limit), every: window / time.Duration(limit),
		buckets: map[string]*loginBucket{}, maxKeys: 100_000}
}

// Allow implements LoginLimiter.
func (l *MemoryLoginLimiter) Allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= l.maxKeys {
			l.prune(now)
		}
		b = &loginBucket{tokens: l.limit, at: now}
		l.buckets[key] = b
	}
	l.refill(b, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) * float64(l.every))
	return false, wait
}

func (l *MemoryLoginLimiter) refill(b *loginBucket, now time.Time) {
	if elapsed := now.Sub(b.at); elapsed > 0 {
		b.tokens += float64(elapsed) / float64(l.every)
		if b.tokens > l.limit {
			b.tokens = l.limit
		}
		b.at = now
	}
}

// prune forgets the buckets that have refilled; when every bucket is busy,
// it forgets them all rather than grow without bound.
func (l *MemoryLoginLimiter) prune(now time.Time) {
	for k, b := range l.buckets {
		l.refill(b, now)
		if b.tokens >= l.limit {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) >= l.maxKeys {
		clear(l.buckets)
	}
}
