package proxy

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/edgegw/gateway/bench/sim"
	"github.com/edgegw/gateway/hotpath/meter"
)

// closeWatch records when the gateway closes each upstream connection.
type closeWatch struct {
	mu     sync.Mutex
	closed []time.Time
}

type watchedConn struct {
	net.Conn
	w    *closeWatch
	once sync.Once
}

func (c *watchedConn) Close() error {
	c.once.Do(func() {
		c.w.mu.Lock()
		c.w.closed = append(c.w.closed, time.Now())
		c.w.mu.Unlock()
	})
	return c.Conn.Close()
}

// closedAfter reports whether an upstream connection was closed after t.
func (w *closeWatch) closedAfter(t time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.closed {
		if c.After(t) {
			return c, true
		}
	}
	return time.Time{}, false
}

// A streaming client that leaves is noticed within a second whatever its
// stream is doing — waiting for the first token, stalled, or mid-stream:
// the upstream connection is closed, the slot comes back, and the ledger
// row bills what was delivered as client_closed_request.
func TestDeparturesReachTheUpstreamAtOnce(t *testing.T) {
	cw := &closeWatch{}
	simLn := fasthttputil.NewInmemoryListener()
	s := sim.New(sim.Config{})
	go func() { _ = s.Serve(simLn) }()
	t.Cleanup(s.Shutdown)
	var dials atomic.Int64
	sink := &recordingSink{}
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(nil))
	f := newChatFixture(t, withLimits(l, sink, uncapped()), func(o *fixtureOptions) {
		o.tcp = true
		o.dial = func() (net.Conn, error) {
			dials.Add(1)
			c, err := simLn.Dial()
			if err != nil {
				return nil, err
			}
			return &watchedConn{Conn: c, w: cw}, nil
		}
		o.upstream = func(c *UpstreamConfig) { c.StreamIdle = 30 * time.Second }
	})
	cases := []struct {
		name, content string
		frames        int // lines to read before leaving
	}{
		{"before the first token", "[[sim:ttft_ms=20000]] [[sim:tokens=5]]", 3},
		{"stalled", "[[sim:tokens=50]] [[sim:fault=stall_after=3]]", 8},
		{"mid-stream", "[[sim:tokens=4000]] [[sim:itl_ms=5]]", 20},
	}
	for i, c := range cases {
		for j, path := range lcPaths {
			rc := f.dialRaw(t)
			rc.send(t, f, "HTTP/1.1", "POST", path, streamBody("hi "+c.content))
			for range c.frames {
				_, err := rc.br.ReadString('\n')
				require.NoError(t, err, "%s %s", c.name, path)
			}
			left := time.Now()
			require.NoError(t, rc.c.Close())
			require.Eventually(t, func() bool { _, ok := cw.closedAfter(left); return ok }, 3*time.Second, 5*time.Millisecond,
				"%s %s: the upstream connection stayed open", c.name, path)
			at, _ := cw.closedAfter(left)
			require.Less(t, at.Sub(left), time.Second, "%s %s", c.name, path)
			require.Eventually(t, func() bool { return f.chat.gate.InFlight() == 0 }, 2*time.Second, 5*time.Millisecond)
			// The slots come back before the row is written (end settles,
			// then ends the request on its route): wait for the row.
			require.Eventually(t, func() bool { return len(sink.all()) == i*len(lcPaths)+j+1 }, 2*time.Second, 5*time.Millisecond,
				"%s %s: no row", c.name, path)
			rows := sink.all()
			row := rows[len(rows)-1]
			require.Equal(t, "client_closed_request", row.ErrorCode, "%s %s", c.name, path)
			require.Equal(t, i > 0, row.OutputTokens > 0, "%s %s: bills what was delivered", c.name, path)
		}
	}
	// A client that is still there is never taken for gone, and a
	// pipelined request it sent meanwhile is still served.
	rc := f.dialRaw(t)
	_, err := rc.c.Write([]byte(rawRequest(f, "POST", "/v1/chat/completions", streamBody("hi [[sim:tokens=3]] [[sim:ttft_ms=800]]")) +
		rawRequest(f, "POST", "/v1/chat/completions", lcKinds()[0].body)))
	require.NoError(t, err)
	for range 2 {
		resp, body, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	}
}

