package storage

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
)

func sampleRecord() hotpath.UsageRecord {
	return hotpath.UsageRecord{
		RequestID:   "req_0123-abc",
		At:          time.Date(2026, 3, 31, 23, 59, 59, 999_999_000, time.UTC),
		KeyID:       "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b",
		UserID:      "7a0c3a7e-8d7b-4f8e-9e51-0c0e2b1a9f11",
		OrgID:       "3F2504E0-4F89-41D3-9A0C-0305E82C3301",
		WorkspaceID: "5b1f0c8e-1d2a-4c3b-8e4f-6a7b8c9d0e1f",
		Bucket:      "apikey", Route: "chat_v1", Tier: "mira", Status: 200,
		InputTokens: 12, OutputTokens: 34, WeightedTokens: 56, CostPico: 7_890_000,
		Estimated: true, Billed: true, Stream: true, DurationUS: 123_456, TTFTUS: 7_890,
	}
}

func TestSpoolLineRoundTrip(t *testing.T) {
	f := func(name string, r hotpath.UsageRecord) {
		t.Run(name, func(t *testing.T) {
			var w ledgerRow
			require.False(t, w.fill(&r))
			line := appendSpoolLine(nil, &w)
			require.True(t, strings.HasSuffix(string(line), "\n"))
			require.Equal(t, 1, strings.Count(string(line), "\n"), "one line per row")
			var got ledgerRow
			require.NoError(t, parseSpoolLine(line[:len(line)-1], &got))
			require.Equal(t, w.rowID, got.rowID)
			require.Equal(t, w.at, got.at)
			require.Equal(t, w.ids, got.ids)
			require.Equal(t, w.idText, got.idText)
			require.Equal(t, w.status, got.status)
			require.Equal(t, w.flags, got.flags)
			require.Equal(t, [4]int64{w.inTok, w.outTok, w.wTok, w.cost}, [4]int64{got.inTok, got.outTok, got.wTok, got.cost})
			require.Equal(t, [2]int64{w.durUS, w.ttftUS}, [2]int64{got.durUS, got.ttftUS})
			for i := 0; i < nText; i++ {
				require.Equal(t, string(w.textBytes(i)), string(got.textBytes(i)), spoolTextNames[i])
			}
			require.Equal(t, r.RequestID, string(got.textBytes(textRequestID)))
			require.Equal(t, r.ErrorCode, string(got.textBytes(textErrorCode)))
			require.Equal(t, r.At.UnixMicro(), got.at)
			if r.OrgID != "" {
				org, present, ok := got.id(idOrg)
				require.True(t, present && ok)
				require.Equal(t, strings.ToLower(r.OrgID), uuidString(&org))
			}
		})
	}
	f("every field", sampleRecord())
	anon := sampleRecord()
	anon.KeyID, anon.UserID, anon.OrgID, anon.WorkspaceID, anon.Tier = "", "", "", "", ""
	anon.Status, anon.ErrorCode, anon.Billed = 401, "unauthorized", false
	f("no key", anon)
	long := sampleRecord()
	long.RequestID = strings.Repeat("r", 128)
	long.Route = strings.Repeat("route-", 30)
	long.ErrorCode = "quote\" backslash\\ newline\n tab\t"
	f("texts too long to keep inline", long)
}

func TestSpoolLineRejectsDamage(t *testing.T) {
	r := sampleRecord()
	var w ledgerRow
	w.fill(&r)
	line := appendSpoolLine(nil, &w)
	line = line[:len(line)-1]
	for i := range line {
		damaged := append([]byte(nil), line...)
		damaged[i] ^= 0x01
		var got ledgerRow
		require.Error(t, parseSpoolLine(damaged, &got), "a flipped bit at %d is caught", i)
	}
	for n := 0; n < len(line); n++ {
		var got ledgerRow
		require.Error(t, parseSpoolLine(line[:n], &got), "a line cut at %d is caught", n)
	}
}

func TestFillKeepsNoReferenceToTheCaller(t *testing.T) {
	buf := []byte("req-original")
	r := sampleRecord()
	r.RequestID = string(buf) // a copy here, but fill must not care either way
	var w ledgerRow
	w.fill(&r)
	r.RequestID = "changed"
	require.Equal(t, "req-original", string(w.textBytes(textRequestID)))
	require.Nil(t, w.long)
}

func TestFillMarksBadIDs(t *testing.T) {
	r := sampleRecord()
	r.UserID = "not-a-uuid"
	r.OrgID = "3F2504E0-4F89-41D3-9A0C-0305E82C330g" // the right length: the writer finds it out
	var w ledgerRow
	require.True(t, w.fill(&r))
	_, present, _ := w.id(idUser)
	require.False(t, present, "a bad id is stored as null")
	_, present, ok := w.id(idOrg)
	require.True(t, present)
	require.False(t, ok)
	_, present, ok = w.id(idKey)
	require.True(t, present && ok)
}

func TestFillZeroTimeUsesNow(t *testing.T) {
	r := sampleRecord()
	r.At = time.Time{}
	var w ledgerRow
	before := time.Now().UnixMicro()
	w.fill(&r)
	require.GreaterOrEqual(t, w.at, before)
}

func TestNewRowID(t *testing.T) {
	ms := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()
	seen := make(map[[16]byte]bool)
	for range 10000 {
		id := newRowID(ms)
		require.Equal(t, byte(0x70), id[6]&0xf0, "version 7")
		require.Equal(t, byte(0x80), id[8]&0xc0, "variant 10")
		var got int64
		for i := 0; i < 6; i++ {
			got = got<<8 | int64(id[i])
		}
		require.Equal(t, ms, got, "milliseconds first, so ids sort by time")
		require.False(t, seen[id])
		seen[id] = true
	}
}

func TestParseUUID(t *testing.T) {
	f := func(s string, ok bool) {
		t.Helper()
		var id [16]byte
		require.Equal(t, ok, parseUUID(&id, s), s)
		if ok {
			require.Equal(t, strings.ToLower(s), uuidString(&id))
		}
	}
	f("0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b", true)
	f("3F2504E0-4F89-41D3-9A0C-0305E82C3301", true)
	f("", false)
	f("0190b3c45d6e7f809a1b2c3d4e5f6a7b", false)
	f("0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7g", false)
	f("0190b3c4-5d6e-7f80-9a1b+2c3d4e5f6a7b", false)
	f("{0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7}", false)
}

func TestCleanText(t *testing.T) {
	require.Equal(t, "chat_v1", cleanText([]byte("chat_v1")))
	require.Equal(t, "a\uFFFDb", cleanText([]byte("a\x00b")))
	require.Equal(t, "a\uFFFDb", cleanText([]byte("a\xffb")))
}
