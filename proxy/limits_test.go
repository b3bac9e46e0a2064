package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bytedance/sonic"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/memory"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/hotpath/meter/metertest"
)

// recordingSink keeps every ledger row it is given.
type recordingSink struct {
	mu   sync.Mutex
	rows []hotpath.UsageRecord
}

func (s *recordingSink) Record(r *hotpath.UsageRecord) {
	s.mu.Lock()
	s.rows = append(s.rows, *r)
	s.mu.Unlock()
}

func (s *recordingSink) all() []hotpath.UsageRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hotpath.UsageRecord(nil), s.rows...)
}

// failingCounters is a store that cannot be reached.
type failingCounters struct{ meter.Counters }

var errDown = fmt.Errorf("%w: connection refused", meter.ErrCountersUnavailable)

func (failingCounters) Hit(context.Context, time.Time, []meter.Window, []meter.WindowState) (bool, error) {
	return false, errDown
}
func (failingCounters) Usage(context.Context, time.Time, []meter.Budget, []meter.BudgetState) error {
	return errDown
}
func (failingCounters) Admit(context.Context, time.Time, *meter.Admission, *meter.Reservation) (meter.AdmitResult, error) {
	return meter.AdmitResult{}, errDown
}
func (failingCounters) Finish(context.Context, meter.Lease, *meter.Reservation, []int64) error {
	return errDown
}

// heldSlots is a store that counts the slots its admissions hold, as the
// requests see them: taken by an admitted Admit, given back by Finish. It
// reads without taking a slot, so it may watch requests in flight.
type heldSlots struct {
	meter.Counters
	mu   sync.Mutex
	held map[meter.Lease]bool
}

func newHeldSlots() *heldSlots {
	return &heldSlots{Counters: meter.NewMemoryCounters(meter.NoSeeder{}), held: map[meter.Lease]bool{}}
}

func (h *heldSlots) Admit(ctx context.Context, now time.Time, a *meter.Admission, r *meter.Reservation) (meter.AdmitResult, error) {
	res, err := h.Counters.Admit(ctx, now, a, r)
	if err == nil && res.Lease.ID != "" {
		h.mu.Lock()
		h.held[res.Lease] = true
		h.mu.Unlock()
	}
	return res, err
}

func (h *heldSlots) Finish(ctx context.Context, lease meter.Lease, r *meter.Reservation, actual []int64) error {
	err := h.Counters.Finish(ctx, lease, r, actual)
	h.mu.Lock()
	delete(h.held, lease)
	h.mu.Unlock()
	return err
}

// inFlight is the number of slots held under key.
func (h *heldSlots) inFlight(key string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	for l := range h.held {
		if l.Key == key {
			n++
		}
	}
	return n
}

func testPlan(edit func(*meter.Plan)) meter.Plan {
	p := meter.DefaultPlan()
	if edit != nil {
		edit(&p)
	}
	return p
}

func newLimits(t testing.TB, c meter.Counters, plan meter.Plan) *meter.Limits {
	t.Helper()
	plan.Name = "default"
	l, err := meter.NewLimits(meter.LimitsConfig{Counters: c, Plans: []meter.Plan{plan}, DefaultPlan: "default", Tiers: hotpath.DefaultTiers()})
	require.NoError(t, err)
	return l
}

// uncapped is a developer key with no spend cap, credit or workspace.
func uncapped() hotpath.Principal {
	return hotpath.Principal{SpendCapMicros: -1, CreditsMicros: -1, WorkspaceCapMicros: -1}
}

func withLimits(l *meter.Limits, sink hotpath.UsageSink, p hotpath.Principal) func(*fixtureOptions) {
	return func(o *fixtureOptions) { o.limits, o.usage, o.principal = l, sink, p }
}

const smallChat = `{"model":"mira","max_tokens":8,"messages":[{"role":"user","content":"hi [[sim:tokens=4]]"}]}`

func TestRateWindowHeadersAndRefusal(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.RequestsPerMinute = 3 }))
	f := newChatFixture(t, withLimits(l, nil, uncapped()))
	before := time.Now().Unix()
	for i := range 3 {
		r := f.post(t, "/api/v1/chat", smallChat)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		require.Equal(t, "3", r.header.Get("X-RateLimit-Limit"))
		require.Equal(t, strconv.Itoa(2-i), r.header.Get("X-RateLimit-Remaining"))
		reset, err := strconv.ParseInt(r.header.Get("X-RateLimit-Reset"), 10, 64)
		require.NoError(t, err)
		require.InDelta(t, before+60, reset, 2)
	}
	for _, path := range []string{"/api/v1/chat", "/v1/chat/completions"} {
		r := f.post(t, path, smallChat)
		require.Equal(t, http.StatusTooManyRequests, r.status)
		require.Contains(t, string(r.body), `"rate_limited"`)
		require.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		require.NoError(t, err)
		require.True(t, ra >= 1 && ra <= 61, ra)
	}
}

