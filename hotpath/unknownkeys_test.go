package hotpath

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
)

// TestForgedKeyCostsOneLookup: a token with a valid checksum that no key
// holds is looked up once, then refused from memory until the memory
// expires or a key is created under its hash.
func TestForgedKeyCostsOneLookup(t *testing.T) {
	src := newMemSource()
	v := newTestVerifier(t, src)
	forged, h := GenerateToken(TokenUser)
	for range 1000 {
		_, cerr := v.VerifyUser(bearer(forged))
		require.Equal(t, codec.ErrUnauthorized, cerr)
	}
	require.EqualValues(t, 1, src.lookups.Load())
	require.EqualValues(t, 999, v.Stats().UnknownHits)

	// A key created under the hash is served at once.
	src.mu.Lock()
	src.users[h] = Principal{KeyID: "k"}
	src.mu.Unlock()
	v.Invalidate(h)
	p, cerr := v.VerifyUser(bearer(forged))
	require.Nil(t, cerr)
	require.Equal(t, "k", p.KeyID)
	require.EqualValues(t, 2, src.lookups.Load())
}

func TestUnknownKeysBoundedAndDistrusted(t *testing.T) {
	src := newMemSource()
	v, err := NewVerifier(VerifierConfig{MaxKeys: 100, NegativeKeys: 4, NegativeTTL: time.Hour}, src)
	require.NoError(t, err)
	t.Cleanup(v.Close)
	v.SetLive(true)
	for range 10 {
		tok, _ := GenerateToken(TokenUser)
		_, _ = v.VerifyUser(bearer(tok))
	}
	require.LessOrEqual(t, len(v.unknown.at), 4)

	forged, _ := GenerateToken(TokenUser)
	_, _ = v.VerifyUser(bearer(forged))
	n := src.lookups.Load()
	// Without the invalidation channel nothing remembered is trusted.
	v.SetLive(false)
	_, _ = v.VerifyUser(bearer(forged))
	require.Equal(t, n+1, src.lookups.Load())
	// A reset forgets too.
	v.SetLive(true)
	_, _ = v.VerifyUser(bearer(forged))
	require.Equal(t, n+2, src.lookups.Load())
	_, _ = v.VerifyUser(bearer(forged))
	require.Equal(t, n+2, src.lookups.Load())
}
