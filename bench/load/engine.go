package load

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Options tune how a scenario is run. The zero value is usable.
type Options struct {
	// Progress, when set, receives one line refreshed every second
	// (elapsed time, requests sent, completed, errors and the current 99th
	// percentile latency), ended by a newline when the run ends.
	Progress io.Writer
	// Seed seeds the choice of each request's wire, tier and fault, and
	// Poisson gaps: the same seed sends the same sequence of requests.
	Seed int64
	// AllowNonLoopback lets a target's host resolve to an address that is
	// not loopback. Load tests are meant to run on one machine, against
	// servers started for them: without this, a mistyped or copied base
	// URL cannot turn the harness into a flood aimed at someone else's
	// service, and the figures never include a network they do not name.
	AllowNonLoopback bool
	// Client tunes the HTTP client.
	Client ClientOptions

	// Round is the length of one round of Compare. Default 2 s (shorter
	// when the duration is, so that there are at least two rounds).
	Round time.Duration
	// FrontierBudget bounds the whole of a Frontier search. Default 60 s.
	FrontierBudget time.Duration
	// ProbeDuration is the measured length of one Frontier probe on each
	// side. Default 2 s.
	ProbeDuration time.Duration
}

// ClientOptions tune the HTTP client of a run: one fasthttp.HostClient per
// target, with pooled keep-alive connections, reading every response body
// as a stream.
type ClientOptions struct {
	// Dial opens a connection to addr; default TCP. Tests pass the Dial of
	// a fasthttputil.InmemoryListener.
	Dial fasthttp.DialFunc
	// MaxConns bounds the connections to the target; a request waits for
	// a free one up to the scenario's timeout. Default: the concurrency
	// (closed loop) or the in-flight cap (open loop), so no request waits.
	MaxConns int
	// ReadBufferSize is the per-connection read buffer (it must hold a
	// response head). Default 4 KiB.
	ReadBufferSize int
	// WriteBufferSize is the per-connection write buffer. Default 4 KiB.
	WriteBufferSize int
}

// ErrNotLoopback is returned for a target whose host does not resolve to a
// loopback address when Options.AllowNonLoopback is not set.
var ErrNotLoopback = errors.New("target host is not a loopback address")

// Run runs sc against t: the warm-up, whose requests are sent but not
// recorded, then the measured window, which ends after sc.Duration or
// sc.MaxRequests measured requests, whichever comes first. Requests still
// in flight then are waited for up to sc.Timeout and then abandoned, as
// errors with code harness_timeout. When the target's memory is sampled,
// the sampling goes on for sc.Cooldown after that, with nothing sent. When
// ctx ends first, in-flight requests are abandoned at once, the cooldown
// is cut short, and Run returns what was measured so far together with
// ctx's error.
func Run(ctx context.Context, sc *Scenario, t Target, opt Options) (*Result, error) {
	r, err := newRunner(ctx, sc, t, opt)
	if err != nil {
		return nil, err
	}
	defer r.close()
	res := newResult(r.sc, t)
	res.Started = time.Now()
	pr := startProgress(opt.Progress, res.Started)
	rss := r.sampleRSS(res)
	defer rss.stop()
	r.phase(ctx, res, pr, r.sc.warmup(), r.sc.Duration, int64(r.sc.MaxRequests))
	pr.stop()
	r.close()
	coolDown(ctx, r.sc.Cooldown, opt.Progress, rss)
	res.finish()
	return res, ctx.Err()
}

// finish derives the figures computed from the others.
func (r *Result) finish() {
	if s := r.Elapsed.Seconds(); s > 0 {
		r.Throughput = float64(r.Completed) / s
	}
	r.costs()
}

// runner runs phases of one scenario against one target, with one client.
type runner struct {
	sc       *Scenario // a validated copy
	t        Target
	opt      Options
	variants []variant
	client   *fasthttp.HostClient
	conns    connTracker
	auth     authHeader // sent with every request; empty: none
	meters   []*procMeter
	machine  *machineMeter // with meters: the CPUs of the machine they run on
	seed     uint64
	maxIn    int // open loop in-flight cap

	spare *recorder // the last phase's, when no request of it is left

	seq    atomic.Uint64 // requests picked so far, across phases
	sent   atomic.Int64  // requests sent, warm-up included
	done   atomic.Int64  // completed in finished phases
	failed atomic.Int64  // errors in finished phases
	phases atomic.Uint64 // phases started
}

