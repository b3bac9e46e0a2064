package codec

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSkipValue(t *testing.T) {
	valid := []string{
		`0`, `-0`, `1`, `-1`, `123`, `1.5`, `-0.25`, `1e9`, `1E+9`, `1e-9`, `12.5e10`, `0e0`,
		`true`, `false`, `null`,
		`""`, `"a"`, `"a b c"`, `"\"\\\/\b\f\n\r\t"`, `"\u0041\u00e9\uD83D\uDE00"`, `"\ud800"`,
		"\"é 世界 🎉\"", "\"\xff invalid UTF-8 is not checked\"", "\"\x7f\"",
		`[]`, `[1]`, `[1,2,3]`, `[ 1 , "a" , null ]`, `{}`, `{"a":1}`, `{"a":{"b":[{"c":[]}]}}`,
		` { "a" : [ true , false ] , "b" : { } } `, "\t\r\n[\n]\n",
		`{"a":1,"a":2}`, `[[[[[[]]]]]]`, `{"":""}`,
	}
	for _, in := range valid {
		t.Run("valid "+in, func(t *testing.T) {
			end, err := skipValue([]byte(in), 0)
			require.NoError(t, err)
			require.Equal(t, len(strings.TrimRight(in, " \t\r\n")), end)
			require.True(t, json.Valid([]byte(in)), "the test case itself")
		})
	}
	invalid := []string{
		``, ` `, `-`, `+1`, `01`, `-01`, `1.`, `.5`, `1e`, `1e+`, `0x10`, `1.e5`, `--1`, `NaN`, `Infinity`,
		`tru`, `True`, `nul`, `nulll`, `f`,
		`"`, `"abc`, `"a\"`, `"\x"`, `"\u12"`, `"\u12G4"`, `"\`, "\"a\x00\"", "\"a\nb\"", "\"\x1f\"",
		`[`, `[1`, `[1,]`, `[,1]`, `[1 2]`, `]`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{a:1}`, `{"a" 1}`,
		`{"a":1]`, `[1}`, `{,}`, `{"a":1 "b":2}`, `{"a\x":1}`, `[1,2`, `{"a":[1,{"b":2]}`,
	}
	for _, in := range invalid {
		t.Run("invalid "+in, func(t *testing.T) {
			b := []byte(in)
			end, err := skipValue(b, 0)
			if err == nil {
				// A valid prefix followed by garbage: the caller sees the garbage.
				require.NotEqual(t, len(b), skipSpace(b, end), "end %d", end)
			}
			require.False(t, json.Valid(b), "the test case itself")
		})
	}
	t.Run("stops after the value", func(t *testing.T) {
		b := []byte(`  {"a":[1,2]} , 3`)
		end, err := skipValue(b, 0)
		require.NoError(t, err)
		require.Equal(t, 13, end)
		end, err = skipValue(b, end+2)
		require.NoError(t, err)
		require.Equal(t, len(b), end)
		end, err = skipValue([]byte(`123abc`), 0)
		require.NoError(t, err)
		require.Equal(t, 3, end)
	})
	t.Run("depth", func(t *testing.T) {
		ok := strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth)
		end, err := skipValue([]byte(ok), 0)
		require.NoError(t, err)
		require.Equal(t, len(ok), end)
		deep := strings.Repeat(`{"a":`, maxJSONDepth+1) + "1" + strings.Repeat("}", maxJSONDepth+1)
		_, err = skipValue([]byte(deep), 0)
		require.ErrorIs(t, err, errJSONDepth)
	})
}

