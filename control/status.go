package control

import (
	"context"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// Component kinds of the status document.
const (
	KindAPI      = "api"
	KindDatabase = "database"
	KindChat     = "chat"
	KindAux      = "aux"
)

// Verdicts of the status document.
const (
	VerdictHealthy  = "healthy"
	VerdictDegraded = "degraded"
	VerdictDown     = "down"
	VerdictUnknown  = "unknown"
)

// Reasons a row carries beside its verdict.
const (
	ReasonNeverMeasured   = "never_measured"
	ReasonStale           = "not_measured_recently"
	ReasonNotConfigured   = "not_configured"
	ReasonStoreUnreadable = "measurements_unreadable"
	ReasonProbesFailed    = "latest_probes_failed"
	ReasonProbeFailed     = "latest_probe_failed"
	ReasonSlowProbe       = "latest_probe_slow"
	ReasonMedianLatency   = "median_latency_high"
	ReasonBreaker         = "breaker_withholding_traffic"
	ReasonUnreachable     = "unreachable"
)

// statusWindow is how many of a component's newest probes its verdict
// reads (the median is over their successes).
const statusWindow = 5

// StatusRow is one component's row of GET /api/status.
type StatusRow struct {
	Component string `json:"component"`
	Kind      string `json:"kind"`
	Status    string `json:"status"`
	Reason    string `json:"reason,omitempty"`
	// CheckedAt and AgeSeconds are null only for a component never
	// measured. CheckedAt is to the second, like every timestamp of the
	// API.
	CheckedAt  rfc3339 `json:"checked_at"`
	AgeSeconds *int64  `json:"age_seconds"`
	// LatencyMs is the newest probe's; MedianLatencyMs the median of the
	// window's successful probes.
	LatencyMs       *int64 `json:"latency_ms,omitempty"`
	MedianLatencyMs *int64 `json:"median_latency_ms,omitempty"`
	// LatencyTargetMs is on chat rows only: the catalogue's value.
	LatencyTargetMs *int `json:"latency_target_ms,omitempty"`
	// Breaker is the worst breaker state of the fleet (chat rows).
	Breaker string `json:"breaker,omitempty"`
}

// StatusDocument is the body of GET /api/status.
type StatusDocument struct {
	GeneratedAt rfc3339     `json:"generated_at"`
	Components  []StatusRow `json:"components"`
}

// fresh reports whether a measurement taken at at still speaks for the
// component at now.
func (c *StatusComponent) fresh(at, now time.Time) bool {
	return now.Sub(at) <= c.StaleAfter
}

// modelVerdict applies the spec's rules to one model component: probes are
// its newest measurements, newest first; breaker is the worst state any
// process reported (chat tiers). A component whose newest probe is not
// fresh is unknown, whatever its probes said.
func modelVerdict(c *StatusComponent, probes []storage.Probe, breaker string, now time.Time) StatusRow {
	r := StatusRow{Component: c.Name, Kind: c.Kind, Status: VerdictUnknown}
	if c.Kind == KindChat {
		t := c.LatencyTargetMs
		r.LatencyTargetMs = &t
		r.Breaker = breaker
	}
	if c.Probe == nil {
		r.Reason = ReasonNotConfigured
		return r
	}
	if len(probes) == 0 {
		r.Reason = ReasonNeverMeasured
		return r
	}
	newest := probes[0]
	age := int64(max(now.Sub(newest.CheckedAt), 0) / time.Second)
	r.CheckedAt, r.AgeSeconds = rfc3339(newest.CheckedAt.Unix()), &age
	if !c.fresh(newest.CheckedAt, now) {
		r.Reason = ReasonStale
		return r
	}
	ms := newest.Latency.Milliseconds()
	r.LatencyMs = &ms
	var ok []int64
	for _, p := range probes {
		if p.OK {
			ok = append(ok, p.Latency.Milliseconds())
		}
	}
	if len(ok) > 0 {
		m := median(ok)
		r.MedianLatencyMs = &m
	}
	switch {
	case !newest.OK && len(probes) > 1 && !probes[1].OK:
		r.Status, r.Reason = VerdictDown, ReasonProbesFailed
	case !newest.OK:
		// After a success, or the first probe ever: one failure is not
		// yet down.
		r.Status, r.Reason = VerdictDegraded, ReasonProbeFailed
	case c.SlowAboveMs > 0 && ms > int64(c.SlowAboveMs):
		r.Status, r.Reason = VerdictDegraded, ReasonSlowProbe
	case r.MedianLatencyMs != nil && c.DegradeAboveMs > 0 && *r.MedianLatencyMs > int64(c.DegradeAboveMs):
		r.Status, r.Reason = VerdictDegraded, ReasonMedianLatency
	case c.Kind == KindChat && breaker != "" && breaker != hotpath.BreakerClosed.String():
		r.Status, r.Reason = VerdictDegraded, ReasonBreaker
	default:
		r.Status = VerdictHealthy
	}
	return r
}

// median of a non-empty slice, the lower middle of an even count rounded
// up to the mean of the two middles.
func median(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2] + 1) / 2
}

