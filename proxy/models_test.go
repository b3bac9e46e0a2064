package proxy

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
)

func TestCatalogueShapes(t *testing.T) {
	cat, err := NewCatalogue(hotpath.DefaultTiers())
	require.NoError(t, err)

	var native struct {
		Object string           `json:"object"`
		Data   []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(cat.native, &native))
	require.Equal(t, "list", native.Object)
	require.Len(t, native.Data, 3)
	want := map[string][3]float64{"kavi": {262144, 8192, 0.76}, "vaani": {131072, 4096, 0.65}, "mira": {65536, 2048, 0.20}}
	for _, e := range native.Data {
		id := e["id"].(string)
		w, ok := want[id]
		require.True(t, ok, id)
		require.Equal(t, "model", e["object"])
		require.Equal(t, w[0], e["context_window"])
		require.Equal(t, w[1], e["max_output"])
		for _, k := range []string{"label", "profile", "created", "owned_by", "latency_target_ms", "supports_tools", "supports_vision"} {
			require.Contains(t, e, k, id)
		}
		require.Equal(t, true, e["supports_structured_output"], id)
		r := e["reasoning"].(map[string]any)
		require.Contains(t, r, "default_effort")
		require.Contains(t, r, "graded")
		p := e["pricing"].(map[string]any)
		require.Equal(t, "USD", p["currency"])
		require.Equal(t, w[2], p["input_unit"])
		require.Equal(t, w[2]*2, p["output_unit"])
	}

	var openai struct {
		Object string           `json:"object"`
		Data   []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(cat.openai, &openai))
	require.Equal(t, "list", openai.Object)
	require.Len(t, openai.Data, 3)
	for _, e := range openai.Data {
		require.Equal(t, "model", e["object"])
		require.ElementsMatch(t, []string{"id", "object", "created", "owned_by"}, keys(e))
	}
}

// The catalogue shows each tier's own structured-output support: a tier
// configured without it shows false.
func TestCatalogueStructuredOutput(t *testing.T) {
	tiers := hotpath.DefaultTiers()
	for i := range tiers {
		tiers[i].SupportsStructured = tiers[i].Name != "mira"
	}
	cat, err := NewCatalogue(tiers)
	require.NoError(t, err)
	var native struct {
		Data []struct {
			ID         string `json:"id"`
			Structured *bool  `json:"supports_structured_output"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(cat.native, &native))
	require.Len(t, native.Data, 3)
	for _, e := range native.Data {
		require.NotNil(t, e.Structured, e.ID)
		require.Equal(t, e.ID != "mira", *e.Structured, e.ID)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
