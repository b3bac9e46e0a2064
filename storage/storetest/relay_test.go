package storetest

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echo serves a loopback address that writes back what it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip reports whether a byte sent through addr comes back.
func roundTrip(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	if _, err := c.Write([]byte{'x'}); err != nil {
		return false
	}
	b := make([]byte, 1)
	_, err = io.ReadFull(c, b)
	return err == nil && b[0] == 'x'
}

// A cut relay keeps its port, so that no other process can take it during
// the outage, and closes what it accepts until it is restored.
func TestRelayKeepsItsAddressWhileCut(t *testing.T) {
	r := StartRelay(t, echo(t))
	require.True(t, roundTrip(t, r.Addr()))

	held, err := net.Dial("tcp", r.Addr())
	require.NoError(t, err)
	defer held.Close()
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.conns) == 2
	}, 5*time.Second, time.Millisecond)

	r.Cut()
	require.NoError(t, held.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = held.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "a connection open at the cut is closed")
	require.False(t, roundTrip(t, r.Addr()), "a connection made during the outage is closed")
	ln, err := net.Listen("tcp", r.Addr())
	if err == nil {
		ln.Close()
	}
	require.Error(t, err, "the port stays the relay's")

	r.Restore()
	require.True(t, roundTrip(t, r.Addr()))
}
