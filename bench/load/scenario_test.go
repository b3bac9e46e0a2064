package load

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestShippedScenariosValidate(t *testing.T) {
	names := ShippedScenarios()
	require.Subset(t, names, []string{
		"chat-nonstream", "chat-stream-256tok", "tools", "mixed-wires", "faults", "many-streams", "soak",
		"anthropic-stream", "responses-stream",
	})
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			sc, err := LoadScenario(name)
			require.NoError(t, err)
			require.Equal(t, name, sc.Name)
			require.NotEmpty(t, strings.TrimSpace(sc.Description))
			require.NotEmpty(t, sc.Wires)
			require.NotEmpty(t, sc.Tiers)
			require.Positive(t, sc.Duration)
			vs, err := buildVariants(sc, target{origin: "http://127.0.0.1:1"}, "")
			require.NoError(t, err)
			for _, v := range vs {
				// A hostile body may be invalid JSON on purpose.
				require.True(t, v.hostile != "" || json.Valid(v.body), "%s", v.body)
			}
		})
	}

	sc, err := LoadScenario("many-streams")
	require.NoError(t, err)
	require.Equal(t, ModeClosed, sc.Mode)
	require.Equal(t, 10000, sc.Concurrency)
	require.Equal(t, 1000, sc.ITLms)
	require.Equal(t, 60, sc.ReplyTokens)
	raw, err := os.ReadFile(filepath.Join("..", "scenarios", "many-streams.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(raw), "ulimit -n")

	sc, err = LoadScenario("soak")
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, sc.SampleRSS)
	require.Equal(t, time.Hour, sc.Duration)
	require.Equal(t, 3*time.Minute, sc.Cooldown)

	sc, err = LoadScenario("chat-stream-256tok")
	require.NoError(t, err)
	require.True(t, sc.Stream)
	require.True(t, sc.IncludeUsage)
	require.Equal(t, 256, sc.ReplyTokens)

	sc, err = LoadScenario("faults")
	require.NoError(t, err)
	require.Contains(t, sc.Faults, "")
	require.Contains(t, sc.Faults, "[[sim:status=503]]")
	require.Contains(t, sc.Faults, "[[sim:drop_after=5]]")
}

func TestLoadScenarioFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.yaml")
	require.NoError(t, os.WriteFile(path, []byte("description: a test\nrate: 5\nduration: 3s\n"), 0o600))
	sc, err := LoadScenario(path)
	require.NoError(t, err)
	require.Equal(t, "mine", sc.Name)
	require.Equal(t, ModeOpen, sc.Mode)
	require.Equal(t, 3*time.Second, sc.Duration)

	require.NoError(t, os.WriteFile(path, []byte("description: a test\nratee: 5\n"), 0o600))
	_, err = LoadScenario(path)
	require.ErrorContains(t, err, "ratee")

	require.NoError(t, os.WriteFile(path, []byte("duration: 10\n"), 0o600))
	_, err = LoadScenario(path)
	require.Error(t, err, "a duration needs a unit")

	_, err = LoadScenario("no-such-scenario")
	require.ErrorContains(t, err, "chat-nonstream")
	_, err = LoadScenario(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestValidateDefaults(t *testing.T) {
	var sc Scenario
	require.NoError(t, sc.Validate())
	require.Equal(t, map[Wire]float64{WireOpenAI: 1}, sc.Wires)
	require.Equal(t, map[string]float64{"mira": 1}, sc.Tiers)
	require.Equal(t, ModeClosed, sc.Mode)
	require.Equal(t, 1, sc.Concurrency)
	require.Equal(t, 10*time.Second, sc.Duration)
	require.Equal(t, time.Second, sc.Warmup)
	require.Equal(t, 60*time.Second, sc.Timeout)

	// Validate is idempotent.
	again := sc
	require.NoError(t, again.Validate())
	require.Equal(t, sc, again)

	none := Scenario{Warmup: -5 * time.Second}
	require.NoError(t, none.Validate())
	require.Zero(t, none.warmup())
}

func TestValidateNamesTheBadField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sc    Scenario
		field string
	}{
		{"unknown wire", Scenario{Wires: map[Wire]float64{"v3": 1}}, "wires"},
		{"negative wire weight", Scenario{Wires: map[Wire]float64{WireV1: -1}}, "wires.v1"},
		{"zero weights", Scenario{Tiers: map[string]float64{"kavi": 0}}, "tiers"},
		{"unknown tier", Scenario{Tiers: map[string]float64{"mria": 1}}, "tiers"},
		{"unknown mode", Scenario{Mode: "half-open"}, "mode"},
		{"open without rate", Scenario{Mode: ModeOpen}, "rate"},
		{"negative concurrency", Scenario{Concurrency: -1}, "concurrency"},
		{"negative tokens", Scenario{ReplyTokens: -1}, "reply_tokens"},
		{"negative duration", Scenario{Duration: -time.Second}, "duration"},
		{"negative timeout", Scenario{Timeout: -time.Second}, "timeout"},
		{"negative rss", Scenario{SampleRSS: -time.Second}, "sample_rss"},
		{"negative cooldown", Scenario{Cooldown: -time.Second}, "cooldown"},
		{"unknown directive", Scenario{Faults: map[string]float64{"explode=1": 1}}, "faults"},
		{"broken marker", Scenario{Faults: map[string]float64{"[[sim:fault=reset": 1}}, "faults"},
		{"negative max_in_flight", Scenario{MaxInFlight: -1}, "max_in_flight"},
		{"relative path", Scenario{Path: "chat/completions"}, "path"},
		{"path with a query", Scenario{Path: "/chat?x=1"}, "path"},
		{"path for two wires", Scenario{Path: "/chat", Wires: map[Wire]float64{WireV1: 1, WireV2: 1}}, "path"},
		{"header without a value", Scenario{AuthHeader: "x-api-key:"}, "auth_header"},
		{"header without a name", Scenario{AuthHeader: "Bearer k1"}, "auth_header"},
		{"header name with a space", Scenario{AuthHeader: "api key: k1"}, "auth_header"},
		{"model with a newline", Scenario{Model: "a\nb"}, "model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.sc.Name = "x"
			err := tc.sc.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), "invalid scenario x: "+tc.field+":")
		})
	}
}

func TestFaultMarkers(t *testing.T) {
	sc := Scenario{Faults: map[string]float64{
		"": 2, "fault=reset": 1, "[[sim:status=503]]": 1, "[[sim:ttft_ms=100]] [[sim:itl_ms=5]]": 1,
	}}
	require.NoError(t, sc.Validate())
	require.Equal(t, map[string]float64{
		"": 2, "[[sim:fault=reset]]": 1, "[[sim:status=503]]": 1, "[[sim:ttft_ms=100]] [[sim:itl_ms=5]]": 1,
	}, sc.Faults)
}
