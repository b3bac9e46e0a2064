package proxy

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/sim"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
)

// One conversation sent on all five wires, plain and streaming, is billed
// and logged alike: the same tier, tokens, weighted tokens, cost, status
// and billing, each row under its own wire's route name. The same holds
// for a refusal before the upstream.
func TestFiveWiresBillAlike(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.RequestsPerMinute = 1000 }))
	sink := &recordingSink{}
	f := newChatFixture(t, withLimits(l, sink, uncapped()))
	const system, turn1, answer, turn2 = "You are terse.", "Say hello [[sim:tokens=5]]", "Hello there.", "Again [[sim:tokens=5]]"
	chat := `{"model":"mira","max_tokens":64,STREAM"messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"` + turn1 +
		`"},{"role":"assistant","content":"` + answer + `"},{"role":"user","content":"` + turn2 + `"}]}`
	wires := []struct{ route, path, body string }{
		{"chat_v1", "/api/v1/chat", chat},
		{"chat_v2", "/api/v2/chat", chat},
		{"chat_openai", "/v1/chat/completions", chat},
		{"messages_anthropic", "/v1/messages", `{"model":"mira","max_tokens":64,STREAM"system":[{"type":"text","text":"` + system +
			`"}],"messages":[{"role":"user","content":[{"type":"text","text":"` + turn1 + `"}]},{"role":"assistant","content":"` + answer +
			`"},{"role":"user","content":"` + turn2 + `"}]}`},
		{"responses_openai", "/v1/responses", `{"model":"mira","max_output_tokens":64,STREAM"instructions":"` + system +
			`","input":[{"role":"user","content":[{"type":"input_text","text":"` + turn1 + `"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"` +
			answer + `"}]},{"role":"user","content":"` + turn2 + `"}]}`},
	}
	for _, stream := range []string{"", `"stream":true,`} {
		for _, w := range wires {
			r := f.post(t, w.path, strings.Replace(w.body, "STREAM", stream, 1))
			require.Equal(t, 200, r.status, "%s: %s", w.path, r.body)
		}
	}
	// A refusal before the upstream: an unknown tier.
	for _, w := range wires {
		r := f.post(t, w.path, strings.Replace(strings.Replace(w.body, "STREAM", "", 1), `"mira"`, `"nova"`, 1))
		require.Equal(t, 400, r.status, "%s: %s", w.path, r.body)
	}
	var rows []hotpath.UsageRecord
	require.Eventually(t, func() bool { rows = sink.all(); return len(rows) == 15 }, 2*time.Second, 5*time.Millisecond)
	// Rows arrive as requests end, which for streams is after the client
	// read them: find each by its route and kind.
	find := func(route string, block int) hotpath.UsageRecord {
		for _, r := range rows {
			if r.Route == route && r.Stream == (block == 1) && (r.Status == 200) == (block < 2) {
				return r
			}
		}
		t.Fatalf("no row for %s in block %d", route, block)
		return hotpath.UsageRecord{}
	}
	for block := range 3 {
		first := find(wires[0].route, block)
		for _, w := range wires {
			got := find(w.route, block)
			require.Equal(t, first.Tier, got.Tier, w.route)
			require.Equal(t, first.InputTokens, got.InputTokens, w.route)
			require.Equal(t, first.OutputTokens, got.OutputTokens, w.route)
			require.Equal(t, first.WeightedTokens, got.WeightedTokens, w.route)
			require.Equal(t, first.CostPico, got.CostPico, w.route)
			require.Equal(t, first.Status, got.Status, w.route)
			require.Equal(t, first.ErrorCode, got.ErrorCode, w.route)
			require.Equal(t, first.Billed, got.Billed, w.route)
			require.Equal(t, first.Estimated, got.Estimated, w.route)
			require.Equal(t, "key-1", got.KeyID)
			// Content went out, with the whole answer or in the first
			// frame, on every wire; a refusal sent none.
			if block < 2 {
				require.Positive(t, got.TTFTUS, "%s block %d", w.route, block)
				require.LessOrEqual(t, got.TTFTUS, got.DurationUS, "%s block %d", w.route, block)
			} else {
				require.Zero(t, got.TTFTUS, w.route)
			}
		}
	}
	rows = []hotpath.UsageRecord{find("chat_v1", 0), {}, {}, {}, {}, find("chat_v1", 1), {}, {}, {}, {}, find("chat_v1", 2)}
	require.True(t, rows[0].Billed)
	require.Equal(t, int64(5), rows[0].OutputTokens)
	require.Positive(t, rows[0].CostPico)
	require.True(t, rows[5].Stream)
	require.False(t, rows[10].Billed)
	require.Equal(t, "invalid_request", rows[10].ErrorCode)
}

