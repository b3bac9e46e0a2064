package hotpath

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Defaults of the idempotent replay store (spec: Limits, "Idempotent replay
// storage").
const (
	// DefaultIdempotencyTTL is how long a stored reply is replayed.
	DefaultIdempotencyTTL = 24 * time.Hour
	// DefaultIdempotencyLease is how long a claim holds its key after it was
	// last renewed. A request renews its claim every third of the lease
	// while it runs (Hold), so however long it takes it keeps the key, and
	// a process that dies mid-request frees its keys within one lease: the
	// client's retry runs instead of meeting 409 for the rest of it.
	DefaultIdempotencyLease = 15 * time.Second
	// DefaultIdempotencyMaxEntries bounds the in-process store.
	DefaultIdempotencyMaxEntries = 100_000
)

// ErrIdempotencyConflict is the 409 idempotency_conflict: Begin returns one
// of the two errors below, and errors.Is(err, ErrIdempotencyConflict) holds
// for both. They are preallocated, so a flood of conflicts allocates nothing.
var ErrIdempotencyConflict = errors.New("idempotency key conflict")

var (
	// ErrIdempotencyKeyReused: the key was used for a request with another
	// body, whether that one is still running or done. Retrying the same
	// request fails the same way while the key is held.
	ErrIdempotencyKeyReused = fmt.Errorf("%w: the key was used for a different request", ErrIdempotencyConflict)
	// ErrIdempotencyInProgress: a request with this key and body is running.
	// Retrying once it has finished replays its reply.
	ErrIdempotencyInProgress = fmt.Errorf("%w: a request with this key is in progress", ErrIdempotencyConflict)
)

// ErrIdempotencyClaimLost is what Complete returns when the claim is no
// longer held: its lease ran out (and perhaps another request claimed the
// key), or the store evicted it. Nothing was stored; the reply already sent
// stands. Callers count it and move on.
var ErrIdempotencyClaimLost = errors.New("idempotency claim lost")

// IdempotencyStore holds the replies of POST /v1/chat/completions requests
// sent with an Idempotency-Key (spec: Chat, "Timeouts, retries, reasoning",
// rule 5). A key lives in a scope, the API key that sent it, so two customers
// may use the same Idempotency-Key; bodyHash is the SHA-256 of the request
// body.
//
// Only one request under a key runs at a time. A second one arriving while
// the first is in flight is refused with ErrIdempotencyInProgress rather
// than made to wait: the client retries later and gets the replay, as with
// Stripe's API. Waiting would hold a connection and a concurrency slot for
// up to a tier deadline per duplicate.
//
// Implementations: MemoryIdempotency in the process, storage.RedisIdempotency
// across a fleet. Both pass the contract tests in hotpath/idemtest.
type IdempotencyStore interface {
	// Lease is how long a claim holds its key after Begin or its last Renew.
	Lease() time.Duration
	// Begin claims (scope, key) for a request whose body hashes to bodyHash.
	// It returns exactly one of:
	//   - a stored Replay to send as it is, with no model call and no billing;
	//   - ErrIdempotencyKeyReused (another body) or ErrIdempotencyInProgress
	//     (a request with this key still in flight);
	//   - a Claim the caller must settle with Complete or Abandon;
	//   - another error: the store cannot answer.
	// The Replay is read-only: it may be shared with other callers.
	Begin(ctx context.Context, scope, key string, bodyHash [32]byte) (*Replay, Claim, error)
}

// Claim is the right to run the request under a key. Settle it exactly
// once; Abandon after Complete does nothing, so a deferred Abandon covers
// every failure path. An unsettled claim expires one lease after Begin or
// its last Renew; Hold renews it for as long as the request runs.
//
// Settle with a context that outlives the client (context.WithoutCancel):
// by then the reply exists whether or not the client is still there.
type Claim interface {
	// Complete stores r for the store's TTL, copying what it keeps. It
	// returns ErrIdempotencyClaimLost when the claim is no longer held.
	Complete(ctx context.Context, r Replay) error
	// Abandon releases the claim and stores nothing: the request failed, and
	// a retry may run. Releasing a claim that is no longer held, or already
	// completed, does nothing.
	Abandon(ctx context.Context) error
	// Renew holds the key for another lease from now. It returns
	// ErrIdempotencyClaimLost when the claim is no longer held.
	Renew(ctx context.Context) error
}

// Hold returns c renewed every third of lease until it is settled, so that
// it keeps its key however long the request runs and no longer than a
// lease after its process stops. A renewal the store fails is tried again
// at the next third; one that finds the claim lost stops renewing.
func Hold(c Claim, lease time.Duration) Claim {
	h := &heldClaim{Claim: c, every: max(lease/3, time.Millisecond)}
	h.mu.Lock()
	h.timer = time.AfterFunc(h.every, h.renew)
	h.mu.Unlock()
	return h
}

type heldClaim struct {
	Claim
	every   time.Duration
	mu      sync.Mutex
	timer   *time.Timer
	settled bool
}

func (h *heldClaim) renew() {
	ctx, cancel := context.WithTimeout(context.Background(), h.every)
	err := h.Claim.Renew(ctx)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.settled && !errors.Is(err, ErrIdempotencyClaimLost) {
		h.timer.Reset(h.every)
	}
}

// stop ends the renewals; a renewal already running finishes harmlessly
// (the settled claim is no longer the key's, or is released next).
func (h *heldClaim) stop() {
	h.mu.Lock()
	h.settled = true
	h.timer.Stop()
	h.mu.Unlock()
}

func (h *heldClaim) Complete(ctx context.Context, r Replay) error {
	h.stop()
	return h.Claim.Complete(ctx, r)
}

func (h *heldClaim) Abandon(ctx context.Context) error {
	h.stop()
	return h.Claim.Abandon(ctx)
}

// Replay is a stored reply. Headers are those that describe the reply
// itself (Content-Type); the ones the edge writes per request (X-Request-Id,
// Gateway-Version, Gateway-Overhead-Ms, X-RateLimit-*) are left out and
// written fresh when the reply is replayed.
type Replay struct {
	Status  int
	Headers [][2]string
	Body    []byte
}

// AppendReplay appends r in the compact binary form a shared store keeps:
//
//	uvarint status | uvarint header count |
//	per header: uvarint len, name, uvarint len, value | body to the end
//
// It accepts a nil dst.
func AppendReplay(dst []byte, r *Replay) []byte {
	dst = binary.AppendUvarint(dst, uint64(r.Status))
	dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = binary.AppendUvarint(dst, uint64(len(h[0])))
		dst = append(dst, h[0]...)
		dst = binary.AppendUvarint(dst, uint64(len(h[1])))
		dst = append(dst, h[1]...)
	}
	return append(dst, r.Body...)
}

