package codec

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Version
		ok   bool
	}{
		{"current", "2026-10-07", CurrentVersion, true},
		{"first accepted year", "2000-01-01", 20000101, true},
		{"last accepted day", "9999-12-31", 99991231, true},
		{"leap day", "2024-02-29", 20240229, true},
		{"leap day 2000", "2000-02-29", 20000229, true},
		{"no leap day 2100", "2100-02-29", 0, false},
		{"no leap day 2026", "2026-02-29", 0, false},
		{"april 31", "2026-04-31", 0, false},
		{"month 0", "2026-00-10", 0, false},
		{"month 13", "2026-13-10", 0, false},
		{"day 0", "2026-10-00", 0, false},
		{"day 32", "2026-01-32", 0, false},
		{"year 1999", "1999-12-31", 0, false},
		{"year 0000", "0000-01-01", 0, false},
		{"empty", "", 0, false},
		{"short", "2026-1-07", 0, false},
		{"no dashes", "20261007", 0, false},
		{"slashes", "2026/10/07", 0, false},
		{"leading space", " 2026-10-07", 0, false},
		{"trailing space", "2026-10-07 ", 0, false},
		{"trailing newline", "2026-10-07\n", 0, false},
		{"crlf", "2026-10-07\r\n", 0, false},
		{"sign", "+026-10-07", 0, false},
		{"minus month", "2026--1-07", 0, false},
		{"letters", "2026-1O-07", 0, false},
		{"nul", "2026-10-0\x00", 0, false},
		{"full-width digits", "２０２６-10-07", 0, false},
		{"timestamp", "2026-10-07T00:00:00Z", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseVersion([]byte(tt.in))
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
			if ok {
				require.True(t, got.Valid())
				require.Equal(t, tt.in, got.String())
			}
		})
	}
}

func TestVersion(t *testing.T) {
	tests := []struct {
		name             string
		v                Version
		s                string
		year, month, day int
		valid            bool
	}{
		{"memory pin", VersionMemoryPin, "2026-09-26", 2026, 9, 26, true},
		{"chat file ids", VersionChatFileIDs, "2026-10-05", 2026, 10, 5, true},
		{"message file ids", VersionMessageFileIDs, "2026-10-06", 2026, 10, 6, true},
		{"file expires in", VersionFileExpiresIn, "2026-10-07", 2026, 10, 7, true},
		{"current", CurrentVersion, "2026-10-07", 2026, 10, 7, true},
		{"zero", 0, "0000-00-00", 0, 0, 0, false},
		{"bad day", 20260230, "2026-02-30", 2026, 2, 30, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.s, tt.v.String())
			require.Equal(t, "v="+tt.s, string(tt.v.AppendTo([]byte("v="))))
			require.Equal(t, tt.year, tt.v.Year())
			require.Equal(t, tt.month, tt.v.Month())
			require.Equal(t, tt.day, tt.v.Day())
			require.Equal(t, tt.valid, tt.v.Valid())
		})
	}
	require.Less(t, VersionMemoryPin, VersionChatFileIDs)
	require.Less(t, VersionChatFileIDs, VersionMessageFileIDs)
	require.Less(t, VersionMessageFileIDs, VersionFileExpiresIn)
	require.LessOrEqual(t, VersionFileExpiresIn, CurrentVersion)
}

// TestVersionEveryDay walks every day from 2000 to 2400 and checks that
// ParseVersion, Valid and AppendTo agree with the time package.
func TestVersionEveryDay(t *testing.T) {
	end := time.Date(2400, 12, 31, 0, 0, 0, 0, time.UTC)
	for d := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC); !d.After(end); d = d.AddDate(0, 0, 1) {
		s := d.Format(time.DateOnly)
		v, ok := ParseVersion([]byte(s))
		if !ok || v != Version(d.Year()*10000+int(d.Month())*100+d.Day()) || !v.Valid() || v.String() != s {
			t.Fatalf("%s: got %d, %v", s, v, ok)
		}
	}
}

// refParseVersion is the reference for FuzzParseVersion, built on the time
// package. time.Parse accepts a sign inside the four year bytes ("+999",
// "-999"), which the year >= 2000 bound rejects.
func refParseVersion(s string) (time.Time, bool) {
	if len(s) != 10 {
		return time.Time{}, false
	}
	tm, err := time.Parse("2006-01-02", s)
	if err != nil || tm.Year() < 2000 {
		return time.Time{}, false
	}
	return tm, true
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{
		"", "2026-10-07", "2000-01-01", "1999-12-31", "9999-12-31", "2024-02-29",
		"2100-02-29", "2026-04-31", "2026-00-01", "2026-01-00", "+999-01-01",
		"-999-01-01", "2026-1-007", " 2026-10-7", "2026-10-07\r\n", "2026-10-0\x00",
		"２０２６-10-07", "2026-10-07T00:00:00Z", strings.Repeat("2026-10-07", 100),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := ParseVersion([]byte(s))
		tm, want := refParseVersion(s)
		require.Equal(t, want, ok, "input %q", s)
		if !ok {
			require.Zero(t, v)
			return
		}
		require.Equal(t, Version(tm.Year()*10000+int(tm.Month())*100+tm.Day()), v)
		require.True(t, v.Valid())
		require.Equal(t, s, string(v.AppendTo(nil)))
	})
}

func BenchmarkParseVersion(b *testing.B) {
	in := []byte("2026-10-07")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseVersion(in); !ok {
			b.Fatal("rejected")
		}
	}
}

func BenchmarkVersionAppendTo(b *testing.B) {
	b.ReportAllocs()
	dst := make([]byte, 0, 16)
	for b.Loop() {
		dst = CurrentVersion.AppendTo(dst[:0])
	}
}
