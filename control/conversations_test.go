package control

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

func TestDeriveConvTitle(t *testing.T) {
	f := func(content, want string) {
		t.Helper()
		require.Equal(t, want, deriveConvTitle(content), "content %q", content)
	}
	f("Hello", "Hello")
	f("First line\nsecond line", "First line")
	f("First line\r\nsecond", "First line")
	f("  spaced\t\tout  words ", "spaced out words")
	f("a\u00a0b\u2003c", "a b c") // Unicode spaces collapse too
	f("bell\x07 and \x1bescape", "bell and escape")
	f("\x00\x01", "")
	f("\n\n  \nthird line names it", "third line names it")
	f("---\n???\nreal words", "real words") // dashes and question marks are punctuation
	f("+++", "+++")                         // plus signs are symbols
	f("!!! ... ???", "")
	f("", "")
	f("   ", "")
	f("42", "42")
	f("€", "€")
	f("😀 party", "😀 party")
	f("日本語のタイトル", "日本語のタイトル")
	f(strings.Repeat("ab ", 40), strings.TrimSpace(strings.Repeat("ab ", 26))+"…")
	f(strings.Repeat("z", 81), strings.Repeat("z", 79)+"…")
	f(strings.Repeat("z", 80), strings.Repeat("z", 80))
	// A space far back is not worth losing half the title for.
	f("a "+strings.Repeat("q", 100), "a "+strings.Repeat("q", 77)+"…")
}

// FuzzDeriveConvTitle checks what every derived title is: at most 80
// characters, one line without control characters or doubled or outer
// spaces, and empty exactly when the content has no letter, digit or symbol.
func FuzzDeriveConvTitle(f *testing.F) {
	for _, s := range []string{"Hello world", "\n\nx", "a\tb", strings.Repeat("word ", 40), "???", "é\u2028ü", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		if !utf8.ValidString(content) {
			return
		}
		title := deriveConvTitle(content)
		require.LessOrEqual(t, utf8.RuneCountInString(title), 80)
		require.Equal(t, strings.IndexFunc(content, convWordish) < 0, title == "")
		if title == "" {
			return
		}
		require.True(t, strings.IndexFunc(title, convWordish) >= 0)
		require.Equal(t, strings.TrimSpace(title), title)
		require.NotContains(t, title, "  ")
		for _, r := range title {
			require.False(t, unicode.IsControl(r), "control character %U", r)
			require.False(t, r != ' ' && unicode.IsSpace(r), "whitespace %U", r)
		}
	})
}

func TestConvCursorsRoundTrip(t *testing.T) {
	id := "0b7e4c5a-1f2d-4e3b-9a8c-7d6e5f4a3b2c"
	at := time.Date(2026, 10, 7, 12, 30, 45, 123456000, time.UTC)
	filters := convListFilterHash("chat", false, nil)
	lc := convListCursor{filters: filters, updatedAt: at, id: id}
	got, cerr := decodeConvListCursor(lc.encode(), filters)
	require.Nil(t, cerr)
	require.Equal(t, lc, got)
	_, cerr = decodeConvListCursor(lc.encode(), convListFilterHash("chat", true, nil))
	require.Equal(t, errConvCursorFilters, cerr)
	vault := id
	require.NotEqual(t, filters, convListFilterHash("chat", false, &vault))
	require.NotEqual(t, filters, convListFilterHash("cli", false, nil))

	mc := convMessageCursor{desc: true, leaf: id, after: 42}
	gotM, cerr := decodeConvMessageCursor(mc.encode(), true)
	require.Nil(t, cerr)
	require.Equal(t, mc, gotM)
	_, cerr = decodeConvMessageCursor(mc.encode(), false)
	require.Equal(t, errConvMessageCursorOrder, cerr)

	// Each kind refuses the other's cursors, and anything mangled.
	_, cerr = decodeConvListCursor(mc.encode(), filters)
	require.Equal(t, errConvCursor, cerr)
	_, cerr = decodeConvMessageCursor(lc.encode(), true)
	require.Equal(t, errConvMessageCursor, cerr)
	enc := mc.encode()
	for _, bad := range []string{"", "!!", enc[:len(enc)-3], enc + "AA", "AQ", strings.Repeat("A", 64)} {
		_, cerr = decodeConvMessageCursor(bad, true)
		require.NotNil(t, cerr, "cursor %q", bad)
		require.Equal(t, codec.CodeInvalidRequest, cerr.Code)
	}
}

