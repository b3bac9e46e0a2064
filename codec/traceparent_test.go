package codec

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidTraceparent(t *testing.T) {
	const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	f := func(in string, want bool) {
		t.Helper()
		require.Equal(t, want, ValidTraceparent([]byte(in)), in)
	}
	f(ok, true)
	f(strings.Replace(ok, "-01", "-00", 1), true)
	f("01"+ok[2:]+"-extra", true)                                       // a later version may carry more fields
	f("01"+ok[2:], true)                                                // or none
	f(ok+"-extra", false)                                               // version 00 has exactly four fields
	f("01"+ok[2:]+"x", false)                                           // a later version's extra fields follow a dash
	f("ff"+ok[2:], false)                                               // version ff is invalid
	f(strings.ToUpper(ok), false)                                       // lowercase hex only
	f("00-00000000000000000000000000000000-00f067aa0ba902b7-01", false) // zero trace id
	f("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false) // zero parent id
	f(ok[:54], false)
	f("", false)
	f("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false)
	f("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false)
}

func TestAppendTraceparent(t *testing.T) {
	got := AppendTraceparent(nil, 0x4bf92f3577b34da6, 0xa3ce929d0e0e4736, 0x00f067aa0ba902b7)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", string(got))
	require.True(t, ValidTraceparent(AppendTraceparent(nil, 0, 0, 0)), "zero ids are made valid")
	require.Zero(t, testing.AllocsPerRun(100, func() {
		var b [TraceparentLen]byte
		_ = AppendTraceparent(b[:0], 1, 2, 3)
	}))
}
