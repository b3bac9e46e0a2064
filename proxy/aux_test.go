package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
)

// The rerank model reads the query and one document together, so the
// window bounds each pair: a query over it is named as the query, a pair
// over it by its document's index, and nothing is sent upstream or billed.
func TestRerankContextWindow(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) { o.aux = true })
	words := func(n int) string { return strings.Repeat("word ", n) }
	for _, c := range []struct{ name, query, docs, want string }{
		{"document", `"q"`, `["short","` + words(9000) + `"]`, `documents[1]: with the query, over the 8192-token window of gw-rerank.`},
		{"query", `"` + words(9000) + `"`, `["short"]`, `query: over the 8192-token window of gw-rerank.`},
		{"pair", `"` + words(5000) + `"`, `["short","` + words(5000) + `"]`, `documents[1]: with the query, over the 8192-token window of gw-rerank.`},
	} {
		r := f.post(t, "/api/v1/rerank", `{"model":"gw-rerank","query":`+c.query+`,"documents":`+c.docs+`}`)
		require.Equal(t, 400, r.status, "%s: %s", c.name, r.body)
		require.Contains(t, string(r.body), `"code":"context_overflow"`, c.name)
		require.Contains(t, string(r.body), c.want, c.name)
	}
	r := f.post(t, "/api/v1/rerank", `{"model":"gw-rerank","query":"`+words(4000)+`","documents":["short","`+words(4000)+`"]}`)
	require.Equal(t, 200, r.status, "a pair within the window is served: %s", r.body)
}

// A null inside input or documents is a value of the wrong type, named
// with its index on every route; an empty string is still a string.
func TestAuxNullItemsAreRefused(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) { o.aux = true })
	for _, c := range []struct{ path, body, want string }{
		{"/api/v1/embeddings", `{"model":"gw-embed","input":["a",null]}`, `input[1]: must be a string.`},
		{"/v1/embeddings", `{"model":"gw-embed","input":[null]}`, `input[0]: must be a string.`},
		{"/api/v1/rerank", `{"model":"gw-rerank","query":"q","documents":["a",null]}`, `documents[1]: must be a string.`},
		{"/api/v1/rerank", `{"model":"gw-rerank","query":"q","documents":["",null]}`, `documents[1]: must be a string.`},
		{"/api/v1/moderations", `{"model":"gw-guard","input":["a", null ]}`, `input[1]: must be a string.`},
	} {
		r := f.post(t, c.path, c.body)
		require.Equal(t, 400, r.status, "%s %s: %s", c.path, c.body, r.body)
		require.Contains(t, string(r.body), `"invalid_request"`, c.body)
		require.Contains(t, string(r.body), c.want, c.body)
	}
	r := f.post(t, "/api/v1/rerank", `{"model":"gw-rerank","query":"q","documents":["a",""]}`)
	require.Equal(t, 200, r.status, "an empty document is a string: %s", r.body)
	require.Contains(t, string(r.body), `"index":1`)
	r = f.post(t, "/api/v1/embeddings", `{"model":"gw-embed","input":["a",""]}`)
	require.Equal(t, 400, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `input[1]: must not be empty.`)
}

// dimensions beyond the embed model's bound is the caller's mistake,
// answered 400 before the upstream call, not the upstream's refusal
// passed on as a 503 to retry.
func TestEmbeddingsDimensionsBound(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) { o.aux = true })
	for _, c := range []struct{ path, dims string }{
		{"/api/v1/embeddings", "4097"},
		{"/api/v1/embeddings", "0"},
		{"/api/v1/embeddings", "-3"},
		{"/v1/embeddings", "100000"},
	} {
		r := f.post(t, c.path, `{"model":"gw-embed","input":"a","dimensions":`+c.dims+`}`)
		require.Equal(t, 400, r.status, "%s %s: %s", c.path, c.dims, r.body)
		require.Contains(t, string(r.body), `"invalid_request"`, c.dims)
		require.Contains(t, string(r.body), `dimensions: must be from 1 to 4096.`, c.dims)
		require.Empty(t, r.header.Get("Retry-After"), c.dims)
	}
	r := f.post(t, "/api/v1/embeddings", `{"model":"gw-embed","input":"a","dimensions":4096}`)
	require.Equal(t, 200, r.status, "%.300s", r.body)

	f = newChatFixture(t, func(o *fixtureOptions) {
		o.aux = true
		o.chat = func(cc *ChatConfig) { cc.Aux.EmbedMaxDimensions = 8 }
	})
	r = f.post(t, "/api/v1/embeddings", `{"model":"gw-embed","input":"a","dimensions":9}`)
	require.Equal(t, 400, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `dimensions: must be from 1 to 8.`)
	r = f.post(t, "/api/v1/embeddings", `{"model":"gw-embed","input":"a","dimensions":8}`)
	require.Equal(t, 200, r.status, "%s", r.body)
}

// The ledger row names the tier that served, null when none was chosen
// (docs/ledger.md): a body refused before it named the route's tier chose
// none, on these routes as on chat.
func TestAuxRowNamesATierOnlyOnceChosen(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.RequestsPerMinute = 1000 }))
	sink := &recordingSink{}
	f := newChatFixture(t, withLimits(l, sink, uncapped()), func(o *fixtureOptions) { o.aux = true })
	for _, c := range []struct {
		path, body, tier string
		status           int
	}{
		{"/api/v1/embeddings", `{"model":"text-embedding-3-small","input":"x"}`, "", 400},
		{"/api/v1/moderations", `not json`, "", 400},
		{"/api/v1/rerank", `{"model":"gw-rerank","query":"q","documents":[]}`, "", 400},
		{"/api/v1/embeddings", `{"model":"gw-embed","input":"x"}`, "gw-embed", 200},
	} {
		before := len(sink.all())
		r := f.post(t, c.path, c.body)
		require.Equal(t, c.status, r.status, "%s %s: %s", c.path, c.body, r.body)
		var rows []hotpath.UsageRecord
		require.Eventually(t, func() bool { rows = sink.all(); return len(rows) == before+1 }, 2*time.Second, 5*time.Millisecond)
		require.Equal(t, c.tier, rows[before].Tier, "%s %s", c.path, c.body)
	}
}
