package hotpath

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
)

// memSource is a KeySource over a map, counting lookups.
type memSource struct {
	mu      sync.Mutex
	users   map[TokenHash]Principal
	svcs    map[TokenHash]ServiceToken
	down    bool
	lookups atomic.Int64
	gate    chan struct{} // when set, lookups wait on it
}

func newMemSource() *memSource {
	return &memSource{users: map[TokenHash]Principal{}, svcs: map[TokenHash]ServiceToken{}}
}

var errDown = errors.New("database unreachable")

func (m *memSource) LookupKey(ctx context.Context, h TokenHash) (*Principal, error) {
	// Read first, then wait: a gated lookup returns the record as it was
	// when the lookup started, like a query that read before a commit.
	m.mu.Lock()
	p, ok := m.users[h]
	down := m.down
	gate := m.gate
	m.mu.Unlock()
	m.lookups.Add(1)
	if gate != nil {
		<-gate
	}
	if down {
		return nil, errDown
	}
	if !ok {
		return nil, ErrKeyNotFound
	}
	return &p, nil
}

func (m *memSource) LookupServiceToken(ctx context.Context, h TokenHash) (*ServiceToken, error) {
	m.lookups.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, errDown
	}
	s, ok := m.svcs[h]
	if !ok {
		return nil, ErrKeyNotFound
	}
	return &s, nil
}

func (m *memSource) update(h TokenHash, f func(p *Principal)) {
	m.mu.Lock()
	p := m.users[h]
	f(&p)
	m.users[h] = p
	m.mu.Unlock()
}

func newTestVerifier(t *testing.T, src KeySource) *Verifier {
	t.Helper()
	v, err := NewVerifier(VerifierConfig{MaxKeys: 1000}, src)
	require.NoError(t, err)
	t.Cleanup(v.Close)
	v.SetLive(true)
	return v
}

func bearer(tok string) []byte { return []byte("Bearer " + tok) }

// addUser registers a fresh key and returns its token.
func addUser(src *memSource, p Principal) string {
	tok, h := GenerateToken(TokenUser)
	src.mu.Lock()
	src.users[h] = p
	src.mu.Unlock()
	return tok
}

// settle waits until the cache has applied buffered writes, so a test can
// count lookups deterministically.
func settle(v *Verifier) { v.cache.Wait() }

func TestVerifyUserAnswers(t *testing.T) {
	src := newMemSource()
	v := newTestVerifier(t, src)
	good := addUser(src, Principal{KeyID: "k1"})
	revoked := addUser(src, Principal{KeyID: "k2", Revoked: true})
	expired := addUser(src, Principal{KeyID: "k3", ExpiresAt: time.Now().Add(-time.Second).Unix()})
	suspended := addUser(src, Principal{KeyID: "k4", Suspended: true})
	unknown, _ := GenerateToken(TokenUser)
	svc, svcHash := GenerateToken(TokenService)
	src.svcs[svcHash] = ServiceToken{ID: "s1"}

	p, cerr := v.VerifyUser(bearer(good))
	require.Nil(t, cerr)
	require.Equal(t, "k1", p.KeyID)

	refused := map[string][]byte{
		"missing":       nil,
		"no scheme":     []byte(good),
		"basic":         []byte("Basic " + good),
		"malformed":     bearer("gw_live_nope"),
		"unknown":       bearer(unknown),
		"revoked":       bearer(revoked),
		"expired":       bearer(expired),
		"service token": bearer(svc),
	}
	for name, h := range refused {
		t.Run(name, func(t *testing.T) {
			_, cerr := v.VerifyUser(h)
			require.Same(t, codec.ErrUnauthorized, cerr)
		})
	}
	_, cerr = v.VerifyUser(bearer(suspended))
	require.Same(t, codec.ErrAccountSuspended, cerr)

	s, cerr := v.VerifyService(bearer(svc))
	require.Nil(t, cerr)
	require.Equal(t, "s1", s.ID)
	_, cerr = v.VerifyService(bearer(good))
	require.Same(t, codec.ErrUnauthorized, cerr, "a user key on a service route")
}

func TestMalformedTokensNeverReachTheSource(t *testing.T) {
	src := newMemSource()
	v := newTestVerifier(t, src)
	for _, h := range []string{"Bearer gw_live_x", "Bearer " + UserPrefix + "0000000000000000000000000000000000000000000000000"} {
		_, cerr := v.VerifyUser([]byte(h))
		require.Same(t, codec.ErrUnauthorized, cerr)
	}
	require.Zero(t, src.lookups.Load())
}

