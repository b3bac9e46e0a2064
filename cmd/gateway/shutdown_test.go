package main

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client that connected and never wrote does not hold the shutdown: it
// has nothing to answer, and the server would wait for it until the read
// timeout and then report requests in flight that do not exist.
func TestShutdownDoesNotWaitForConnectionsThatSentNothing(t *testing.T) {
	ta := startTestApp(t, func(c *serveConfig) { c.ReadTimeout, c.ShutdownTimeout = 30*time.Second, 2*time.Second })
	var silent []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ta.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		silent = append(silent, c)
	}
	time.Sleep(50 * time.Millisecond) // accepted
	ta.shutdown()
	require.NotContains(t, ta.logs.String(), "requests still in flight at shutdown")
	for _, c := range silent {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Second)))
		n, err := c.Read(make([]byte, 1))
		require.Zero(t, n)
		require.Error(t, err)
		require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "closed without a word")
	}
}
