package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/bench/sim"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/cputest"
)

// heldChildEnv, set to a simulator's address, makes the test binary a
// child that sends requests through an Upstream and reports its own read
// system calls: /proc/self/io counts the whole process's, and the child
// runs nothing else.
const heldChildEnv = "PROXY_TEST_HELD_UPSTREAM"

const heldExchanges = 200

// heldChild runs the exchanges with the default dialer (the hold on), then
// with the hold off, and prints a line for each.
func heldChild() int {
	addr := os.Getenv(heldChildEnv)
	for _, held := range []bool{true, false} {
		reads, err := exchangeMany(addr, held, heldExchanges)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Printf("held=%t reads=%d\n", held, reads)
	}
	return 0
}

// exchangeMany sends n non-streaming requests one after another through
// an Upstream's client, each answered after 1 ms, and returns the read
// system calls the process made meanwhile.
func exchangeMany(addr string, held bool, n int) (int64, error) {
	cfg := UpstreamConfig{BaseURL: "http://" + addr + "/v1", Model: "sim-mira"}
	if !held {
		// The same dialer, its connection behind a type the hold does not take.
		d := &fasthttp.TCPDialer{}
		cfg.Dial = func(a string) (net.Conn, error) {
			c, err := d.Dial(a)
			if err != nil {
				return nil, err
			}
			return struct{ net.Conn }{c}, nil
		}
	}
	tier := hotpath.DefaultTiers()[0]
	up, err := NewUpstream(&tier, cfg, hotpath.NewBreaker(hotpath.BreakerConfig{}, nil))
	if err != nil {
		return 0, err
	}
	body := []byte(`{"model":"sim-mira","messages":[{"role":"user","content":"hi [[sim:ttft_ms=1]]"}],"max_tokens":4}`)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	do := func() error {
		req.Reset()
		req.SetRequestURI(up.url)
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json")
		req.SetBody(body)
		if err := up.plain.DoDeadline(req, resp, time.Now().Add(10*time.Second)); err != nil {
			return err
		}
		if resp.StatusCode() != fasthttp.StatusOK || !bytes.Contains(resp.Body(), []byte(`"chat.completion"`)) {
			return fmt.Errorf("status %d: %s", resp.StatusCode(), resp.Body())
		}
		return nil
	}
	if err := do(); err != nil { // the connection dialled
		return 0, err
	}
	r0, err := ownReads()
	if err != nil {
		return 0, err
	}
	for range n {
		if err := do(); err != nil {
			return 0, err
		}
	}
	r1, err := ownReads()
	return r1 - r0, err
}

// ownReads is the process's read system calls so far.
func ownReads() (int64, error) {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "syscr:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no syscr in /proc/self/io")
}

// A non-streaming answer costs one read system call: the request goes out
// once the poller is armed for the answer, so the read that would have
// found nothing yet is never tried. The child (so that no other goroutine's
// reads are counted) sends 200 requests, each answered 1 ms later, with
// the hold and without it.
func TestUpstreamAnswerTakesOneRead(t *testing.T) {
	cputest.NeedProc(t, "/proc/self/io")
	s := sim.New(sim.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Shutdown)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), heldChildEnv+"="+ln.Addr().String())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := map[bool]int64{}
	for line := range strings.Lines(string(out)) {
		var held bool
		var reads int64
		if _, err := fmt.Sscanf(line, "held=%t reads=%d", &held, &reads); err == nil {
			got[held] = reads
		}
	}
	require.Len(t, got, 2, "%s", out)
	t.Logf("read system calls per answer: %.2f with the hold, %.2f without",
		float64(got[true])/heldExchanges, float64(got[false])/heldExchanges)
	// Without the hold each answer takes a read that finds nothing and one
	// that finds the answer; the control shows the count can see that.
	require.GreaterOrEqual(t, got[false], int64(heldExchanges*19/10), "without the hold")
	require.LessOrEqual(t, got[true], int64(heldExchanges*11/10), "with the hold")
}

// heldPair is a TCP connection with the hold, and the server's end.
func heldPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	srv := <-accepted
	require.NotNil(t, srv)
	hc := holdWrites(c)
	require.IsType(t, &heldConn{}, hc)
	t.Cleanup(func() { _ = hc.Close(); _ = srv.Close() })
	return hc, srv
}