// errBadReplay is what ParseReplay returns for bytes AppendReplay did not write.
var errBadReplay = errors.New("cannot parse stored reply: malformed")

// ParseReplay reads what AppendReplay wrote. The result shares nothing with
// b; empty headers and body come back nil.
func ParseReplay(b []byte) (*Replay, error) {
	status, b, ok := replayUvarint(b)
	if !ok || status < 100 || status > 999 {
		return nil, errBadReplay
	}
	n, b, ok := replayUvarint(b)
	if !ok || n > uint64(len(b)/2) { // every header takes at least two bytes
		return nil, errBadReplay
	}
	r := &Replay{Status: int(status)}
	if n > 0 {
		r.Headers = make([][2]string, n)
	}
	for i := range r.Headers {
		for j := range r.Headers[i] {
			var l uint64
			if l, b, ok = replayUvarint(b); !ok || l > uint64(len(b)) {
				return nil, errBadReplay
			}
			r.Headers[i][j] = string(b[:l])
			b = b[l:]
		}
	}
	if len(b) > 0 {
		r.Body = append([]byte(nil), b...)
	}
	return r, nil
}

func replayUvarint(b []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, b, false
	}
	return v, b[n:], true
}

// clone returns a deep copy of r that shares nothing with the caller's
// buffers. Empty headers and body come back nil.
func (r *Replay) clone() *Replay {
	c := &Replay{Status: r.Status}
	if len(r.Body) > 0 {
		c.Body = append([]byte(nil), r.Body...)
	}
	if len(r.Headers) > 0 {
		c.Headers = make([][2]string, len(r.Headers))
		for i, h := range r.Headers {
			c.Headers[i] = [2]string{strings.Clone(h[0]), strings.Clone(h[1])}
		}
	}
	return c
}

