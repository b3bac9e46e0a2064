package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/edgegw/gateway/storage"
)

// StatusComponent is one model component of the status document and how it
// is probed.
type StatusComponent struct {
	// Name is the row's component: a chat tier (kavi, vaani, mira) or an
	// auxiliary tier (gw-embed, gw-rerank, gw-guard).
	Name string
	// Kind is KindChat or KindAux.
	Kind string
	// LatencyTargetMs is the catalogue's value, shown on chat rows.
	LatencyTargetMs int
	// Probe sends one tiny request to the component and reports how it
	// went; nil means the component is not configured (its row is unknown,
	// reason not_configured).
	Probe func(ctx context.Context) error
	// Every is the time between two probes. Default 15s.
	Every time.Duration
	// Timeout bounds one probe. Default 10s.
	Timeout time.Duration
	// StaleAfter is the age past which the newest probe no longer speaks
	// for the component (the row is then unknown). Default 2×Every+Timeout.
	StaleAfter time.Duration
	// DegradeAboveMs: the component is degraded when the median latency of
	// its recent successful probes exceeds it; 0 never.
	DegradeAboveMs int
	// SlowAboveMs: the component is degraded when its newest probe
	// succeeded but took longer; 0 never.
	SlowAboveMs int

	probes struct{ ok, failed *metrics.Counter }
}

// Status measures the fleet's components and builds GET /api/status.
// Every process serves the document from PostgreSQL; one process at a time
// (the holder of an advisory lock) probes, and every process reports its
// own breakers.
type Status struct {
	// DB stores the measurements. Required.
	DB *storage.DB
	// Log receives failures to store or read measurements; never a
	// response body.
	Log *slog.Logger
	// Components are the model components, in the document's order.
	Components []StatusComponent
	// Breakers returns this process's breaker state per chat tier; nil
	// reports none.
	Breakers func() map[string]string
	// ProcessID names this process in breaker reports. Required when
	// Breakers is set.
	ProcessID string
	// BreakerEvery is the time between two breaker reports; reports older
	// than three of them are ignored. Default 5s.
	BreakerEvery time.Duration
	// Tick is how often the runner wakes to see what is due. Default 1s.
	Tick time.Duration
	// Now is the clock of the measurements and verdicts. Default
	// time.Now.
	Now func() time.Time
	// Metrics receives the probe counters; nil registers none.
	Metrics *metrics.Set
	// ReadEvery is how long one read of the stored measurements serves
	// documents, so a public route polled hard costs the database at most
	// one read per interval; verdicts and ages are still computed at each
	// request's time. 0 reads on every request.
	ReadEvery time.Duration

	readMu sync.Mutex
	read   statusRead

	leader       *storage.StatusLeader
	next         map[string]time.Time
	nextBreakers time.Time
}

// Validate fills in defaults and checks the components.
func (s *Status) Validate() error {
	if s.DB == nil {
		return errors.New("status: database required")
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	if s.BreakerEvery <= 0 {
		s.BreakerEvery = 5 * time.Second
	}
	if s.Tick <= 0 {
		s.Tick = time.Second
	}
	if s.Breakers != nil && s.ProcessID == "" {
		return errors.New("status: process id required to report breakers")
	}
	seen := map[string]bool{}
	for i := range s.Components {
		c := &s.Components[i]
		if c.Kind != KindChat && c.Kind != KindAux {
			return fmt.Errorf("status.%s: kind %q is not chat or aux", c.Name, c.Kind)
		}
		if seen[c.Name] {
			return fmt.Errorf("status.%s: listed twice", c.Name)
		}
		seen[c.Name] = true
		if c.Every < 0 || c.Timeout < 0 || c.StaleAfter < 0 || c.DegradeAboveMs < 0 || c.SlowAboveMs < 0 {
			return fmt.Errorf("status.%s: intervals and thresholds must not be negative", c.Name)
		}
		if c.Every == 0 {
			c.Every = 15 * time.Second
		}
		if c.Timeout == 0 {
			c.Timeout = 10 * time.Second
		}
		if c.StaleAfter == 0 {
			c.StaleAfter = 2*c.Every + c.Timeout
		}
		if c.StaleAfter < c.Every {
			return fmt.Errorf("status.%s: stale_after must be at least the interval", c.Name)
		}
		if s.Metrics != nil && c.Probe != nil {
			c.probes.ok = s.Metrics.NewCounter(fmt.Sprintf(`gateway_status_probes_total{component=%q,outcome="ok"}`, c.Name))
			c.probes.failed = s.Metrics.NewCounter(fmt.Sprintf(`gateway_status_probes_total{component=%q,outcome="failed"}`, c.Name))
		}
	}
	s.leader = s.DB.NewStatusLeader()
	s.next = map[string]time.Time{}
	return nil
}

func (s *Status) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Status) breakerEvery() time.Duration {
	if s.BreakerEvery <= 0 {
		return 5 * time.Second
	}
	return s.BreakerEvery
}

