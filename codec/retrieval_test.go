package codec

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseEmbeddings(t *testing.T) {
	var e Embeddings
	body := []byte(` {"object":"list","data":[{"object":"embedding","index":1,"embedding":[ 0.5 , -1e-3,2 ]},` +
		`{"embedding":[1.25],"index":0,"extra":{"a":[1,"x"]}}],"model":"m","usage":{"prompt_tokens":7,"total_tokens":7}} `)
	require.True(t, ParseEmbeddings(body, 2, false, &e))
	require.Equal(t, "[1.25]", string(e.Vectors[0]))
	require.Equal(t, "[ 0.5 , -1e-3,2 ]", string(e.Vectors[1]))
	require.EqualValues(t, 7, e.PromptTokens)

	require.True(t, ParseEmbeddings([]byte(`{"data":[{"index":0,"embedding":"AAAAPw=="}],"usage":null}`), 1, true, &e))
	require.Equal(t, `"AAAAPw=="`, string(e.Vectors[0]))
	require.Zero(t, e.PromptTokens)

	for _, bad := range []string{
		``, `[]`, `{}`, `{"data":[]}`, `{"data":null}`,
		`{"data":[{"index":0,"embedding":[1]}]} x`,
		`{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[2]}]}`, // duplicate
		`{"data":[{"index":0,"embedding":[1]},{"index":2,"embedding":[2]}]}`, // out of range
		`{"data":[{"index":0,"embedding":[1]}]}`,                             // one missing
		`{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[2]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":-1,"embedding":[1]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0.0,"embedding":[1]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":null,"embedding":[1]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"embedding":[1]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":[]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":["1"]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":[1,]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":[1,,2]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":[01]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":[1e]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":[NaN]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":[1,{"x":1}]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":[[1]]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":"AAAA"},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":[1],"embedding":[1]},{"index":1,"embedding":[2]}]}`,
		`{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[2]}],"data":[]}`,
		`{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[2]}],"usage":{"prompt_tokens":-1}}`,
		`{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[2]}],"usage":{"prompt_tokens":1.5}}`,
		`{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[2]}],"usage":[1]}`,
		`{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[2]}]`,
		`{"data":[{"index":0,"embedding":[1 2]},{"index":1,"embedding":[2]}]}`,
	} {
		require.False(t, ParseEmbeddings([]byte(bad), 2, false, &e), bad)
	}
	for _, bad := range []string{
		`{"data":[{"index":0,"embedding":[1]}]}`,
		`{"data":[{"index":0,"embedding":"A\x01"}]}`,
		`{"data":[{"index":0,"embedding":"AAAA}]}`,
	} {
		require.False(t, ParseEmbeddings([]byte(bad), 1, true, &e), bad)
	}
}

func TestParseEmbeddingsAllocatesNothing(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"data":[`)
	for i := range 8 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"index":` + string(rune('0'+7-i)) + `,"embedding":[` + strings.Repeat("0.0123456,", 255) + `1]}`)
	}
	b.WriteString(`],"usage":{"prompt_tokens":3}}`)
	body := []byte(b.String())
	e := Embeddings{Vectors: make([][]byte, 8)}
	require.True(t, ParseEmbeddings(body, 8, false, &e))
	require.Zero(t, testing.AllocsPerRun(100, func() { ParseEmbeddings(body, 8, false, &e) }))
}