func TestOrgWindowIsSharedAndTighterOneIsShown(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) {
		p.RequestsPerMinute, p.OrgRequestsPerMinute = 10, 2
	}))
	f := newChatFixture(t, withLimits(l, nil, uncapped()))
	r := f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, "2", r.header.Get("X-RateLimit-Limit"))
	require.Equal(t, "1", r.header.Get("X-RateLimit-Remaining"))
	// Another key of the same organization spends the rest.
	other := hotpath.Principal{KeyID: "key-2", UserID: "user-2", OrgID: "org-1", Kind: hotpath.KindDeveloper,
		SpendCapMicros: -1, CreditsMicros: -1, WorkspaceCapMicros: -1}
	st, metered, refusal := l.Hit(context.Background(), time.Now(), &other, hotpath.RateRequests)
	require.True(t, metered)
	require.Nil(t, refusal)
	require.Zero(t, st.Remaining)
	r = f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	// Nothing was counted in the key's own window by the refusal.
	key, _, err := l.PeekWindows(context.Background(), time.Now(), &hotpath.Principal{KeyID: "key-1", OrgID: "org-1"})
	require.NoError(t, err)
	require.Equal(t, int64(9), key.Remaining)
}

// When the key's window and the organization's are both full, the headers
// describe the one the request waits for: X-RateLimit-Reset is reset_at,
// and a retry at it is served.
func TestBothWindowsFullShowTheLaterReset(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) {
		p.RequestsPerMinute, p.OrgRequestsPerMinute = 3, 5
	}))
	key := func(id string) *hotpath.Principal {
		return &hotpath.Principal{KeyID: id, UserID: "user-" + id, OrgID: "org-1", Kind: hotpath.KindDeveloper,
			SpendCapMicros: -1, CreditsMicros: -1, WorkspaceCapMicros: -1}
	}
	hit := func(p *hotpath.Principal, at time.Time) (meter.RateState, *codec.Error) {
		st, metered, refusal := l.Hit(context.Background(), at, p, hotpath.RateRequests)
		require.True(t, metered)
		return st, refusal
	}
	t0 := time.Unix(1_800_000_000, 0)
	_, refusal := hit(key("a"), t0.Add(-50*time.Second)) // opens the organization's window, ending at t0+10s
	require.Nil(t, refusal)
	for range 3 { // fills b's window, ending at t0+60s
		_, refusal = hit(key("b"), t0)
		require.Nil(t, refusal)
	}
	for _, id := range []string{"c", "c", "c", "d", "d"} { // the organization's next window, ending at t0+71s, full
		_, refusal = hit(key(id), t0.Add(11*time.Second))
		require.Nil(t, refusal)
	}
	st, refusal := hit(key("b"), t0.Add(15*time.Second))
	require.NotNil(t, refusal)
	require.Equal(t, t0.Add(71*time.Second).Unix(), refusal.Detail.ResetAt)
	require.Equal(t, refusal.Detail.ResetAt, st.ResetAt, "X-RateLimit-Reset is the reset the request waits for")
	require.Zero(t, st.Remaining)
	_, refusal = hit(key("b"), time.Unix(st.ResetAt, 0))
	require.Nil(t, refusal, "a retry at X-RateLimit-Reset is served")
}

func TestRateHeadersAbsentOnKeyCheckRefusals(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(nil))
	ro := uncapped()
	ro.ReadOnly = true
	f := newChatFixture(t, withLimits(l, nil, ro))
	r := f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, http.StatusForbidden, r.status)
	require.Contains(t, string(r.body), `"key_read_only"`)
	require.Empty(t, r.header.Get("X-RateLimit-Limit"))

	scoped := uncapped()
	var err error
	scoped.Scopes, err = hotpath.ParseScopes([]string{"moderation"})
	require.NoError(t, err)
	f = newChatFixture(t, withLimits(l, nil, scoped))
	r = f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, http.StatusForbidden, r.status)
	require.Contains(t, string(r.body), `"key_scope_forbidden"`)
	require.Empty(t, r.header.Get("X-RateLimit-Limit"))

	f = newChatFixture(t, withLimits(l, nil, uncapped()))
	f.key = "gw_live_not-a-key"
	r = f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Empty(t, r.header.Get("X-RateLimit-Limit"))
}

func TestUnreachableStoreServesUnmetered(t *testing.T) {
	l := newLimits(t, failingCounters{}, testPlan(nil))
	f := newChatFixture(t, withLimits(l, nil, uncapped()))
	r := f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Empty(t, r.header.Get("X-RateLimit-Limit"))
	require.Empty(t, r.header.Get("X-RateLimit-Remaining"))
	require.Equal(t, uint64(1), l.Unmetered.Load(), "one admission, unmetered")
}

func TestConcurrencyCeilingPerKey(t *testing.T) {
	c := newHeldSlots()
	l := newLimits(t, c, testPlan(func(p *meter.Plan) { p.MaxConcurrent = 2 }))
	f := newChatFixture(t, withLimits(l, nil, uncapped()))
	slow := `{"model":"mira","stream":true,"messages":[{"role":"user","content":"x [[sim:tokens=20]] [[sim:itl_ms=10]]"}]}`
	done := make(chan chatReply, 2)
	for range 2 {
		go func() { done <- f.post(t, "/api/v1/chat", slow) }()
	}
	require.Eventually(t, func() bool {
		return c.inFlight("cc:key-1") == 2
	}, 2*time.Second, time.Millisecond)
	for _, path := range []string{"/api/v1/chat", "/api/v2/chat", "/v1/chat/completions"} {
		r := f.post(t, path, smallChat)
		require.Equal(t, http.StatusTooManyRequests, r.status)
		require.Equal(t, "1", r.header.Get("Retry-After"))
		if path != "/v1/chat/completions" {
			require.Contains(t, string(r.body), `"reason":"concurrency"`)
		}
	}
	for range 2 {
		require.Equal(t, http.StatusOK, (<-done).status)
	}
	require.Eventually(t, func() bool {
		return c.inFlight("cc:key-1") == 0
	}, 2*time.Second, time.Millisecond, "every ending gives the slot back")

	// A client that leaves mid-stream gives its slot back too.
	conn, err := f.rawDial()
	require.NoError(t, err)
	body := slow
	_, err = fmt.Fprintf(conn, "POST /api/v1/chat HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		f.key, len(body), body)
	require.NoError(t, err)
	buf := make([]byte, 512)
	_, err = conn.Read(buf)
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool {
		return c.inFlight("cc:key-1") == 0
	}, 3*time.Second, time.Millisecond)
}

