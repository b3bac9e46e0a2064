package control

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bytedance/sonic"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func okProbe(at time.Duration, lat int) storage.Probe {
	return storage.Probe{CheckedAt: t0.Add(at), OK: true, Latency: time.Duration(lat) * time.Millisecond}
}

func failedProbe(at time.Duration) storage.Probe {
	return storage.Probe{CheckedAt: t0.Add(at), Error: "status_500", Latency: 3 * time.Millisecond}
}

func TestStatusVerdicts(t *testing.T) {
	chat := StatusComponent{Name: "kavi", Kind: KindChat, LatencyTargetMs: 2500, Every: 10 * time.Second,
		StaleAfter: 30 * time.Second, DegradeAboveMs: 500, SlowAboveMs: 1000, Probe: func(context.Context) error { return nil }}
	now := t0.Add(time.Minute)
	s := time.Second
	cases := []struct {
		name    string
		probes  []storage.Probe // newest first
		breaker string
		status  string
		reason  string
	}{
		{"never measured", nil, "", VerdictUnknown, ReasonNeverMeasured},
		{"healthy", []storage.Probe{okProbe(55*s, 100), okProbe(45*s, 120)}, "closed", VerdictHealthy, ""},
		{"stale healthy is unknown", []storage.Probe{okProbe(29*s, 100)}, "", VerdictUnknown, ReasonStale},
		{"stale down is unknown", []storage.Probe{failedProbe(29 * s), failedProbe(19 * s)}, "", VerdictUnknown, ReasonStale},
		{"just fresh", []storage.Probe{okProbe(30*s, 100)}, "", VerdictHealthy, ""},
		{"latest two failed", []storage.Probe{failedProbe(55 * s), failedProbe(45 * s), okProbe(35*s, 100)}, "", VerdictDown, ReasonProbesFailed},
		{"failed after a success", []storage.Probe{failedProbe(55 * s), okProbe(45*s, 100)}, "", VerdictDegraded, ReasonProbeFailed},
		{"first probe failed", []storage.Probe{failedProbe(55 * s)}, "", VerdictDegraded, ReasonProbeFailed},
		{"recovered after two failures", []storage.Probe{okProbe(55*s, 100), failedProbe(45 * s), failedProbe(35 * s)}, "", VerdictHealthy, ""},
		{"newest slow", []storage.Probe{okProbe(55*s, 1001), okProbe(45*s, 100), okProbe(35*s, 100)}, "", VerdictDegraded, ReasonSlowProbe},
		{"newest at the slow bound", []storage.Probe{okProbe(55*s, 1000), okProbe(45*s, 100), okProbe(35*s, 100)}, "", VerdictHealthy, ""},
		{"median high", []storage.Probe{okProbe(55*s, 400), okProbe(45*s, 700), okProbe(35*s, 800)}, "", VerdictDegraded, ReasonMedianLatency},
		{"median at the bound", []storage.Probe{okProbe(55*s, 400), okProbe(45*s, 500), okProbe(35*s, 900)}, "", VerdictHealthy, ""},
		{"median skips failures", []storage.Probe{okProbe(55*s, 100), failedProbe(45 * s), okProbe(35*s, 900), okProbe(25*s, 900)}, "", VerdictDegraded, ReasonMedianLatency},
		{"breaker open somewhere", []storage.Probe{okProbe(55*s, 100)}, "open", VerdictDegraded, ReasonBreaker},
		{"breaker half open", []storage.Probe{okProbe(55*s, 100)}, "half_open", VerdictDegraded, ReasonBreaker},
		{"down outranks breaker", []storage.Probe{failedProbe(55 * s), failedProbe(45 * s)}, "open", VerdictDown, ReasonProbesFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := modelVerdict(&chat, tc.probes, tc.breaker, now)
			require.Equal(t, tc.status, r.Status)
			require.Equal(t, tc.reason, r.Reason)
			require.NotNil(t, r.LatencyTargetMs, "chat rows carry latency_target_ms")
			require.Equal(t, 2500, *r.LatencyTargetMs)
			if len(tc.probes) > 0 {
				require.Equal(t, rfc3339(tc.probes[0].CheckedAt.Unix()), r.CheckedAt)
				require.Equal(t, int64(now.Sub(tc.probes[0].CheckedAt)/time.Second), *r.AgeSeconds)
			} else {
				require.Zero(t, r.CheckedAt)
				require.Nil(t, r.AgeSeconds)
			}
		})
	}

	t.Run("aux rows carry no latency target and ignore breakers", func(t *testing.T) {
		aux := chat
		aux.Kind, aux.Name = KindAux, "gw-embed"
		r := modelVerdict(&aux, []storage.Probe{okProbe(55*s, 100)}, "open", now)
		require.Equal(t, VerdictHealthy, r.Status)
		require.Nil(t, r.LatencyTargetMs)
	})
	t.Run("not configured", func(t *testing.T) {
		aux := chat
		aux.Probe = nil
		r := modelVerdict(&aux, nil, "", now)
		require.Equal(t, VerdictUnknown, r.Status)
		require.Equal(t, ReasonNotConfigured, r.Reason)
	})
}

