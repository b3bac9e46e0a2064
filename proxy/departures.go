package proxy

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// departureEvery is how often the watcher looks at every open stream's
// client: a client that left is noticed within about this long.
const departureEvery = 400 * time.Millisecond

// departures notices clients that left — closed or reset their
// connection — while their stream has nothing to write to them: an upstream
// that is silent, reasoning the wire does not show, a first token still to
// come. One goroutine looks at every open stream's socket in turn, without
// reading from it (a peek, so a pipelined request the client sent is left
// where it is), instead of a goroutine per stream. A stream whose client
// left has its upstream connection closed at once, which ends its pump; the
// stream then frees its slots and bills what was delivered. A request
// whose long prompt is being counted is watched the same way, and its
// count abandoned.
//
// A client that half-closes its connection after its request reads as
// gone, as it does to nginx: its stream is abandoned cleanly.
type departures struct {
	mu      sync.Mutex
	streams map[*turn]syscall.RawConn
	stop    chan struct{}
	start   sync.Once // the watcher starts with the first stream
	end     sync.Once
	every   time.Duration // departureEvery; tests set it before the first add
}

type watched struct {
	t  *turn
	rc syscall.RawConn
}

func newDepartures() *departures {
	return &departures{streams: map[*turn]syscall.RawConn{}, stop: make(chan struct{}), every: departureEvery}
}

// add watches t's client connection c; a connection the watcher cannot
// look at (not a socket) is left to the stream's writes to notice.
func (d *departures) add(t *turn, c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok || !canPeek {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	d.mu.Lock()
	d.streams[t] = rc
	d.mu.Unlock()
	d.start.Do(func() { go d.run() })
}

// leftDuring reports, for a request not on the watcher's list (a
// non-streaming one), whether its client has closed or reset c: one peek,
// made by the request's own goroutine.
func leftDuring(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok || !canPeek {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return clientGoneNow(rc)
}

// remove stops watching t. After it returns the watcher never touches t.
func (d *departures) remove(t *turn) {
	d.mu.Lock()
	delete(d.streams, t)
	d.mu.Unlock()
}

// close stops the watcher; one not yet started never starts.
func (d *departures) close() {
	d.start.Do(func() {})
	d.end.Do(func() { close(d.stop) })
}

func (d *departures) run() {
	tick := time.NewTicker(d.every)
	defer tick.Stop()
	var list []watched // the sweep's own, reused
	for {
		select {
		case <-d.stop:
			return
		case <-tick.C:
			list = d.sweep(list[:0])
		}
	}
}

// sweep looks at every watched connection once, listing them in list (the
// caller's, returned for reuse): the sockets are peeked outside the lock,
// and a departure is acted on under it, so that a stream that ended
// meanwhile (removed) is never touched.
func (d *departures) sweep(list []watched) []watched {
	d.mu.Lock()
	for t, rc := range d.streams {
		list = append(list, watched{t, rc})
	}
	d.mu.Unlock()
	for i := range list {
		if !clientGone(list[i].rc) {
			continue
		}
		d.mu.Lock()
		if _, ok := d.streams[list[i].t]; ok {
			delete(d.streams, list[i].t)
			list[i].t.depart()
		}
		d.mu.Unlock()
	}
	clear(list) // no turn is kept past its stream
	return list
}

// depart marks a stream whose client left and closes its upstream
// connection, which wakes its pump from a read that may otherwise last
// until the upstream's next byte. Called by the watcher, under its lock.
func (t *turn) depart() {
	t.departed.Store(true)
	if up := t.upConn.Load(); up != nil {
		_ = up.Conn.Close()
	}
}
