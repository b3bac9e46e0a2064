package hotpath

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"golang.org/x/sync/singleflight"

	"github.com/edgegw/gateway/codec"
)

// ErrKeyNotFound is what a KeySource returns for a hash it does not hold.
var ErrKeyNotFound = errors.New("key not found")

// KeySource is where key records come from when the cache cannot answer:
// PostgreSQL in production. Both methods return ErrKeyNotFound for an
// unknown hash; revoked and expired records are returned as they are, so the
// cache can remember that they are refused. Each call returns a record of
// its own: the verifier prepares it, then shares it between requests.
type KeySource interface {
	LookupKey(ctx context.Context, h TokenHash) (*Principal, error)
	LookupServiceToken(ctx context.Context, h TokenHash) (*ServiceToken, error)
}

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// MaxKeys bounds how many key records the cache holds. Default 100000.
	MaxKeys int64
	// TTL bounds how long a cached record is trusted without a refetch,
	// whatever the invalidation channel says. Default 5m.
	TTL time.Duration
	// LookupTimeout bounds one KeySource call. Default 2s.
	LookupTimeout time.Duration
	// NegativeKeys bounds how many unknown token hashes are remembered, so
	// that a forged key with a valid checksum, sent again and again, costs
	// one KeySource call per NegativeTTL instead of one per request.
	// Default 10000; negative turns the memory off.
	NegativeKeys int64
	// NegativeTTL is how long an unknown hash is remembered. Default 30s.
	// Creating a key under the hash forgets it at once (Invalidate).
	NegativeTTL time.Duration
}

// Validate checks the configuration and fills in defaults.
func (c *VerifierConfig) Validate() error {
	if c.MaxKeys == 0 {
		c.MaxKeys = 100_000
	}
	if c.TTL == 0 {
		c.TTL = 5 * time.Minute
	}
	if c.LookupTimeout == 0 {
		c.LookupTimeout = 2 * time.Second
	}
	if c.NegativeKeys == 0 {
		c.NegativeKeys = 10_000
	}
	if c.NegativeTTL == 0 {
		c.NegativeTTL = 30 * time.Second
	}
	if c.MaxKeys < 0 || c.TTL < 0 || c.LookupTimeout < 0 || c.NegativeTTL < 0 {
		return errors.New("key cache sizes and durations must not be negative")
	}
	return nil
}

// Verifier turns bearer tokens into principals. Records come from a ristretto
// cache kept true by invalidations (Invalidate, Reset) that the storage layer
// feeds from PostgreSQL notifications; a miss asks the KeySource, with
// concurrent misses for one key coalesced into one lookup.
//
// While the invalidation channel is down (SetLive(false)) nothing cached is
// trusted: every request asks the KeySource, and a cached record is served
// only when the KeySource cannot answer at all.
type Verifier struct {
	cfg   VerifierConfig
	src   KeySource
	cache *ristretto.Cache[uint64, *keyEntry]
	group singleflight.Group
	base  time.Time

	mu        sync.Mutex // orders cache fills against invalidations
	dropped   map[TokenHash]int64
	clearedAt atomic.Int64
	live      atomic.Bool
	unknown   unknownKeys

	// downUntil is when the source may be asked again after a lookup it
	// failed (monotonic nanoseconds; 0 while it answers), and probing is
	// set while one request asks it.
	downUntil atomic.Int64
	probing   atomic.Bool

	hits, misses, staleServed, lookupErrors, unknownHits atomic.Uint64
}

type keyEntry struct {
	hash      TokenHash
	user      *Principal
	svc       *ServiceToken
	fetchedAt int64 // monotonic nanoseconds since Verifier.base
	dead      atomic.Bool
}

// NewVerifier returns a verifier over src. It starts not live: call SetLive
// once the invalidation channel is listening.
func NewVerifier(cfg VerifierConfig, src KeySource) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cache, err := ristretto.NewCache(&ristretto.Config[uint64, *keyEntry]{
		NumCounters: cfg.MaxKeys * 10,
		MaxCost:     cfg.MaxKeys,
		BufferItems: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot create key cache: %w", err)
	}
	return &Verifier{
		cfg:     cfg,
		src:     src,
		cache:   cache,
		base:    time.Now(),
		dropped: make(map[TokenHash]int64),
		unknown: unknownKeys{max: int(cfg.NegativeKeys), ttl: int64(cfg.NegativeTTL), at: map[TokenHash]int64{}},
	}, nil
}

