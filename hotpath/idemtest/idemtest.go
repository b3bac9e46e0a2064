// Package idemtest is the contract every hotpath.IdempotencyStore passes:
// the in-process store and the Redis one run the same tests, so a gateway
// behaves the same with one process or a fleet.
package idemtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
)

// The lifetimes a store under test must be made with: short, so that a
// store on real time expires within the test, and long enough that nothing
// expires between two calls of one step.
const (
	TTL   = 250 * time.Millisecond // how long a stored reply lives
	Lease = 150 * time.Millisecond // how long an unsettled claim holds its key
)

// Clock is implemented by a store under test whose clock the test drives
// (an in-process store with an injected clock). Run moves it instead of
// waiting for time to pass, and then also checks that nothing expired a
// moment early.
type Clock interface {
	Advance(d time.Duration)
}

// Run runs the contract. newStore returns an empty store, made with TTL and
// Lease, for each case.
func Run(t *testing.T, newStore func(t *testing.T) hotpath.IdempotencyStore) {
	body1, body2 := sha256.Sum256([]byte(`{"n":1}`)), sha256.Sum256([]byte(`{"n":2}`))
	reply := hotpath.Replay{
		Status:  200,
		Headers: [][2]string{{"Content-Type", "application/json"}, {"X-Note", "a: b, ü"}},
		Body:    allBytes(),
	}

	t.Run("FirstBeginClaims", func(t *testing.T) {
		s := newStore(t)
		claim(t, s, "scope", "k", body1)
	})

	t.Run("CompleteThenReplay", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		sent := clone(reply)
		require.NoError(t, c.Complete(t.Context(), sent))
		sent.Body[0]++ // the store keeps its own copy
		sent.Headers[0][1] = "text/plain"
		for range 2 {
			requireReplay(t, reply, begin(t, s, "scope", "k", body1))
		}
	})

	t.Run("EmptyReplay", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		require.NoError(t, c.Complete(t.Context(), hotpath.Replay{Status: 204}))
		requireReplay(t, hotpath.Replay{Status: 204}, begin(t, s, "scope", "k", body1))
	})

	t.Run("OtherBodyConflicts", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		requireConflict(t, s, "scope", "k", body2, hotpath.ErrIdempotencyKeyReused)
		require.NoError(t, c.Complete(t.Context(), reply))
		requireConflict(t, s, "scope", "k", body2, hotpath.ErrIdempotencyKeyReused)
		requireReplay(t, reply, begin(t, s, "scope", "k", body1))
	})

	t.Run("InFlightConflicts", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		requireConflict(t, s, "scope", "k", body1, hotpath.ErrIdempotencyInProgress)
		require.NoError(t, c.Complete(t.Context(), reply))
		requireReplay(t, reply, begin(t, s, "scope", "k", body1))
	})

	t.Run("AbandonReleases", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		require.NoError(t, c.Abandon(t.Context()))
		require.NoError(t, c.Abandon(t.Context()), "a second Abandon does nothing")
		// A retry after a failure may even carry another body: nothing was
		// stored under the key.
		c = claim(t, s, "scope", "k", body2)
		require.NoError(t, c.Complete(t.Context(), reply))
		requireReplay(t, reply, begin(t, s, "scope", "k", body2))
	})

	t.Run("CompleteAfterAbandonIsLost", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		require.NoError(t, c.Abandon(t.Context()))
		require.ErrorIs(t, c.Complete(t.Context(), reply), hotpath.ErrIdempotencyClaimLost)
		claim(t, s, "scope", "k", body1)
	})

	t.Run("AbandonAfterCompleteKeepsReplay", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		require.NoError(t, c.Complete(t.Context(), reply))
		require.NoError(t, c.Abandon(t.Context()))
		requireReplay(t, reply, begin(t, s, "scope", "k", body1))
	})

	t.Run("SecondCompleteIsLost", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		require.NoError(t, c.Complete(t.Context(), reply))
		require.ErrorIs(t, c.Complete(t.Context(), hotpath.Replay{Status: 201}), hotpath.ErrIdempotencyClaimLost)
		requireReplay(t, reply, begin(t, s, "scope", "k", body1))
	})

	t.Run("LeaseExpires", func(t *testing.T) {
		s := newStore(t)
		first := claim(t, s, "scope", "k", body1)
		var second hotpath.Claim
		expire(t, s, Lease,
			func() { requireConflict(t, s, "scope", "k", body1, hotpath.ErrIdempotencyInProgress) },
			func() bool {
				_, c, err := s.Begin(context.Background(), "scope", "k", body1)
				second = c
				return err == nil && c != nil
			})
		// The first claim lost the key: it can neither store nor release it.
		require.ErrorIs(t, first.Complete(t.Context(), hotpath.Replay{Status: 201}), hotpath.ErrIdempotencyClaimLost)
		require.NoError(t, first.Abandon(t.Context()))
		requireConflict(t, s, "scope", "k", body1, hotpath.ErrIdempotencyInProgress)
		require.NoError(t, second.Complete(t.Context(), reply))
		requireReplay(t, reply, begin(t, s, "scope", "k", body1))
	})

	t.Run("RenewHoldsTheKey", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		// Renewed every two thirds of a lease, for two leases: still held.
		for range 3 {
			pass(s, 2*Lease/3)
			require.NoError(t, c.Renew(t.Context()))
			requireConflict(t, s, "scope", "k", body1, hotpath.ErrIdempotencyInProgress)
		}
		// Left alone, it expires one lease after the last renewal.
		expire(t, s, Lease,
			func() { requireConflict(t, s, "scope", "k", body1, hotpath.ErrIdempotencyInProgress) },
			func() bool {
				_, c, err := s.Begin(context.Background(), "scope", "k", body1)
				return err == nil && c != nil
			})
		require.ErrorIs(t, c.Renew(t.Context()), hotpath.ErrIdempotencyClaimLost)
	})

	t.Run("RenewAfterCompleteIsLost", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		require.NoError(t, c.Complete(t.Context(), reply))
		require.ErrorIs(t, c.Renew(t.Context()), hotpath.ErrIdempotencyClaimLost)
		requireReplay(t, reply, begin(t, s, "scope", "k", body1))
	})

	t.Run("LeaseExpiresUnclaimed", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		// Watch another key claimed just after: once its lease has run out,
		// so has k's, and k was left alone meanwhile.
		claim(t, s, "scope", "probe", body1)
		expire(t, s, Lease,
			func() { requireConflict(t, s, "scope", "probe", body1, hotpath.ErrIdempotencyInProgress) },
			func() bool {
				_, c, err := s.Begin(context.Background(), "scope", "probe", body1)
				return err == nil && c != nil
			})
		require.ErrorIs(t, c.Complete(t.Context(), reply), hotpath.ErrIdempotencyClaimLost)
		claim(t, s, "scope", "k", body1)
	})

	t.Run("ReplayExpires", func(t *testing.T) {
		s := newStore(t)
		c := claim(t, s, "scope", "k", body1)
		require.NoError(t, c.Complete(t.Context(), reply))
		expire(t, s, TTL,
			func() { requireReplay(t, reply, begin(t, s, "scope", "k", body1)) },
			func() bool {
				r, c, err := s.Begin(context.Background(), "scope", "k", body1)
				return err == nil && r == nil && c != nil
			})
	})

	t.Run("ScopesIsolate", func(t *testing.T) {
		s := newStore(t)
		a := claim(t, s, "org-a", "k", body1)
		b := claim(t, s, "org-b", "k", body2)
		other := reply
		other.Body = []byte("b's reply")
		require.NoError(t, a.Complete(t.Context(), reply))
		requireConflict(t, s, "org-b", "k", body2, hotpath.ErrIdempotencyInProgress)
		require.NoError(t, b.Complete(t.Context(), other))
		requireReplay(t, reply, begin(t, s, "org-a", "k", body1))
		requireReplay(t, other, begin(t, s, "org-b", "k", body2))
		// Where the scope ends and the key begins is never ambiguous.
		claim(t, s, "a:b", "c", body1)
		claim(t, s, "a", "b:c", body1)
		claim(t, s, "a:b:c", "", body1)
	})

	t.Run("KeysIsolate", func(t *testing.T) {
		s := newStore(t)
		claim(t, s, "scope", "k1", body1)
		claim(t, s, "scope", "k2", body1)
	})

	t.Run("ConcurrentBeginsClaimOnce", func(t *testing.T) {
		s := newStore(t)
		const n = 50
		var (
			wg     sync.WaitGroup
			start  = make(chan struct{})
			claims = make([]hotpath.Claim, n)
			errs   = make([]error, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				var r *hotpath.Replay
				r, claims[i], errs[i] = s.Begin(context.Background(), "scope", "fresh", body1)
				if r != nil && errs[i] == nil {
					errs[i] = errors.New("replayed a reply that was never stored")
				}
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i := range n {
			if claims[i] != nil {
				require.NoError(t, errs[i])
				won++
				continue
			}
			require.ErrorIs(t, errs[i], hotpath.ErrIdempotencyInProgress)
		}
		require.Equal(t, 1, won)
	})
}

// expire checks that something holds now, lets d pass on s's clock, and
// waits until gone reports true. On a store whose clock the test drives it
// also checks the state a millisecond before d.
func expire(t *testing.T, s hotpath.IdempotencyStore, d time.Duration, still func(), gone func() bool) {
	t.Helper()
	still()
	if c, ok := s.(Clock); ok {
		c.Advance(d - time.Millisecond)
		still()
		c.Advance(time.Millisecond)
		require.True(t, gone(), "still there after %v", d)
		return
	}
	require.Eventually(t, gone, d+5*time.Second, 5*time.Millisecond, "still there long after %v", d)
}

// pass lets d go by: the store's clock moves, or real time passes.
func pass(s hotpath.IdempotencyStore, d time.Duration) {
	if c, ok := s.(Clock); ok {
		c.Advance(d)
		return
	}
	time.Sleep(d)
}

func claim(t *testing.T, s hotpath.IdempotencyStore, scope, key string, body [32]byte) hotpath.Claim {
	t.Helper()
	r, c, err := s.Begin(t.Context(), scope, key, body)
	require.NoError(t, err)
	require.Nil(t, r)
	require.NotNil(t, c)
	return c
}

func begin(t *testing.T, s hotpath.IdempotencyStore, scope, key string, body [32]byte) *hotpath.Replay {
	t.Helper()
	r, c, err := s.Begin(t.Context(), scope, key, body)
	require.NoError(t, err)
	require.Nil(t, c, "claimed a key that holds a reply")
	require.NotNil(t, r)
	return r
}

func requireConflict(t *testing.T, s hotpath.IdempotencyStore, scope, key string, body [32]byte, want error) {
	t.Helper()
	r, c, err := s.Begin(t.Context(), scope, key, body)
	require.ErrorIs(t, err, want)
	require.ErrorIs(t, err, hotpath.ErrIdempotencyConflict)
	require.Nil(t, r)
	require.Nil(t, c)
}

// requireReplay compares byte for byte; nil and empty are the same.
func requireReplay(t *testing.T, want hotpath.Replay, got *hotpath.Replay) {
	t.Helper()
	require.NotNil(t, got)
	require.Equal(t, want.Status, got.Status)
	require.Len(t, got.Headers, len(want.Headers))
	for i := range want.Headers {
		require.Equal(t, want.Headers[i], got.Headers[i])
	}
	require.True(t, bytes.Equal(want.Body, got.Body), "body differs: want %d bytes, got %d", len(want.Body), len(got.Body))
}

func clone(r hotpath.Replay) hotpath.Replay {
	r.Headers = append([][2]string(nil), r.Headers...)
	r.Body = append([]byte(nil), r.Body...)
	return r
}

// allBytes is a body holding every byte value, so that a store that is not
// binary-safe fails.
func allBytes() []byte {
	b := make([]byte, 0, 3*256)
	for range 3 {
		for i := range 256 {
			b = append(b, byte(i))
		}
	}
	return b
}