func TestConvFields(t *testing.T) {
	f, cerr := parseConvFields([]byte(` {"a":"x","n":null,"b":true,"l":["p","q"],"num":1} `))
	require.Nil(t, cerr)
	require.True(t, f.present("n"))
	require.False(t, f.given("n"))
	require.False(t, f.present("zz"))
	s, cerr := f.str("a")
	require.Nil(t, cerr)
	require.Equal(t, "x", *s)
	s, cerr = f.str("n")
	require.Nil(t, cerr)
	require.Nil(t, s)
	_, cerr = f.str("num")
	require.Contains(t, cerr.Message, "num: must be a string")
	b, cerr := f.boolean("b")
	require.Nil(t, cerr)
	require.True(t, b)
	_, cerr = f.boolean("a")
	require.NotNil(t, cerr)
	l, cerr := f.strings("l")
	require.Nil(t, cerr)
	require.Equal(t, []string{"p", "q"}, l)

	empty, cerr := parseConvFields(nil)
	require.Nil(t, cerr)
	require.Empty(t, empty)
	for _, body := range []string{"[]", "null", `"x"`, "{", "{\"a\":\"\xff\"}"} {
		_, cerr := parseConvFields([]byte(body))
		require.NotNil(t, cerr, "body %q", body)
		require.Equal(t, codec.CodeInvalidRequest, cerr.Code)
	}

	obj, cerr := convCompactObject("meta", []byte(" { \"b\" : [ 1 , 2 ] , \"a\" : \"<&>\" } "))
	require.Nil(t, cerr)
	require.Equal(t, `{"b":[1,2],"a":"<&>"}`, string(obj))
	_, cerr = convCompactObject("meta", []byte(`[1]`))
	require.NotNil(t, cerr)
}

func TestConvPageLimit(t *testing.T) {
	n, cerr := convPageLimit("limit", nil, 50, 100)
	require.Nil(t, cerr)
	require.Equal(t, 50, n)
	n, cerr = convPageLimit("limit", []byte("100"), 50, 100)
	require.Nil(t, cerr)
	require.Equal(t, 100, n)
	for _, bad := range []string{"", "0", "101", "-1", "1.5", "ten", "9999999999999999999999"} {
		_, cerr := convPageLimit("limit", []byte(bad), 50, 100)
		require.NotNil(t, cerr, "limit %q", bad)
		require.Contains(t, cerr.Message, "limit")
		require.Contains(t, cerr.Message, "100")
	}
}

func TestParseConvAppend(t *testing.T) {
	call := &hotpath.Call{Version: codec.CurrentVersion, User: &hotpath.Principal{}}
	in, cerr := parseConvAppend([]byte(`{"role":"user","content":"hi","file_ids":[]}`), call)
	require.Nil(t, cerr)
	require.Equal(t, "complete", in.Status)
	require.Equal(t, []string{}, in.FileIDs)

	// The canonical form ignores spelling: the same request hashes the same.
	a, _ := parseConvAppend([]byte(`{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`), call)
	b, _ := parseConvAppend([]byte(`{ "tool_calls" : [ { "function" : { "arguments" : "{}", "name" : "f" }, "type":"function", "id":"c", "extra": 1 } ], "role":"assistant", "content": null }`), call)
	require.Equal(t, a, b)

	call.Pinned = true
	in, cerr = parseConvAppend([]byte(`{"role":"user","content":"x","file_ids":["b","a","b"]}`), call)
	require.Nil(t, cerr)
	require.Equal(t, []string{"b", "a"}, in.FileIDs)
	call.User = &hotpath.Principal{Scopes: 1 << hotpath.FamilyConversations}
	_, cerr = parseConvAppend([]byte(`{"role":"user","content":"x","file_ids":["b"]}`), call)
	require.Equal(t, errConvFileIDsScope, cerr)
	call.Version = codec.VersionChatFileIDs
	_, cerr = parseConvAppend([]byte(`{"role":"user","content":"x","file_ids":["b"]}`), call)
	require.Equal(t, errConvFileIDsPin, cerr)
}

func TestRetentionRunsOnItsClock(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, err := db.CreateOrg(ctx, "Acme")
	require.NoError(t, err)
	u, err := db.CreateUser(ctx, "ada@example.com", org.ID, hotpath.RoleMember)
	require.NoError(t, err)
	conv, err := db.CreateConversation(ctx, u.ID, org.ID, storage.NewConversation{Source: "chat"})
	require.NoError(t, err)

	r := &Retention{DB: db, Log: slog.New(slog.DiscardHandler), Every: time.Hour,
		Now: func() time.Time { return time.Now().Add(364 * 24 * time.Hour) }}
	deleted, ran, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, ran)
	require.Zero(t, deleted, "inside its 365 days")

	r.Now = func() time.Time { return conv.RetentionUntil }
	deleted, ran, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, 1, deleted)
	_, err = db.GetConversation(ctx, u.ID, org.ID, conv.ID)
	require.ErrorIs(t, err, storage.ErrNotFound, "deleted when the deadline is reached")

	stopped, cancel := context.WithCancel(ctx)
	cancel()
	r.Run(stopped) // returns once its context is done
	r.Every = 0
	r.Run(ctx) // disabled: returns at once
}