// settleOrder notes, in order, a store's settlements ("settle") and the
// ledger rows recorded ("record").
type settleOrder struct {
	meter.Counters
	mu     sync.Mutex
	events []string
}

func (o *settleOrder) note(e string) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
}

func (o *settleOrder) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.events
	o.events = nil
	return e
}

func (o *settleOrder) Finish(ctx context.Context, lease meter.Lease, r *meter.Reservation, actual []int64) error {
	o.note("settle")
	return o.Counters.Finish(ctx, lease, r, actual)
}

func (o *settleOrder) Record(*hotpath.UsageRecord) { o.note("record") }

// A request settles before its ledger row is recorded, streaming or not:
// a budget counter rebuilt from the ledger in between (Redis lost it) then
// lacks the request, and its settlement adds it there
// (storage.RedisCounters); recorded first, the row could be in the
// rebuild and the settlement would count it again.
func TestRequestsSettleBeforeTheirRowIsRecorded(t *testing.T) {
	o := &settleOrder{Counters: meter.NewMemoryCounters(meter.NoSeeder{})}
	p := uncapped()
	p.SpendCapMicros = 1_000_000 // a budget to settle
	f := newChatFixture(t, withLimits(newLimits(t, o, testPlan(nil)), o, p))
	for _, stream := range []string{"", `"stream":true,`} {
		for _, path := range []string{"/api/v1/chat", "/v1/chat/completions", "/v1/messages"} {
			r := f.post(t, path, `{"model":"mira","max_tokens":16,`+stream+`"messages":[{"role":"user","content":"hi [[sim:tokens=3]]"}]}`)
			require.Equal(t, 200, r.status, "%s: %s", path, r.body)
			var events []string
			require.Eventually(t, func() bool { events = append(events, o.take()...); return len(events) == 2 }, 2*time.Second, time.Millisecond)
			require.Equal(t, []string{"settle", "record"}, events, "%s %s", path, stream)
		}
	}
}

// Idempotency-Key works on both new wires as on /v1/chat/completions: the
// first answer is replayed byte for byte, another body under the same key
// is a conflict in the wire's envelope.
func TestWireIdempotency(t *testing.T) {
	f := newChatFixture(t)
	for _, w := range []struct{ path, body, other string }{
		{"/v1/messages", `{"model":"mira","max_tokens":16,"messages":[{"role":"user","content":"idem [[sim:tokens=3]]"}]}`,
			`{"model":"mira","max_tokens":16,"messages":[{"role":"user","content":"other [[sim:tokens=3]]"}]}`},
		{"/v1/responses", `{"model":"mira","input":"idem [[sim:tokens=3]]"}`, `{"model":"mira","input":"other [[sim:tokens=3]]"}`},
	} {
		t.Run(w.path, func(t *testing.T) {
			key := "idem-" + w.path
			first := f.post(t, w.path, w.body, "Idempotency-Key", key)
			require.Equal(t, 200, first.status, "%s", first.body)
			again := f.post(t, w.path, w.body, "Idempotency-Key", key)
			require.Equal(t, 200, again.status)
			require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
			require.Equal(t, string(first.body), string(again.body))
			conflict := f.post(t, w.path, w.other, "Idempotency-Key", key)
			require.Equal(t, 409, conflict.status)
			if w.path == "/v1/messages" {
				require.Contains(t, string(conflict.body), `"type":"invalid_request_error"`)
			} else {
				require.Contains(t, string(conflict.body), `"code":"idempotency_conflict"`)
			}
		})
	}

	// A body every wire accepts, under one key on two wires, is two
	// requests: the second is a conflict, never the first's answer in the
	// other wire's shape.
	both := `{"model":"mira","max_tokens":16,"input":"idem [[sim:tokens=3]]",` +
		`"messages":[{"role":"user","content":"idem [[sim:tokens=3]]"}]}`
	first := f.post(t, "/v1/chat/completions", both, "Idempotency-Key", "idem-shared")
	require.Equal(t, 200, first.status, "%s", first.body)
	for _, path := range []string{"/v1/messages", "/v1/responses"} {
		r := f.post(t, path, both, "Idempotency-Key", "idem-shared")
		require.Equal(t, 409, r.status, "%s: %s", path, r.body)
		require.Empty(t, r.header.Get("Idempotent-Replayed"))
	}
	again := f.post(t, "/v1/chat/completions", both, "Idempotency-Key", "idem-shared")
	require.Equal(t, string(first.body), string(again.body))
}

