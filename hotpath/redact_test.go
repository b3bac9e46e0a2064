package hotpath_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
)

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://collector:4317/v1/traces":    "https://collector:4317/v1/traces",
		"grpc://u:secret@collector:4317":      "grpc://u:xxxxx@collector:4317",
		"https://token@idp.example.com/realm": "https://xxxxx@idp.example.com/realm",
		"https://u:se/cr?et@host/realm":       "https://u:xxxxx@host/realm",
		"https://u:p%zz@host/":                "https://u:xxxxx@host/",
		"u:secret@host:1/path":                "xxxxx@host:1/path",
		"https://u:p@ss@host":                 "https://u:xxxxx@host",
		"not a url":                           "not a url",
		"":                                    "",
		"http://host/path@at-sign":            "http://xxxxx@at-sign",
		"redis://:SE:CR@ET/PW@h/db":           "redis://:xxxxx@h/db",
	} {
		require.Equal(t, want, hotpath.RedactURL(raw), raw)
	}
}
