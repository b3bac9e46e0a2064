package proxy

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// KeepAccepting wraps a listener so that every connection it accepts
// refuses request heads with bare-LF line ends at once and keeps each
// request line's start (see edgeConn), and so that running out of file
// descriptors (or kernel memory) pauses accepting instead of ending it:
// fasthttp's Serve returns on any accept error that is not a timeout, which
// would leave a process that is merely overloaded serving nothing for
// good. The pause doubles from 5 ms up to one second while the condition
// lasts; the first failure of each episode is logged and every one counted
// in Retries.
func KeepAccepting(ln net.Listener, log *slog.Logger) *AcceptRetrier {
	return &AcceptRetrier{Listener: ln, log: log}
}

// AcceptRetrier is a listener that retries resource-exhaustion accept
// errors; see KeepAccepting.
type AcceptRetrier struct {
	net.Listener
	log *slog.Logger
	// Retries counts accepts that failed for lack of resources.
	Retries atomic.Uint64

	// unused are the connections that have sent nothing yet. The server
	// counts a connection busy from its accept, so its shutdown would wait
	// for one that never writes until the read timeout; CloseUnused
	// closes them.
	mu       sync.Mutex
	unused   map[*edgeConn]struct{}
	stopping bool
}

// Accept waits for the next connection.
func (l *AcceptRetrier) Accept() (net.Conn, error) {
	wait := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			ec := &edgeConn{Conn: c, head: true, inLine: true}
			ec.owner.Store(l)
			l.mu.Lock()
			stopping := l.stopping
			if !stopping {
				if l.unused == nil {
					l.unused = map[*edgeConn]struct{}{}
				}
				l.unused[ec] = struct{}{}
			}
			l.mu.Unlock()
			if stopping {
				_ = c.Close()
				continue
			}
			return ec, nil
		}
		if !exhausted(err) {
			return c, err
		}
		l.Retries.Add(1)
		if wait == 5*time.Millisecond {
			l.log.Error("cannot accept connections: out of resources; retrying", "err", err, "retry_in", wait)
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// CloseUnused closes every connection that has sent nothing yet, and from
// then on each one accepted at once: call it when shutdown begins, after
// the grace, so that a client that connected and never wrote does not hold
// the shutdown until the read timeout. A connection idle between requests
// is the server's to close; one that sent part of a request is left to the
// server, which refuses that request once it has arrived.
func (l *AcceptRetrier) CloseUnused() {
	l.mu.Lock()
	l.stopping = true
	unused := l.unused
	l.unused = nil
	l.mu.Unlock()
	for c := range unused {
		_ = c.Conn.Close()
	}
}

// used forgets c as unused: its first byte arrived, or it closed.
func (l *AcceptRetrier) used(c *edgeConn) {
	l.mu.Lock()
	delete(l.unused, c)
	l.mu.Unlock()
}

// exhausted reports an accept error that passes when resources free up.
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED)
}

// errBareLF ends the read of a request head whose lines end in a bare LF.
var errBareLF = errors.New("a request line or header field ends with a bare LF")

// edgeConn is an accepted client connection. While it reads a request
// head — from the connection's start, and from each response written until
// the empty line that ends the next head — it checks that every line ends
// with CRLF: the server's parser finds no end to a head whose lines end
// with a bare LF and would wait out the read timeout; this refuses it at
// once (400). The check costs one IndexByte per header line.
//
// It also keeps the start of the head's request line, as it arrives: the
// server drops a request it could not read before it answers, and the
// answer still speaks the wire the path names (requestTarget). That costs
// a copy of the line's bytes.
type edgeConn struct {
	net.Conn
	head     bool // reading a request head
	prevCR   bool // the last byte read was CR
	lineSeen bool // the current line has bytes besides CR
	started  bool // a byte arrived since the last response
	inLine   bool // reading the head's request line
	lineLen  int  // bytes kept in line
	line     [requestLineKept]byte
	linger   bool // Close drains what the client still sends (lingerOnClose)
	// owner is the listener that counts the connection unused, until its
	// first byte.
	owner atomic.Pointer[AcceptRetrier]
}

// requestLineKept is how much of a request line a connection keeps: the
// method and a path far longer than any the envelope depends on.
const requestLineKept = 128

func (c *edgeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if !c.started && c.owner.Load() != nil {
			if l := c.owner.Swap(nil); l != nil {
				l.used(c)
			}
		}
		c.started = true
		if c.head && !c.scan(p[:n]) {
			return 0, errBareLF
		}
	}
	return n, err
}