func TestCacheServesHitsAndInvalidateDrops(t *testing.T) {
	src := newMemSource()
	v := newTestVerifier(t, src)
	tok := addUser(src, Principal{KeyID: "k1"})
	h := HashToken([]byte(tok))

	_, cerr := v.VerifyUser(bearer(tok))
	require.Nil(t, cerr)
	settle(v)
	for range 10 {
		_, cerr = v.VerifyUser(bearer(tok))
		require.Nil(t, cerr)
	}
	require.Equal(t, int64(1), src.lookups.Load(), "hits are served from the cache")

	src.update(h, func(p *Principal) { p.Revoked = true })
	_, cerr = v.VerifyUser(bearer(tok))
	require.Nil(t, cerr, "without an invalidation the cache still answers")
	v.Invalidate(h)
	_, cerr = v.VerifyUser(bearer(tok))
	require.Same(t, codec.ErrUnauthorized, cerr, "refused on the very next request after Invalidate")
}

func TestResetRefetchesEverything(t *testing.T) {
	src := newMemSource()
	v := newTestVerifier(t, src)
	tok := addUser(src, Principal{KeyID: "k1"})
	_, cerr := v.VerifyUser(bearer(tok))
	require.Nil(t, cerr)
	settle(v)
	src.update(HashToken([]byte(tok)), func(p *Principal) { p.Suspended = true })
	v.Reset()
	_, cerr = v.VerifyUser(bearer(tok))
	require.Same(t, codec.ErrAccountSuspended, cerr)
}

// cachedNotLive returns a verifier over src that holds the record of a
// fresh key k1 of users and is no longer live, and k1's token.
func cachedNotLive(t *testing.T, src KeySource, users *memSource) (*Verifier, string) {
	t.Helper()
	v := newTestVerifier(t, src)
	tok := addUser(users, Principal{KeyID: "k1"})
	_, cerr := v.VerifyUser(bearer(tok))
	require.Nil(t, cerr)
	settle(v)
	v.SetLive(false)
	return v, tok
}

func TestNotLiveBypassesCacheButServesStaleWhenSourceIsDown(t *testing.T) {
	src := newMemSource()
	v, tok := cachedNotLive(t, src, src)
	before := src.lookups.Load()
	_, cerr := v.VerifyUser(bearer(tok))
	require.Nil(t, cerr)
	require.Equal(t, before+1, src.lookups.Load(), "not live: every request asks the source")

	src.mu.Lock()
	src.down = true
	src.mu.Unlock()
	p, cerr := v.VerifyUser(bearer(tok))
	require.Nil(t, cerr, "a known key keeps working while the source is down")
	require.Equal(t, "k1", p.KeyID)
	require.Equal(t, uint64(1), v.Stats().StaleServed)

	fresh := addUser(src, Principal{KeyID: "k2"})
	_, cerr = v.VerifyUser(bearer(fresh))
	require.Equal(t, codec.CodeServiceUnavailable, cerr.Code, "an unknown key cannot be verified while the source is down")
}

// A lookup that started before an invalidation must not put its (possibly
// stale) record into the cache afterwards.
func TestInvalidationDuringLookupIsNotUndone(t *testing.T) {
	src := newMemSource()
	v := newTestVerifier(t, src)
	tok := addUser(src, Principal{KeyID: "k1"})
	h := HashToken([]byte(tok))

	src.mu.Lock()
	src.gate = make(chan struct{})
	src.mu.Unlock()
	done := make(chan *codec.Error)
	go func() {
		_, cerr := v.VerifyUser(bearer(tok))
		done <- cerr
	}()
	for src.lookups.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// The lookup is under way with the old record; now the key is revoked.
	v.Invalidate(h)
	src.update(h, func(p *Principal) { p.Revoked = true })
	close(src.gate)
	require.Nil(t, <-done, "the racing request saw the record as it was when it asked")
	src.mu.Lock()
	src.gate = nil
	src.mu.Unlock()
	settle(v)
	_, cerr := v.VerifyUser(bearer(tok))
	require.Same(t, codec.ErrUnauthorized, cerr)
}

func TestConcurrentMissesCoalesce(t *testing.T) {
	src := newMemSource()
	v := newTestVerifier(t, src)
	tok := addUser(src, Principal{KeyID: "k1"})
	src.gate = make(chan struct{})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, cerr := v.VerifyUser(bearer(tok))
			require.Nil(t, cerr)
		}()
	}
	for src.lookups.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the others pile up behind the first
	close(src.gate)
	wg.Wait()
	require.Less(t, src.lookups.Load(), int64(20))
}

