package codec

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJSONUnstorable(t *testing.T) {
	const (
		nul  = "must not contain NUL characters."
		half = "must not contain an unpaired surrogate escape."
		num  = "must not contain a number beyond 1e308 in magnitude, or below 1e-324 other than zero."
	)
	for raw, want := range map[string]string{
		`"h\u0000i"`:                 nul,
		`{"a\u0000":1}`:              nul,
		`["x","\\\u0000"]`:           nul, // an escaped backslash, then NUL
		`"\u00000"`:                  nul,
		"\"raw\x00byte\"":            nul,
		`"h\\u0000i"`:                "", // a backslash, then the text u0000
		`"\\\\u0000"`:                "",
		`"\u0001\u1000\u0100"`:       "",
		`"plain"`:                    "",
		`"ends with a backslash \\"`: "",
		``:                           "",

		`"\ud83d\ude00"`:                  "", // a pair
		`"\uD83D\uDE00 and \ud800\udc00"`: "",
		`"\ud800"`:                        half,
		`"\ud800x"`:                       half,
		`"\ud800\u0041"`:                  half,
		`"\udc00"`:                        half,
		`"\\ud800"`:                       "", // text, not an escape
		`["\ud83d\ude00","\ude00"]`:       half,

		`[0,-0,0.0,0e999999,-0.000e-99999]`:      "",
		`[1e308,-1.7976931348623157e308,1e-324]`: "",
		`123456789012345678901234567890`:         "",
		`0.000123e-320`:                          "", // 1.23e-324
		`1e309`:                                  num,
		`10e308`:                                 num,
		`-1e200000`:                              num,
		`1e-325`:                                 num,
		`0.0001e-321`:                            num,
		`{"maximum":1e99999999999999999999}`:     num,
		`"1e999 in a string is text"`:            "",
		`{"1e999":"a key is text too"}`:          "",
	} {
		require.Equal(t, want, JSONUnstorable([]byte(raw)), raw)
	}
	long := "[" + strings.Repeat(`"\ud83d\ude00",1e300,`, 1000) + "0]"
	require.Empty(t, JSONUnstorable([]byte(long)))
}

func TestStorableJSON(t *testing.T) {
	for raw, want := range map[string]string{
		`{"a":"b"}`:                            `{"a":"b"}`,
		`{"a":"x\u0000y"}`:                     `{"a":"x\ufffdy"}`,
		`{"a":"x\\u0000y"}`:                    `{"a":"x\\u0000y"}`,
		`["\ud800",1,"\ud83d\ude00","\udc00"]`: `["\ufffd",1,"\ud83d\ude00","\ufffd"]`,
		`{"n":1e400,"m":2}`:                    `{"n":null,"m":2}`,
		"{\"a\":\"x\x00y\"}":                   `{"a":"x\ufffdy"}`,
	} {
		got := string(StorableJSON([]byte(raw)))
		require.Equal(t, want, got, raw)
		require.Empty(t, JSONUnstorable([]byte(got)), raw)
	}
}