// requestStarted reports whether a byte of the next request has arrived
// since the last response: a read timeout before that is an idle
// connection's, closed without a word.
func (c *edgeConn) requestStarted() bool { return c.started }

// scan follows a head through b; false means a bare LF.
func (c *edgeConn) scan(b []byte) bool {
	for len(b) > 0 && c.head {
		i := bytes.IndexByte(b, '\n')
		if c.inLine {
			c.keepLine(b, i)
		}
		if i < 0 {
			c.prevCR = b[len(b)-1] == '\r'
			c.lineSeen = c.lineSeen || len(b) > 1 || !c.prevCR
			return true
		}
		cr := c.prevCR
		if i > 0 {
			cr = b[i-1] == '\r'
		}
		if !cr {
			return false
		}
		content := c.lineSeen || i > 1
		c.prevCR, c.lineSeen = false, false
		if !content {
			c.head = false // the empty line: the body, if any, follows
		}
		b = b[i+1:]
	}
	return true
}

// keepLine keeps what fits of the request line's bytes in b, which end at
// i when the line does (i < 0: it goes on).
func (c *edgeConn) keepLine(b []byte, i int) {
	if i >= 0 {
		b, c.inLine = b[:i], false
	}
	c.lineLen += copy(c.line[c.lineLen:], b)
}

// requestTarget returns the target of the request line being read, or nil
// until it has arrived whole (a target longer than the bytes kept is given
// by its start). A line that does not begin with a method is not a
// request's.
func (c *edgeConn) requestTarget() []byte {
	method, rest, ok := bytes.Cut(c.line[:c.lineLen], []byte{' '})
	if !ok || !isMethod(method) {
		return nil
	}
	target, _, ok := bytes.Cut(rest, []byte{' '})
	if !ok && c.inLine && c.lineLen < len(c.line) {
		return nil // the target may go on
	}
	return bytes.TrimSuffix(target, []byte{'\r'})
}

// isMethod reports a method name of capital letters, as every method the
// gateway serves is.
func isMethod(b []byte) bool {
	for _, ch := range b {
		if ch < 'A' || ch > 'Z' {
			return false
		}
	}
	return len(b) > 0
}

// Write marks the start of the next request's head once a final response
// goes out (not an interim 100 Continue, after which the body comes).
func (c *edgeConn) Write(p []byte) (int, error) {
	if !bytes.HasPrefix(p, interim) {
		c.head, c.prevCR, c.lineSeen, c.started = true, false, false, false
		c.inLine, c.lineLen = true, 0
	}
	return c.Conn.Write(p)
}

var interim = []byte("HTTP/1.1 100 ")

// Lingering close bounds: the longest Close drains a refused request's
// rest, and the longest it waits for the next byte of it.
const (
	lingerFor  = 5 * time.Second
	lingerIdle = time.Second
)

// lingerOnClose makes Close end the connection as a lingering close: the
// answer to a request the server refused unread (a body over the bound, a
// head too large) goes out, the sending side is shut, and what the client
// still sends is read and dropped until it stops, for at most lingerFor,
// before the socket closes. Closed at once, with the client's bytes unread,
// the socket resets the connection, and a client still uploading (an SDK
// sending a 9 MiB body) loses the 413 in its receive queue and sees only a
// connection error.
func (c *edgeConn) lingerOnClose() { c.linger = true }

// Close closes the connection, lingering when lingerOnClose asked.
func (c *edgeConn) Close() error {
	if l := c.owner.Swap(nil); l != nil {
		l.used(c)
	}
	if c.linger {
		c.linger = false
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			c.drain(time.Now().Add(lingerFor))
		}
	}
	return c.Conn.Close()
}

// drain reads and drops what arrives until the peer closes, stays quiet
// for lingerIdle, or end passes.
func (c *edgeConn) drain(end time.Time) {
	buf := make([]byte, 32<<10)
	for {
		now := time.Now()
		next := now.Add(lingerIdle)
		if end.Before(next) {
			next = end
		}
		if !now.Before(end) || c.Conn.SetReadDeadline(next) != nil {
			return
		}
		if _, err := c.Conn.Read(buf); err != nil {
			return
		}
	}
}

// SyscallConn exposes the socket, for the departure watcher.
func (c *edgeConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
