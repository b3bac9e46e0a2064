package hotpath_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/idemtest"
)

// testClock is a clock the test moves by hand.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := new(testClock)
	c.ns.Store(time.Date(2026, 10, 7, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// clockedMemory is a memory store with the clock that drives it, so that
// the contract moves time instead of waiting.
type clockedMemory struct {
	*hotpath.MemoryIdempotency
	*testClock
}

func TestMemoryIdempotencyContract(t *testing.T) {
	idemtest.Run(t, func(t *testing.T) hotpath.IdempotencyStore {
		clk := newTestClock()
		m := hotpath.NewMemoryIdempotency(idemtest.TTL, 0,
			hotpath.IdempotencyLease(idemtest.Lease), hotpath.IdempotencyClock(clk.now))
		return clockedMemory{m, clk}
	})
}

var (
	bodyA = sha256.Sum256([]byte("a"))
	ok200 = hotpath.Replay{Status: 200, Headers: [][2]string{{"Content-Type", "application/json"}}, Body: []byte(`{"id":"x"}`)}
)

func claimKey(t *testing.T, m *hotpath.MemoryIdempotency, key string) hotpath.Claim {
	t.Helper()
	r, c, err := m.Begin(t.Context(), "scope", key, bodyA)
	require.NoError(t, err)
	require.Nil(t, r)
	require.NotNil(t, c)
	return c
}

func TestMemoryIdempotencyDefaults(t *testing.T) {
	clk := newTestClock()
	m := hotpath.NewMemoryIdempotency(0, 0, hotpath.IdempotencyClock(clk.now))
	ctx := t.Context()

	c := claimKey(t, m, "lease")
	clk.Advance(hotpath.DefaultIdempotencyLease - time.Millisecond)
	_, _, err := m.Begin(ctx, "scope", "lease", bodyA)
	require.ErrorIs(t, err, hotpath.ErrIdempotencyInProgress)
	require.NoError(t, c.Abandon(ctx))

	c = claimKey(t, m, "ttl")
	require.NoError(t, c.Complete(ctx, ok200))
	clk.Advance(hotpath.DefaultIdempotencyTTL - time.Millisecond)
	r, _, err := m.Begin(ctx, "scope", "ttl", bodyA)
	require.NoError(t, err)
	require.NotNil(t, r)
	clk.Advance(time.Millisecond)
	claimKey(t, m, "ttl")
}

func TestMemoryIdempotencyEvictsOldestReplayFirst(t *testing.T) {
	m := hotpath.NewMemoryIdempotency(time.Hour, 3)
	ctx := t.Context()
	for _, k := range []string{"r1", "r2"} {
		require.NoError(t, claimKey(t, m, k).Complete(ctx, ok200))
	}
	inflight := claimKey(t, m, "c1")
	claimKey(t, m, "c2") // over the bound: r1, the oldest reply, goes
	require.Equal(t, hotpath.IdempotencyStats{InFlight: 2, Stored: 1, Evicted: 1}, m.Stats())

	r, _, err := m.Begin(ctx, "scope", "r2", bodyA)
	require.NoError(t, err)
	require.NotNil(t, r, "r2 is younger and stays")
	_, _, err = m.Begin(ctx, "scope", "c1", bodyA)
	require.ErrorIs(t, err, hotpath.ErrIdempotencyInProgress, "claims outlive replies")
	require.NoError(t, inflight.Complete(ctx, ok200))
}

func TestMemoryIdempotencyEvictsClaimsWhenNoReplayIsLeft(t *testing.T) {
	m := hotpath.NewMemoryIdempotency(time.Hour, 2)
	ctx := t.Context()
	oldest := claimKey(t, m, "c1")
	claimKey(t, m, "c2")
	claimKey(t, m, "c3")
	require.Equal(t, hotpath.IdempotencyStats{InFlight: 2, Evicted: 1}, m.Stats())
	require.ErrorIs(t, oldest.Complete(ctx, ok200), hotpath.ErrIdempotencyClaimLost)
}

func TestMemoryIdempotencyPrunesOnAccess(t *testing.T) {
	clk := newTestClock()
	m := hotpath.NewMemoryIdempotency(time.Minute, 0,
		hotpath.IdempotencyLease(time.Second), hotpath.IdempotencyClock(clk.now))
	ctx := t.Context()
	for i := range 100 {
		c := claimKey(t, m, "k"+strconv.Itoa(i))
		if i%2 == 0 {
			require.NoError(t, c.Complete(ctx, ok200))
		}
	}
	require.Equal(t, hotpath.IdempotencyStats{InFlight: 50, Stored: 50}, m.Stats())

	clk.Advance(time.Second) // the claims' lease ends
	claimKey(t, m, "new")
	require.Equal(t, hotpath.IdempotencyStats{InFlight: 1, Stored: 50}, m.Stats())

	clk.Advance(time.Minute) // and then the replies' TTL, and the new claim's lease
	_, _, err := m.Begin(ctx, "scope", "k0", bodyA)
	require.NoError(t, err)
	require.Equal(t, hotpath.IdempotencyStats{InFlight: 1}, m.Stats())
}

func TestReplayEncodingRoundTrips(t *testing.T) {
	for name, r := range map[string]hotpath.Replay{
		"full":  {Status: 200, Headers: [][2]string{{"Content-Type", "application/json"}, {"", ""}}, Body: []byte("{}\x00\xff")},
		"empty": {Status: 204},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := hotpath.ParseReplay(hotpath.AppendReplay(nil, &r))
			require.NoError(t, err)
			require.Equal(t, r, *got)
		})
	}
}