func newRunner(ctx context.Context, sc *Scenario, t Target, opt Options) (*runner, error) {
	if sc == nil {
		return nil, errors.New("cannot run: no scenario")
	}
	c := *sc
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tg, err := parseTarget(t.BaseURL)
	if err != nil {
		return nil, err
	}
	if !opt.AllowNonLoopback {
		if err := checkLoopback(ctx, t.BaseURL); err != nil {
			return nil, err
		}
	}
	switch t.Wire {
	case "", WireV1, WireV2, WireOpenAI, WireUpstream, WireAnthropic, WireResponses:
	default:
		return nil, fmt.Errorf("cannot run target %s: unknown wire %q", t.Name, t.Wire)
	}
	tg.model, tg.path = cmp.Or(t.Model, c.Model), cmp.Or(t.Path, c.Path)
	if t.Path != "" {
		if err := checkPath(t.Path); err != nil {
			return nil, fmt.Errorf("cannot run target %s: path: %w", t.Name, err)
		}
	}
	if err := checkModel(t.Model); err != nil {
		return nil, fmt.Errorf("cannot run target %s: model: %w", t.Name, err)
	}
	vs, err := buildVariants(&c, tg, t.Wire)
	if err != nil {
		return nil, err
	}
	r := &runner{sc: &c, t: t, opt: opt, variants: vs, seed: uint64(opt.Seed)}
	switch {
	case t.AuthHeader != "":
		name, value, err := ParseHeader(t.AuthHeader)
		if err != nil {
			return nil, fmt.Errorf("cannot run target %s: %w", t.Name, err)
		}
		r.auth = authHeader{[]byte(name), []byte(value)}
	case t.Key != "":
		r.auth = authHeader{strAuthorization, []byte("Bearer " + t.Key)}
	case c.AuthHeader != "":
		name, value, _ := ParseHeader(c.AuthHeader) // validated
		r.auth = authHeader{[]byte(name), []byte(value)}
	}
	for _, p := range t.procs() {
		if p.PID > 0 {
			r.meters = append(r.meters, &procMeter{proc: p})
		}
	}
	if len(r.meters) > 0 {
		r.machine = &machineMeter{}
	}
	r.maxIn = c.MaxInFlight
	if r.maxIn == 0 && c.Mode == ModeOpen {
		need := c.Rate * max(time.Second, c.expectedReply()).Seconds()
		r.maxIn = max(16, int(math.Ceil(4*need)))
	}
	maxConns := opt.Client.MaxConns
	if maxConns <= 0 {
		maxConns = c.Concurrency
		if c.Mode == ModeOpen {
			maxConns = r.maxIn
		}
	}
	dial := opt.Client.Dial
	if dial == nil {
		dial = func(addr string) (net.Conn, error) { return fasthttp.DialTimeout(addr, 5*time.Second) }
	}
	r.client = &fasthttp.HostClient{
		Addr:                     tg.addr,
		IsTLS:                    tg.tls,
		Dial:                     r.conns.dial(dial),
		MaxConns:                 max(maxConns, 1),
		MaxConnWaitTimeout:       c.Timeout,
		MaxIdleConnDuration:      max(30*time.Second, 2*c.Think), // a think gap keeps its connection
		ReadBufferSize:           orDefault(opt.Client.ReadBufferSize, 4<<10),
		WriteBufferSize:          orDefault(opt.Client.WriteBufferSize, 4<<10),
		NoDefaultUserAgentHeader: true,
		DisablePathNormalizing:   true,
		StreamResponseBody:       true,
	}
	return r, nil
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// close closes every connection of the runner's client.
func (r *runner) close() {
	r.conns.closeAll()
	r.client.CloseIdleConnections()
}

// Why a phase stopped sending.
const (
	stopWindow int32 = iota + 1 // the measured window ended
	stopMax                     // MaxRequests were sent
	stopCtx                     // the context ended
)

// phase is one stretch of sending: an optional warm-up, then a measured
// window.
type phase struct {
	r           *runner
	rec         *recorder
	start       time.Time
	measureFrom time.Time
	end         time.Time
	maxReq      int64

	measured atomic.Int64 // measured requests taken
	reason   atomic.Int32
	maxHit   chan struct{}
	maxOnce  sync.Once
	wg       sync.WaitGroup // requests (open loop) or clients (closed loop)
}

func (ph *phase) stop(reason int32) { ph.reason.CompareAndSwap(0, reason) }

// take claims the next measured request; false when MaxRequests are taken.
func (ph *phase) take() bool {
	n := ph.measured.Add(1)
	if ph.maxReq > 0 && n > ph.maxReq {
		ph.stop(stopMax)
		ph.maxOnce.Do(func() { close(ph.maxHit) })
		return false
	}
	return true
}

// phase runs warmup then window (at most maxReq measured requests when
// positive), and adds what it measured to res.
func (r *runner) phase(ctx context.Context, res *Result, pr *progress, warmup, window time.Duration, maxReq int64) {
	rec := r.spare
	if rec != nil {
		r.spare = nil
		rec.reset()
	} else {
		rec = newRecorder(r.t.Name)
	}
	now := time.Now()
	ph := &phase{
		r:           r,
		rec:         rec,
		start:       now,
		measureFrom: now.Add(warmup),
		end:         now.Add(warmup + window),
		maxReq:      maxReq,
		maxHit:      make(chan struct{}),
	}
	var cpu *cpuWindow
	if window > 0 {
		cpu = r.beginCPU(ph.measureFrom)
	}
	pr.show(ph)
	n := r.phases.Add(1)
	// Connections count from the end of the warm-up.
	r.conns.from.Store(ph.measureFrom.UnixNano())
	opened := r.conns.opened.Load()
	if r.sc.Mode == ModeOpen {
		r.openLoop(ctx, ph, n)
	} else {
		r.closedLoop(ctx, ph)
	}
	stoppedAt := time.Now()
	res.Connections += r.conns.opened.Load() - opened

	wait := r.sc.Timeout
	if ctx.Err() != nil {
		wait = 0
	}
	reusable := true
	if !waitTimeout(&ph.wg, wait) {
		ph.rec.finalize()
		// Unblock the abandoned requests, then drop from the pool the
		// connections that were closed under it.
		r.conns.closeAll()
		reusable = waitTimeout(&ph.wg, time.Second)
		r.client.CloseIdleConnections()
	} else {
		ph.rec.finalize()
	}
	// The CPU window ends with the window's last request, so that it
	// holds all the work of the requests the result counts: a stream sent
	// in the window's last second is counted, and so is what it costs
	// after the window. (A comparison's rounds start with nothing in
	// flight, so their windows hold no other request's work.)
	cpu.end()
	pr.show(nil)

	before := res.Completed
	beforeErr := res.Errors
	ph.rec.mergeInto(res)
	if cpu != nil {
		res.CPU = r.procCosts()
		res.CPUs = r.machine.busy()
	}
	r.done.Add(res.Completed - before)
	r.failed.Add(res.Errors - beforeErr)
	if reusable {
		r.spare = ph.rec
	}

	var elapsed time.Duration
	switch ph.reason.Load() {
	case stopMax:
		if last := ph.rec.lastEnd(); !last.IsZero() {
			elapsed = last.Sub(ph.measureFrom)
		} else {
			elapsed = stoppedAt.Sub(ph.measureFrom)
		}
	case stopCtx:
		elapsed = stoppedAt.Sub(ph.measureFrom)
	default:
		elapsed = window
	}
	res.Elapsed += min(max(elapsed, 0), window)
}

// waitTimeout waits for wg up to d and reports whether it finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	if d <= 0 {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// openLoop sends one request at every slot of the schedule (start plus
// i/rate, or exponential gaps when Poisson), each on a goroutine of its own,
// until the window ends. A request is timed from its slot, not from when it
// left: when the sender falls behind, the delay counts. A slot that comes
// while the in-flight cap is reached is not sent but counted as a
// harness_backlog error, so that a stalled target cannot make the harness
// pile up goroutines.
func (r *runner) openLoop(ctx context.Context, ph *phase, phaseNo uint64) {
	gap := float64(time.Second) / r.sc.Rate
	rng := rand.New(rand.NewPCG(r.seed, phaseNo))
	sem := make(chan struct{}, r.maxIn)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	next := ph.start
	for i := 1; ; i++ {
		if !next.Before(ph.end) {
			ph.stop(stopWindow)
			return
		}
		if d := time.Until(next); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				ph.stop(stopCtx)
				return
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			ph.stop(stopCtx)
			return
		}
		measured := !next.Before(ph.measureFrom)
		if measured && !ph.take() {
			return
		}
		idx := r.seq.Add(1) - 1
		v := pick(r.variants, r.seed, idx)
		select {
		case sem <- struct{}{}:
			if measured {
				ph.rec.sent()
			}
			ph.wg.Add(1)
			go r.openRequest(ph, sem, v, next, measured, idx)
		default:
			if measured {
				ph.rec.backlog(uint32(idx))
			}
		}
		if r.sc.Poisson {
			next = next.Add(time.Duration(rng.ExpFloat64() * gap))
		} else {
			next = ph.start.Add(time.Duration(float64(i) * gap))
		}
	}
}