func TestParseRerank(t *testing.T) {
	scores := make([]RerankScore, 0, 4)
	scores, usage, ok := ParseRerank([]byte(`{"id":"r","results":[{"index":1,"relevance_score":0.25,"document":{"text":"x"}},{"relevance_score":1e-2,"index":0}],"usage":{"total_tokens":9}}`), 2, false, scores)
	require.True(t, ok)
	require.Equal(t, []RerankScore{{1, 0.25}, {0, 0.01}}, scores)
	require.EqualValues(t, 9, usage)
	scores, usage, ok = ParseRerank([]byte(`[{"index":0,"score":-3}]`), 1, true, scores)
	require.True(t, ok)
	require.Equal(t, []RerankScore{{0, -3}}, scores)
	require.Zero(t, usage)
	tei := []byte(`[{"index":0,"score":-3}]`)
	require.Zero(t, testing.AllocsPerRun(100, func() { ParseRerank(tei, 1, true, scores) }))

	for _, c := range []struct {
		tei  bool
		body string
	}{
		{false, `{"results":[{"index":0,"relevance_score":0.5},{"index":0,"relevance_score":0.4}]}`},
		{false, `{"results":[{"index":0,"relevance_score":0.5}]}`},
		{false, `{"results":[{"index":0,"relevance_score":0.5},{"index":1,"relevance_score":0.4},{"index":1,"relevance_score":0.4}]}`},
		{false, `{"results":[{"index":0},{"index":1,"relevance_score":0.4}]}`},
		{false, `{"results":[{"index":0,"relevance_score":"high"},{"index":1,"relevance_score":0.4}]}`},
		{false, `{"results":[{"index":0,"relevance_score":1e999},{"index":1,"relevance_score":0.4}]}`},
		{false, `{"results":[{"index":0,"score":0.5},{"index":1,"score":0.4}]}`},
		{false, `{"results":[{"index":2,"relevance_score":0.5},{"index":1,"relevance_score":0.4}]}`},
		{false, `[{"index":0,"score":0.5},{"index":1,"score":0.4}]`},
		{true, `{"results":[{"index":0,"score":0.5},{"index":1,"score":0.4}]}`},
		{true, `[{"index":0,"score":0.5},{"index":1,"relevance_score":0.4}]`},
		{true, `[{"index":0,"score":0.5},{"index":1,"score":0.4}] ]`},
	} {
		_, _, ok := ParseRerank([]byte(c.body), 2, c.tei, scores)
		require.False(t, ok, c.body)
	}
}

// What ParseEmbeddings accepts is valid JSON whose vectors decode as
// numbers (or strings) with encoding/json.
func FuzzParseEmbeddings(f *testing.F) {
	f.Add([]byte(`{"data":[{"index":0,"embedding":[1,2.5e3,-0]}]}`), false)
	f.Add([]byte(`{"data":[{"index":0,"embedding":"AAAA"}],"usage":{"prompt_tokens":2}}`), true)
	f.Add([]byte(`{"data":[{"index":0,"embedding":[1,{"x":1}]}]}`), false)
	f.Fuzz(func(t *testing.T, body []byte, base64 bool) {
		var e Embeddings
		if !ParseEmbeddings(body, 1, base64, &e) {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if base64 {
			var s string
			require.NoError(t, json.Unmarshal(e.Vectors[0], &s))
			return
		}
		var v []float64
		require.NoError(t, json.Unmarshal(e.Vectors[0], &v))
		require.NotEmpty(t, v)
	})
}

// embeddingsBody is an answer of 8 vectors of 256 floats, as the aux
// benchmarks' canned upstream sends.
func embeddingsBody() []byte {
	var b strings.Builder
	b.WriteString(`{"object":"list","model":"m","data":[`)
	for i := range 8 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"object":"embedding","index":` + string(rune('0'+i)) + `,"embedding":[` + strings.Repeat("0.0123456,", 255) + `-0.25e-3]}`)
	}
	b.WriteString(`],"usage":{"prompt_tokens":320,"total_tokens":320}}`)
	return []byte(b.String())
}

func BenchmarkParseEmbeddings(b *testing.B) {
	body := embeddingsBody()
	e := Embeddings{Vectors: make([][]byte, 8)}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if !ParseEmbeddings(body, 8, false, &e) {
			b.Fatal("refused")
		}
	}
}

func TestSkipDigitsMatchesBytewise(t *testing.T) {
	for c := range 256 {
		for pos := range 10 {
			b := []byte("0123456789012345")
			if pos < len(b) {
				b[pos] = byte(c)
			}
			want := 0
			for want < len(b) && b[want]-'0' <= 9 {
				want++
			}
			require.Equal(t, want, skipDigits(b, 0), "byte %#x at %d", c, pos)
		}
	}
}
