package storetest

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Relay is a TCP forwarder between a client and a server (PostgreSQL,
// Redis) that a test cuts, as when the server dies: every connection is
// closed, and each new one is closed as soon as it is accepted, until the
// test restores it. The relay keeps its address while cut. A listener
// closed for the outage would free its port for any other process of the
// test run to bind, and a client dialling it would then reach that process
// (one that never answers, say) instead of an outage.
type Relay struct {
	target, addr string
	ln           net.Listener
	mu           sync.Mutex
	cut          bool
	conns        map[net.Conn]struct{}
}

// StartRelay forwards a fresh loopback address to target ("host:port").
func StartRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &Relay{target: target, addr: ln.Addr().String(), ln: ln, conns: make(map[net.Conn]struct{})}
	go r.serve()
	t.Cleanup(r.close)
	return r
}

// Addr is the relay's address, to give clients instead of the target's.
func (r *Relay) Addr() string { return r.addr }

func (r *Relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if r.isCut() {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		live := !r.cut
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
}

func (r *Relay) isCut() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cut
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

// Cut closes every connection through the relay and every one made until
// Restore. Cutting twice is harmless.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
	for c := range r.conns {
		c.Close()
	}
	clear(r.conns)
}

// Restore forwards new connections again.
func (r *Relay) Restore() {
	r.mu.Lock()
	r.cut = false
	r.mu.Unlock()
}

// close ends the relay at the test's end.
func (r *Relay) close() {
	r.ln.Close()
	r.Cut()
}