func BenchmarkVerifyUserHit(b *testing.B) {
	src := newMemSource()
	v, _ := NewVerifier(VerifierConfig{MaxKeys: 1000}, src)
	defer v.Close()
	v.SetLive(true)
	tok := addUser(src, Principal{KeyID: "k1"})
	h := bearer(tok)
	_, _ = v.VerifyUser(h)
	settle(v)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, cerr := v.VerifyUser(h); cerr != nil {
				b.Fatal(cerr)
			}
		}
	})
}

func BenchmarkAppendRequestID(b *testing.B) {
	buf := make([]byte, 0, 64)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRequestID(buf[:0], now)
	}
}

// hungSource is a memSource that, when hang is set, accepts a lookup and
// never answers it, as a server behind a dead network path does.
type hungSource struct {
	*memSource
	hang atomic.Bool
}

func (s *hungSource) LookupKey(ctx context.Context, h TokenHash) (*Principal, error) {
	if s.hang.Load() {
		s.lookups.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.memSource.LookupKey(ctx, h)
}

// A source that hangs holds one request for a lookup's bound; the requests
// after it, within the bound, are answered at once without asking it.
func TestAHungSourceIsWaitedOnOncePerBound(t *testing.T) {
	src := &hungSource{memSource: newMemSource()}
	v, tok := cachedNotLive(t, src, src.memSource)
	src.hang.Store(true)
	p, cerr := v.VerifyUser(bearer(tok))
	require.Nil(t, cerr, "the known key is served once the lookup gives up")
	require.Equal(t, "k1", p.KeyID)
	asked := src.lookups.Load()
	for range 20 {
		p, cerr = v.VerifyUser(bearer(tok))
		require.Nil(t, cerr)
		require.Equal(t, "k1", p.KeyID)
	}
	fresh := addUser(src.memSource, Principal{KeyID: "k2"})
	_, cerr = v.VerifyUser(bearer(fresh))
	require.Equal(t, codec.CodeServiceUnavailable, cerr.Code, "an unknown key still cannot be verified")
	require.Equal(t, asked, src.lookups.Load(), "within the bound the source is not asked again")
	require.Equal(t, uint64(21), v.Stats().StaleServed)

	// The notification channel listening again means PostgreSQL answers:
	// the source is asked at once.
	src.hang.Store(false)
	v.SetLive(true)
	p, cerr = v.VerifyUser(bearer(fresh))
	require.Nil(t, cerr)
	require.Equal(t, "k2", p.KeyID)
}

// Once the bound has passed, one request asks the source again; the others
// are answered meanwhile, not held behind it.
func TestOneRequestAsksAFailedSourceAgain(t *testing.T) {
	src := newMemSource()
	v, tok := cachedNotLive(t, src, src)
	src.mu.Lock()
	src.down = true
	src.mu.Unlock()
	_, cerr := v.VerifyUser(bearer(tok))
	require.Nil(t, cerr)
	require.Positive(t, v.downUntil.Load(), "a failed lookup starts a bound")

	v.downUntil.Store(1) // the bound has passed
	gate := make(chan struct{})
	src.mu.Lock()
	src.gate = gate
	src.mu.Unlock()
	asked := src.lookups.Load()
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		_, _ = v.VerifyUser(bearer(tok))
	}()
	require.Eventually(t, func() bool { return src.lookups.Load() == asked+1 }, 5*time.Second, time.Millisecond)

	others := make(chan struct{})
	go func() {
		defer close(others)
		for range 10 {
			p, cerr := v.VerifyUser(bearer(tok))
			if cerr != nil || p.KeyID != "k1" {
				return
			}
		}
	}()
	require.Eventually(t, func() bool {
		select {
		case <-others:
			return true
		default:
			return false
		}
	}, 5*time.Second, time.Millisecond, "the others are not held behind the probe")
	require.Equal(t, asked+1, src.lookups.Load(), "one request asks the source")

	close(gate)
	<-probed
	require.Greater(t, v.downUntil.Load(), int64(1), "the failed probe starts a new bound")
	require.Equal(t, uint64(12), v.Stats().StaleServed)

	// The source is back when the next bound has passed: the next request
	// asks it, and the memory of the failure ends.
	src.mu.Lock()
	src.down, src.gate = false, nil
	src.mu.Unlock()
	v.downUntil.Store(1)
	_, cerr = v.VerifyUser(bearer(tok))
	require.Nil(t, cerr)
	require.Equal(t, asked+2, src.lookups.Load())
	require.Zero(t, v.downUntil.Load())
}