// keep is how far back measurements are read and kept: the longest
// staleness bound, so an old measurement can still be shown as stale.
func (s *Status) keep() time.Duration {
	k := time.Hour
	for _, c := range s.Components {
		k = max(k, 4*c.StaleAfter)
	}
	return k
}

// RunOnce reports this process's breakers when due and, when this process
// leads (or takes over), probes every component that is due, at once and
// in parallel; it returns when they are stored. It reports whether this
// process leads.
func (s *Status) RunOnce(ctx context.Context) (bool, error) {
	now := s.now()
	var errs []error
	if s.Breakers != nil && !now.Before(s.nextBreakers) {
		if err := s.DB.ReportBreakers(ctx, s.ProcessID, s.Breakers(), now, time.Hour); err != nil {
			errs = append(errs, err)
		} else {
			s.nextBreakers = now.Add(s.breakerEvery())
		}
	}
	lead, err := s.leader.Lead(ctx)
	if err != nil || !lead {
		// A follower forgets its schedule: when it takes over, it probes
		// everything at once.
		clear(s.next)
		return false, errors.Join(append(errs, err)...)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range s.Components {
		c := &s.Components[i]
		if c.Probe == nil || now.Before(s.next[c.Name]) {
			continue
		}
		s.next[c.Name] = now.Add(c.Every)
		wg.Go(func() {
			if err := s.probe(ctx, c); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return true, errors.Join(errs...)
}

// probe measures one component and stores the measurement, stamped with
// the time it completed. Its latency is measured on the monotonic clock.
func (s *Status) probe(ctx context.Context, c *StatusComponent) error {
	pctx, cancel := context.WithTimeout(ctx, c.Timeout)
	start := time.Now()
	err := c.Probe(pctx)
	lat := time.Since(start)
	cancel()
	if ctx.Err() != nil {
		return nil // shutting down: this measurement says nothing
	}
	p := storage.Probe{Component: c.Name, CheckedAt: s.now(), OK: err == nil, Latency: lat}
	if err != nil {
		p.Error = ProbeErrorClass(err)
		if c.probes.failed != nil {
			c.probes.failed.Inc()
		}
	} else if c.probes.ok != nil {
		c.probes.ok.Inc()
	}
	return s.DB.RecordProbe(ctx, p, s.keep())
}

// ProbeErrorClass is the class stored for a failed probe: the error's own
// ProbeClass when it has one, timeout for a deadline, else error. Never
// the error's text, which may quote an upstream.
func ProbeErrorClass(err error) string {
	var pc interface{ ProbeClass() string }
	switch {
	case errors.As(err, &pc):
		return pc.ProbeClass()
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "error"
}

// Close gives the lead up, so another process takes over at once, and
// closes the lock's connection.
func (s *Status) Close(ctx context.Context) {
	if s.leader != nil {
		s.leader.Release(ctx)
	}
}

// Run runs RunOnce every Tick until ctx ends, then gives the lead up so
// another process takes over at once.
func (s *Status) Run(ctx context.Context) {
	t := time.NewTicker(s.Tick)
	defer t.Stop()
	for {
		if _, err := s.RunOnce(ctx); err != nil && ctx.Err() == nil {
			s.Log.Warn("status probing failed", "err", err)
		}
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			s.Close(rctx)
			cancel()
			return
		case <-t.C:
		}
	}
}