// MemoryIdempotency is the in-process IdempotencyStore of a single gateway.
//
// Entries are kept under the SHA-256 of (scope, key), never the caller's
// strings, so an entry costs about 200 bytes plus its reply. Expired entries
// are pruned on every call, oldest first, so the store needs no goroutine
// and no Close. Claims and replies sit in two lists ordered by age; since
// every claim lives one lease and every reply one TTL, age order is expiry
// order and pruning stops at the first entry still alive.
//
// When more than maxEntries are held, the oldest stored reply is evicted
// first, and an in-flight claim only when no reply is left: evicting a claim
// could let a duplicate reach the model. Evicted counts both.
//
// One mutex guards the store; every critical section is a map access and a
// few pointer moves.
type MemoryIdempotency struct {
	ttl, lease time.Duration
	max        int
	now        func() time.Time
	base       time.Time

	mu      sync.Mutex
	entries map[[32]byte]*idemEntry
	claims  idemList // in flight, oldest first
	replays idemList // stored, oldest first
	evicted uint64
}

var _ IdempotencyStore = (*MemoryIdempotency)(nil)

// IdempotencyOption adjusts a MemoryIdempotency.
type IdempotencyOption func(*MemoryIdempotency)

// IdempotencyLease sets how long an unsettled claim holds its key. Default
// DefaultIdempotencyLease.
func IdempotencyLease(d time.Duration) IdempotencyOption {
	return func(m *MemoryIdempotency) {
		if d > 0 {
			m.lease = d
		}
	}
}

// IdempotencyClock replaces time.Now, for tests.
func IdempotencyClock(now func() time.Time) IdempotencyOption {
	return func(m *MemoryIdempotency) {
		if now != nil {
			m.now = now
		}
	}
}

// NewMemoryIdempotency returns an empty store whose replies live for ttl
// and which holds at most maxEntries claims and replies. Zero or negative
// values take the defaults (DefaultIdempotencyTTL,
// DefaultIdempotencyMaxEntries).
func NewMemoryIdempotency(ttl time.Duration, maxEntries int, opts ...IdempotencyOption) *MemoryIdempotency {
	if ttl <= 0 {
		ttl = DefaultIdempotencyTTL
	}
	if maxEntries <= 0 {
		maxEntries = DefaultIdempotencyMaxEntries
	}
	m := &MemoryIdempotency{
		ttl:     ttl,
		lease:   DefaultIdempotencyLease,
		max:     maxEntries,
		now:     time.Now,
		entries: make(map[[32]byte]*idemEntry),
	}
	for _, o := range opts {
		o(m)
	}
	m.base = m.now()
	return m
}

type idemEntry struct {
	m          *MemoryIdempotency
	digest     [32]byte
	bodyHash   [32]byte
	replay     *Replay // nil while the claim is in flight
	expires    int64   // nanoseconds since m.base
	prev, next *idemEntry
}

// clock reads the store's clock as nanoseconds since the store was made;
// with time.Now that is monotonic, whatever the wall clock does.
func (m *MemoryIdempotency) clock() int64 { return int64(m.now().Sub(m.base)) }

// idemDigest names (scope, key) without keeping either string. The scope is
// length-prefixed, so no two pairs share an encoding.
func idemDigest(scope, key string) [32]byte {
	var buf [256]byte
	b := binary.AppendUvarint(buf[:0], uint64(len(scope)))
	b = append(b, scope...)
	b = append(b, key...)
	return sha256.Sum256(b)
}

