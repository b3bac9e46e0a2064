package tokens

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

func TestCount(t *testing.T) {
	f := func(text string, want int) {
		t.Helper()
		require.Equal(t, want, Count(text), "%q", text)
	}
	f("", 0)
	f("hello", 1)
	f("hello world", 2)
	f(" the", 1)
	require.Greater(t, Count("<|im_start|>"), 1, "markers in text are plain text")
	require.Equal(t, Count("\xff\xfe"), Count("\uFFFD\uFFFD"))
}

func TestCountChat(t *testing.T) {
	primer := 1 + Count("assistant\n")
	block := func(inner string) int { return 3 + Count(inner) }
	for _, tc := range []struct {
		name  string
		msgs  []Message
		tools []Tool
		want  int
	}{
		{name: "empty", want: primer},
		{
			name: "user",
			msgs: []Message{{Role: "user", Content: "What is the capital of France?"}},
			want: primer + block("user\nWhat is the capital of France?"),
		},
		{
			name: "system and user",
			msgs: []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}},
			want: primer + block("system\nBe brief.") + block("user\nHi"),
		},
		{
			name: "named",
			msgs: []Message{{Role: "user", Name: "ana", Content: "Hi"}},
			want: primer + block("user ana\nHi"),
		},
		{
			name: "tool call and result",
			msgs: []Message{
				{Role: "user", Content: "Weather in Paris?"},
				{Role: "assistant", ToolCalls: []ToolCall{
					{ID: "tc_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
					{ID: "tc_2", Name: "get_time", Arguments: `{}`},
				}},
				{Role: "tool", ToolCallID: "tc_1", Content: "18C"},
			},
			want: primer + block("user\nWeather in Paris?") +
				block("assistant\n"+`{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}`+"\n"+`{"name":"get_time","arguments":"{}"}`) +
				block("tool\n18C"),
		},
		{
			name: "content before tool call",
			msgs: []Message{{Role: "assistant", Content: "Let me check.", ToolCalls: []ToolCall{{Name: "f", Arguments: "{}"}}}},
			want: primer + block("assistant\nLet me check.\n"+`{"name":"f","arguments":"{}"}`),
		},
		{
			name: "tools",
			msgs: []Message{{Role: "user", Content: "Hi"}},
			tools: []Tool{
				{Name: "get_weather", Description: "Current weather.", Parameters: []byte("{\n  \"type\": \"object\",\n  \"properties\": {\"city\": {\"type\": \"string\"}}\n}")},
				{Name: "noop"},
				{Name: "broken", Parameters: []byte("{not json")},
			},
			want: primer + block("tools\n"+
				`{"name":"get_weather","description":"Current weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}`+"\n"+
				`{"name":"noop"}`+"\n"+
				`{"name":"broken","parameters":"{not json"}`) + block("user\nHi"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, CountChat(tc.msgs, tc.tools))
		})
	}
}

func TestCountConcurrent(t *testing.T) {
	text := string(AppendWords(nil, 7, 300))
	msgs := []Message{{Role: "user", Content: text}}
	want, wantChat := Count(text), CountChat(msgs, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if Count(text) != want || CountChat(msgs, nil) != wantChat {
					t.Error("concurrent counts differ")
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestVocabulary(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range vocabulary {
		require.False(t, seen[w], "duplicate %q", w)
		seen[w] = true
		require.Equal(t, 1, Count(" "+w), "%q is not one token after a space", w)
		require.Equal(t, strings.ToLower(w), w)
	}
	for _, w := range starters {
		require.False(t, seen[w], "duplicate %q", w)
		seen[w] = true
		require.Equal(t, 1, Count(w), "%q is not one token at the start", w)
		require.Equal(t, 1, Count(" "+w), "%q is not one token after a space", w)
		require.True(t, unicode.IsUpper(rune(w[0])))
	}
	require.Equal(t, 1, Count("."))
}

func TestAppendWordsExact(t *testing.T) {
	seeds := []uint64{0, 1, 2, 42, 0xdeadbeef, 1 << 63, ^uint64(0)}
	step, others := 1, uint64(500)
	if raceEnabled {
		step, others = 37, 20
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			for n := 0; n <= 600; n += step {
				text := string(AppendWords(nil, seed, n))
				require.Equal(t, n, Count(text), "seed %d n %d: %q", seed, n, text)
			}
		})
	}
	for seed := range others {
		text := string(AppendWords(nil, seed*0x9e3779b97f4a7c15, 97))
		require.Equal(t, 97, Count(text), "seed %d: %q", seed, text)
	}
}

func TestAppendWordsShape(t *testing.T) {
	require.Empty(t, AppendWords(nil, 1, 0))
	require.Empty(t, AppendWords(nil, 1, -3))
	require.Equal(t, "prefix", string(AppendWords([]byte("prefix"), 1, 0)))

	one := string(AppendWords(nil, 3, 1))
	require.Contains(t, starters, one)

	text := string(AppendWords(nil, 9, 400))
	require.Equal(t, text, string(AppendWords(nil, 9, 400)), "deterministic")
	require.NotEqual(t, text, string(AppendWords(nil, 10, 400)), "seeded")
	require.True(t, unicode.IsUpper(rune(text[0])))
	require.True(t, strings.HasSuffix(text, "."))
	require.NotContains(t, text, "..")
	require.NotContains(t, text, "  ")
	sentences := strings.Split(strings.TrimSuffix(text, "."), ". ")
	require.Greater(t, len(sentences), 400/18)
	for _, s := range sentences {
		words := strings.Fields(s)
		require.True(t, unicode.IsUpper(rune(s[0])), "%q", s)
		require.LessOrEqual(t, len(words), 16, "%q", s)
	}

	pieces := Split(text)
	require.Len(t, pieces, 400)
	require.Equal(t, text, strings.Join(pieces, ""))
	for _, p := range pieces[1:] {
		require.True(t, p == "." || p[0] == ' ', "%q", p)
	}
}

func TestSplit(t *testing.T) {
	require.Nil(t, Split(""))
	for _, text := range []string{
		"hello world",
		`{"city":"Paris","days":[1,2,3]}`,
		"naïve café — 日本語のテキスト 🙂🙂",
		"\xffbad\xfe",
	} {
		pieces := Split(text)
		joined := strings.Join(pieces, "")
		require.Equal(t, strings.ToValidUTF8(text, "\uFFFD"), joined)
		require.LessOrEqual(t, len(pieces), Count(text))
		for _, p := range pieces {
			require.NotEmpty(t, p)
			require.True(t, utf8Valid(p), "%q", p)
		}
	}
	require.Len(t, Split(`{"city":"Paris"}`), Count(`{"city":"Paris"}`))
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "") == s }

func BenchmarkCount(b *testing.B) {
	text := string(AppendWords(nil, 1, 1024))[:2048]
	Count(text)
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		Count(text)
	}
}

func BenchmarkCountChat(b *testing.B) {
	msgs := []Message{
		{Role: "system", Content: "You are a helpful assistant."},
		{Role: "user", Content: string(AppendWords(nil, 2, 200))},
	}
	CountChat(msgs, nil)
	b.ReportAllocs()
	for b.Loop() {
		CountChat(msgs, nil)
	}
}

func BenchmarkAppendWords(b *testing.B) {
	buf := make([]byte, 0, 8<<10)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendWords(buf[:0], 1, 512)
	}
}
