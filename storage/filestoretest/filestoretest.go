// Package filestoretest is the contract every storage.FileStore passes:
// one suite, run against each implementation.
package filestoretest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
)

// opaque hides a reader's length, so a store takes its streaming path.
type opaque struct{ r io.Reader }

func (o opaque) Read(p []byte) (int, error) { return o.r.Read(p) }

// failing returns n bytes, then fails.
type failing struct{ n int }

var errBroken = errors.New("connection reset")

func (f *failing) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errBroken
	}
	m := min(len(p), f.n)
	clear(p[:m])
	f.n -= m
	return m, nil
}

// Run runs the contract against the store s.
func Run(t *testing.T, s storage.FileStore) {
	ctx := context.Background()
	read := func(t *testing.T, key string) []byte {
		t.Helper()
		r, err := s.Open(ctx, key)
		require.NoError(t, err)
		defer r.Close()
		b, err := io.ReadAll(r)
		require.NoError(t, err)
		return b
	}
	gone := func(t *testing.T, key string) {
		t.Helper()
		_, err := s.Open(ctx, key)
		require.ErrorIs(t, err, storage.ErrNotFound)
	}
	data := make([]byte, 2*storage.PGChunkSize+12345) // several PostgreSQL chunks
	_, _ = rand.Read(data)

	t.Run("round trip, sized and streamed", func(t *testing.T) {
		n, err := s.Put(ctx, "a", bytes.NewReader(data), int64(len(data)))
		require.NoError(t, err)
		require.EqualValues(t, len(data), n)
		require.True(t, bytes.Equal(data, read(t, "a")), "the bytes read back are the bytes put")
		n, err = s.Put(ctx, "b", opaque{bytes.NewReader(data)}, int64(len(data)))
		require.NoError(t, err)
		require.EqualValues(t, len(data), n)
		require.True(t, bytes.Equal(data, read(t, "b")), "the bytes read back are the bytes put")
	})
	t.Run("empty file", func(t *testing.T) {
		n, err := s.Put(ctx, "empty", bytes.NewReader(nil), 10)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Empty(t, read(t, "empty"))
	})
	t.Run("over the limit keeps nothing", func(t *testing.T) {
		_, err := s.Put(ctx, "big", bytes.NewReader(data), int64(len(data)-1))
		require.ErrorIs(t, err, storage.ErrFileTooLarge)
		gone(t, "big")
		_, err = s.Put(ctx, "big2", opaque{bytes.NewReader(data)}, int64(len(data)-1))
		require.ErrorIs(t, err, storage.ErrFileTooLarge)
		gone(t, "big2")
	})
	t.Run("interrupted upload keeps nothing", func(t *testing.T) {
		_, err := s.Put(ctx, "cut", &failing{n: storage.PGChunkSize + 10}, int64(len(data)))
		require.Error(t, err)
		gone(t, "cut")
	})
	t.Run("delete", func(t *testing.T) {
		_, err := s.Put(ctx, "d", bytes.NewReader([]byte("bytes")), 100)
		require.NoError(t, err)
		require.NoError(t, s.Delete(ctx, "d"))
		gone(t, "d")
		require.NoError(t, s.Delete(ctx, "d"), "deleting a missing key is not an error")
		require.NoError(t, s.Delete(ctx, "never"))
	})
	t.Run("missing key", func(t *testing.T) { gone(t, "missing") })
	t.Run("keys are independent", func(t *testing.T) {
		_, err := s.Put(ctx, "x/1", bytes.NewReader([]byte("one")), 10)
		require.NoError(t, err)
		_, err = s.Put(ctx, "x/2", bytes.NewReader([]byte("two")), 10)
		require.NoError(t, err)
		require.NoError(t, s.Delete(ctx, "x/1"))
		require.Equal(t, []byte("two"), read(t, "x/2"))
	})
}