// Close releases the cache.
func (v *Verifier) Close() { v.cache.Close() }

func (v *Verifier) mono() int64 { return int64(time.Since(v.base)) }

func cacheKey(h TokenHash) uint64 { return binary.LittleEndian.Uint64(h[:8]) }

// VerifyUser checks an Authorization header value and returns the user key's
// principal. Missing, malformed, unknown, expired and revoked keys, and
// service tokens, all get codec.ErrUnauthorized; a suspended owner gets
// codec.ErrAccountSuspended.
func (v *Verifier) VerifyUser(authorization []byte) (*Principal, *codec.Error) {
	token, ok := codec.ParseBearer(authorization)
	if !ok {
		return nil, codec.ErrUnauthorized
	}
	return v.VerifyUserToken(token)
}

// VerifyUserToken is VerifyUser for a bare key, as the Anthropic-compatible
// routes take it in x-api-key.
func (v *Verifier) VerifyUserToken(token []byte) (*Principal, *codec.Error) {
	if CheckToken(token) != TokenUser {
		return nil, codec.ErrUnauthorized
	}
	e, cerr := v.entry(HashToken(token), TokenUser)
	if cerr != nil {
		return nil, cerr
	}
	p := e.user
	if cerr := p.Refusal(time.Now().Unix()); cerr != nil {
		return nil, cerr
	}
	return p, nil
}

// VerifyService checks an Authorization header value and returns the service
// token. Anything else, user keys included, is codec.ErrUnauthorized.
func (v *Verifier) VerifyService(authorization []byte) (*ServiceToken, *codec.Error) {
	token, ok := codec.ParseBearer(authorization)
	if !ok || CheckToken(token) != TokenService {
		return nil, codec.ErrUnauthorized
	}
	e, cerr := v.entry(HashToken(token), TokenService)
	if cerr != nil {
		return nil, cerr
	}
	s := e.svc
	if s.Revoked || s.ExpiresAt != 0 && time.Now().Unix() >= s.ExpiresAt {
		return nil, codec.ErrUnauthorized
	}
	return s, nil
}

func (v *Verifier) entry(h TokenHash, kind TokenKind) (*keyEntry, *codec.Error) {
	cached, ok := v.cache.Get(cacheKey(h))
	if ok && (cached.hash != h || cached.dead.Load()) {
		cached, ok = nil, false
	}
	if ok && v.live.Load() && cached.fetchedAt > v.clearedAt.Load() {
		v.hits.Add(1)
		return cached, nil
	}
	if v.live.Load() && v.unknown.has(h, v.mono(), v.clearedAt.Load()) {
		v.unknownHits.Add(1)
		return nil, codec.ErrUnauthorized
	}
	v.misses.Add(1)
	start := v.mono()
	// After a failed lookup, the source is asked again once a lookup's
	// bound has passed, by one request at a time: the others are answered
	// as if it had failed again. A source that hangs instead of refusing
	// would otherwise hold every request for the whole bound.
	if down := v.downUntil.Load(); down != 0 {
		if start < down || !v.probing.CompareAndSwap(false, true) {
			return v.unreachable(cached, ok)
		}
		defer v.probing.Store(false)
	}
	e, err := v.fetch(h, kind)
	switch {
	case err == nil:
		v.downUntil.Store(0)
		return e, nil
	case errors.Is(err, ErrKeyNotFound):
		v.downUntil.Store(0)
		v.rememberUnknown(h, start)
		return nil, codec.ErrUnauthorized
	default:
		v.downUntil.Store(v.mono() + int64(v.cfg.LookupTimeout))
		return v.unreachable(cached, ok)
	}
}