// worstBreaker is the state that withholds the most traffic: open, then
// half_open, then closed; empty when nobody reported.
func worstBreaker(states []string) string {
	rank := map[string]int{"closed": 1, "half_open": 2, "open": 3}
	worst := ""
	for _, s := range states {
		if rank[s] > rank[worst] {
			worst = s
		}
	}
	return worst
}

// Document builds the status document at s.now() from the stored
// measurements. ok is false when no model component has a fresh
// measurement (the route then answers 503).
func (s *Status) Document(ctx context.Context) (doc StatusDocument, ok bool) {
	now := s.now()
	doc.GeneratedAt = rfc3339(now.Unix())
	zero := int64(0)
	doc.Components = append(doc.Components, StatusRow{Component: "api", Kind: KindAPI, Status: VerdictHealthy,
		CheckedAt: doc.GeneratedAt, AgeSeconds: &zero})
	rd := s.readMeasurements(ctx, now)
	probes, breakers, err := rd.probes, rd.breakers, rd.err
	age := int64(max(now.Sub(rd.at), 0) / time.Second)
	dbRow := StatusRow{Component: "database", Kind: KindDatabase, Status: VerdictHealthy,
		CheckedAt: rfc3339(rd.at.Unix()), AgeSeconds: &age}
	if err != nil {
		dbRow.Status, dbRow.Reason = VerdictDown, ReasonUnreachable
	} else {
		ms := rd.latency.Milliseconds()
		dbRow.LatencyMs = &ms
	}
	doc.Components = append(doc.Components, dbRow)
	for i := range s.Components {
		c := &s.Components[i]
		var r StatusRow
		if err != nil {
			r = StatusRow{Component: c.Name, Kind: c.Kind, Status: VerdictUnknown, Reason: ReasonStoreUnreadable}
			if c.Kind == KindChat {
				t := c.LatencyTargetMs
				r.LatencyTargetMs = &t
			}
		} else {
			r = modelVerdict(c, probes[c.Name], worstBreaker(breakers[c.Name]), now)
		}
		if r.Status != VerdictUnknown {
			ok = true
		}
		doc.Components = append(doc.Components, r)
	}
	return doc, ok
}

// statusRead is one read of the stored measurements.
type statusRead struct {
	at       time.Time // on the status clock
	taken    time.Time // on the monotonic clock, for ReadEvery
	probes   map[string][]storage.Probe
	breakers map[string][]string
	latency  time.Duration
	err      error
}

// readMeasurements reads the measurements, or returns the last read when
// it is younger than ReadEvery. The read is also the database's probe.
func (s *Status) readMeasurements(ctx context.Context, now time.Time) statusRead {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	if s.ReadEvery > 0 && !s.read.taken.IsZero() && time.Since(s.read.taken) < s.ReadEvery {
		return s.read
	}
	start := time.Now()
	rd := statusRead{at: now, taken: start}
	rd.probes, rd.err = s.DB.RecentProbes(ctx, now.Add(-s.keep()), statusWindow)
	if rd.err == nil {
		rd.breakers, rd.err = s.DB.BreakerStates(ctx, now.Add(-3*s.breakerEvery()))
	}
	rd.latency = time.Since(start)
	s.read = rd
	return rd
}

// status serves GET /api/status: public, never cached, 503 only when no
// model component has a fresh measurement.
func (a *API) status(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	qctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	doc, ok := a.Status.Document(qctx)
	code := fasthttp.StatusOK
	if !ok {
		code = fasthttp.StatusServiceUnavailable
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	return writeJSON(ctx, code, doc)
}
