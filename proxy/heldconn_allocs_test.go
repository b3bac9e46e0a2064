//go:build !race

package proxy

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// An exchange on a kept upstream connection allocates nothing for the
// hold: the buffer is lent by a pool, the raw read's callback is bound
// once per connection.
func TestHeldExchangeAllocatesNothing(t *testing.T) {
	c, _ := echoHeldPair(t)
	req, ans := []byte("ping"), make([]byte, 64)
	allocs := testing.AllocsPerRun(200, func() {
		_, _ = c.Write(req)
		_, _ = io.ReadFull(c, ans[:len(req)])
	})
	require.Zero(t, allocs)
}
