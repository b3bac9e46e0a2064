package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/hotpath"
)

// UpstreamConfig binds a tier to an OpenAI-compatible provider endpoint.
type UpstreamConfig struct {
	// BaseURL is the provider's API root, e.g. https://api.example.com/v1;
	// chat goes to BaseURL + "/chat/completions". Required.
	BaseURL string
	// Path is appended to BaseURL for every call. Default
	// "/chat/completions"; the embeddings tier uses "/embeddings" and the
	// rerank tier "/rerank".
	Path string
	// APIKey is sent as a Bearer token when set.
	APIKey string
	// Model is the upstream model id. It is never shown to clients.
	Model string
	// SystemPrompt, when set, is sent as the first system message.
	SystemPrompt string
	// Reasons tells whether the model produces a reasoning trace and takes
	// reasoning_effort.
	Reasons bool
	// MaxConns bounds streaming connections to the provider. A stream
	// holds one for its whole life, so the default is high: 65536.
	MaxConns int
	// MaxPlainConns bounds the connections non-streaming requests share.
	// Past it a request waits up to a second for one and is then answered
	// upstream_overloaded: an upstream slower than the offered load must
	// not make the gateway open connections (and descriptors) without
	// bound. Default 1024, never more than MaxConns.
	MaxPlainConns int
	// StreamIdle bounds the silence between two reads of a stream before it
	// is treated as stalled. Default 60s.
	StreamIdle time.Duration
	// StreamMax bounds a whole stream. Default 5m.
	StreamMax time.Duration
	// Retries is how many times a failed attempt is retried before anything
	// reached the client. Default 2; negative means none.
	Retries int
	// Backoff is the first retry's wait; it doubles per retry. Default 50ms.
	Backoff time.Duration
	// MaxRetryWait caps how long a provider's Retry-After is honoured
	// before a retry. Default 2s.
	MaxRetryWait time.Duration
	// MaxResponseBytes caps a non-streaming response body; a larger one is
	// an upstream failure (503 upstream_overloaded, not retried). Default
	// 4 MiB: a whole completion at the largest output cap is far smaller.
	MaxResponseBytes int
	// MaxEventBytes caps one SSE event of a stream; a larger one ends the
	// stream as an upstream failure. Default 1 MiB.
	MaxEventBytes int
	// Dial replaces the TCP dialer (the in-process simulator uses it).
	Dial fasthttp.DialFunc
	// Transport replaces the whole round trip; benchmarks use it to measure
	// the gateway without a network.
	Transport fasthttp.RoundTripper
}

// Validate checks the binding and fills in defaults.
func (c *UpstreamConfig) Validate() error {
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("base_url: %q is not an http(s) URL", hotpath.RedactURL(c.BaseURL))
	}
	if c.Model == "" {
		return errors.New("model: must be set")
	}
	if c.Path == "" {
		c.Path = "/chat/completions"
	}
	if c.MaxConns == 0 {
		c.MaxConns = 65536
	}
	if c.MaxPlainConns == 0 {
		c.MaxPlainConns = min(1024, c.MaxConns)
	}
	if c.StreamIdle == 0 {
		c.StreamIdle = 60 * time.Second
	}
	if c.StreamMax == 0 {
		c.StreamMax = 5 * time.Minute
	}
	switch {
	case c.Retries == 0:
		c.Retries = 2
	case c.Retries < 0:
		c.Retries = 0
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.MaxEventBytes == 0 {
		c.MaxEventBytes = DefaultMaxEventBytes
	}
	if c.Backoff == 0 {
		c.Backoff = 50 * time.Millisecond
	}
	if c.MaxRetryWait == 0 {
		c.MaxRetryWait = 2 * time.Second
	}
	if c.MaxResponseBytes < 0 || c.MaxEventBytes < 0 || c.MaxConns < 0 || c.MaxPlainConns < 0 || c.StreamIdle < 0 || c.StreamMax < 0 || c.Backoff < 0 || c.MaxRetryWait < 0 {
		return errors.New("upstream limits must not be negative")
	}
	return nil
}

