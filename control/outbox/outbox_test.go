package outbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	var off Config
	require.NoError(t, off.Validate())
	require.False(t, off.Enabled())

	c := Config{Host: "smtp.example.test", From: "a@example.test"}
	require.NoError(t, c.Validate())
	require.Equal(t, 587, c.Port)
	require.Equal(t, "required", c.StartTLS)
	require.Equal(t, 5*time.Second, c.Poll)
	require.Equal(t, 30*time.Second, c.Timeout)
	require.Equal(t, 8, c.MaxAttempts)
	require.Equal(t, 30*time.Second, c.Backoff)
	require.Equal(t, time.Hour, c.MaxBackoff)

	for name, bad := range map[string]Config{
		"no from":          {Host: "h"},
		"bad port":         {Host: "h", From: "a@b.test", Port: 70000},
		"bad starttls":     {Host: "h", From: "a@b.test", StartTLS: "maybe"},
		"user no password": {Host: "h", From: "a@b.test", Username: "u"},
	} {
		t.Run(name, func(t *testing.T) { require.Error(t, bad.Validate()) })
	}
}

func TestBackoffDoublesToItsCeiling(t *testing.T) {
	w := &Worker{Config: Config{Backoff: time.Second, MaxBackoff: 10 * time.Second}}
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, w.backoff(n))
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		10 * time.Second, 10 * time.Second}, got)
}

func TestTruncate(t *testing.T) {
	require.Equal(t, "a b", truncate("a\nb"))
	long := make([]byte, 900)
	for i := range long {
		long[i] = 'x'
	}
	require.Len(t, truncate(string(long)), 500)
}