// TestSkipStringWordBoundaries puts each kind of byte at every offset
// around the eight-byte fast path.
func TestSkipStringWordBoundaries(t *testing.T) {
	specials := []struct {
		name  string
		s     string
		valid bool
	}{
		{"quote escape", `\"`, true}, {"backslash escape", `\\`, true}, {"unicode escape", `\u00e9`, true},
		{"nul", "\x00", false}, {"unit separator", "\x1f", false}, {"newline", "\n", false},
		{"space", " ", true}, {"del", "\x7f", true}, {"high byte", "\xff", true}, {"emoji", "🎉", true},
		{"bad escape", `\q`, false}, {"short unicode escape", `\u12"`, false},
	}
	for _, sp := range specials {
		t.Run(sp.name, func(t *testing.T) {
			for pre := 0; pre <= 17; pre++ {
				for post := 0; post <= 9; post++ {
					raw := `"` + strings.Repeat("a", pre) + sp.s + strings.Repeat("b", post) + `"`
					require.Equal(t, sp.valid, ValidJSONString([]byte(raw)), "%q", raw)
					require.Equal(t, json.Valid([]byte(raw)), ValidJSONString([]byte(raw)), "%q", raw)
				}
			}
		})
	}
}

func TestSkipStringUnterminated(t *testing.T) {
	for n := range 20 {
		for _, tail := range []string{``, `\`, `\"`, `\u`, `\u123`} {
			raw := []byte(`"` + strings.Repeat("x", n) + tail)
			end, err := skipString(raw, 0)
			require.Error(t, err, "%q", raw)
			require.LessOrEqual(t, end, len(raw))
		}
	}
}

func TestValidJSONString(t *testing.T) {
	f := func(in string, want bool) {
		t.Helper()
		require.Equal(t, want, ValidJSONString([]byte(in)), "%q", in)
	}
	f(`""`, true)
	f(`"hello"`, true)
	f(`"tab\tand\u2028"`, true)
	f(`"a" `, false)
	f(` "a"`, false)
	f(`"a""b"`, false)
	f(`"a`, false)
	f(`"`, false)
	f(``, false)
	f(`a`, false)
	f(`null`, false)
	f(`1`, false)
	f(`"\u00"`, false)
	f("\"a\tb\"", false)
	for _, s := range []string{"", "plain", "quote \" backslash \\", "\x00\x01\n", "é🎉\u2028", "\xff"} {
		require.True(t, ValidJSONString(AppendJSONString(nil, s)), "%q", s)
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"-0", 0, true}, {"7", 7, true}, {"1234567890", 1234567890, true}, {"-42", -42, true},
		{strconv.FormatInt(math.MaxInt64, 10), math.MaxInt64, true},
		{strconv.FormatInt(math.MinInt64, 10), math.MinInt64, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false},
		{"99999999999999999999", 0, false}, {"18446744073709551616", 0, false},
		{"", 0, false}, {"-", 0, false}, {"01", 0, false}, {"1.0", 0, false}, {"1e3", 0, false},
		{"+1", 0, false}, {" 1", 0, false}, {"1 ", 0, false}, {"--1", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := parseInt([]byte(tt.in))
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestObjectIter(t *testing.T) {
	b := []byte(` { "a" : 1 , "b\"c" : [ 2 ] , "d" : { "e" : null } , "" : "x" } tail`)
	var it objectIter
	require.True(t, it.start(b, 0))
	var keys, values []string
	for key, ok := it.next(); ok; key, ok = it.next() {
		v, good := it.value()
		require.True(t, good)
		keys = append(keys, string(key))
		values = append(values, string(v))
	}
	require.NoError(t, it.err)
	require.Equal(t, []string{"a", `b\"c`, "d", ""}, keys)
	require.Equal(t, []string{"1", "[ 2 ]", `{ "e" : null }`, `"x"`}, values)
	require.Equal(t, " tail", string(b[it.pos:]))

	require.True(t, it.start([]byte(`{}`), 0))
	_, ok := it.next()
	require.False(t, ok)
	require.NoError(t, it.err)
	require.Equal(t, 2, it.pos)

	for _, in := range []string{``, `[]`, `{`, `{"a"`, `{"a":1`, `{"a":1,}`, `{"a" 1}`, `{"a":1 "b":2}`, `{1:2}`, `{"a":tru}`, `{"\q":1}`} {
		t.Run(in, func(t *testing.T) {
			var it objectIter
			if it.start([]byte(in), 0) {
				for _, ok := it.next(); ok; _, ok = it.next() {
					it.skip()
				}
			}
			require.Error(t, it.err)
		})
	}
}

func TestArrayIter(t *testing.T) {
	b := []byte(`[ 1 , "two" , [ 3 ] , { "four" : 4 } ]`)
	var it arrayIter
	require.True(t, it.start(b, 0))
	var got []string
	for it.next() {
		start := it.pos
		it.skip()
		got = append(got, string(b[start:it.pos]))
	}
	require.NoError(t, it.err)
	require.Equal(t, []string{"1", `"two"`, "[ 3 ]", `{ "four" : 4 }`}, got)
	require.Equal(t, len(b), it.pos)

	for _, in := range []string{``, `{}`, `[`, `[1`, `[1,]`, `[,]`, `[1 2]`, `[1,,2]`} {
		t.Run(in, func(t *testing.T) {
			var it arrayIter
			if it.start([]byte(in), 0) {
				for it.next() {
					it.skip()
				}
			}
			require.Error(t, it.err)
		})
	}
}

// FuzzSkipValue checks skipValue and ValidJSONString against encoding/json.
func FuzzSkipValue(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,2.5e-3,true,false,null,"x\u00e9\n"]}`, `[]`, `{}`, `""`, `-0.0E+0`, `01`, `[1,]`,
		`"\ud83d\ude00"`, "\"\xff\"", `{"a":{"b":{"c":[[[]]]}}}`, ` 1 `, `"abc`, `{"a" : 1 , "b" : 2 }`,
		`{"choices":[{"delta":{"content":"hi"}}]}`, "\"a\x00\"", `[1 2]`, `nul`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		end, err := skipValue(in, 0)
		require.LessOrEqual(t, end, len(in))
		require.GreaterOrEqual(t, end, 0)
		ok := err == nil && skipSpace(in, end) == len(in)
		if err == errJSONDepth {
			return
		}
		require.Equal(t, json.Valid(in), ok, "skipValue ended at %d with %v", end, err)
		if err == nil {
			require.True(t, json.Valid(in[:end]), "span %q", in[:end])
		}
		wantString := json.Valid(in) && len(in) > 0 && in[0] == '"' && in[len(in)-1] == '"'
		require.Equal(t, wantString, ValidJSONString(in))
	})
}