// TestNoOvershootUnderConcurrency fires 200 concurrent requests at every
// kind of cap and checks that what was admitted never costs more than it.
func TestNoOvershootUnderConcurrency(t *testing.T) {
	// A 4-token vaani reply to "hi" costs about 15 micro-USD at the
	// default prices, and admission reserves about twice that; the caps
	// hold a handful of such requests.
	cases := []struct {
		name    string
		edit    func(*hotpath.Principal)
		budget  meter.Budget
		code    string
		measure func(r hotpath.UsageRecord) int64
	}{
		{"key spend cap", func(p *hotpath.Principal) { p.SpendCapMicros = 100 },
			meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key-1", Cap: 100_000_000}, "key_spend_cap_exceeded",
			func(r hotpath.UsageRecord) int64 { return r.CostPico }},
		{"workspace cap", func(p *hotpath.Principal) { p.WorkspaceID, p.WorkspaceCapMicros = "ws-1", 100 },
			meter.Budget{Kind: meter.BudgetWorkspaceSpend, Subject: "ws-1", Cap: 100_000_000}, "workspace_spend_cap_exceeded",
			func(r hotpath.UsageRecord) int64 { return r.CostPico }},
		{"credits", func(p *hotpath.Principal) {
			p.Kind, p.CreditsMicros, p.CreditsAdjustMicros = hotpath.KindHeadless, 120, -20
		},
			meter.Budget{Kind: meter.BudgetCredits, Subject: "key-1", Cap: 100_000_000}, "credits_exhausted",
			func(r hotpath.UsageRecord) int64 { return r.CostPico }},
		{"token pools", func(p *hotpath.Principal) { p.Kind = hotpath.KindSignedIn },
			meter.Budget{Kind: meter.BudgetPoolMonthly, Subject: "org-1", Cap: 2000}, "budget_exhausted",
			func(r hotpath.UsageRecord) int64 { return r.WeightedTokens }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, sink, f := overshootFixture(t, tc.edit)
			body := `{"model":"vaani","max_tokens":8,"reasoning_effort":"none","messages":[{"role":"user","content":"hi [[sim:tokens=4]]"}]}`
			ok, refused := 0, 0
			for _, r := range postAtOnce(t, f, 200, body) {
				switch r.status {
				case http.StatusOK:
					ok++
				case http.StatusTooManyRequests:
					refused++
					require.Contains(t, string(r.body), `"`+tc.code+`"`)
					if tc.code == "credits_exhausted" {
						// Credit resets on nothing: no reset_at, as the
						// limits document shows resets_at null; a back-off.
						require.NotContains(t, string(r.body), "reset_at")
						require.Equal(t, strconv.Itoa(meter.CreditRetryAfter), r.header.Get("Retry-After"))
					}
					require.NotEmpty(t, r.header.Get("Retry-After"))
				default:
					t.Fatalf("unexpected %d %s", r.status, r.body)
				}
			}
			require.Positive(t, ok)
			require.Positive(t, refused)
			requireWithinCap(t, c, sink, tc.budget, tc.measure)
		})
	}
}

// overshootFixture is a chat fixture for hundreds of requests at once
// against one cap: windows and the concurrency ceiling out of the way, a
// monthly token pool of 2,000, a developer key edited by edit.
func overshootFixture(t *testing.T, edit func(*hotpath.Principal), opts ...func(*fixtureOptions)) (*meter.MemoryCounters, *recordingSink, *chatFixture) {
	c := meter.NewMemoryCounters(meter.NoSeeder{})
	l := newLimits(t, c, testPlan(func(p *meter.Plan) {
		p.MaxConcurrent, p.RequestsPerMinute, p.OrgRequestsPerMinute = 1000, 1000, 1000
		p.PoolMonthly, p.PoolBurst = 2000, 1_000_000
	}))
	p := uncapped()
	edit(&p)
	sink := &recordingSink{}
	opts = append([]func(*fixtureOptions){withLimits(l, sink, p), func(o *fixtureOptions) { o.maxInFlight = 1000 }}, opts...)
	return c, sink, newChatFixture(t, opts...)
}

// postAtOnce sends body to /api/v1/chat n times at once and returns the
// replies.
func postAtOnce(t *testing.T, f *chatFixture, n int, body string) []chatReply {
	replies := make(chan chatReply, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { replies <- f.post(t, "/api/v1/chat", body) })
	}
	wg.Wait()
	close(replies)
	var out []chatReply
	for r := range replies {
		out = append(out, r)
	}
	return out
}

