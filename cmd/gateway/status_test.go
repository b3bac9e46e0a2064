package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is the status document's injected clock.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

func rows(t *testing.T, r resp) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, c := range r.body["components"].([]any) {
		row := c.(map[string]any)
		out[row["component"].(string)] = row
	}
	return out
}

// The status document through the route, with every chat tier probing a
// simulator: one healthy, one slow, one failing. The probes run on an
// injected clock, so staleness and the "latest two failed" rule are driven
// step by step.
func TestStatusDocumentAgainstSimulator(t *testing.T) {
	cfgPath := simnetConfig(t, `
tiers:
  kavi:  {provider: simnet, upstream_model: sim-large}
  vaani: {provider: simnet, upstream_model: sim-medium}
  mira:  {provider: simnet, upstream_model: sim-small}
status:
  components:
    kavi:  {interval: 10s}
    vaani: {interval: 10s, prompt: "ping [[sim:ttft_ms=300]]", latency_slow_above_ms: 100, latency_degrade_above_ms: 60000}
    mira:  {interval: 10s, timeout: 5s, prompt: "ping [[sim:status=500]]"}
    gw-embed:  {enabled: false}
    gw-rerank: {enabled: false}
    gw-guard:  {enabled: false}
`)
	ta := startTestApp(t, func(c *serveConfig) { c.ConfigPath = cfgPath; c.StatusProbes = false; c.StatusReadEvery = 0 })
	clk := &fakeClock{}
	clk.ns.Store(time.Now().UnixNano())
	ta.status.Now = clk.Now
	ctx := context.Background()

	r := ta.call(t, "GET", "/api/status", "", nil)
	require.Equal(t, 503, r.status, "no model component measured yet")
	require.Equal(t, "no-store", r.header.Get("Cache-Control"))
	require.Equal(t, "unknown", rows(t, r)["kavi"]["status"])
	require.Equal(t, "never_measured", rows(t, r)["kavi"]["reason"])

	lead, err := ta.status.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, lead)
	r = ta.call(t, "GET", "/api/status", "", nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, "no-store", r.header.Get("Cache-Control"))
	got := rows(t, r)
	require.Equal(t, "healthy", got["api"]["status"])
	require.Equal(t, "healthy", got["database"]["status"])
	require.Equal(t, "healthy", got["kavi"]["status"], "%v", got["kavi"])
	require.Equal(t, "degraded", got["vaani"]["status"])
	require.Equal(t, "latest_probe_slow", got["vaani"]["reason"])
	require.Equal(t, "degraded", got["mira"]["status"], "a first failure is not yet down")
	require.EqualValues(t, 2500, got["kavi"]["latency_target_ms"])
	require.EqualValues(t, 400, got["mira"]["latency_target_ms"])
	for _, aux := range []string{"gw-embed", "gw-rerank", "gw-guard"} {
		// Disabled: not probed, whatever binds them.
		require.Equal(t, "aux", got[aux]["kind"])
		require.Equal(t, "unknown", got[aux]["status"])
		require.Equal(t, "not_configured", got[aux]["reason"])
		require.NotContains(t, got[aux], "latency_target_ms", "only chat rows carry it")
	}
	for name, row := range got {
		require.Contains(t, row, "checked_at", name)
		require.Contains(t, row, "age_seconds", name)
	}
	require.NotContains(t, string(r.raw), "sim-small", "upstream models never show")

	clk.Add(10 * time.Second)
	_, err = ta.status.RunOnce(ctx)
	require.NoError(t, err)
	got = rows(t, ta.call(t, "GET", "/api/status", "", nil))
	require.Equal(t, "down", got["mira"]["status"], "the latest two probes failed")
	require.Equal(t, "healthy", got["kavi"]["status"])

	// The prober stops (its process died and no other took over): every
	// row ages out into unknown, and with no fresh model row the
	// document is 503.
	clk.Add(26 * time.Second)
	r = ta.call(t, "GET", "/api/status", "", nil)
	require.Equal(t, 200, r.status, "still fresh at 26s (bound 2×10s+5s for mira, 2×10s+10s for the others)")
	require.Equal(t, "unknown", rows(t, r)["mira"]["status"])
	require.Equal(t, "healthy", rows(t, r)["kavi"]["status"])
	clk.Add(5 * time.Second)
	r = ta.call(t, "GET", "/api/status", "", nil)
	require.Equal(t, 503, r.status)
	got = rows(t, r)
	for _, name := range []string{"kavi", "vaani", "mira"} {
		require.Equal(t, "unknown", got[name]["status"], name)
		require.Equal(t, "not_measured_recently", got[name]["reason"], name)
		require.EqualValues(t, 31, got[name]["age_seconds"], name)
	}
}

