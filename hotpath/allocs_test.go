//go:build !race

package hotpath

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVerifyUserHitAllocatesNothing(t *testing.T) {
	src := newMemSource()
	v := newTestVerifier(t, src)
	tok := addUser(src, Principal{KeyID: "k1"})
	h := bearer(tok)
	_, cerr := v.VerifyUser(h)
	require.Nil(t, cerr)
	settle(v)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, cerr := v.VerifyUser(h); cerr != nil {
			t.Fatal(cerr)
		}
	})
	require.Zero(t, allocs)
}

func TestRequestIDsAllocateNothing(t *testing.T) {
	c := AcquireCall()
	defer ReleaseCall(c)
	client := []byte("client-supplied_id-123")
	allocs := testing.AllocsPerRun(1000, func() {
		c.SetID(nil)
		c.SetID(client)
	})
	require.Zero(t, allocs)
	require.Equal(t, "client-supplied_id-123", string(c.ID()))
}

func TestCheckTokenAllocatesNothing(t *testing.T) {
	tok, _ := GenerateToken(TokenUser)
	b := []byte(tok)
	allocs := testing.AllocsPerRun(1000, func() {
		if CheckToken(b) != TokenUser {
			t.Fatal("refused a good token")
		}
		_ = HashToken(b)
	})
	require.Zero(t, allocs)
}

func TestGateAllocatesNothing(t *testing.T) {
	g := NewGate(4)
	allocs := testing.AllocsPerRun(1000, func() {
		if g.TryAcquire() {
			g.Release()
		}
	})
	require.Zero(t, allocs)
}