// requireWithinCap checks that what the sink's billed rows cost (by
// measure) stays within b's cap and that b's counter settled to exactly
// that, every reservation given back; it returns the billed rows.
func requireWithinCap(t *testing.T, c meter.Counters, sink *recordingSink, b meter.Budget, measure func(hotpath.UsageRecord) int64) []hotpath.UsageRecord {
	t.Helper()
	var spent int64
	var billed []hotpath.UsageRecord
	for _, r := range sink.all() {
		if r.Billed {
			spent += measure(r)
			billed = append(billed, r)
		}
	}
	require.LessOrEqual(t, spent, b.Cap, "admitted requests cost more than the cap")
	var st [1]meter.BudgetState
	require.NoError(t, c.Usage(context.Background(), time.Now(), []meter.Budget{b}, st[:]))
	require.Equal(t, spent, st[0].Used, "the counter settles to the sum of real costs")
	return billed
}

func TestBudgetRefusalShape(t *testing.T) {
	c := meter.NewMemoryCounters(meter.NoSeeder{})
	l := newLimits(t, c, testPlan(func(p *meter.Plan) { p.PoolMonthly = 1000 }))
	p := uncapped()
	p.Kind = hotpath.KindSignedIn
	f := newChatFixture(t, withLimits(l, nil, p))
	// Spend the monthly pool.
	var res meter.Reservation
	b := []meter.Budget{{Kind: meter.BudgetPoolMonthly, Subject: "org-1", Cap: 1000}}
	refused, err := metertest.Reserve(context.Background(), c, time.Now(), b, []int64{1000}, &res)
	require.NoError(t, err)
	require.Equal(t, -1, refused)

	r := f.post(t, "/api/v1/chat", `{"model":"kavi","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	var env struct {
		Code          string `json:"code"`
		ResetAt       string `json:"reset_at"`
		MiraAvailable *bool  `json:"mira_available"`
	}
	require.NoError(t, sonic.Unmarshal(r.body, &env))
	require.Equal(t, "budget_exhausted", env.Code)
	next := meter.NextMonth(time.Now())
	require.Equal(t, next.Format(time.RFC3339), env.ResetAt)
	require.NotNil(t, env.MiraAvailable)
	require.True(t, *env.MiraAvailable)
	ra, err := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
	require.NoError(t, err)
	require.InDelta(t, float64(next.Unix()-time.Now().Unix()), float64(ra), 2)
	require.Equal(t, "600", r.header.Get("X-RateLimit-Limit"), "budget refusals still show the request window")
	require.Equal(t, "599", r.header.Get("X-RateLimit-Remaining"))

	// auto is downgraded to mira, which has its own request cap.
	r = f.post(t, "/api/v1/chat", `{"model":"auto","max_tokens":8,"reasoning_effort":"high","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Contains(t, string(r.body), `"routed_tier":"mira"`)
}

// In the last 12 hours of a month both pools can refuse a request, and the
// 12-hour pool may still refuse it after the month turns: its reset_at is
// the later of the two, so a retry at reset_at is served.
func TestPoolRefusalNearMonthEndWaitsForBothPools(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) {
		p.PoolMonthly, p.PoolBurst = 1000, 800
	}))
	p := uncapped()
	p.KeyID, p.UserID, p.OrgID, p.Kind = "key-1", "user-1", "org-1", hotpath.KindSignedIn
	tier := hotpath.Tier{Name: "kavi", PoolWeight: 1}
	admit := func(at time.Time, tokens int64) *codec.Error {
		var ch meter.Charge
		l.FillCharge(&ch, &p, &tier, 0, tokens)
		_, metered, refusal := l.AdmitChat(context.Background(), at, &p, &ch)
		require.True(t, metered)
		if refusal == nil {
			l.FinishChat(&ch, true, 0, tokens)
		}
		return refusal
	}
	require.Nil(t, admit(time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC), 700))

	at := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC) // both pools refuse 400 more
	refusal := admit(at, 400)
	require.NotNil(t, refusal)
	require.Equal(t, codec.CodeBudgetExhausted, refusal.Code)
	reset := time.Unix(refusal.Detail.ResetAt, 0)
	require.True(t, reset.After(meter.NextMonth(at)), "reset_at %v is when the 12-hour pool frees, after the month's", reset.UTC())
	require.Equal(t, int(reset.Unix()-at.Unix()), refusal.Detail.RetryAfter)
	require.NotNil(t, admit(reset.Add(-time.Second), 400), "retrying sooner fails the same way")
	require.Nil(t, admit(reset, 400), "a retry at reset_at is served")

	// Earlier in the month the monthly pool's reset is the later one.
	l = newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) {
		p.PoolMonthly, p.PoolBurst = 1000, 800
	}))
	require.Nil(t, admit(time.Date(2026, 11, 10, 13, 0, 0, 0, time.UTC), 700))
	refusal = admit(time.Date(2026, 11, 10, 23, 0, 0, 0, time.UTC), 400)
	require.NotNil(t, refusal)
	require.Equal(t, meter.NextMonth(at).Unix(), refusal.Detail.ResetAt)
}

func TestAutoDowngradesWhilePoolsAreLow(t *testing.T) {
	c := meter.NewMemoryCounters(meter.NoSeeder{})
	l := newLimits(t, c, testPlan(func(p *meter.Plan) { p.PoolBurst, p.LowPercent = 100_000, 20 }))
	p := uncapped()
	p.Kind = hotpath.KindSignedIn
	f := newChatFixture(t, withLimits(l, nil, p))
	body := `{"model":"auto","max_tokens":8,"reasoning_effort":"high","messages":[{"role":"user","content":"hi"}]}`
	r := f.post(t, "/api/v1/chat", body)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Contains(t, string(r.body), `"routed_tier":"kavi"`, "healthy pools: high effort goes to kavi")

	var res meter.Reservation
	b := []meter.Budget{{Kind: meter.BudgetPoolBurst, Subject: "org-1", Cap: 100_000}}
	_, err := metertest.Reserve(context.Background(), c, time.Now(), b, []int64{85_000}, &res)
	require.NoError(t, err)
	p.OrgID = "org-1" // as the fixture binds it
	// Routing reads the pools at most once a second per organization: read
	// them now, as a second later would.
	require.True(t, l.PoolsLow(context.Background(), time.Now().Add(2*time.Second), &p))
	r = f.post(t, "/api/v1/chat", body)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Contains(t, string(r.body), `"routed_tier":"mira"`)
}

