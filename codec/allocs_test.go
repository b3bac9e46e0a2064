//go:build !race

package codec

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestZeroAllocs(t *testing.T) {
	dst := make([]byte, 0, 4096)
	rid := []byte("0f8fad5b-d9cb-469f-a165-70867728950e")
	text := strings.Repeat("Grüße \"x\"\n\t\x01\u2028\xff ", 20)
	textBytes := []byte(text)
	version := []byte("2026-10-07")
	bearer := []byte("Bearer sk-live-0123456789abcdef==")

	tests := []struct {
		name string
		fn   func()
	}{
		{"AppendV1Error plain", func() { dst = AppendV1Error(dst[:0], ErrRateLimited, rid) }},
		{"AppendV1Error all details", func() { dst = AppendV1Error(dst[:0], fullError, rid) }},
		{"AppendV1Error nil", func() { dst = AppendV1Error(dst[:0], nil, nil) }},
		{"AppendOpenAIError", func() { dst = AppendOpenAIError(dst[:0], fullError) }},
		{"AppendJSONString", func() { dst = AppendJSONString(dst[:0], text) }},
		{"AppendJSONBytes", func() { dst = AppendJSONBytes(dst[:0], textBytes) }},
		{"ParseVersion", func() { _, _ = ParseVersion(version) }},
		{"Version.AppendTo", func() { dst = CurrentVersion.AppendTo(dst[:0]) }},
		{"ValidRequestID", func() { _ = ValidRequestID(rid) }},
		{"AppendUUIDv7", func() { dst = AppendUUIDv7(dst[:0], 1, 2, 3) }},
		{"ParseBearer", func() { _, _ = ParseBearer(bearer) }},
		{"LookupCode", func() { _, _ = LookupCode("upstream_timeout") }},
		{"Code methods", func() {
			_, _, _, _ = CodeRateLimited.String(), CodeRateLimited.Status(), CodeRateLimited.OpenAIType(), CodeRateLimited.DefaultMessage()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Zero(t, testing.AllocsPerRun(100, tt.fn))
		})
	}
}