// What is written goes out with the read that follows it, whole, however
// large; a write past the bound goes out at once.
func TestHeldWritesGoOutWithTheRead(t *testing.T) {
	c, srv := heldPair(t)
	_, err := c.Write([]byte("ping "))
	require.NoError(t, err)
	_, err = c.Write([]byte("pong\n"))
	require.NoError(t, err)
	// Nothing has been sent yet.
	require.NoError(t, srv.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err = srv.Read(make([]byte, 16))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, srv.SetReadDeadline(time.Time{}))

	go func() {
		line, _ := bufio.NewReader(srv).ReadString('\n')
		_, _ = srv.Write([]byte("got " + line))
	}()
	got, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "got ping pong\n", got)

	// Past the bound: written as it comes, the read after it reads.
	big := bytes.Repeat([]byte("x"), heldMax+1)
	done := make(chan int64, 1)
	go func() {
		n, _ := io.CopyN(io.Discard, srv, int64(len(big)))
		done <- n
		_, _ = srv.Write([]byte("ok\n"))
	}()
	n, err := c.Write(big)
	require.NoError(t, err)
	require.Equal(t, len(big), n)
	require.Equal(t, int64(len(big)), <-done)
	got, err = bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ok\n", got)
}

// The read after a held write keeps the read deadline, and says it was a
// read that timed out.
func TestHeldReadKeepsItsDeadline(t *testing.T) {
	c, srv := heldPair(t)
	_, err := c.Write([]byte("hello"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	_, err = c.Read(make([]byte, 8))
	require.Error(t, err)
	require.True(t, isTimeout(err), "%v", err)
	require.Contains(t, err.Error(), "read tcp")
	// The request did go out.
	got := make([]byte, 5)
	_, err = io.ReadFull(srv, got)
	require.NoError(t, err)
	require.Equal(t, "hello", string(got))
}

// A peer that closed the connection while it sat idle is found at the read
// after the held write, at once, not at the deadline: the write draws the
// reset that wakes the read.
func TestHeldWriteToAClosedPeerFailsAtOnce(t *testing.T) {
	c, srv := heldPair(t)
	require.NoError(t, srv.Close())
	time.Sleep(20 * time.Millisecond) // the FIN arrives and the poller sees it
	_, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Read(make([]byte, 64))
	require.Error(t, err)
	require.False(t, isTimeout(err), "a closed peer is not a timeout: %v", err)
}

// TLS's handshake, which writes then reads, runs over the hold, and so do
// the requests and answers after it.
func TestHeldConnUnderTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("hello over tls"))
	}))
	defer srv.Close()
	raw, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	hc := holdWrites(raw)
	require.IsType(t, &heldConn{}, hc)
	tc := tls.Client(hc, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test server's own certificate
	_, err = tc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	require.NoError(t, err)
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(len("hello over tls"))))
	require.NoError(t, err)
	require.Equal(t, "hello over tls", string(b))
	require.NoError(t, tc.Close())
}

// A connection closed by another goroutine while its read waits (a
// departed stream's client closes its upstream connection) ends the read
// at once; Close touches nothing the reading goroutine owns (run with
// -race).
func TestHeldConnClosedWhileReading(t *testing.T) {
	c, srv := heldPair(t)
	_, err := c.Write([]byte("request"))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		done <- err
	}()
	got := make([]byte, len("request"))
	_, err = io.ReadFull(srv, got) // the read has begun: it sent the request
	require.NoError(t, err)
	require.NoError(t, c.Close())
	err = <-done
	require.ErrorIs(t, err, net.ErrClosed)
}

// A connection that sat idle is written and read the ordinary way: a peer
// that half-closed it meanwhile (a lingering close drains what it is sent
// and never resets) is found at the first read, where a held request
// would wait for its deadline, the poller having forgotten the end it saw.
func TestHeldConnIdleHalfClosedPeerEndsAtOnce(t *testing.T) {
	c, srv := heldPair(t)
	require.NoError(t, srv.(*net.TCPConn).CloseWrite())
	go func() { _, _ = io.Copy(io.Discard, srv) }() // lingering: drain, never reset
	time.Sleep(heldFresh + 50*time.Millisecond)     // the end arrives; the poller sees it
	_, err := c.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Read(make([]byte, 64))
	require.ErrorIs(t, err, io.EOF, "the end is found at once, not at the deadline")
}

// An answered connection keeps no request buffer: an open stream's
// connection, or an idle pooled one, costs nothing for it.
func TestHeldConnKeepsNoBufferOnceSent(t *testing.T) {
	c, hc := echoHeldPair(t)
	req, ans := []byte("ping"), make([]byte, 64)
	_, err := c.Write(req)
	require.NoError(t, err)
	require.NotNil(t, hc.box, "held until the read")
	_, err = io.ReadFull(c, ans[:len(req)])
	require.NoError(t, err)
	require.Nil(t, hc.box, "nothing held once sent")
	require.Nil(t, hc.held)
}

// echoHeldPair is a held connection whose peer echoes what it is sent.
func echoHeldPair(t *testing.T) (net.Conn, *heldConn) {
	t.Helper()
	c, srv := heldPair(t)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := srv.Read(buf)
			if err != nil {
				return
			}
			if _, err := srv.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	return c, c.(*heldConn)
}