func TestLedgerRowsForEveryEnding(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.RequestsPerMinute = 3 }))
	sink := &recordingSink{}
	f := newChatFixture(t, withLimits(l, sink, uncapped()))
	r := f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, http.StatusOK, r.status)
	r = f.post(t, "/api/v2/chat", `{"model":"vaani","stream":true,"messages":[{"role":"user","content":"hi [[sim:tokens=5]]"}]}`)
	require.Equal(t, http.StatusOK, r.status)
	r = f.post(t, "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"hi [[sim:status=400]]"}]}`)
	require.NotEqual(t, http.StatusOK, r.status)
	r = f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, http.StatusTooManyRequests, r.status)

	require.Eventually(t, func() bool { return len(sink.all()) == 4 }, 2*time.Second, time.Millisecond)
	rows := map[string]hotpath.UsageRecord{}
	for _, row := range sink.all() {
		require.Equal(t, "req-golden", row.RequestID)
		require.Equal(t, "key-1", row.KeyID)
		require.Equal(t, "org-1", row.OrgID)
		require.Equal(t, "apikey", row.Bucket)
		require.Positive(t, row.DurationUS)
		rows[row.Route+"/"+strconv.Itoa(row.Status)] = row
	}
	ok := rows["chat_v1/200"]
	require.True(t, ok.Billed)
	require.Equal(t, "mira", ok.Tier)
	require.Positive(t, ok.InputTokens)
	require.Equal(t, int64(4), ok.OutputTokens)
	require.Positive(t, ok.CostPico)
	require.Empty(t, ok.ErrorCode)

	st := rows["chat_v2/200"]
	require.True(t, st.Stream)
	require.True(t, st.Billed)
	require.Equal(t, int64(5), st.OutputTokens)
	require.Positive(t, st.TTFTUS)

	limited := rows["chat_v1/429"]
	require.False(t, limited.Billed)
	require.Equal(t, "rate_limited", limited.ErrorCode)
	require.Zero(t, limited.CostPico)

	var failed *hotpath.UsageRecord
	for _, row := range rows {
		if row.Route == "chat_openai" {
			failed = &row
		}
	}
	require.NotNil(t, failed)
	require.False(t, failed.Billed)
	require.NotEmpty(t, failed.ErrorCode)
}

// panickingRules panics when a turn reads its standing rules: after chat
// admitted the request, before it answers.
type panickingRules struct{ rulesStore }

func (panickingRules) Rules(context.Context, memory.Caller) ([]memory.Rule, error) {
	panic("rules store exploded")
}

func TestSlotsAreReleasedWhenAHandlerPanics(t *testing.T) {
	c := newHeldSlots()
	l := newLimits(t, c, testPlan(func(p *meter.Plan) { p.MaxConcurrent = 1 }))
	p := uncapped()
	p.SpendCapMicros = 1000 // a budget to reserve against
	f := newChatFixture(t, withLimits(l, nil, p), func(o *fixtureOptions) {
		o.memory = &MemoryConfig{Store: panickingRules{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	})
	ruled := `{"model":"mira","max_tokens":8,"rules":true,"messages":[{"role":"user","content":"hi [[sim:tokens=4]]"}]}`
	for range 3 {
		r := f.post(t, "/api/v1/chat", ruled)
		require.Equal(t, http.StatusInternalServerError, r.status, "not 429: the slot came back")
	}
	require.Zero(t, c.inFlight("cc:key-1"))
	require.Zero(t, f.chat.gate.InFlight())
	var st [1]meter.BudgetState
	require.NoError(t, c.Usage(context.Background(), time.Now(),
		[]meter.Budget{{Kind: meter.BudgetKeySpend, Subject: "key-1", Cap: 1000 * 1_000_000}}, st[:]))
	require.Zero(t, st[0].Used, "the reservations were given back")
}

// panickingReplays panics when it stores an answer.
type panickingReplays struct{ hotpath.IdempotencyStore }

func (s panickingReplays) Begin(ctx context.Context, scope, key string, body [32]byte) (*hotpath.Replay, hotpath.Claim, error) {
	r, c, err := s.IdempotencyStore.Begin(ctx, scope, key, body)
	if c != nil {
		c = panickingClaim{c}
	}
	return r, c, err
}

type panickingClaim struct{ hotpath.Claim }

func (panickingClaim) Complete(context.Context, hotpath.Replay) error { panic("replay store exploded") }

// A panic while the answer is stored under its Idempotency-Key gives the
// key back with the slot: a retry runs again, it is not 409.
func TestIdempotencyKeyIsReleasedWhenAHandlerPanics(t *testing.T) {
	c := newHeldSlots()
	l := newLimits(t, c, testPlan(func(p *meter.Plan) { p.MaxConcurrent = 1 }))
	f := newChatFixture(t, withLimits(l, nil, uncapped()), func(o *fixtureOptions) {
		o.idempotency = panickingReplays{hotpath.NewMemoryIdempotency(time.Hour, 0)}
	})
	for range 3 {
		r := f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", "k1")
		require.Equal(t, http.StatusInternalServerError, r.status, "not 429: the slot came back; not 409: so did the key")
	}
	require.Zero(t, c.inFlight("cc:key-1"))
	require.Zero(t, f.chat.gate.InFlight())
}

func TestRateHeadersAreSpelledAsTheSpecSays(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(nil))
	f := newChatFixture(t, withLimits(l, nil, uncapped()))
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	ctx.Request.SetRequestURI("/api/v1/chat")
	ctx.Request.Header.Set("Authorization", "Bearer "+f.key)
	ctx.Request.SetBodyString(smallChat)
	f.handler(&ctx)
	require.Equal(t, http.StatusOK, ctx.Response.StatusCode(), string(ctx.Response.Body()))
	head := ctx.Response.Header.String()
	for _, name := range []string{"X-RateLimit-Limit: 600\r\n", "X-RateLimit-Remaining: 599\r\n", "X-RateLimit-Reset: "} {
		require.Contains(t, head, name)
	}
}

// TestCompleteStreamsReuseTheUpstreamConnection: a stream that ended with
// [DONE] leaves its upstream connection in the pool, so the next stream
// skips a dial; a stream the client left is closed upstream.
func TestCompleteStreamsReuseTheUpstreamConnection(t *testing.T) {
	var dials atomic.Int64
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.upstream = func(c *UpstreamConfig) {
			dial := c.Dial
			c.Dial = func(addr string) (net.Conn, error) { dials.Add(1); return dial(addr) }
		}
	})
	for range 5 {
		r := f.post(t, "/api/v1/chat", `{"model":"mira","stream":true,"messages":[{"role":"user","content":"hi [[sim:tokens=3]]"}]}`)
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, string(r.body), "[DONE]")
	}
	require.Eventually(t, func() bool { return f.chat.open.Load() == 0 }, 2*time.Second, time.Millisecond)
	require.Equal(t, int64(1), dials.Load(), "five streams one after another share one upstream connection")
}

