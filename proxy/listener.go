package proxy

import (
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// KeepAccepting wraps a listener so that running out of file descriptors
// (or kernel memory) pauses accepting instead of ending it: fasthttp's Serve
// returns on any accept error that is not a timeout, which would leave a
// process that is merely overloaded serving nothing for good. The pause
// doubles from 5 ms up to one second while the condition lasts; the first
// failure of each episode is logged and every one counted in Retries.
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
}

// Accept waits for the next connection.
func (l *AcceptRetrier) Accept() (net.Conn, error) {
	wait := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err == nil || !exhausted(err) {
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

// exhausted reports an accept error that passes when resources free up.
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED)
}