// Upstream is one tier's provider endpoint with its connection pools and
// circuit breaker.
type Upstream struct {
	Tier    *hotpath.Tier
	cfg     UpstreamConfig
	url     string
	auth    string
	plain   *fasthttp.HostClient // whole responses, bounded by the tier deadline
	stream  *fasthttp.HostClient // streamed responses, with a read-idle bound
	Breaker *hotpath.Breaker
	meter   tierMeter // registered by NewChat
	live    liveConns // both pools' open connections, for Cut
}

// liveConns are an upstream's open connections, so that Cut can end the
// exchanges still running when shutdown's bound has passed.
type liveConns struct {
	mu  sync.Mutex
	set map[*liveConn]struct{}
	cut atomic.Bool // no connection is dialled any more
}

// liveConn is a connection liveConns holds until it closes. Its local
// address is its inner connection's (an idleConn's is the idleConn).
type liveConn struct {
	net.Conn
	live *liveConns
}

func (c *liveConn) Close() error {
	c.live.mu.Lock()
	delete(c.live.set, c)
	c.live.mu.Unlock()
	return c.Conn.Close()
}

// errUpstreamCut refuses a dial after Cut.
var errUpstreamCut = errors.New("the gateway is shutting down")

func (l *liveConns) track(c net.Conn) (net.Conn, error) {
	lc := &liveConn{Conn: c, live: l}
	l.mu.Lock()
	if l.cut.Load() {
		l.mu.Unlock()
		_ = c.Close()
		return nil, errUpstreamCut
	}
	if l.set == nil {
		l.set = map[*liveConn]struct{}{}
	}
	l.set[lc] = struct{}{}
	l.mu.Unlock()
	return lc, nil
}