// Refusals before admission carry the request window's headers, read and
// not counted: only a 401, a key-check 403 and a limiter outage go without.
func TestRefusalsBeforeAdmissionCarryTheWindow(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.RequestsPerMinute = 5 }))
	p := uncapped()
	p.Models = []string{"mira", "vaani"}
	f := newChatFixture(t, withLimits(l, nil, p))
	r := f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Equal(t, "4", r.header.Get("X-RateLimit-Remaining"))
	for _, c := range []struct{ name, path, body, code string }{
		{"validation", "/api/v1/chat", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, "invalid_request"},
		{"allowlist", "/v1/chat/completions", `{"model":"kavi","messages":[{"role":"user","content":"hi"}]}`, "model_not_allowed"},
		{"context", "/api/v2/chat", `{"model":"mira","messages":[{"role":"user","content":"` + strings.Repeat("word ", 70000) + `"}]}`, "context_overflow"},
	} {
		r := f.post(t, c.path, c.body)
		require.Contains(t, string(r.body), c.code, c.name)
		require.Equal(t, "5", r.header.Get("X-RateLimit-Limit"), c.name)
		require.Equal(t, "4", r.header.Get("X-RateLimit-Remaining"), "%s: peeked, not counted", c.name)
		require.NotEmpty(t, r.header.Get("X-RateLimit-Reset"), c.name)
	}
	// Counted requests still count.
	r = f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, "3", r.header.Get("X-RateLimit-Remaining"))
}