func TestParseReplayRefusesMalformed(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":           nil,
		"status too low":  {99, 0},
		"status too high": {0xe8, 0x07, 0}, // 1000
		"no header count": {200, 1},
		"too many":        {200, 1, 5},
		"name overruns":   {200, 1, 1, 9, 'a', 0},
		"value overruns":  {200, 1, 1, 1, 'a', 9},
		"varint overflow": {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := hotpath.ParseReplay(b)
			require.Error(t, err)
		})
	}
}

// FuzzReplayEncoding checks that a reply survives its encoding byte for
// byte, and that any bytes either fail to parse or parse to a reply whose
// encoding parses back to the same reply.
func FuzzReplayEncoding(f *testing.F) {
	f.Add(uint16(200), "Content-Type", "application/json", []byte(`{"id":"x"}`))
	f.Add(uint16(204), "", "", []byte(nil))
	f.Add(uint16(200), "X", "\x00\xff", []byte{200, 1, 1, 'a', 1, 'b'})
	f.Fuzz(func(t *testing.T, status uint16, name, value string, body []byte) {
		r := hotpath.Replay{Status: 100 + int(status)%900, Headers: [][2]string{{name, value}}}
		if len(body) > 0 {
			r.Body = body
		}
		got, err := hotpath.ParseReplay(hotpath.AppendReplay(nil, &r))
		require.NoError(t, err)
		require.Equal(t, r, *got)

		parsed, err := hotpath.ParseReplay(body)
		if err != nil {
			return
		}
		again, err := hotpath.ParseReplay(hotpath.AppendReplay(nil, parsed))
		require.NoError(t, err)
		require.Equal(t, parsed, again)
	})
}

func TestMemoryIdempotencyCompleteCopiesHeaders(t *testing.T) {
	m := hotpath.NewMemoryIdempotency(time.Hour, 0)
	ctx := t.Context()
	buf := []byte("application/json")
	sent := hotpath.Replay{Status: 200, Headers: [][2]string{{"Content-Type", string(buf)}}, Body: bytes.Clone(buf)}
	require.NoError(t, claimKey(t, m, "k").Complete(ctx, sent))
	sent.Headers[0][0] = "X"
	sent.Body[0] = 'X'
	r, _, err := m.Begin(ctx, "scope", "k", bodyA)
	require.NoError(t, err)
	require.Equal(t, "Content-Type", r.Headers[0][0])
	require.Equal(t, "application/json", string(r.Body))
}

func BenchmarkMemoryIdempotencyReplay(b *testing.B) {
	m := hotpath.NewMemoryIdempotency(time.Hour, 0)
	ctx := context.Background()
	_, c, err := m.Begin(ctx, "key_0123456789abcdef", "3f1c2a9e-5b7d-4e21-9a0c-8d6f4b2e1a37", bodyA)
	require.NoError(b, err)
	require.NoError(b, c.Complete(ctx, ok200))
	b.ReportAllocs()
	for b.Loop() {
		r, _, err := m.Begin(ctx, "key_0123456789abcdef", "3f1c2a9e-5b7d-4e21-9a0c-8d6f4b2e1a37", bodyA)
		if err != nil || r == nil {
			b.Fatal("no replay")
		}
	}
}

func BenchmarkMemoryIdempotencyReplayParallel(b *testing.B) {
	m := hotpath.NewMemoryIdempotency(time.Hour, 0)
	ctx := context.Background()
	_, c, err := m.Begin(ctx, "key_0123456789abcdef", "3f1c2a9e-5b7d-4e21-9a0c-8d6f4b2e1a37", bodyA)
	require.NoError(b, err)
	require.NoError(b, c.Complete(ctx, ok200))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, _, err := m.Begin(ctx, "key_0123456789abcdef", "3f1c2a9e-5b7d-4e21-9a0c-8d6f4b2e1a37", bodyA)
			if err != nil || r == nil {
				b.Error("no replay")
				return
			}
		}
	})
}

// Hold renews a claim for as long as it is unsettled, past any number of
// leases, and stops once it is settled.
func TestHoldKeepsAClaimPastItsLease(t *testing.T) {
	const lease = 60 * time.Millisecond
	m := hotpath.NewMemoryIdempotency(time.Hour, 0, hotpath.IdempotencyLease(lease))
	ctx := t.Context()
	held := hotpath.Hold(claimKey(t, m, "k"), lease)
	time.Sleep(5 * lease)
	_, _, err := m.Begin(ctx, "scope", "k", bodyA)
	require.ErrorIs(t, err, hotpath.ErrIdempotencyInProgress, "renewed while unsettled")
	require.NoError(t, held.Complete(ctx, ok200))
	r, _, err := m.Begin(ctx, "scope", "k", bodyA)
	require.NoError(t, err)
	require.Equal(t, ok200, *r)

	// Abandoned, renewal stops and the key is free at once.
	held = hotpath.Hold(claimKey(t, m, "j"), lease)
	require.NoError(t, held.Abandon(ctx))
	time.Sleep(2 * lease)
	claimKey(t, m, "j")
}