func TestWorstBreakerAndMedian(t *testing.T) {
	require.Equal(t, "", worstBreaker(nil))
	require.Equal(t, "closed", worstBreaker([]string{"closed", "closed"}))
	require.Equal(t, "half_open", worstBreaker([]string{"closed", "half_open"}))
	require.Equal(t, "open", worstBreaker([]string{"half_open", "open", "closed"}))
	require.Equal(t, int64(5), median([]int64{9, 5, 1}))
	require.Equal(t, int64(4), median([]int64{1, 3, 5, 9}))
}

// clock is an injected clock the test moves by hand.
type clock struct{ now atomic.Int64 }

func newClock(t time.Time) *clock { c := &clock{}; c.now.Store(t.UnixNano()); return c }
func (c *clock) Now() time.Time   { return time.Unix(0, c.now.Load()).UTC() }
func (c *clock) Add(d time.Duration) {
	c.now.Add(int64(d))
}

// The document reads what the leader stored; a measurement that ages past
// its bound turns the row unknown, and with no fresh model row the
// document says so (the route's 503).
func TestStatusDocumentFromStoredProbes(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	clk := newClock(time.Now())
	var fail atomic.Bool
	probe := func(context.Context) error {
		if fail.Load() {
			return errors.New("refused")
		}
		return nil
	}
	s := &Status{DB: db, Now: clk.Now, Components: []StatusComponent{
		{Name: "kavi", Kind: KindChat, LatencyTargetMs: 2500, Every: 10 * time.Second, Probe: probe},
		{Name: "gw-embed", Kind: KindAux},
	}}
	require.NoError(t, s.Validate())
	t.Cleanup(func() { s.Close(ctx) })
	require.Equal(t, 30*time.Second, s.Components[0].StaleAfter, "default: two intervals and the timeout")

	doc, ok := s.Document(ctx)
	require.False(t, ok, "nothing measured yet")
	require.Equal(t, []string{"api", "database", "kavi", "gw-embed"}, names(doc))
	require.Equal(t, VerdictUnknown, doc.Components[2].Status)
	require.Equal(t, VerdictHealthy, doc.Components[1].Status)

	lead, err := s.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, lead)
	doc, ok = s.Document(ctx)
	require.True(t, ok)
	require.Equal(t, VerdictHealthy, doc.Components[2].Status)
	require.Equal(t, ReasonNotConfigured, doc.Components[3].Reason)

	// Not due yet: nothing is probed.
	clk.Add(5 * time.Second)
	fail.Store(true)
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	doc, _ = s.Document(ctx)
	require.Equal(t, VerdictHealthy, doc.Components[2].Status)
	require.EqualValues(t, 5, *doc.Components[2].AgeSeconds)

	clk.Add(5 * time.Second)
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	doc, _ = s.Document(ctx)
	require.Equal(t, VerdictDegraded, doc.Components[2].Status, "one failure after a success")

	clk.Add(10 * time.Second)
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	doc, ok = s.Document(ctx)
	require.True(t, ok, "a measurably down component is a fresh measurement")
	require.Equal(t, VerdictDown, doc.Components[2].Status)

	clk.Add(31 * time.Second) // the prober stopped: nothing new
	doc, ok = s.Document(ctx)
	require.False(t, ok)
	require.Equal(t, VerdictUnknown, doc.Components[2].Status)
	require.Equal(t, ReasonStale, doc.Components[2].Reason)
	require.EqualValues(t, 31, *doc.Components[2].AgeSeconds)
}