// A compressed body is refused at the edge, before a chat or specialised
// route's handler counts the request: the 415 still shows the window, read
// without counting, as every other route's 415 does.
func TestUnsupportedEncodingCarriesTheWindow(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.RequestsPerMinute = 5 }))
	f := newChatFixture(t, withLimits(l, nil, uncapped()), func(o *fixtureOptions) { o.aux = true })
	r := f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Equal(t, "4", r.header.Get("X-RateLimit-Remaining"))
	for _, c := range []struct{ path, body string }{
		{"/api/v1/chat", smallChat},
		{"/api/v2/chat", smallChat},
		{"/v1/chat/completions", smallChat},
		{"/v1/messages", `{"model":"mira","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
		{"/api/v1/embeddings", `{"model":"gw-embed","input":"a"}`},
		{"/v1/embeddings", `{"model":"gw-embed","input":"a"}`},
		{"/api/v1/rerank", `{"model":"gw-rerank","query":"q","documents":["a"]}`},
		{"/api/v1/moderations", `{"model":"gw-guard","input":"a"}`},
		{"/v1/moderations", `{"model":"gw-guard","input":"a"}`},
	} {
		r := f.post(t, c.path, c.body, "Content-Encoding", "gzip")
		require.Equal(t, http.StatusUnsupportedMediaType, r.status, "%s: %s", c.path, r.body)
		require.Equal(t, "5", r.header.Get("X-RateLimit-Limit"), c.path)
		require.Equal(t, "4", r.header.Get("X-RateLimit-Remaining"), "%s: peeked, not counted", c.path)
		require.NotEmpty(t, r.header.Get("X-RateLimit-Reset"), c.path)
	}
}

// rulesStore answers every turn with the same standing rules and no
// memory.
type rulesStore struct{ rules []memory.Rule }

func (s rulesStore) Candidates(context.Context, memory.Caller, string) ([]memory.Candidate, error) {
	return nil, nil
}

func (s rulesStore) Capture(context.Context, memory.Caller, []memory.Fact, [][]float32) ([]memory.Captured, error) {
	return nil, nil
}

func (s rulesStore) Rules(context.Context, memory.Caller) ([]memory.Rule, error) { return s.rules, nil }

// Text the client did not send — standing rules, added after admission,
// and the tier's system prompt — is billed as input, so it is reserved
// too: 200 concurrent requests still never cost more than a cap.
func TestNoOvershootWithTextTheClientDidNotSend(t *testing.T) {
	rule := strings.Repeat("Answer in English. ", 3) // 57 bytes
	prompts := []struct {
		name string
		opt  func(*fixtureOptions)
	}{
		{"standing rules", func(o *fixtureOptions) {
			o.memory = &MemoryConfig{Store: rulesStore{rules: []memory.Rule{
				{Text: rule, Source: "org"}, {Text: rule + "1", Source: "org"}, {Text: rule + "2", Source: "org"}, {Text: rule + "3", Source: "org"},
			}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		}},
		{"system prompt", func(o *fixtureOptions) {
			o.upstream = func(c *UpstreamConfig) {
				if c.Model == "sim-vaani" {
					c.SystemPrompt = strings.Repeat(rule, 4)
				}
			}
		}},
	}
	caps := []struct {
		name    string
		edit    func(*hotpath.Principal)
		budget  meter.Budget
		measure func(r hotpath.UsageRecord) int64
	}{
		{"key spend cap", func(p *hotpath.Principal) { p.SpendCapMicros = 1000 },
			meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key-1", Cap: 1000_000_000},
			func(r hotpath.UsageRecord) int64 { return r.CostPico }},
		{"token pools", func(p *hotpath.Principal) { p.Kind = hotpath.KindSignedIn },
			meter.Budget{Kind: meter.BudgetPoolMonthly, Subject: "org-1", Cap: 2000},
			func(r hotpath.UsageRecord) int64 { return r.WeightedTokens }},
	}
	for _, pr := range prompts {
		for _, tc := range caps {
			t.Run(pr.name+", "+tc.name, func(t *testing.T) {
				c, sink, f := overshootFixture(t, tc.edit, pr.opt)
				body := `{"model":"vaani","max_tokens":8,"reasoning_effort":"none","rules":true,"memory":{"recall":false,"capture":false},` +
					`"messages":[{"role":"user","content":"hi [[sim:tokens=4]]"}]}`
				ok := 0
				for _, r := range postAtOnce(t, f, 200, body) {
					switch r.status {
					case http.StatusOK:
						ok++
						if pr.name == "standing rules" {
							require.Contains(t, string(r.body), `"rules_applied"`)
						}
					case http.StatusTooManyRequests:
					default:
						t.Fatalf("unexpected %d %s", r.status, r.body)
					}
				}
				require.Positive(t, ok)
				billed := requireWithinCap(t, c, sink, tc.budget, tc.measure)
				require.Greater(t, billed[0].InputTokens, int64(60), "the injected text was billed as input")
			})
		}
	}
}

// A workspace's spend is counted while it has no cap, so a cap set later
// starts from the month's real spend: the counter the cap is enforced on
// and the ledger agree.
func TestWorkspaceSpendCountedWithoutACap(t *testing.T) {
	c := meter.NewMemoryCounters(meter.NoSeeder{})
	l := newLimits(t, c, testPlan(nil))
	p := uncapped()
	p.WorkspaceID = "ws-1"
	sink := &recordingSink{}
	f := newChatFixture(t, withLimits(l, sink, p))
	for range 3 {
		require.Equal(t, http.StatusOK, f.post(t, "/api/v1/chat", smallChat).status)
	}
	var spent int64
	for _, r := range sink.all() {
		spent += r.CostPico
	}
	require.Positive(t, spent)
	var st [1]meter.BudgetState
	require.NoError(t, c.Usage(context.Background(), time.Now(),
		[]meter.Budget{{Kind: meter.BudgetWorkspaceSpend, Subject: "ws-1", Cap: -1}}, st[:]))
	require.Equal(t, spent, st[0].Used, "counted without a cap")

	// The cap set now sees what was spent: one micro-dollar more than the
	// spend admits nothing the size of these requests.
	p.WorkspaceCapMicros = spent/1_000_000 + 1
	f = newChatFixture(t, withLimits(l, sink, p))
	r := f.post(t, "/api/v1/chat", smallChat)
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"workspace_spend_cap_exceeded"`)
}

