package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/edgegw/gateway/control"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/proxy"
)

// statusFile is the config file's status: section: how each component of
// GET /api/status is probed and judged.
type statusFile struct {
	// BreakerReportInterval is how often each process reports its
	// breakers. Default 5s.
	BreakerReportInterval time.Duration `yaml:"breaker_report_interval"`
	// Components are keyed by component name (kavi, vaani, mira, gw-embed,
	// gw-rerank, gw-guard).
	Components map[string]statusComponentFile `yaml:"components"`
}

type statusComponentFile struct {
	Enabled               *bool          `yaml:"enabled"`
	Interval              *time.Duration `yaml:"interval"`
	Timeout               *time.Duration `yaml:"timeout"`
	StaleAfter            *time.Duration `yaml:"stale_after"`
	LatencyDegradeAboveMs *int           `yaml:"latency_degrade_above_ms"`
	LatencySlowAboveMs    *int           `yaml:"latency_slow_above_ms"`
	Prompt                *string        `yaml:"prompt"`
}

// auxComponents are the auxiliary tiers of the status document, each
// probed in its route's shape: one embeddings input, a rerank query with
// one document, one guard verdict.
var auxComponents = []string{hotpath.TierEmbed, hotpath.TierRerank, hotpath.TierGuard}

// statusSettings is the status: section resolved over the tiers.
type statusSettings struct {
	BreakerEvery time.Duration
	Components   []statusComponentSetting
}

type statusComponentSetting struct {
	control.StatusComponent
	Enabled bool
	Prompt  string
}

// loadStatus resolves the status: section. A chat tier's thresholds
// default to twice (median) and four times (newest probe) its latency
// target; an auxiliary tier's to 1000 and 2000 ms.
func loadStatus(f statusFile, tiers []hotpath.Tier) (statusSettings, error) {
	s := statusSettings{BreakerEvery: f.BreakerReportInterval}
	if s.BreakerEvery < 0 {
		return s, fmt.Errorf("config status.breaker_report_interval: must not be negative")
	}
	known := map[string]bool{}
	for _, t := range tiers {
		known[t.Name] = true
		s.Components = append(s.Components, statusComponentSetting{Enabled: true, Prompt: proxy.DefaultProbePrompt,
			StatusComponent: control.StatusComponent{Name: t.Name, Kind: control.KindChat, LatencyTargetMs: t.LatencyTargetMs,
				DegradeAboveMs: 2 * t.LatencyTargetMs, SlowAboveMs: 4 * t.LatencyTargetMs}})
	}
	for _, name := range auxComponents {
		known[name] = true
		s.Components = append(s.Components, statusComponentSetting{Enabled: true, Prompt: proxy.DefaultProbePrompt,
			StatusComponent: control.StatusComponent{Name: name, Kind: control.KindAux, DegradeAboveMs: 1000, SlowAboveMs: 2000}})
	}
	for name := range f.Components {
		if !known[name] {
			return s, fmt.Errorf("config status.components.%s: unknown component", name)
		}
	}
	for i := range s.Components {
		c := &s.Components[i]
		fc, ok := f.Components[c.Name]
		if !ok {
			continue
		}
		set(&c.Enabled, fc.Enabled)
		set(&c.Every, fc.Interval)
		set(&c.Timeout, fc.Timeout)
		set(&c.StaleAfter, fc.StaleAfter)
		set(&c.DegradeAboveMs, fc.LatencyDegradeAboveMs)
		set(&c.SlowAboveMs, fc.LatencySlowAboveMs)
		set(&c.Prompt, fc.Prompt)
		if c.Every < 0 || c.Timeout < 0 || c.StaleAfter < 0 || c.DegradeAboveMs < 0 || c.SlowAboveMs < 0 {
			return s, fmt.Errorf("config status.components.%s: intervals and thresholds must not be negative", c.Name)
		}
		if c.Every > 0 && c.Every < time.Second {
			return s, fmt.Errorf("config status.components.%s.interval: must be at least 1s", c.Name)
		}
		if c.Prompt == "" {
			return s, fmt.Errorf("config status.components.%s.prompt: must not be empty", c.Name)
		}
	}
	return s, nil
}

// newStatus builds the status prober over the upstreams: a chat tier is
// probed with a chat completion, an auxiliary tier in its route's shape
// (rerankShape is the rerank tier's wire). Breakers are reported under a
// process id of host name, pid and a random suffix.
func (a *app) newStatus(st statusSettings, ups map[string]*proxy.Upstream, rerankShape string) (*control.Status, error) {
	s := &control.Status{DB: a.db, Log: a.log, BreakerEvery: st.BreakerEvery, Metrics: a.metrics,
		ReadEvery: a.cfg.StatusReadEvery}
	for _, cs := range st.Components {
		c := cs.StatusComponent
		if up := ups[c.Name]; up != nil && cs.Enabled {
			c.Probe = probeOf(c, up, cs.Prompt, rerankShape)
		}
		s.Components = append(s.Components, c)
	}
	s.Breakers = func() map[string]string {
		m := make(map[string]string, len(ups))
		for name, up := range ups {
			m[name] = up.Breaker.State().String()
		}
		return m
	}
	s.ProcessID = processID()
	return s, s.Validate()
}

// probeOf is the probe of component c on its upstream.
func probeOf(c control.StatusComponent, up *proxy.Upstream, prompt, rerankShape string) func(context.Context) error {
	switch c.Name {
	case hotpath.TierEmbed:
		return func(ctx context.Context) error { return up.ProbeEmbeddings(ctx, prompt) }
	case hotpath.TierRerank:
		return func(ctx context.Context) error { return up.ProbeRerank(ctx, rerankShape, prompt, proxy.ProbeDocument) }
	case hotpath.TierGuard:
		return func(ctx context.Context) error { return up.ProbeGuard(ctx, prompt) }
	}
	return func(ctx context.Context) error { return up.Probe(ctx, prompt) }
}

func processID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