// Every timestamp of the document is RFC 3339 UTC to the second, like every
// timestamp of the API, whatever fraction the clock and the stored probes
// carry; a component never measured has null for both.
func TestStatusTimestampsToTheSecond(t *testing.T) {
	ctx := context.Background()
	clk := newClock(time.Date(2026, 11, 27, 16, 47, 0, 864525898, time.UTC))
	s := &Status{DB: storetest.DB(t), Now: clk.Now, Components: []StatusComponent{
		{Name: "kavi", Kind: KindChat, LatencyTargetMs: 2500, Every: 10 * time.Second,
			Probe: func(context.Context) error { return nil }},
		{Name: "gw-embed", Kind: KindAux},
	}}
	require.NoError(t, s.Validate())
	t.Cleanup(func() { s.Close(ctx) })
	_, err := s.RunOnce(ctx)
	require.NoError(t, err)
	clk.Add(1500 * time.Millisecond)
	doc, ok := s.Document(ctx)
	require.True(t, ok)
	body, err := sonic.Marshal(doc)
	require.NoError(t, err)
	var got struct {
		GeneratedAt *string `json:"generated_at"`
		Components  []struct {
			Component string  `json:"component"`
			CheckedAt *string `json:"checked_at"`
		} `json:"components"`
	}
	require.NoError(t, sonic.Unmarshal(body, &got))
	require.NotNil(t, got.GeneratedAt, "%s", body)
	require.Equal(t, "2026-11-27T16:47:02Z", *got.GeneratedAt)
	want := map[string]string{"api": "2026-11-27T16:47:02Z", "database": "2026-11-27T16:47:02Z",
		"kavi": "2026-11-27T16:47:00Z"}
	for _, r := range got.Components {
		if r.Component == "gw-embed" {
			require.Nil(t, r.CheckedAt, "never measured: null")
			continue
		}
		require.NotNil(t, r.CheckedAt, r.Component)
		require.Equal(t, want[r.Component], *r.CheckedAt, r.Component)
	}
}

func names(doc StatusDocument) []string {
	var n []string
	for _, r := range doc.Components {
		n = append(n, r.Component)
	}
	return n
}

// One process probes at a time; when its session dies another takes over
// on its next turn, and the old one finds itself a follower.
func TestStatusLeadershipTakeover(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	other, err := storage.Open(ctx, storage.Config{URL: db.Pool.Config().ConnString()})
	require.NoError(t, err)
	t.Cleanup(other.Close)

	var probedA, probedB atomic.Int32
	mk := func(d *storage.DB, n *atomic.Int32, id string) *Status {
		s := &Status{DB: d, ProcessID: id, Breakers: func() map[string]string { return map[string]string{"kavi": "closed"} },
			Components: []StatusComponent{{Name: "kavi", Kind: KindChat, Every: time.Second,
				Probe: func(context.Context) error { n.Add(1); return nil }}}}
		require.NoError(t, s.Validate())
		t.Cleanup(func() { s.Close(ctx) })
		return s
	}
	a, b := mk(db, &probedA, "a"), mk(other, &probedB, "b")
	lead, err := a.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, lead)
	lead, err = b.RunOnce(ctx)
	require.NoError(t, err)
	require.False(t, lead)
	require.EqualValues(t, 1, probedA.Load())
	require.Zero(t, probedB.Load())

	// The leader's session dies, as when its process is killed.
	// Only this test's database: other tests on the same server hold
	// advisory locks of their own (tern's, while they migrate).
	_, err = other.Pool.Exec(ctx, `select pg_terminate_backend(pid) from pg_locks
		where locktype = 'advisory' and granted
		and database = (select oid from pg_database where datname = current_database())`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		lead, err := b.RunOnce(ctx)
		return err == nil && lead
	}, 10*time.Second, 50*time.Millisecond)
	require.EqualValues(t, 1, probedB.Load())
	lead, _ = a.RunOnce(ctx)
	require.False(t, lead, "the old leader lost its lock with its session")

	// Both processes reported their breakers.
	states, err := db.BreakerStates(ctx, time.Now().Add(-time.Minute))
	require.NoError(t, err)
	require.Len(t, states["kavi"], 2)
}

// One read of the measurements serves documents for ReadEvery; each
// document still judges freshness at its own time, so a cached read never
// shows a stale verdict.
func TestStatusReadServesForItsInterval(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	clk := newClock(time.Now())
	s := &Status{DB: db, Now: clk.Now, ReadEvery: time.Hour, Components: []StatusComponent{
		{Name: "mira", Kind: KindChat, Every: 10 * time.Second, Probe: func(context.Context) error { return nil }}}}
	require.NoError(t, s.Validate())
	t.Cleanup(func() { s.Close(ctx) })
	_, err := s.RunOnce(ctx)
	require.NoError(t, err)
	doc, ok := s.Document(ctx)
	require.True(t, ok)
	require.Equal(t, VerdictHealthy, doc.Components[2].Status)

	_, err = db.Pool.Exec(ctx, `delete from status_probes`)
	require.NoError(t, err)
	doc, _ = s.Document(ctx)
	require.Equal(t, VerdictHealthy, doc.Components[2].Status, "served from the earlier read")

	clk.Add(31 * time.Second)
	doc, ok = s.Document(ctx)
	require.False(t, ok)
	require.Equal(t, VerdictUnknown, doc.Components[2].Status, "the cached measurement is judged at the request's time")
	require.EqualValues(t, 31, *doc.Components[1].AgeSeconds, "the database row shows the read's age")
}