func (r *runner) openRequest(ph *phase, sem chan struct{}, v *variant, intended time.Time, measured bool, idx uint64) {
	c := callPool.Get().(*call)
	r.sent.Add(1)
	c.do(r.client, v, r.auth, r.sc.Timeout, intended)
	if measured {
		c.out.index = idx
		ph.rec.recordVariant(uint32(idx), v, &c.out)
	}
	c.reset()
	callPool.Put(c)
	<-sem
	ph.wg.Done()
}

// closedLoop runs sc.Concurrency clients, each sending its next request
// when the last one ends, timed from when it is sent, and returns when
// sending must stop.
func (r *runner) closedLoop(ctx context.Context, ph *phase) {
	for w := range r.sc.Concurrency {
		ph.wg.Add(1)
		go r.client1(ctx, ph, uint32(w))
	}
	t := time.NewTimer(time.Until(ph.end))
	defer t.Stop()
	select {
	case <-ctx.Done():
		ph.stop(stopCtx)
	case <-t.C:
		ph.stop(stopWindow)
	case <-ph.maxHit:
	}
}

// client1 is one closed-loop client.
func (r *runner) client1(ctx context.Context, ph *phase, w uint32) {
	defer ph.wg.Done()
	c := callPool.Get().(*call)
	defer callPool.Put(c)
	for ph.reason.Load() == 0 {
		if ctx.Err() != nil {
			ph.stop(stopCtx)
			return
		}
		now := time.Now()
		if !now.Before(ph.end) {
			ph.stop(stopWindow)
			return
		}
		measured := !now.Before(ph.measureFrom)
		if measured && !ph.take() {
			return
		}
		idx := r.seq.Add(1) - 1
		v := pick(r.variants, r.seed, idx)
		if measured {
			ph.rec.sent()
		}
		r.sent.Add(1)
		c.do(r.client, v, r.auth, r.sc.Timeout, now)
		if measured {
			c.out.index = idx
			ph.rec.recordVariant(w, v, &c.out)
		}
		c.reset()
		if r.sc.Think > 0 && !ph.sleep(ctx, r.sc.Think) {
			return
		}
	}
}

