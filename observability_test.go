package gateway_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The dashboard and the alert rules in docs/observability parse, and every
// gateway_ metric they query is one the code registers: a renamed metric
// fails here, not silently on a dashboard.
func TestObservabilityDocsQueryExistingMetrics(t *testing.T) {
	var code strings.Builder
	require.NoError(t, filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			code.Write(b)
		}
		return nil
	}))
	registered := code.String()
	metric := regexp.MustCompile(`gateway_[a-z_]+`)
	check := func(source, expr string) {
		for _, m := range metric.FindAllString(expr, -1) {
			name := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if strings.HasSuffix(name, suffix) && !strings.Contains(registered, name) {
					name = strings.TrimSuffix(name, suffix)
				}
			}
			require.Contains(t, registered, name, "%s queries %s, which no code registers", source, m)
		}
	}

	raw, err := os.ReadFile("docs/observability/alerts.yml")
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
	require.NotEmpty(t, rules.Groups)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			require.NotEmpty(t, r.Expr, r.Alert)
			check("alert "+r.Alert, r.Expr)
		}
	}

	raw, err = os.ReadFile("docs/observability/grafana-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}
}