// The auxiliary tiers are probed in their routes' shapes against a
// simulator: embeddings healthy, rerank slow, the guard failing, each
// through the verdict rules of chat rows but without latency_target_ms or
// a breaker. The probes are counted in gateway_status_probes_total only:
// no ledger row, no breaker failure.
func TestStatusProbesAuxTiersAgainstSimulator(t *testing.T) {
	cfgPath := simnetConfig(t, `
aux_tiers:
  gw-embed:  {provider: simnet, upstream_model: sim-embed}
  gw-rerank: {provider: simnet, upstream_model: sim-rerank}
  gw-guard:  {provider: simnet, upstream_model: guard-sim}
status:
  components:
    kavi:  {enabled: false}
    vaani: {enabled: false}
    mira:  {enabled: false}
    gw-embed:  {interval: 10s}
    gw-rerank: {interval: 10s, prompt: "ping [[sim:ttft_ms=300]]", latency_slow_above_ms: 100, latency_degrade_above_ms: 60000}
    gw-guard:  {interval: 10s, timeout: 5s, prompt: "ping [[sim:status=500]]"}
`)
	ta := startTestApp(t, func(c *serveConfig) { c.ConfigPath = cfgPath; c.StatusProbes = false; c.StatusReadEvery = 0 })
	clk := &fakeClock{}
	clk.ns.Store(time.Now().UnixNano())
	ta.status.Now = clk.Now
	ctx := context.Background()

	r := ta.call(t, "GET", "/api/status", "", nil)
	require.Equal(t, 503, r.status, "no model component measured yet")
	require.Equal(t, "never_measured", rows(t, r)["gw-embed"]["reason"])

	_, err := ta.status.RunOnce(ctx)
	require.NoError(t, err)
	r = ta.call(t, "GET", "/api/status", "", nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	got := rows(t, r)
	require.Equal(t, "healthy", got["gw-embed"]["status"], "%v", got["gw-embed"])
	require.Equal(t, "degraded", got["gw-rerank"]["status"], "%v", got["gw-rerank"])
	require.Equal(t, "latest_probe_slow", got["gw-rerank"]["reason"])
	require.GreaterOrEqual(t, got["gw-rerank"]["latency_ms"], float64(300))
	require.Equal(t, "degraded", got["gw-guard"]["status"], "a first failure is not yet down")
	require.Equal(t, "latest_probe_failed", got["gw-guard"]["reason"])
	for _, aux := range []string{"gw-embed", "gw-rerank", "gw-guard"} {
		require.Equal(t, "aux", got[aux]["kind"])
		require.NotContains(t, got[aux], "latency_target_ms", "only chat rows carry it")
		require.NotContains(t, got[aux], "breaker", "no breaker rule on aux rows")
	}
	for _, chat := range []string{"kavi", "vaani", "mira"} {
		require.Equal(t, "not_configured", got[chat]["reason"], chat)
	}
	require.NotContains(t, string(r.raw), "sim-embed", "upstream models never show")

	clk.Add(10 * time.Second)
	_, err = ta.status.RunOnce(ctx)
	require.NoError(t, err)
	got = rows(t, ta.call(t, "GET", "/api/status", "", nil))
	require.Equal(t, "down", got["gw-guard"]["status"], "the latest two probes failed")
	require.Equal(t, "latest_probes_failed", got["gw-guard"]["reason"])
	require.Equal(t, "healthy", got["gw-embed"]["status"])

	// Two probes per component, counted as probes and nowhere else: the
	// guard's failures did not move its breaker.
	var page bytes.Buffer
	ta.metrics.WritePrometheus(&page)
	m := page.String()
	require.Contains(t, m, `gateway_status_probes_total{component="gw-embed",outcome="ok"} 2`)
	require.Contains(t, m, `gateway_status_probes_total{component="gw-rerank",outcome="ok"} 2`)
	require.Contains(t, m, `gateway_status_probes_total{component="gw-guard",outcome="failed"} 2`)
	require.Contains(t, m, `gateway_breaker_state{tier="gw-guard"} 0`)
}

// The breaker of one process that withholds a tier's traffic degrades the
// tier's row, whatever the probes say.
func TestStatusReportsTheWorstBreaker(t *testing.T) {
	ta := startTestApp(t, func(c *serveConfig) { c.StatusProbes = false; c.StatusReadEvery = 0 })
	ctx := context.Background()
	_, err := ta.status.RunOnce(ctx)
	require.NoError(t, err)
	got := rows(t, ta.call(t, "GET", "/api/status", "", nil))
	require.Equal(t, "healthy", got["kavi"]["status"])
	require.Equal(t, "closed", got["kavi"]["breaker"])

	require.NoError(t, ta.db.ReportBreakers(ctx, "another-process", map[string]string{"kavi": "open"}, time.Now(), time.Hour))
	got = rows(t, ta.call(t, "GET", "/api/status", "", nil))
	require.Equal(t, "degraded", got["kavi"]["status"])
	require.Equal(t, "breaker_withholding_traffic", got["kavi"]["reason"])
	require.Equal(t, "open", got["kavi"]["breaker"])
	require.Equal(t, "healthy", got["vaani"]["status"])
}

// The status: section's mistakes are refused at start, naming the field;
// what it leaves out takes the defaults derived from each tier.
func TestStatusConfiguration(t *testing.T) {
	dir := t.TempDir()
	load := func(body string) (settings, error) {
		p := filepath.Join(dir, "gateway.yaml")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return loadSettings(p)
	}
	for body, want := range map[string]string{
		"status:\n  components:\n    gpt4: {interval: 10s}\n":                 "status.components.gpt4: unknown component",
		"status:\n  components:\n    kavi: {interval: -1s}\n":                 "status.components.kavi",
		"status:\n  components:\n    kavi: {interval: 100ms}\n":               "status.components.kavi.interval",
		"status:\n  components:\n    mira: {prompt: \"\"}\n":                  "status.components.mira.prompt",
		"status:\n  components:\n    mira: {latency_slow_ms: 10}\n":           "latency_slow_ms",
		"status:\n  breaker_report_interval: -5s\n":                           "status.breaker_report_interval",
		"status:\n  components:\n    vaani: {latency_degrade_above_ms: -1}\n": "status.components.vaani",
	} {
		_, err := load(body)
		require.ErrorContains(t, err, want, body)
	}

	st, err := load("status:\n  components:\n    mira: {interval: 30s, latency_slow_above_ms: 900}\n")
	require.NoError(t, err)
	byName := map[string]statusComponentSetting{}
	for _, c := range st.Status.Components {
		byName[c.Name] = c
	}
	require.Len(t, byName, 6)
	require.Equal(t, 30*time.Second, byName["mira"].Every)
	require.Equal(t, 900, byName["mira"].SlowAboveMs)
	require.Equal(t, 800, byName["mira"].DegradeAboveMs, "twice mira's 400 ms target")
	require.Equal(t, 10000, byName["kavi"].SlowAboveMs, "four times kavi's 2500 ms target")
	require.Equal(t, "aux", byName["gw-rerank"].Kind)

	// Without a file the defaults hold as well.
	st, err = loadSettings("")
	require.NoError(t, err)
	require.Len(t, st.Status.Components, 6)
}