// Begin implements IdempotencyStore. A replay is served from the store
// without copying and allocates nothing.
func (m *MemoryIdempotency) Begin(_ context.Context, scope, key string, bodyHash [32]byte) (*Replay, Claim, error) {
	d := idemDigest(scope, key)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock()
	m.prune(now)
	if e := m.entries[d]; e != nil {
		switch {
		case e.bodyHash != bodyHash:
			return nil, nil, ErrIdempotencyKeyReused
		case e.replay == nil:
			return nil, nil, ErrIdempotencyInProgress
		}
		return e.replay, nil, nil
	}
	e := &idemEntry{m: m, digest: d, bodyHash: bodyHash, expires: now + int64(m.lease)}
	m.entries[d] = e
	m.claims.push(e)
	for len(m.entries) > m.max {
		victim := m.replays.head
		if victim == nil {
			victim = m.claims.head
		}
		m.drop(victim)
		m.evicted++
	}
	return nil, e, nil
}

// lockHeld locks the store, prunes what expired and reports the time and
// whether e is still an unsettled claim. The caller unlocks.
func (e *idemEntry) lockHeld() (now int64, held bool) {
	m := e.m
	m.mu.Lock()
	now = m.clock()
	m.prune(now)
	return now, m.entries[e.digest] == e && e.replay == nil
}

// Complete implements Claim.
func (e *idemEntry) Complete(_ context.Context, r Replay) error {
	stored := r.clone()
	m := e.m
	now, held := e.lockHeld()
	defer m.mu.Unlock()
	if !held {
		return ErrIdempotencyClaimLost
	}
	m.claims.remove(e)
	e.replay = stored
	e.expires = now + int64(m.ttl)
	m.replays.push(e)
	return nil
}

// Renew implements Claim.
func (e *idemEntry) Renew(context.Context) error {
	m := e.m
	now, held := e.lockHeld()
	defer m.mu.Unlock()
	if !held {
		return ErrIdempotencyClaimLost
	}
	// Every claim lives one lease, so the list stays in expiry order with
	// the renewed one last.
	m.claims.remove(e)
	e.expires = now + int64(m.lease)
	m.claims.push(e)
	return nil
}

// Lease implements IdempotencyStore.
func (m *MemoryIdempotency) Lease() time.Duration { return m.lease }

// Abandon implements Claim.
func (e *idemEntry) Abandon(context.Context) error {
	m := e.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries[e.digest] == e && e.replay == nil {
		m.drop(e)
	}
	return nil
}

// prune drops every entry that expired at or before now.
func (m *MemoryIdempotency) prune(now int64) {
	for _, l := range [...]*idemList{&m.claims, &m.replays} {
		for l.head != nil && l.head.expires <= now {
			m.drop(l.head)
		}
	}
}

func (m *MemoryIdempotency) drop(e *idemEntry) {
	delete(m.entries, e.digest)
	if e.replay == nil {
		m.claims.remove(e)
	} else {
		m.replays.remove(e)
	}
}

// IdempotencyStats is a snapshot of a MemoryIdempotency.
type IdempotencyStats struct {
	InFlight int    // claims held
	Stored   int    // replies stored
	Evicted  uint64 // entries dropped to stay within maxEntries, ever
}

// Stats returns a snapshot. Entries that expired but were not pruned yet
// still count.
func (m *MemoryIdempotency) Stats() IdempotencyStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return IdempotencyStats{InFlight: m.claims.n, Stored: m.replays.n, Evicted: m.evicted}
}

// idemList is an intrusive doubly linked list of entries, oldest at head.
type idemList struct {
	head, tail *idemEntry
	n          int
}

func (l *idemList) push(e *idemEntry) {
	e.prev, e.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
	l.n++
}

func (l *idemList) remove(e *idemEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
	l.n--
}