// sleep waits d, or less when the phase or ctx ends first; false means
// sending must stop.
func (ph *phase) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(min(d, time.Until(ph.end)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return ph.reason.Load() == 0 && time.Now().Before(ph.end)
	}
}

// connTracker remembers the open connections of a client, so that requests
// abandoned at the end of a run can be unblocked by closing theirs.
type connTracker struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	// opened counts the connections dialled from the time in from (Unix
	// nanoseconds), the current phase's measured window.
	opened, from atomic.Int64
}

type trackedConn struct {
	net.Conn
	t    *connTracker
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}

func (t *connTracker) dial(dial fasthttp.DialFunc) fasthttp.DialFunc {
	return func(addr string) (net.Conn, error) {
		conn, err := dial(addr)
		if err != nil {
			return nil, err
		}
		if time.Now().UnixNano() >= t.from.Load() {
			t.opened.Add(1)
		}
		tc := &trackedConn{Conn: conn, t: t}
		t.mu.Lock()
		if t.conns == nil {
			t.conns = map[*trackedConn]struct{}{}
		}
		t.conns[tc] = struct{}{}
		t.mu.Unlock()
		return tc, nil
	}
}

func (t *connTracker) closeAll() {
	t.mu.Lock()
	conns := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// checkLoopback returns ErrNotLoopback, wrapped, unless every address the
// base URL's host resolves to is a loopback address.
func checkLoopback(ctx context.Context, base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("cannot parse base URL %q: %w", base, err)
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); ip != nil {
		if !ip.IsLoopback() {
			return fmt.Errorf("cannot load %s: %w (set AllowNonLoopback to load another machine)", base, ErrNotLoopback)
		}
		return nil
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return fmt.Errorf("cannot resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("cannot resolve %s: no address", host)
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return fmt.Errorf("cannot load %s: %s resolves to %s: %w (set AllowNonLoopback to load another machine)",
				base, host, a.IP, ErrNotLoopback)
		}
	}
	return nil
}
