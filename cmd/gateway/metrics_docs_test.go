package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// Every metric the dashboard and the alert rules in docs/observability
// query is one a running gateway registers (read from its registry, so a
// histogram that has seen nothing yet counts too), and together they
// cover the families an SRE watches. A renamed metric fails here, not
// silently on a dashboard.
func TestObservabilityDocsMatchTheRegistry(t *testing.T) {
	ta := startTestApp(t)
	families := map[string]bool{}
	for _, name := range ta.metrics.ListMetricNames() {
		family, _, _ := strings.Cut(name, "{")
		families[family] = true
	}
	exported := func(m string) bool {
		if families[m] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(m, suffix); ok && families[base] {
				return true // a VictoriaMetrics histogram's series
			}
		}
		return false
	}
	metric := regexp.MustCompile(`gateway_[a-z0-9_]+`)
	queried := map[string]bool{}
	check := func(source, expr string) {
		for _, m := range metric.FindAllString(expr, -1) {
			require.True(t, exported(m), "%s queries %s, which the gateway does not export", source, m)
			queried[m] = true
		}
	}

	raw, err := os.ReadFile("../../docs/observability/alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			check("alert "+r.Alert, r.Expr)
		}
	}
	raw, err = os.ReadFile("../../docs/observability/grafana-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok {
			check("variable", q)
		}
	}

	// The families the fleet's operators watch: overhead, time to first
	// token, inter-token gaps, errors by code, moderation gates, the
	// limiter failing open, the ledger's queue and spool, breakers and the
	// PostgreSQL pool. (Redis's client pool exports no statistics; the
	// limiter's fail-open counter is how a Redis outage shows.)
	for _, want := range []string{
		"gateway_chat_overhead_seconds", "gateway_chat_time_to_first_token_seconds", "gateway_chat_stream_max_gap_seconds",
		"gateway_errors_total", "gateway_chat_moderation_gate_seconds", "gateway_chat_moderation_gate_fail_open_total",
		"gateway_limits_unmetered_total", "gateway_ledger_queue_length", "gateway_ledger_spool_bytes",
		"gateway_breaker_state", "gateway_db_pool_acquired_conns", "gateway_db_pool_empty_acquires_total",
	} {
		found := false
		for m := range queried {
			found = found || m == want || strings.HasPrefix(m, want+"_")
		}
		require.True(t, found, "no panel or alert watches %s", want)
	}
}