// A client's departure is counted as what it is: one that leaves
// mid-stream or mid-request is client_closed_request (499), one that
// closes its kept connection between requests is no error at all, and
// nothing is ever counted invalid_request for it.
func TestDeparturesAreNotInvalidRequests(t *testing.T) {
	f := newLifecycleFixture(t)
	invalid := `gateway_errors_total{code="invalid_request"}`
	closed := `gateway_errors_total{code="client_closed_request"}`
	// Requests answered, then connections closed between requests, idle
	// or not.
	for _, path := range lcPaths {
		rc := f.dialRaw(t)
		rc.send(t, f, "HTTP/1.1", "POST", path, streamBody("hi [[sim:tokens=3]]"))
		_, _, err := rc.read(t)
		require.NoError(t, err)
		require.NoError(t, rc.c.Close())
	}
	rc := f.dialRaw(t)
	require.NoError(t, rc.c.Close()) // connected, never sent a byte
	// Mid-request: half a head, then gone.
	rc = f.dialRaw(t)
	_, err := rc.c.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Le"))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, rc.c.Close())
	// Mid-body.
	rc = f.dialRaw(t)
	_, err = rc.c.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n{\"mo"))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, rc.c.Close())
	// Mid-stream.
	rc = f.dialRaw(t)
	rc.send(t, f, "HTTP/1.1", "POST", "/api/v1/chat", streamBody("hi [[sim:tokens=400]] [[sim:itl_ms=10]]"))
	for range 10 {
		_, err := rc.br.ReadString('\n')
		require.NoError(t, err)
	}
	require.NoError(t, rc.c.Close())
	require.Eventually(t, func() bool { return metricValue(t, f, closed) == 3 }, 3*time.Second, 10*time.Millisecond,
		"client_closed_request: %v", metricValue(t, f, closed))
	require.Zero(t, metricValue(t, f, invalid))
	// The error is counted just before the request itself.
	require.Eventually(t, func() bool {
		return metricValue(t, f, `gateway_requests_total{route="chat_v1",status="4xx"}`) == 1
	}, 3*time.Second, 10*time.Millisecond, "the stream is logged 499")
}

// A client that leaves while its long prompt is being counted has the
// count abandoned: the request ends as client_closed_request, not as the
// context_overflow the finished count would have given, and nothing of it
// reaches the upstream.
func TestDepartureStopsTheCount(t *testing.T) {
	// A read timeout long enough for 6 MiB under the race detector on a
	// busy machine: the body must be read whole for the count to start.
	f := newLifecycleFixture(t, func(o *fixtureOptions) {
		o.server.MaxBodySize, o.server.ReadTimeout = 8<<20, 30*time.Second
	})
	f.chat.watch.every = 5 * time.Millisecond
	// Eight bytes a token and no word breaks: the count cannot stop early
	// by the word bound and must read about 2 MiB to pass kavi's window.
	body := `{"model":"kavi","messages":[{"role":"user","content":"` + strings.Repeat("a", 6<<20) + `"}]}`
	closed := `gateway_errors_total{code="client_closed_request"}`
	overflow := `gateway_errors_total{code="context_overflow"}`

	// A client that waits is told its prompt is over the window.
	rc := f.dialRaw(t)
	rc.send(t, f, "HTTP/1.1", "POST", "/api/v1/chat", body)
	resp, _, err := rc.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, 1.0, metricValue(t, f, overflow))

	// One that leaves as soon as its request is sent is not counted for.
	rc = f.dialRaw(t)
	rc.send(t, f, "HTTP/1.1", "POST", "/api/v1/chat", body)
	require.NoError(t, rc.c.Close())
	require.Eventually(t, func() bool { return metricValue(t, f, closed) == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 1.0, metricValue(t, f, overflow), "the abandoned count gave no verdict")
	require.Zero(t, f.chat.gate.InFlight())
}
