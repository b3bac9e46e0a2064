package main

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestControlPlaneTypeErrorsNameTheField: the keys route answers a wrong
// type with the field and the type it takes, not "not valid JSON", and
// matches keys case-sensitively.
func TestControlPlaneTypeErrorsNameTheField(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "kim@example.com", "--scopes", "org,chat")

	r := ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"read_only": "yes"})
	require.Equal(t, 400, r.status, "%s", r.raw)
	require.Equal(t, "invalid_request", r.body["code"])
	require.Equal(t, "read_only: must be a boolean, got a string.", r.body["error"])

	r = ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"allowed_scopes": "chat"})
	require.Equal(t, 400, r.status, "%s", r.raw)
	require.Equal(t, "allowed_scopes: must be an array, got a string.", r.body["error"])

	// "READ_ONLY" is not read_only: the key is minted writable.
	r = ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"READ_ONLY": true, "allowed_scopes": []string{"chat"}})
	require.Equal(t, 201, r.status, "%s", r.raw)
	require.NotEqual(t, true, r.body["read_only"])
}

// TestForgedCursorPositionsAreBadCursors: a list cursor whose position no
// list could have issued (an instant before 2000 or ahead of the clock, a
// sequence past what the column holds) is 400 invalid_request naming the
// cursor on every keyset list, never a query that fails with a 500.
func TestForgedCursorPositionsAreBadCursors(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	ec := evalClient{addr: ta.Addr(), key: ada.key}
	suite := ec.suite(t, "Cursors")
	ec.addCase(t, suite, "Hi [[sim:reply=Hello]]", eq("Hello"))
	run := ec.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", nil)["id"].(string)

	const id = "00000000-0000-0000-0000-000000000000"
	enc := base64.RawURLEncoding.EncodeToString
	eval := func(kind, scope string, us int64) string {
		return enc(fmt.Appendf(nil, `{"k":%q,"s":%q,"t":%d,"i":%q}`, kind, scope, us, id))
	}
	// paths are the lists' cursors naming the instant us.
	paths := func(us int64) []string {
		return []string{
			"/api/v1/files?cursor=" + enc(append(binary.AppendVarint([]byte{'f'}, us), id...)),
			"/api/v1/memories?cursor=" + enc([]byte(strconv.FormatInt(us, 10)+":"+id)),
			"/api/v1/evals/suites?cursor=" + eval("suites", "", us),
			"/api/v1/evals/suites/" + suite + "/cases?cursor=" + eval("cases", suite, us),
			"/api/v1/evals/suites/" + suite + "/runs?cursor=" + eval("runs", suite, us),
		}
	}
	y2k := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, us := range []int64{math.MinInt64, -300_000_000_000_000_000, 0, y2k - 1,
		time.Now().Add(48 * time.Hour).UnixMicro(), math.MaxInt64} {
		for _, path := range paths(us) {
			requireError(t, ada.do(t, "GET", path, nil), 400, "invalid_request", "cursor")
		}
	}
	// An eval cursor's id is a UUID, and a result's position fits the column.
	requireError(t, ada.do(t, "GET", "/api/v1/evals/suites?cursor="+
		enc(fmt.Appendf(nil, `{"k":"suites","t":%d,"i":"x"}`, time.Now().UnixMicro())), nil), 400, "invalid_request", "cursor")
	for _, pos := range []string{`"q":4294967296`, `"q":1,"r":-1`, `"q":-5`} {
		requireError(t, ada.do(t, "GET", "/api/v1/evals/runs/"+run+"/results?cursor="+
			enc(fmt.Appendf(nil, `{"k":"results:","s":%q,%s}`, run, pos)), nil), 400, "invalid_request", "cursor")
	}

	// Positions a list can issue still page.
	for _, us := range []int64{y2k, time.Now().UnixMicro()} {
		for _, path := range paths(us) {
			r := ada.do(t, "GET", path, nil)
			require.Equal(t, 200, r.status, "%s: %s", path, r.raw)
		}
	}
	r := ada.do(t, "GET", "/api/v1/evals/runs/"+run+"/results?cursor="+
		enc(fmt.Appendf(nil, `{"k":"results:","s":%q,"q":1,"r":1}`, run)), nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
}
