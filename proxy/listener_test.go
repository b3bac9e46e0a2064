package proxy

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// flakyListener fails its first accepts with an error, then accepts.
type flakyListener struct {
	net.Listener
	fail []error
}

func (f *flakyListener) Accept() (net.Conn, error) {
	if len(f.fail) > 0 {
		err := f.fail[0]
		f.fail = f.fail[1:]
		return nil, err
	}
	c1, c2 := net.Pipe()
	c2.Close()
	return c1, nil
}

func TestKeepAcceptingRidesOutDescriptorExhaustion(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	ln := KeepAccepting(&flakyListener{fail: []error{emfile, emfile, emfile}}, slog.New(slog.DiscardHandler))
	c, err := ln.Accept()
	require.NoError(t, err)
	c.Close()
	require.Equal(t, uint64(3), ln.Retries.Load())

	// Anything else still ends the listener, as before.
	closed := errors.New("use of closed network connection")
	ln = KeepAccepting(&flakyListener{fail: []error{closed}}, slog.New(slog.DiscardHandler))
	_, err = ln.Accept()
	require.ErrorIs(t, err, closed)
}