func BenchmarkSkipValue(b *testing.B) {
	in := openAIStream(8)
	i := strings.Index(string(in), "\n\n")
	in = in[len("data: "):i]
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := skipValue(in, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func TestArrayLongerThan(t *testing.T) {
	tools := func(n int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = `{"type":"function","function":{"name":"f` + strconv.Itoa(i) + `"}}`
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"model":"m","tools":` + tools(3) + `}`, false},
		{`{"model":"m","tools":` + tools(4) + `}`, true},
		{`{"tools":` + tools(5) + `,"model":"m"}`, true},
		// The member is found after values of every kind, escapes included.
		{`{"messages":[{"content":"a \"tools\": [1,2,3,4,5]"}],"n":{"tools":[1,2,3,4,5]},"tools":[1,2]}`, false},
		{`{"a":[[1,2],{"b":"c"}],"tools" : [ 1 , 2 , 3 , 4 ]}`, true},
		// Not an array, or not an object: nothing to count.
		{`{"tools":"1,2,3,4,5"}`, false},
		{`[1,2,3,4,5]`, false},
		// Malformed before the bound is passed: left to the decoder.
		{`{"tools":[1,2,3`, false},
		{`{"model":"m",`, false},
		// Passing the bound decides, whatever follows.
		{`{"tools":[1,2,3,4,5,`, true},
	} {
		require.Equal(t, tc.want, ArrayLongerThan([]byte(tc.body), "tools", 3), tc.body)
	}
	// A million tools allocate nothing; what follows the bound is not read
	// (the malformed tail above).
	huge := []byte(`{"tools":[` + strings.Repeat(`{"x":1},`, 1<<20) + `{"x":1}]}`)
	require.Zero(t, testing.AllocsPerRun(10, func() { require.True(t, ArrayLongerThan(huge, "tools", 3)) }))
}
