package sim

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/tokens"
)

func TestGuard(t *testing.T) {
	h := newHarness(t, Config{})
	for _, tc := range []struct {
		name, model, text, want string
	}{
		{"safe", "gw-guard", "How do I bake bread?", "safe"},
		{"trigger word", "gw-guard", "How to build a BOMB at home", "unsafe\nS9"},
		{"several triggers", "guard-3", "steal then murder", "unsafe\nS1,S2"},
		{"part of a word is no trigger", "gw-guard", "bombastic stealth", "safe"},
		{"directive", "gw-guard", "hello [[sim:unsafe=S10,S1]]", "unsafe\nS1,S10"},
		{"directive and trigger", "gw-guard", "suicide [[sim:unsafe=S1]]", "unsafe\nS1,S11"},
		{"bare directive", "gw-guard", "hello [[sim:unsafe]]", "unsafe"},
		{"not the guard", "chat-model", "bomb [[sim:tokens=3]]", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := chat(tc.text)
			body["model"] = tc.model
			v, _ := h.postJSON("/v1/chat/completions", body, http.StatusOK)
			content := dig(t, v, "choices.0.message.content").(string)
			if tc.want == "" {
				require.Equal(t, 3, tokens.Count(content))
				return
			}
			require.Equal(t, tc.want, content)
			require.Equal(t, tc.model, v["model"])
			require.Equal(t, "stop", dig(t, v, "choices.0.finish_reason"))
			require.Equal(t, tokens.Count(content), num(t, v, "usage.completion_tokens"))
			again, _ := h.postJSON("/v1/chat/completions", body, http.StatusOK)
			require.Equal(t, v, again)

			s, _ := h.stream(body)
			require.True(t, s.done)
			var streamed string
			for _, f := range s.frames[1 : len(s.frames)-1] {
				streamed += delta(f)["content"].(string)
			}
			require.Equal(t, tc.want, streamed)
		})
	}
	t.Run("bad hazard code", func(t *testing.T) {
		body := chat("[[sim:unsafe=S99]]")
		body["model"] = "gw-guard"
		h.postJSON("/v1/chat/completions", body, http.StatusBadRequest)
	})
}

func TestEmbeddings(t *testing.T) {
	h := newHarness(t, Config{})
	v, _ := h.postJSON("/v1/embeddings", map[string]any{"model": "gw-embed", "input": []string{"alpha beta", "gamma", "alpha beta"}}, http.StatusOK)
	require.Equal(t, "list", v["object"])
	require.Equal(t, "gw-embed", v["model"])
	data := v["data"].([]any)
	require.Len(t, data, 3)
	vecs := make([][]float64, 3)
	for i, d := range data {
		e := d.(map[string]any)
		require.Equal(t, "embedding", e["object"])
		require.Equal(t, i, num(t, e, "index"))
		for _, x := range e["embedding"].([]any) {
			vecs[i] = append(vecs[i], x.(float64))
		}
		require.Len(t, vecs[i], DefaultDimensions)
		require.InDelta(t, 1, norm(vecs[i]), 1e-5)
	}
	require.Equal(t, vecs[0], vecs[2], "same input, same vector")
	require.NotEqual(t, vecs[0], vecs[1])
	want := tokens.Count("alpha beta")*2 + tokens.Count("gamma")
	require.Equal(t, want, num(t, v, "usage.prompt_tokens"))
	require.Equal(t, want, num(t, v, "usage.total_tokens"))

	// A single string, its own dimensions, and the same vector as in a list.
	one, _ := h.postJSON("/v1/embeddings", map[string]any{"model": "e", "input": "gamma"}, http.StatusOK)
	require.Len(t, dig(t, one, "data").([]any), 1)
	var got []float64
	for _, x := range dig(t, one, "data.0.embedding").([]any) {
		got = append(got, x.(float64))
	}
	require.Equal(t, vecs[1], got)
	dims, _ := h.postJSON("/v1/embeddings", map[string]any{"model": "e", "input": "gamma", "dimensions": 8}, http.StatusOK)
	require.Len(t, dig(t, dims, "data.0.embedding").([]any), 8)

	b64, _ := h.postJSON("/v1/embeddings", map[string]any{"model": "e", "input": "gamma", "encoding_format": "base64"}, http.StatusOK)
	raw, err := base64.StdEncoding.DecodeString(dig(t, b64, "data.0.embedding").(string))
	require.NoError(t, err)
	require.Len(t, raw, 4*DefaultDimensions)
	for i := range DefaultDimensions {
		f := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		require.Equal(t, float32(vecs[1][i]), f)
	}

	other := newHarness(t, Config{Seed: 7})
	seeded, _ := other.postJSON("/v1/embeddings", map[string]any{"model": "e", "input": "gamma"}, http.StatusOK)
	require.NotEqual(t, dig(t, one, "data.0.embedding"), dig(t, seeded, "data.0.embedding"))

	for _, bad := range []map[string]any{
		{"model": "e", "input": []any{}},
		{"model": "e", "input": []any{1, 2}},
		{"model": "e", "input": "x", "dimensions": 0},
		{"model": "e", "input": "x", "encoding_format": "int8"},
	} {
		h.postJSON("/v1/embeddings", bad, http.StatusBadRequest)
	}
	h.postJSON("/v1/embeddings", map[string]any{"model": "e", "input": "x [[sim:fault=rate_limited]]"}, http.StatusTooManyRequests)
}

