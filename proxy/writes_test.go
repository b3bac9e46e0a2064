package proxy

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// countingConn counts the writes (or reads that returned bytes) on a
// connection.
type countingConn struct {
	net.Conn
	writes, reads *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.reads.Add(1)
	}
	return n, err
}

// manyEventsUpstream answers a stream of n content events written all at
// once, in one HTTP chunk.
func manyEventsUpstream(n int) func(ctx *fasthttp.RequestCtx) {
	var b strings.Builder
	b.WriteString(`data: {"id":"u","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
	for i := range n {
		fmt.Fprintf(&b, `data: {"id":"u","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" w%d"},"finish_reason":null}]}`+"\n\n", i)
	}
	b.WriteString(`data: {"id":"u","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n")
	b.WriteString(`data: {"id":"u","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":` + fmt.Sprint(n) + `,"total_tokens":9}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return sseUpstream(b.String(), 0)
}

// The frames rewritten from one upstream read go to the client in one
// write: an upstream that sends 300 events in a few reads costs the client
// a few writes, not 300 (writes ≤ upstream reads + 2).
func TestOneClientWritePerUpstreamRead(t *testing.T) {
	up := newFakeUpstream(t, manyEventsUpstream(300))
	var upReads, upWrites, clientWrites, clientReads atomic.Int64
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.tcp = true
		o.dial = func() (net.Conn, error) {
			c, err := up.dial()
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, writes: &upWrites, reads: &upReads}, nil
		}
		o.clientConn = func(c net.Conn) net.Conn { return &countingConn{Conn: c, writes: &clientWrites, reads: &clientReads} }
	})
	for _, path := range lcPaths {
		upReads.Store(0)
		rc := f.dialRaw(t)
		clientWrites.Store(0)
		rc.send(t, f, "HTTP/1.1", "POST", path, streamBody("hi"))
		resp, body, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, 300, strings.Count(string(body), " w"), path)
		reads, writes := upReads.Load(), clientWrites.Load()
		t.Logf("%s: %d upstream reads, %d client writes for 300 events", path, reads, writes)
		require.LessOrEqual(t, writes, reads+2, path)
		require.Less(t, writes, int64(30), path)
	}
}

// An upstream that sends one event per read still gets one write per
// event: no frame waits for a later one.
func TestOneEventPerReadIsWrittenAtOnce(t *testing.T) {
	var clientWrites, clientReads atomic.Int64
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.tcp = true
		o.clientConn = func(c net.Conn) net.Conn { return &countingConn{Conn: c, writes: &clientWrites, reads: &clientReads} }
	})
	for _, path := range lcPaths {
		rc := f.dialRaw(t)
		clientWrites.Store(0)
		rc.send(t, f, "HTTP/1.1", "POST", path, streamBody("hi [[sim:tokens=20]] [[sim:itl_ms=15]]"))
		resp, _, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		// The head with the primer, then each of the 20 tokens in a write
		// of its own (the last with the ending, which the simulator sends
		// right behind it).
		require.GreaterOrEqual(t, clientWrites.Load(), int64(1+20), path)
	}
}