// A retry of a stored answer replays it whatever the key's budgets say: the
// replay is looked up before admission, reserves nothing and bills nothing.
func TestIdempotentReplayAfterTheSpendCapIsSpent(t *testing.T) {
	c := meter.NewMemoryCounters(meter.NoSeeder{})
	l := newLimits(t, c, testPlan(nil))
	p := uncapped()
	p.SpendCapMicros = 1000
	sink := &recordingSink{}
	f := newChatFixture(t, withLimits(l, sink, p))
	first := f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", "ik")
	require.Equal(t, http.StatusOK, first.status, "%s", first.body)

	// Spend what is left of the cap.
	l.Wait()
	spend := []meter.Budget{{Kind: meter.BudgetKeySpend, Subject: "key-1", Cap: 1000 * 1_000_000}}
	spent := func() int64 {
		l.Wait()
		var st [1]meter.BudgetState
		require.NoError(t, c.Usage(context.Background(), time.Now(), spend, st[:]))
		return st[0].Used
	}
	var res meter.Reservation
	refused, err := metertest.Reserve(context.Background(), c, time.Now(), spend, []int64{spend[0].Cap - spent()}, &res)
	require.NoError(t, err)
	require.Equal(t, -1, refused)
	r := f.post(t, "/v1/chat/completions", smallChat)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Contains(t, string(r.body), "key_spend_cap_exceeded")

	again := f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", "ik")
	require.Equal(t, http.StatusOK, again.status, "%s", again.body)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, string(first.body), string(again.body))
	require.Equal(t, spend[0].Cap, spent(), "the replay reserved and spent nothing")

	require.Eventually(t, func() bool { return len(sink.all()) == 3 }, 2*time.Second, time.Millisecond)
	replay := sink.all()[2]
	require.Equal(t, http.StatusOK, replay.Status)
	require.False(t, replay.Billed)
	require.Zero(t, replay.CostPico)
	require.Zero(t, replay.InputTokens+replay.OutputTokens)
}

// A retry of a stored answer needs no concurrency slot, and a retry while
// the first is still running is 409 whether or not a slot is free.
func TestIdempotentReplayWhileTheSlotsAreHeld(t *testing.T) {
	c := newHeldSlots()
	l := newLimits(t, c, testPlan(func(p *meter.Plan) { p.MaxConcurrent = 1 }))
	f := newChatFixture(t, withLimits(l, nil, uncapped()))
	first := f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", "ik")
	require.Equal(t, http.StatusOK, first.status, "%s", first.body)
	require.Eventually(t, func() bool { return c.inFlight("cc:key-1") == 0 }, 2*time.Second, time.Millisecond)

	slow := `{"model":"mira","messages":[{"role":"user","content":"x [[sim:ttft_ms=600]] [[sim:tokens=2]]"}]}`
	done := make(chan chatReply, 1)
	go func() { done <- f.post(t, "/v1/chat/completions", slow, "Idempotency-Key", "slow") }()
	require.Eventually(t, func() bool { return c.inFlight("cc:key-1") == 1 }, 2*time.Second, time.Millisecond)

	r := f.post(t, "/v1/chat/completions", smallChat)
	require.Equal(t, http.StatusTooManyRequests, r.status, "the key's one slot is held")
	again := f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", "ik")
	require.Equal(t, http.StatusOK, again.status, "%s", again.body)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, string(first.body), string(again.body))
	r = f.post(t, "/v1/chat/completions", slow, "Idempotency-Key", "slow")
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Contains(t, string(r.body), "idempotency_conflict")

	held := <-done
	require.Equal(t, http.StatusOK, held.status, "%s", held.body)
	again = f.post(t, "/v1/chat/completions", slow, "Idempotency-Key", "slow")
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, string(held.body), string(again.body))
}

// A request that claimed its key and was then refused at admission gives
// the key back: the retry runs afresh, neither 409 nor a replay.
func TestClaimedKeyRefusedAtAdmissionCanBeRetried(t *testing.T) {
	c := newHeldSlots()
	l := newLimits(t, c, testPlan(func(p *meter.Plan) { p.MaxConcurrent = 1 }))
	f := newChatFixture(t, withLimits(l, nil, uncapped()))
	slow := `{"model":"mira","stream":true,"messages":[{"role":"user","content":"x [[sim:tokens=20]] [[sim:itl_ms=10]]"}]}`
	done := make(chan chatReply, 1)
	go func() { done <- f.post(t, "/api/v1/chat", slow) }()
	require.Eventually(t, func() bool { return c.inFlight("cc:key-1") == 1 }, 2*time.Second, time.Millisecond)
	r := f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", "ik")
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, http.StatusOK, (<-done).status)
	require.Eventually(t, func() bool { return c.inFlight("cc:key-1") == 0 }, 2*time.Second, time.Millisecond)

	r = f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", "ik")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Empty(t, r.header.Get("Idempotent-Replayed"))
	again := f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", "ik")
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
}

// An over-long Idempotency-Key is refused before admission and uses no
// window slot; a replay is a request served and counts in the window (a
// full one refuses it); a conflict is answered before admission.
func TestIdempotencyKeyAndTheRequestWindow(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.RequestsPerMinute = 4 }))
	f := newChatFixture(t, withLimits(l, nil, uncapped()))
	r := f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", "ik")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, "3", r.header.Get("X-RateLimit-Remaining"))

	r = f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", strings.Repeat("k", 256))
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, string(r.body), "Idempotency-Key")
	require.Equal(t, "3", r.header.Get("X-RateLimit-Remaining"), "peeked, not counted")
	r = f.post(t, "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"other"}]}`, "Idempotency-Key", "ik")
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, "3", r.header.Get("X-RateLimit-Remaining"), "peeked, not counted")

	r = f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", "ik")
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	require.Equal(t, "2", r.header.Get("X-RateLimit-Remaining"), "a replay is counted")
	for range 2 {
		require.Equal(t, http.StatusOK, f.post(t, "/v1/chat/completions", smallChat).status)
	}
	r = f.post(t, "/v1/chat/completions", smallChat, "Idempotency-Key", "ik")
	require.Equal(t, http.StatusTooManyRequests, r.status, "a full window refuses a replay too")
	require.Contains(t, string(r.body), "rate_limited")
	require.Empty(t, r.header.Get("Idempotent-Replayed"))
}