// Cut ends every exchange with the upstream that is still running, and
// every one after: its connections close, none is dialled again, and an
// attempt that fails from now on answers server_shutting_down without a
// retry (a stream, with its wire's failure ending). Shutdown calls it once
// its bound has passed, so that what still runs ends answered and logged
// instead of vanishing with the process.
func (up *Upstream) Cut() {
	l := &up.live
	l.mu.Lock()
	l.cut.Store(true)
	conns := l.set
	l.set = nil
	l.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

// cut reports whether Cut was called.
func (up *Upstream) cut() bool { return up.live.cut.Load() }

// tierMeter counts a tier's tokens and money, and the requests its
// upstream refused as malformed, registered once.
type tierMeter struct {
	input, output, cost *metrics.Counter
	refused             *metrics.Counter
}

// NewUpstream returns the binding of tier to cfg.
func NewUpstream(tier *hotpath.Tier, cfg UpstreamConfig, breaker *hotpath.Breaker) (*Upstream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.BaseURL)
	isTLS := u.Scheme == "https"
	addr := u.Host
	if u.Port() == "" {
		if isTLS {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	up := &Upstream{
		Tier:    tier,
		cfg:     cfg,
		url:     strings.TrimSuffix(cfg.BaseURL, "/") + cfg.Path,
		Breaker: breaker,
	}
	if cfg.APIKey != "" {
		up.auth = "Bearer " + cfg.APIKey
	}
	dial := cfg.Dial
	if dial == nil {
		d := &fasthttp.TCPDialer{Concurrency: 0}
		dial = func(a string) (net.Conn, error) {
			c, err := d.DialTimeout(a, 5*time.Second)
			if err != nil {
				return nil, err
			}
			return holdWrites(c), nil
		}
	}
	newClient := func(idle time.Duration, maxConns int) *fasthttp.HostClient {
		hc := &fasthttp.HostClient{
			Addr:               addr,
			IsTLS:              isTLS,
			MaxConns:           maxConns,
			MaxConnWaitTimeout: time.Second, // at the cap, wait briefly for a free connection
			// Small socket buffers: a stream holds its connection for
			// minutes, and SSE frames and chat heads are small.
			ReadBufferSize:                2048,
			WriteBufferSize:               2048,
			MaxIdleConnDuration:           90 * time.Second,
			NoDefaultUserAgentHeader:      true,
			DisableHeaderNamesNormalizing: false,
			Dial:                          dial,
			RetryIfErr:                    func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
			Transport:                     cfg.Transport,
		}
		hc.Dial = func(a string) (net.Conn, error) {
			if up.cut() {
				return nil, errUpstreamCut
			}
			c, err := dial(a)
			if err != nil {
				return nil, err
			}
			if idle > 0 {
				c = &idleConn{Conn: c, idle: idle}
			}
			return up.live.track(c)
		}
		return hc
	}
	up.plain = newClient(0, cfg.MaxPlainConns)
	up.plain.MaxResponseBodySize = cfg.MaxResponseBytes
	up.stream = newClient(cfg.StreamIdle, cfg.MaxConns)
	return up, nil
}

// idleConn bounds each read by an idle timeout, without lifting a deadline
// the client set for the whole exchange. Moving a deadline costs a runtime
// timer update, so it is moved only when a quarter of the idle bound has
// passed: a stall is then caught between 3/4 and 1 of the bound.
//
// While a stream reads it, hook wakes the read when the stream has sent its
// client nothing for a while, so that it can say so (turn.keepQuiet); the
// stream finds its connection through the response's LocalAddr, which is
// the idleConn itself.
type idleConn struct {
	net.Conn
	idle time.Duration
	hard time.Time
	set  time.Time // the read deadline in force
	hook quietHook
}

// quietHook is a stream reading an idleConn: beforeRead is told before the
// connection is read (what the stream holds for its client goes out then);
// quietDue is when it must next write to its client; quiet writes. False
// means the client is gone.
type quietHook interface {
	beforeRead() bool
	quietDue() time.Time
	quiet() bool
}

func (c *idleConn) SetDeadline(t time.Time) error {
	c.hard, c.set = t, t
	return c.Conn.SetDeadline(t)
}

func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.hard, c.set = t, t
	return c.Conn.SetReadDeadline(t)
}

// LocalAddr is the connection itself, so that a response read from it
// leads back to it.
func (c *idleConn) LocalAddr() net.Addr { return c }

// Network and String make the connection its own local address.
func (c *idleConn) Network() string { return c.Conn.LocalAddr().Network() }

func (c *idleConn) String() string { return c.Conn.LocalAddr().String() }

func (c *idleConn) Read(p []byte) (int, error) {
	if c.hook != nil && !c.hook.beforeRead() {
		return 0, errClientGone
	}
	var want time.Time // the stall bound: an idle bound from the read's start
	for {
		now := time.Now()
		if want.IsZero() {
			want = now.Add(c.idle)
			if !c.hard.IsZero() && c.hard.Before(want) {
				want = c.hard
			}
		}
		wake := want
		if c.hook != nil {
			if q := c.hook.quietDue(); q.Before(wake) {
				wake = q
			}
		}
		// Move the deadline when the one in force is later than wanted (a
		// far deadline the client set), or more than a quarter of the
		// bound earlier and not the client's own. An early wake is a
		// stall without a hook, and with one a read resumed.
		if c.set.IsZero() || c.set.After(wake) || wake.Sub(c.set) > c.idle/4 && !c.set.Equal(c.hard) {
			if err := c.Conn.SetReadDeadline(wake); err != nil {
				return 0, err
			}
			c.set = wake
		}
		n, err := c.Conn.Read(p)
		if n > 0 || err == nil || c.hook == nil || !isTimeout(err) {
			return n, err
		}
		now = time.Now()
		if !now.Before(want) {
			return n, err // stalled
		}
		if !now.Before(c.hook.quietDue()) && !c.hook.quiet() {
			return n, errClientGone
		}
		c.set = time.Time{} // the deadline passed; set the next one
	}
}

// errClientGone ends an upstream read for a stream whose client left.
var errClientGone = errors.New("the client left the stream")

// Retries is how many times a failed attempt is retried.
func (up *Upstream) Retries() int { return up.cfg.Retries }

// doFresh sends req on client. A pooled connection the upstream closed
// while it was idle (a keep-alive timeout shorter than the pool's) fails
// before any answer: an end of stream before the first byte (fasthttp's
// ErrConnectionClosed), or a reset or broken pipe when the request reached
// a closed socket. Idle connections that old are likely all closed, so the
// pool's idle connections are closed and req is sent once more, at once,
// on a new connection. It reports whether it did.
func doFresh(client *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) (bool, error) {
	err := client.DoDeadline(req, resp, deadline)
	if !staleConn(err) || !time.Now().Before(deadline) {
		return false, err
	}
	client.CloseIdleConnections()
	_ = resp.CloseBodyStream()
	return true, client.DoDeadline(req, resp, deadline)
}

func staleConn(err error) bool {
	return errors.Is(err, fasthttp.ErrConnectionClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