func norm(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

func TestRerank(t *testing.T) {
	h := newHarness(t, Config{})
	docs := []string{
		"Bananas are yellow fruit.",
		"The capital of France is Paris.",
		"Paris is known for the Eiffel tower.",
		"Completely unrelated text.",
	}
	query := "What is the capital of France?"
	for _, path := range []string{"/rerank", "/v1/rerank"} {
		t.Run(path, func(t *testing.T) {
			v, _ := h.postJSON(path, map[string]any{"model": "gw-rerank", "query": query, "documents": docs}, http.StatusOK)
			require.Equal(t, "gw-rerank", v["model"])
			results := v["results"].([]any)
			require.Len(t, results, len(docs))
			seen := map[int]bool{}
			prev := math.Inf(1)
			for _, r := range results {
				m := r.(map[string]any)
				i := num(t, m, "index")
				score := m["relevance_score"].(float64)
				require.False(t, seen[i])
				seen[i] = true
				require.LessOrEqual(t, score, prev, "sorted by score, descending")
				require.GreaterOrEqual(t, score, 0.0)
				require.Less(t, score, 1.0)
				prev = score
			}
			require.Equal(t, 1, num(t, results[0].(map[string]any), "index"), "the best match first")
			want := tokens.Count(query)
			for _, d := range docs {
				want += tokens.Count(d)
			}
			require.Equal(t, want, num(t, v, "usage.total_tokens"))

			again, _ := h.postJSON(path, map[string]any{"model": "gw-rerank", "query": query, "documents": docs}, http.StatusOK)
			require.Equal(t, v, again)
		})
	}
	t.Run("top_n and documents", func(t *testing.T) {
		objs := []any{map[string]any{"text": docs[0]}, docs[1], map[string]any{"text": docs[2]}}
		v, _ := h.postJSON("/rerank", map[string]any{"model": "r", "query": query, "documents": objs, "top_n": 2, "return_documents": true}, http.StatusOK)
		results := v["results"].([]any)
		require.Len(t, results, 2)
		first := results[0].(map[string]any)
		require.Equal(t, docs[1], dig(t, first, "document.text"))
	})
	t.Run("bad", func(t *testing.T) {
		h.postJSON("/rerank", map[string]any{"model": "r", "query": "", "documents": docs}, http.StatusBadRequest)
		h.postJSON("/rerank", map[string]any{"model": "r", "query": "q", "documents": docs, "top_n": 0}, http.StatusBadRequest)
		h.postJSON("/rerank", map[string]any{"model": "r", "query": "q", "documents": []any{5}}, http.StatusBadRequest)
		h.postJSON("/rerank", map[string]any{"model": "r", "query": "q [[sim:status=503]]", "documents": docs}, http.StatusServiceUnavailable)
	})
}
