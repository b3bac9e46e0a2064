package pii

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFind(t *testing.T) {
	f := func(s string, want Category, offset int) {
		t.Helper()
		c, off, ok := Find(s)
		if want == "" {
			require.False(t, ok, "%q: found %s at %d", s, c, off)
			return
		}
		require.True(t, ok, "%q", s)
		require.Equal(t, want, c, "%q", s)
		require.Equal(t, offset, off, "%q", s)
	}
	f("write to ada@example.com please", Email, 9)
	f("a.b+tag@mail.example.org", Email, 0)
	f("user@localhost", "", 0)
	f("@example.com", "", 0)
	f("foo@bar.c1", "", 0)
	f("card 4111 1111 1111 1111 ok", Card, 5)
	f("4111-1111-1111-1111", Card, 0)
	f("4111111111111111", Card, 0)
	f("4111111111111112", "", 0) // Luhn-invalid 16 digits is not a card, and 16 > 15 is not a phone
	f("call +44 20 7946 0958", Phone, 5)
	f("call (555) 123-4567 now", Phone, 5)
	f("555.123.4567", Phone, 0)
	f("+1-202-555-0143", Phone, 0)
	f("Use API version 2026-09-26 always", "", 0)
	f("between 2026-09-26 and 2026-10-07", "", 0)
	f("answer in 3 bullet points, max 200 words", "", 0)
	f("order 12345", "", 0)
	f("build v1.2.3.4", "", 0)
	f("id abc1234567890", "", 0)
	f("order_5551234567 shipped", "", 0)
	f("call4155550100", "", 0) // glued to a word: an identifier, not a phone
	f("4155550100x", "", 0)
	// A card is a card wherever it stands, and grouped by dots too.
	f("pay with card_4111111111111111", Card, 14)
	f("visa4111111111111111", Card, 4)
	f("4111111111111111x", Card, 0)
	f("card 4111.1111.1111.1111", Card, 5)
	f("x4111111111111112", "", 0) // Luhn-invalid
	f("", "", 0)
}

func TestLuhn(t *testing.T) {
	d := func(s string) ([]byte, int) {
		b := make([]byte, 19)
		for i := range s {
			b[i] = s[i] - '0'
		}
		return b, len(s)
	}
	for _, s := range []string{"4111111111111111", "5500005555555559", "378282246310005", "6011000990139424"} {
		b, n := d(s)
		require.True(t, luhn(b, n), s)
	}
	b, n := d("4111111111111121")
	require.False(t, luhn(b, n))
	b, n = d("411111111111")
	require.False(t, luhn(b, n), "too short for a card")
}

func FuzzFind(f *testing.F) {
	for _, s := range []string{"ada@example.com", "4111 1111 1111 1111", "+44 20 7946 0958", "(((", "1-", "@.", "+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, off, ok := Find(s)
		if !ok {
			return
		}
		require.Contains(t, []Category{Email, Phone, Card}, c)
		require.True(t, off >= 0 && off < len(s))
	})
}