// unreachable answers a request whose key the source cannot look up: from
// the last record the source gave, which is better than refusing every
// caller while PostgreSQL is away, or else 503.
func (v *Verifier) unreachable(cached *keyEntry, ok bool) (*keyEntry, *codec.Error) {
	if ok {
		v.staleServed.Add(1)
		return cached, nil
	}
	v.lookupErrors.Add(1)
	return nil, codec.ErrServiceUnavailable
}

// fetch asks the KeySource under its own timeout. It takes no caller
// context on purpose: the callers' fasthttp RequestCtx is recycled after the
// handler and must not parent a context, and a coalesced lookup serves
// several callers at once.
func (v *Verifier) fetch(h TokenHash, kind TokenKind) (*keyEntry, error) {
	res, err, _ := v.group.Do(string(h[:]), func() (any, error) {
		start := v.mono()
		lctx, cancel := context.WithTimeout(context.Background(), v.cfg.LookupTimeout)
		defer cancel()
		e := &keyEntry{hash: h, fetchedAt: start}
		var err error
		if kind == TokenService {
			e.svc, err = v.src.LookupServiceToken(lctx, h)
		} else {
			e.user, err = v.src.LookupKey(lctx, h)
		}
		if err != nil {
			return nil, err
		}
		if e.user != nil {
			e.user.prepare()
		}
		v.fill(e)
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	return res.(*keyEntry), nil
}

// fill caches e unless an invalidation for its key, or a reset, arrived
// after the lookup started: then the record may predate the change.
func (v *Verifier) fill(e *keyEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dropped[e.hash] >= e.fetchedAt || v.clearedAt.Load() >= e.fetchedAt {
		return
	}
	v.cache.SetWithTTL(cacheKey(e.hash), e, 1, v.cfg.TTL)
}

// Invalidate forgets the record for one token hash. When it returns, no
// request on this process is served from the old record.
func (v *Verifier) Invalidate(h TokenHash) {
	now := v.mono()
	v.mu.Lock()
	v.dropped[h] = now
	if len(v.dropped) > 4096 {
		// Fills older than the lookup timeout cannot be in flight any more.
		horizon := now - int64(2*v.cfg.LookupTimeout)
		for k, at := range v.dropped {
			if at < horizon {
				delete(v.dropped, k)
			}
		}
	}
	v.mu.Unlock()
	v.unknown.forget(h)
	v.kill(h)
	// A fill that passed its check before we took the lock may still sit in
	// the cache's write buffer: flush it, then kill what it stored.
	v.cache.Wait()
	v.kill(h)
}

func (v *Verifier) kill(h TokenHash) {
	k := cacheKey(h)
	if e, ok := v.cache.Get(k); ok && e.hash == h {
		e.dead.Store(true)
	}
	v.cache.Del(k)
}

// Reset distrusts every cached record: each is fetched again on its next
// use. Storage calls it when notifications may have been missed.
func (v *Verifier) Reset() {
	v.mu.Lock()
	v.clearedAt.Store(v.mono())
	v.mu.Unlock()
}

// SetLive tells the verifier whether the invalidation channel is listening.
// Going live resets the cache, since anything may have changed meanwhile.
func (v *Verifier) SetLive(live bool) {
	if live {
		// The channel reached PostgreSQL: ask it again at once.
		v.downUntil.Store(0)
		v.Reset()
	}
	v.live.Store(live)
}

// Live reports whether cached records are being trusted.
func (v *Verifier) Live() bool { return v.live.Load() }

// VerifierStats is a snapshot of the verifier's counters.
type VerifierStats struct {
	Hits, Misses, StaleServed, LookupErrors uint64
	// UnknownHits counts requests refused from the memory of unknown
	// hashes, without a KeySource call.
	UnknownHits uint64
}

// Stats returns the counters.
func (v *Verifier) Stats() VerifierStats {
	return VerifierStats{
		Hits:         v.hits.Load(),
		Misses:       v.misses.Load(),
		StaleServed:  v.staleServed.Load(),
		LookupErrors: v.lookupErrors.Load(),
		UnknownHits:  v.unknownHits.Load(),
	}
}

// Wait blocks until the cache has applied every buffered write, so that a
// record just fetched is served from the cache by the next request.
func (v *Verifier) Wait() { v.cache.Wait() }
