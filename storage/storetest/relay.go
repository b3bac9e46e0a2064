package storetest

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Relay is a TCP forwarder between a client and a server (PostgreSQL,
// Redis) that a test cuts — listener and every connection closed, as when
// the server dies — and restores on the same address.
type Relay struct {
	target, addr string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
}

// StartRelay forwards a fresh loopback address to target ("host:port").
func StartRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &Relay{target: target, addr: ln.Addr().String(), conns: make(map[net.Conn]struct{})}
	r.serve(ln)
	t.Cleanup(r.Cut)
	return r
}

// Addr is the relay's address, to give clients instead of the target's.
func (r *Relay) Addr() string { return r.addr }

func (r *Relay) serve(ln net.Listener) {
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", r.target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			live := r.ln == ln
			if live {
				r.conns[c], r.conns[up] = struct{}{}, struct{}{}
			}
			r.mu.Unlock()
			if !live {
				c.Close()
				up.Close()
				continue
			}
			go r.pipe(c, up)
			go r.pipe(up, c)
		}
	}()
}

func (r *Relay) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	r.mu.Lock()
	delete(r.conns, dst)
	delete(r.conns, src)
	r.mu.Unlock()
}

// Cut closes the listener and every connection through the relay. Cutting
// twice is harmless.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		r.ln.Close()
		r.ln = nil
	}
	for c := range r.conns {
		c.Close()
	}
	clear(r.conns)
}

// Restore listens again on the relay's address.
func (r *Relay) Restore(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	require.NoError(t, err)
	r.serve(ln)
}
