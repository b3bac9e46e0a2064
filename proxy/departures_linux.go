package proxy

import (
	"syscall"
	"unsafe"
)

// canPeek says clientGone can look at a socket here.
const canPeek = true

// peeker peeks at one socket: one byte, without taking it and without
// waiting. Its method value is made once, so a sweep allocates nothing.
type peeker struct {
	gone    bool
	waiting bool // a byte is there to read
	buf     [1]byte
	fn      func(fd uintptr)
}

var sweepPeeker = func() *peeker {
	p := &peeker{}
	p.fn = p.peek
	return p
}()

func (p *peeker) peek(fd uintptr) {
	n, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p.buf[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	switch errno {
	case 0:
		p.gone = n == 0 // end of stream: the client closed (or half-closed)
		p.waiting = n > 0
	case syscall.EAGAIN, syscall.EINTR:
		p.gone = false // nothing to read: the client is there
	default:
		p.gone = true // reset, or the socket is gone
	}
}

// clientGone reports whether the client at the other end of rc has closed
// or reset its connection. Bytes waiting (a pipelined request) mean it is
// there; they stay where they are. Only the watcher's goroutine calls it.
func clientGone(rc syscall.RawConn) bool {
	p := sweepPeeker
	p.gone = false
	if err := rc.Control(p.fn); err != nil {
		return true // closed under us
	}
	return p.gone
}

// clientGoneNow is clientGone for any goroutine: its peeker is its own.
func clientGoneNow(rc syscall.RawConn) bool {
	p := &peeker{}
	if err := rc.Control(p.peek); err != nil {
		return true
	}
	return p.gone
}

// bytesWaiting reports whether the client at the other end of rc has sent
// bytes not yet read, leaving them where they are.
func bytesWaiting(rc syscall.RawConn) bool {
	p := &peeker{}
	return rc.Control(p.peek) == nil && p.waiting
}
