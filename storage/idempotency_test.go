package storage_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/idemtest"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

func TestRedisIdempotencyContract(t *testing.T) {
	storetest.EachRedisDeployment(t, testRedisIdempotencyContract)
}

func testRedisIdempotencyContract(t *testing.T, connect func(testing.TB) rueidis.Client) {
	c := connect(t)
	idemtest.Run(t, func(t *testing.T) hotpath.IdempotencyStore {
		return storage.NewRedisIdempotency(c, storetest.Prefix(), idemtest.TTL, idemtest.Lease)
	})
}

func TestRedisIdempotencyKeys(t *testing.T) { storetest.EachRedis(t, testRedisIdempotencyKeys) }

func testRedisIdempotencyKeys(t *testing.T, connect func(testing.TB) rueidis.Client) {
	c := connect(t)
	ctx := t.Context()
	prefix := storetest.Prefix()
	s := storage.NewRedisIdempotency(c, prefix, time.Hour, time.Minute)
	const idemKey = "client-chosen-idempotency-key"
	body := sha256.Sum256([]byte(`{"model":"mira"}`))

	_, claim, err := s.Begin(ctx, "key_42", idemKey, body)
	require.NoError(t, err)
	require.NotNil(t, claim)

	sum := sha256.Sum256([]byte(idemKey))
	name := prefix + "idem:key_42:" + hex.EncodeToString(sum[:])
	require.Equal(t, []string{name}, allKeys(t, c, prefix+"*"), "one key, untagged: a script touches only it")

	pttl := func() time.Duration {
		ms, err := c.Do(ctx, c.B().Pttl().Key(name).Build()).AsInt64()
		require.NoError(t, err)
		return time.Duration(ms) * time.Millisecond
	}
	require.InDelta(t, time.Minute, pttl(), float64(5*time.Second), "a claim lives one lease")

	require.NoError(t, claim.Complete(ctx, hotpath.Replay{Status: 200, Body: []byte("{}")}))
	require.InDelta(t, time.Hour, pttl(), float64(5*time.Second), "a reply lives one TTL")
	v, err := c.Do(ctx, c.B().Get().Key(name).Build()).ToString()
	require.NoError(t, err)
	require.False(t, strings.Contains(v, idemKey), "the client's key is stored only hashed")
}

// Two processes, each with its own client, share claims and replies.
func TestRedisIdempotencyAcrossProcesses(t *testing.T) {
	storetest.EachRedisDeployment(t, testRedisIdempotencyAcrossProcesses)
}

func testRedisIdempotencyAcrossProcesses(t *testing.T, connect func(testing.TB) rueidis.Client) {
	prefix := storetest.Prefix()
	a := storage.NewRedisIdempotency(connect(t), prefix, time.Hour, time.Minute)
	b := storage.NewRedisIdempotency(connect(t), prefix, time.Hour, time.Minute)
	ctx := t.Context()
	body := sha256.Sum256([]byte("body"))

	_, claim, err := a.Begin(ctx, "scope", "k", body)
	require.NoError(t, err)
	require.NotNil(t, claim)
	_, _, err = b.Begin(ctx, "scope", "k", body)
	require.ErrorIs(t, err, hotpath.ErrIdempotencyInProgress)

	want := hotpath.Replay{Status: 200, Headers: [][2]string{{"Content-Type", "application/json"}}, Body: []byte(`{"id":"1"}`)}
	require.NoError(t, claim.Complete(ctx, want))
	got, _, err := b.Begin(ctx, "scope", "k", body)
	require.NoError(t, err)
	require.Equal(t, want, *got)
}

// A closed client fails the call. On one server only: a closed cluster
// client closes its node connections in the background and may still
// answer meanwhile.
func TestRedisIdempotencyUnreachable(t *testing.T) {
	c := storetest.Redis(t)
	s := storage.NewRedisIdempotency(c, storetest.Prefix(), time.Hour, time.Minute)
	c.Close()
	_, claim, err := s.Begin(t.Context(), "scope", "k", sha256.Sum256(nil))
	require.Error(t, err)
	require.NotErrorIs(t, err, hotpath.ErrIdempotencyConflict)
	require.Nil(t, claim)
}

func TestRedisIdempotencyRefusesNonHTTPStatus(t *testing.T) {
	storetest.EachRedis(t, testRedisIdempotencyRefusesNonHTTPStatus)
}

func testRedisIdempotencyRefusesNonHTTPStatus(t *testing.T, connect func(testing.TB) rueidis.Client) {
	s := storage.NewRedisIdempotency(connect(t), storetest.Prefix(), time.Hour, time.Minute)
	_, claim, err := s.Begin(t.Context(), "scope", "k", sha256.Sum256(nil))
	require.NoError(t, err)
	require.Error(t, claim.Complete(t.Context(), hotpath.Replay{Status: 0}))
	require.NoError(t, claim.Abandon(t.Context()))
}

// A held claim keeps its key past any number of leases while its process
// renews it, and a process that dies (here: its client closes) frees the
// key within one lease, for another process's retry to run.
func TestRedisIdempotencyHeldClaimOutlivesNoDeadProcess(t *testing.T) {
	const lease = 300 * time.Millisecond
	prefix := storetest.Prefix()
	dying := storetest.Redis(t)
	a := storage.NewRedisIdempotency(dying, prefix, time.Hour, lease)
	b := storage.NewRedisIdempotency(storetest.Redis(t), prefix, time.Hour, lease)
	ctx := t.Context()
	body := sha256.Sum256([]byte("body"))

	_, claim, err := a.Begin(ctx, "scope", "k", body)
	require.NoError(t, err)
	hotpath.Hold(claim, a.Lease())
	time.Sleep(4 * lease)
	_, _, err = b.Begin(ctx, "scope", "k", body)
	require.ErrorIs(t, err, hotpath.ErrIdempotencyInProgress, "renewed by its living process")

	dying.Close()
	require.Eventually(t, func() bool {
		_, c, err := b.Begin(ctx, "scope", "k", body)
		return err == nil && c != nil
	}, 10*time.Second, 10*time.Millisecond, "freed once its process stops renewing")
}