// saturatingSink is a ledger that a test fills and empties at will.
type saturatingSink struct {
	recordingSink
	full atomic.Bool
}

func (s *saturatingSink) Saturated() bool { return s.full.Load() }

// While the ledger can keep no more rows, billable work is refused 503
// service_unavailable with Retry-After in its wire's envelope, before the
// upstream is called: every chat wire, streamed or not, and every
// specialised route. What bills nothing (a replay, token counting) is
// still served, and once the ledger has room again so is everything.
func TestSaturatedLedgerRefusesBillableWork(t *testing.T) {
	s := sim.New(sim.Config{})
	t.Cleanup(s.Shutdown)
	up := newFakeUpstream(t, s.Handler())
	sink := &saturatingSink{}
	f := newChatFixture(t, func(o *fixtureOptions) { o.dial, o.usage, o.aux = up.dial, sink, true })
	const chat = `{"model":"mira","max_tokens":16,STREAM"messages":[{"role":"user","content":"hi [[sim:tokens=3]]"}]}`
	var billable []struct{ path, body string }
	for _, stream := range []string{"", `"stream":true,`} {
		for _, path := range []string{"/api/v1/chat", "/api/v2/chat", "/v1/chat/completions", "/v1/messages"} {
			billable = append(billable, struct{ path, body string }{path, strings.Replace(chat, "STREAM", stream, 1)})
		}
		billable = append(billable, struct{ path, body string }{"/v1/responses",
			`{"model":"mira","max_output_tokens":16,` + stream + `"input":"hi [[sim:tokens=3]]"}`})
	}
	for _, path := range []string{"/api/v1/embeddings", "/v1/embeddings"} {
		billable = append(billable, struct{ path, body string }{path, `{"model":"gw-embed","input":["a","b"]}`})
	}
	billable = append(billable, struct{ path, body string }{"/api/v1/rerank", `{"model":"gw-rerank","query":"q","documents":["a","b"]}`})
	for _, path := range []string{"/api/v1/moderations", "/v1/moderations"} {
		billable = append(billable, struct{ path, body string }{path, `{"model":"gw-guard","input":"a"}`})
	}
	plain := strings.Replace(chat, "STREAM", "", 1)
	first := f.post(t, "/v1/chat/completions", plain, "Idempotency-Key", "saturated")
	require.Equal(t, 200, first.status, "%s", first.body)

	sink.full.Store(true)
	calls := up.calls.Load()
	for _, b := range billable {
		r := f.post(t, b.path, b.body)
		if b.path == "/v1/messages" {
			// Anthropic's overloaded_error, as for every 503 on its wire.
			require.Equal(t, 529, r.status, "%s: %s", b.path, r.body)
			require.Contains(t, string(r.body), `"type":"overloaded_error"`)
		} else {
			require.Equal(t, 503, r.status, "%s: %s", b.path, r.body)
			require.Contains(t, string(r.body), `"code":"service_unavailable"`, b.path)
		}
		require.Equal(t, "1", r.header.Get("Retry-After"), b.path)
	}
	require.Equal(t, calls, up.calls.Load(), "no upstream call while the ledger is saturated")
	for _, row := range sink.all()[1:] {
		require.False(t, row.Billed, row.Route)
		require.Equal(t, "service_unavailable", row.ErrorCode, row.Route)
	}

	again := f.post(t, "/v1/chat/completions", plain, "Idempotency-Key", "saturated")
	require.Equal(t, 200, again.status, "a replay bills nothing: %s", again.body)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	for _, path := range []string{"/api/v1/tokens/count", "/v1/messages/count_tokens"} {
		r := f.post(t, path, plain)
		require.Equal(t, 200, r.status, "token counting bills nothing: %s: %s", path, r.body)
	}

	sink.full.Store(false)
	for _, b := range billable {
		r := f.post(t, b.path, b.body)
		require.Equal(t, 200, r.status, "%s: %s", b.path, r.body)
	}
}
