package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// heldConn holds what the upstream client writes until the client reads
// the answer, then sends it and waits for the answer in one step.
//
// A socket read tried right after a request is sent finds nothing (the
// upstream has not answered yet): it costs a system call that returns
// EAGAIN before the poller parks the reader, about as much as a whole
// read on this kind of machine. Sent from inside the raw connection's read
// callback, the request goes out after the poller has been armed for the
// answer, so the first read is tried only once the answer is there and no
// readiness can be missed: nothing can arrive on an HTTP/1.1 connection
// before its request is sent.
//
// Only a request/response client may use it: whatever it writes must be
// followed by a read. What is held when the connection closes is dropped:
// a request whose answer nobody will read, or a TLS close alert (a peer
// sees the connection end as it would have without one). Close may come
// from another goroutine (a departed stream's client closes its upstream
// connection), so it does not touch what is held.
type heldConn struct {
	*net.TCPConn
	raw  syscall.RawConn
	held []byte
	box  *[]byte // held's buffer, from heldBufs: nil when nothing is held

	// The raw read's callback and its state, kept here so that a read
	// allocates nothing (a closure passed to the raw connection would).
	onReadable func(fd uintptr) bool
	rp         []byte
	rn         int
	rerr       error
	sent       bool
	sendErr    error
	// last is when the connection was dialled or last read from.
	last time.Time
}

// heldMax bounds what is held: a larger request is written as it comes.
const heldMax = 64 << 10

// heldBufs lends the buffers requests are held in: a connection keeps one
// only while it holds a request, so an open stream's connection, or an
// idle one, keeps none.
var heldBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 2048)
	return &b
}}

// heldFresh is how recently a connection must have been read from for its
// request to be held. An upstream may close a connection that sits idle,
// and the poller's readiness for that end is forgotten when the next read
// begins; a peer that only half-closes (and drains what it is sent, as a
// lingering close does) answers the request with no reset, so a held
// request would wait for its deadline. A connection idle longer than this
// is written and read the ordinary way, whose first read finds the end at
// once. Upstreams keep idle connections for seconds, not milliseconds.
const heldFresh = 100 * time.Millisecond

// holdWrites wraps a TCP connection; other connections are returned as
// they are.
func holdWrites(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	hc := &heldConn{TCPConn: tc, raw: raw, last: time.Now()}
	hc.onReadable = hc.sendThenRead
	return hc
}

// sendThenRead is the raw read's callback: its first call sends what is
// held and waits for the answer (false), the next ones read it.
func (c *heldConn) sendThenRead(fd uintptr) bool {
	if !c.sent {
		c.sent = true
		for len(c.held) > 0 {
			w, err := syscall.Write(int(fd), c.held)
			if err == syscall.EINTR {
				continue
			}
			if err != nil || w <= 0 {
				if err != syscall.EAGAIN {
					c.sendErr = err
					if c.sendErr == nil {
						c.sendErr = io.ErrShortWrite
					}
				}
				return true // the rest goes out the ordinary way
			}
			c.held = c.held[:copy(c.held, c.held[w:])]
		}
		return false // wait for the answer
	}
	for {
		c.rn, c.rerr = syscall.Read(int(fd), c.rp)
		if c.rerr != syscall.EINTR {
			break
		}
	}
	return c.rerr != syscall.EAGAIN
}

func (c *heldConn) Write(p []byte) (int, error) {
	if len(c.held)+len(p) > heldMax {
		if err := c.flush(); err != nil {
			return 0, err
		}
		return c.TCPConn.Write(p)
	}
	if c.box == nil {
		c.box = heldBufs.Get().(*[]byte)
		c.held = (*c.box)[:0]
	}
	c.held = append(c.held, p...)
	return len(p), nil
}

// release gives the buffer back: nothing is held any more.
func (c *heldConn) release() {
	if c.box != nil && cap(c.held) <= heldMax {
		*c.box = c.held[:0]
		heldBufs.Put(c.box)
	}
	c.held, c.box = nil, nil
}

// flush writes what is held the ordinary way.
func (c *heldConn) flush() error {
	if len(c.held) == 0 {
		return nil
	}
	_, err := c.TCPConn.Write(c.held)
	c.release()
	return err
}

func (c *heldConn) Read(p []byte) (int, error) {
	if len(c.held) > 0 && len(p) > 0 && time.Since(c.last) < heldFresh {
		return c.sendAndRead(p)
	}
	if err := c.flush(); err != nil {
		return 0, err
	}
	n, err := c.TCPConn.Read(p)
	if n > 0 {
		c.last = time.Now()
	}
	return n, err
}

// sendAndRead sends what is held from inside the read that waits for the
// answer.
func (c *heldConn) sendAndRead(p []byte) (int, error) {
	c.rp, c.rn, c.rerr, c.sent, c.sendErr = p, 0, nil, false, nil
	err := c.raw.Read(c.onReadable)
	n, readErr, sendErr := c.rn, c.rerr, c.sendErr
	c.rp = nil
	if len(c.held) == 0 {
		c.release()
	}
	switch {
	case sendErr != nil:
		c.release()
		return 0, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: sendErr}
	case err != nil:
		// The read could not begin (the connection closed, its deadline
		// passed) or its wait ended so: nothing of this exchange will be
		// read, so what was not sent never will be.
		c.release()
		var op *net.OpError
		if errors.As(err, &op) {
			op.Op = "read" // not "raw-read": the caller asked for a read
		}
		return 0, err
	case len(c.held) > 0:
		// The socket took part of it: the rest goes the ordinary way.
		if err := c.flush(); err != nil {
			return 0, err
		}
		return c.Read(p)
	case readErr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: readErr}
	case n == 0:
		return 0, io.EOF
	}
	c.last = time.Now()
	return n, nil
}
