package meter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// Plan is a subscription plan: what an organization's keys may do per
// minute, at once, and per month. Plans live in configuration; an
// organization names its plan and falls back to the default one.
type Plan struct {
	Name string
	// RequestsPerMinute is each key's per-minute request window, shared by
	// every metered route except token counting.
	RequestsPerMinute int64
	// OrgRequestsPerMinute is the same window for the whole organization.
	OrgRequestsPerMinute int64
	// TokenCountsPerMinute is the per-key window of token counting, which
	// has its own bucket.
	TokenCountsPerMinute int64
	// MaxConcurrent is the most chat requests one key has in flight across
	// the three chat routes, streams included.
	MaxConcurrent int64
	// PoolMonthly and PoolBurst size the subscription bucket's token pools
	// in weighted tokens: a calendar-month cap and a trailing 12-hour cap.
	PoolMonthly int64
	PoolBurst   int64
	// MiraMonthlyRequests caps requests served by the request-capped tiers
	// (Tier.RequestCapped: mira by default) in a
	// calendar month (subscription bucket).
	MiraMonthlyRequests int64
	// LowPercent is the share of a pool left at which it is reported low
	// and auto is downgraded to mira.
	LowPercent int64
}

// Validate names the first field out of range.
func (p *Plan) Validate() error {
	switch {
	case p.Name == "":
		return errors.New("name: must be set")
	case p.RequestsPerMinute <= 0:
		return errors.New("requests_per_minute: must be positive")
	case p.OrgRequestsPerMinute <= 0:
		return errors.New("org_requests_per_minute: must be positive")
	case p.TokenCountsPerMinute <= 0:
		return errors.New("token_counts_per_minute: must be positive")
	case p.MaxConcurrent <= 0:
		return errors.New("max_concurrent_requests: must be positive")
	case p.PoolMonthly <= 0 || p.PoolBurst <= 0:
		return errors.New("pool_monthly_tokens, pool_burst_tokens: must be positive")
	case p.MiraMonthlyRequests <= 0:
		return errors.New("mira_monthly_requests: must be positive")
	case p.LowPercent < 0 || p.LowPercent >= 100:
		return errors.New("low_percent: must be from 0 to 99")
	}
	return nil
}

// DefaultPlan is the plan an organization gets when configuration names
// none. Its numbers are the documented defaults (docs/limits.md).
func DefaultPlan() Plan {
	return Plan{Name: "default", RequestsPerMinute: 600, OrgRequestsPerMinute: 3000, TokenCountsPerMinute: 1200,
		MaxConcurrent: 32, PoolMonthly: 100_000_000, PoolBurst: 10_000_000, MiraMonthlyRequests: 20_000, LowPercent: 20}
}

// RateWindow is the per-minute window length.
const RateWindow = time.Minute

// Limits is the gateway's enforcement of plans: request windows, the chat
// concurrency ceiling and budget admission, all over one Counters store. It
// is also what GET /api/v1/limits reads, so the numbers shown are the
// numbers enforced.
type Limits struct {
	c     Counters
	plans map[string]*Plan
	def   *Plan
	// pooled are the tiers that draw on the token pools, capped those
	// whose requests count against the plan's monthly request allowance.
	pooled, capped []string

	// Unmetered counts requests served without a check because the store
	// could not be reached.
	Unmetered atomic.Uint64
	// Log receives a line when requests start running unmetered; nil logs
	// nothing.
	Log          *slog.Logger
	unmeteredLog hotpath.LogLimiter
	// AsyncFinish settles and releases after the request's answer, off its
	// path: with a remote store a request then waits on one round trip,
	// its admission. Wait waits for the settlements under way.
	AsyncFinish bool
	finishing   sync.WaitGroup

	// pools caches, per organization, whether its pools are low: auto's
	// routing reads it instead of a store round trip per request.
	poolsMu sync.Mutex
	pools   map[string]poolsSeen
}

type poolsSeen struct {
	low   bool
	until int64 // Unix nanoseconds
}

// poolsFresh is how long a pools reading steers auto before it is read
// again.
const poolsFresh = time.Second

// LimitsConfig is what the limiter enforces, and where it counts.
type LimitsConfig struct {
	Counters Counters
	// Plans must hold DefaultPlan, the plan of an organization that names
	// none (or one that is not defined).
	Plans       []Plan
	DefaultPlan string
	// Tiers say how each tier meters (Tier.PoolWeight and
	// Tier.RequestCapped); requests name the tier they are charged on.
	Tiers []hotpath.Tier
}

// NewLimits builds the limiter.
func NewLimits(cfg LimitsConfig) (*Limits, error) {
	l := &Limits{c: cfg.Counters, plans: make(map[string]*Plan, len(cfg.Plans)), pools: map[string]poolsSeen{}}
	for i := range cfg.Plans {
		p := cfg.Plans[i]
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("plan %s: %w", p.Name, err)
		}
		l.plans[p.Name] = &p
	}
	l.def = l.plans[cfg.DefaultPlan]
	if l.def == nil {
		return nil, fmt.Errorf("default plan %q is not defined", cfg.DefaultPlan)
	}
	for i := range cfg.Tiers {
		if t := &cfg.Tiers[i]; t.RequestCapped {
			l.capped = append(l.capped, t.Name)
		} else {
			l.pooled = append(l.pooled, t.Name)
		}
	}
	return l, nil
}

// PooledTiers are the tiers that draw on the token pools: blocked when a
// pool is spent.
func (l *Limits) PooledTiers() []string { return l.pooled }

// RequestCappedTiers are the tiers whose requests count against the plan's
// monthly request allowance: blocked when it is spent.
func (l *Limits) RequestCappedTiers() []string { return l.capped }

// Counters returns the store.
func (l *Limits) Counters() Counters { return l.c }

// PlanOf returns the key's plan.
func (l *Limits) PlanOf(p *hotpath.Principal) *Plan {
	if pl, ok := l.plans[p.PlanName]; ok {
		return pl
	}
	return l.def
}

// RateState is what the rate-limit headers show: the tighter of the key's
// and the organization's windows.
type RateState struct {
	Limit     int64
	Remaining int64
	ResetAt   int64 // Unix seconds; 0 before the window opened
}

func (l *Limits) windows(p *hotpath.Principal, b hotpath.RateBucket, ws *[2]Window) []Window {
	pl, k := l.PlanOf(p), p.CounterKeys()
	if b == hotpath.RateTokenCount {
		ws[0] = Window{Key: k.Tokens, Limit: pl.TokenCountsPerMinute, Length: RateWindow, Tenant: p.OrgID}
		return ws[:1]
	}
	ws[0] = Window{Key: k.Key, Limit: pl.RequestsPerMinute, Length: RateWindow, Tenant: p.OrgID}
	ws[1] = Window{Key: k.Org, Limit: pl.OrgRequestsPerMinute, Length: RateWindow, Tenant: p.OrgID}
	return ws[:2]
}

// tighter is the window the rate-limit headers describe: the one with the
// fewest requests left and, between windows equally close to full, the one
// that resets last. When both are full that is the one a refused request
// waits for, so X-RateLimit-Reset is the refusal's reset_at.
func tighter(out []WindowState) RateState {
	s := out[0]
	s.Remaining = max(s.Remaining, 0)
	for _, o := range out[1:] {
		o.Remaining = max(o.Remaining, 0)
		if o.Remaining < s.Remaining || o.Remaining == s.Remaining && o.ResetAt > s.ResetAt {
			s = o
		}
	}
	return RateState(s)
}

// Hit counts one request in the key's and the organization's windows. It
// returns metered false when the store failed (the request is then served
// unmetered and counted in Unmetered), and otherwise the headers' state and,
// when a window is full, the 429 to answer.
func (l *Limits) Hit(ctx context.Context, now time.Time, p *hotpath.Principal, b hotpath.RateBucket) (st RateState, metered bool, refusal *codec.Error) {
	var ws [2]Window
	var out [2]WindowState
	w := l.windows(p, b, &ws)
	var allowed bool
	var err error
	if b == hotpath.RatePeek {
		if err = l.c.PeekWindows(ctx, now, w, out[:len(w)]); err == nil {
			allowed = out[0].Remaining > 0 && out[1].Remaining > 0
		}
	} else {
		allowed, err = l.c.Hit(ctx, now, w, out[:len(w)])
	}
	if err != nil {
		l.unmetered(err)
		return RateState{}, false, nil
	}
	st = tighter(out[:len(w)])
	if allowed {
		return st, true, nil
	}
	return st, true, l.windowRefusal(now, out[:len(w)], st)
}

// windowRefusal is the 429 for a full window: the full window is the one to
// wait for.
func (l *Limits) windowRefusal(now time.Time, out []WindowState, st RateState) *codec.Error {
	reset := st.ResetAt
	for _, o := range out {
		if o.Remaining <= 0 && o.ResetAt > reset {
			reset = o.ResetAt
		}
	}
	return &codec.Error{Code: codec.CodeRateLimited,
		Message: "Too many requests in this minute; retry after the window resets.",
		Detail:  codec.Detail{RetryAfter: retryAfter(now, reset), ResetAt: reset}}
}

// unmetered counts a request served without its limits because the store
// failed, and says so in the log at most every hotpath.DefaultLogEvery.
func (l *Limits) unmetered(err error) {
	l.Unmetered.Add(1)
	if l.Log == nil {
		return
	}
	if ok, _ := l.unmeteredLog.Allow(); ok {
		l.Log.Warn("counter store unreachable; serving requests unmetered", "err", err,
			"unmetered_total", l.Unmetered.Load())
	}
}

// PeekWindows reads the key's and the organization's request windows.
func (l *Limits) PeekWindows(ctx context.Context, now time.Time, p *hotpath.Principal) (key, org WindowState, err error) {
	var ws [2]Window
	var out [2]WindowState
	w := l.windows(p, hotpath.RateRequests, &ws)
	if err := l.c.PeekWindows(ctx, now, w, out[:]); err != nil {
		return key, org, err
	}
	return out[0], out[1], nil
}

func retryAfter(now time.Time, reset int64) int {
	// reset is a whole second: reset − ⌊now⌋ rounds the wait up, so a
	// retry at the announced second finds the window reset.
	return int(max(reset-now.Unix(), 1))
}

// CreditRetryAfter is the Retry-After, in seconds, of credits_exhausted.
// Prepaid credit is a balance, not an allowance: it resets on nothing by
// time and clears only when an operator adds credit. So the refusal has no
// reset_at and GET /api/v1/limits shows credits.resets_at null; every 429
// must still carry Retry-After, and this one is a back-off (retrying sooner
// fails the same way unless credit was added), not a reset time.
const CreditRetryAfter = 3600

// errConcurrency is the refusal at the per-key in-flight ceiling.
var errConcurrency = &codec.Error{Code: codec.CodeRateLimited,
	Message: "Too many chat requests in flight for this key; retry in a moment.",
	Detail:  codec.Detail{Reason: "concurrency", RetryAfter: 1}}

// PoolState is a token pool's health.
type PoolState uint8

// The three states.
const (
	PoolHealthy PoolState = iota
	PoolLow
	PoolBlocked
)

var poolStateNames = [...]string{"healthy", "low", "blocked"}

// String is the state as GET /api/v1/limits shows it.
func (s PoolState) String() string { return poolStateNames[s] }

// State classifies a counter against its cap.
func (pl *Plan) State(used, cap int64) PoolState {
	switch {
	case used >= cap:
		return PoolBlocked
	case (cap-used)*100 <= cap*pl.LowPercent:
		return PoolLow
	}
	return PoolHealthy
}

// Charge is what one request is admitted against: the budgets that apply to
// its key and the most it can cost in each.
type Charge struct {
	Budgets [MaxReservation]Budget
	Amounts [MaxReservation]int64
	N       int
	Res     Reservation
	// costIdx, poolIdx and requestIdx locate the budgets for settling.
	costIdx    [3]int8 // key spend, workspace spend, credits; -1 when absent
	poolIdx    [2]int8 // monthly, burst
	requestIdx int8    // the monthly request allowance
	weight     int64   // the tier's pool weight, 0 when the pools are not drawn on
	lease      Lease
	admitted   bool
	// ext is what ExtendChat reserved on top of Res, given back whole
	// when the request settles (Res then takes its whole cost).
	ext Reservation
	// What AdmitChat and FinishChat hand the counters. The counters are
	// an interface, so what is passed to them escapes: kept here, in the
	// request's charge, it costs no allocation per request.
	adm    Admission
	ws     [2]Window
	wout   [2]WindowState
	actual [MaxReservation]int64
}

func (ch *Charge) add(b Budget, amount int64) int8 {
	ch.Budgets[ch.N], ch.Amounts[ch.N] = b, amount
	ch.N++
	return int8(ch.N - 1)
}

// Subscription reports whether the key draws on the token pools.
func Subscription(p *hotpath.Principal) bool { return p.Kind == hotpath.KindSignedIn }

// FillCharge fills ch with the budgets p's request on tier must fit in,
// each at the most the request can use: input tokens (an upper bound on the
// prompt) and up to maxOutput tokens of reply, at the tier's prices and
// pool weight.
func (l *Limits) FillCharge(ch *Charge, p *hotpath.Principal, tier *hotpath.Tier, input, maxOutput int64) {
	*ch = Charge{costIdx: [3]int8{-1, -1, -1}, poolIdx: [2]int8{-1, -1}, requestIdx: -1}
	maxCostPico := Cost(&tier.Prices, input, 0, maxOutput)
	if p.SpendCapMicros >= 0 {
		ch.costIdx[0] = ch.add(Budget{Kind: BudgetKeySpend, Subject: p.KeyID, Cap: PicoUSD(p.SpendCapMicros), Tenant: p.OrgID}, maxCostPico)
	}
	if p.WorkspaceID != "" {
		// Counted while the workspace has no cap too (a cap below 0 only
		// counts): a cap set later then starts from the month's real
		// spend, not from what was counted before it was lifted.
		cap := int64(-1)
		if p.WorkspaceCapMicros >= 0 {
			cap = PicoUSD(p.WorkspaceCapMicros)
		}
		ch.costIdx[1] = ch.add(Budget{Kind: BudgetWorkspaceSpend, Subject: p.WorkspaceID, Cap: cap, Tenant: p.OrgID}, maxCostPico)
	}
	if p.Kind == hotpath.KindHeadless {
		ch.costIdx[2] = ch.add(Budget{Kind: BudgetCredits, Subject: p.KeyID, Cap: PicoUSD(p.CreditsCapMicros()), Tenant: p.OrgID}, maxCostPico)
	}
	if Subscription(p) {
		pl := l.PlanOf(p)
		if tier.RequestCapped {
			ch.requestIdx = ch.add(Budget{Kind: BudgetMiraRequests, Subject: p.OrgID, Cap: pl.MiraMonthlyRequests, Tenant: p.OrgID}, 1)
		} else {
			ch.weight = tier.PoolWeight
			w := ch.weight * (input + maxOutput)
			ch.poolIdx[0] = ch.add(Budget{Kind: BudgetPoolMonthly, Subject: p.OrgID, Cap: pl.PoolMonthly, Tenant: p.OrgID}, w)
			ch.poolIdx[1] = ch.add(Budget{Kind: BudgetPoolBurst, Subject: p.OrgID, Cap: pl.PoolBurst, Tenant: p.OrgID}, w)
		}
	}
}

// refusal is the 429 for budgets[i], spent: its code, reset_at and a
// Retry-After counting down to it.
//
// The counters name the first budget that refuses, and the monthly pool
// comes before the 12-hour pool. In a month's last 12 hours both may refuse,
// and the 12-hour pool may go on refusing after the month turns: the
// request waits for whichever frees later.
func (l *Limits) refusal(ctx context.Context, now time.Time, budgets []Budget, amounts []int64, i int, p *hotpath.Principal) *codec.Error {
	b := &budgets[i]
	reset := l.resetAt(ctx, now, b)
	if b.Kind == BudgetPoolMonthly {
		for j := i + 1; j < len(budgets); j++ {
			if budgets[j].Kind == BudgetPoolBurst {
				if r, refuses := l.refuses(ctx, now, &budgets[j], amounts[j]); refuses && r > reset {
					b, reset = &budgets[j], r
				}
			}
		}
	}
	e := &codec.Error{Detail: codec.Detail{ResetAt: reset, RetryAfter: retryAfter(now, reset)}}
	switch b.Kind {
	case BudgetKeySpend:
		e.Code = codec.CodeKeySpendCapExceeded
		e.Message = "This key has reached its monthly spend cap."
	case BudgetWorkspaceSpend:
		e.Code = codec.CodeWorkspaceSpendCapExceeded
		e.Message = "The key's workspace has reached its monthly spend cap."
	case BudgetCredits:
		e.Code = codec.CodeCreditsExhausted
		e.Message = "This key's prepaid credit is spent."
		if reset == 0 {
			e.Detail.RetryAfter = CreditRetryAfter
		}
	default:
		e.Code = codec.CodeBudgetExhausted
		e.Message = "The plan's " + budgetLabel(b.Kind) + " is spent for this period."
		e.Detail.MiraAvailable = -1
		if b.Kind != BudgetMiraRequests && l.requestsLeft(ctx, now, p) {
			e.Detail.MiraAvailable = 1
		}
	}
	return e
}

func budgetLabel(k BudgetKind) string {
	switch k {
	case BudgetPoolMonthly:
		return "monthly token pool"
	case BudgetPoolBurst:
		return "12-hour token pool"
	}
	return "monthly mira request allowance"
}

// refuses says whether the trailing budget b would refuse amount more now,
// and when it next goes down.
func (l *Limits) refuses(ctx context.Context, now time.Time, b *Budget, amount int64) (resetAt int64, refuses bool) {
	if b.Cap < 0 {
		return 0, false
	}
	used, reset, ok := l.trailing(ctx, now, b)
	if !ok || used <= b.Cap && amount <= b.Cap-used {
		return 0, false
	}
	return reset, true
}

func (l *Limits) resetAt(ctx context.Context, now time.Time, b *Budget) int64 {
	switch b.Kind.Period() {
	case PeriodMonth:
		return NextMonth(now).Unix()
	case PeriodLifetime:
		return 0
	}
	_, reset, _ := l.trailing(ctx, now, b)
	return reset
}

// trailing reads the trailing budget b: what it holds, and when it next
// goes down (a slot from now when the store cannot say); ok false when the
// store failed.
func (l *Limits) trailing(ctx context.Context, now time.Time, b *Budget) (used, reset int64, ok bool) {
	var st [1]BudgetState
	err := l.c.Usage(ctx, now, []Budget{*b}, st[:])
	reset = now.Add(BurstSlot).Unix()
	if err == nil && st[0].ResetAt != 0 {
		reset = st[0].ResetAt
	}
	return st[0].Used, reset, err == nil
}

// requestsLeft reports whether p may still use a request-capped tier: the
// key allows one and the plan's monthly request allowance is not spent.
func (l *Limits) requestsLeft(ctx context.Context, now time.Time, p *hotpath.Principal) bool {
	allowed := false
	for _, name := range l.capped {
		allowed = allowed || p.AllowsModel(name)
	}
	if !allowed {
		return false
	}
	pl := l.PlanOf(p)
	var st [1]BudgetState
	b := Budget{Kind: BudgetMiraRequests, Subject: p.OrgID, Cap: pl.MiraMonthlyRequests, Tenant: p.OrgID}
	if err := l.c.Usage(ctx, now, []Budget{b}, st[:]); err != nil {
		return false
	}
	return st[0].Used < pl.MiraMonthlyRequests
}

// maxPoolsSeen bounds the pools cache.
const maxPoolsSeen = 100_000

// PoolsLow reports whether either token pool of a subscription key is low or
// blocked: auto is then routed to mira. A store failure reports false.
func (l *Limits) PoolsLow(ctx context.Context, now time.Time, p *hotpath.Principal) bool {
	if !Subscription(p) {
		return false
	}
	l.poolsMu.Lock()
	seen, ok := l.pools[p.OrgID]
	l.poolsMu.Unlock()
	if ok && now.UnixNano() < seen.until {
		return seen.low
	}
	pl := l.PlanOf(p)
	b := [2]Budget{{Kind: BudgetPoolMonthly, Subject: p.OrgID, Cap: pl.PoolMonthly, Tenant: p.OrgID},
		{Kind: BudgetPoolBurst, Subject: p.OrgID, Cap: pl.PoolBurst, Tenant: p.OrgID}}
	var st [2]BudgetState
	if err := l.c.Usage(ctx, now, b[:], st[:]); err != nil {
		return false
	}
	low := pl.State(st[0].Used, pl.PoolMonthly) != PoolHealthy || pl.State(st[1].Used, pl.PoolBurst) != PoolHealthy
	l.poolsMu.Lock()
	if len(l.pools) >= maxPoolsSeen {
		clear(l.pools) // a bound, not an eviction policy: entries live a second
	}
	l.pools[p.OrgID] = poolsSeen{low: low, until: now.Add(poolsFresh).UnixNano()}
	l.poolsMu.Unlock()
	return low
}

// AdmitChat admits one chat request in a single step: it counts in the
// key's and the organization's request windows, takes one of the key's
// concurrency slots and reserves its largest possible cost (maxCostPico,
// maxTokens, computed by FillCharge into ch) against every budget. It returns
// the rate-limit headers' state, whether the request was metered (false when
// the store failed: it is then served unmetered), and the refusal to answer.
func (l *Limits) AdmitChat(ctx context.Context, now time.Time, p *hotpath.Principal, ch *Charge) (st RateState, metered bool, refusal *codec.Error) {
	a, out := &ch.adm, ch.wout[:]
	*a = Admission{Windows: l.windows(p, hotpath.RateRequests, &ch.ws), WindowOut: out,
		LeaseKey: p.CounterKeys().Lease, LeaseLimit: l.PlanOf(p).MaxConcurrent, LeaseTenant: p.OrgID,
		Budgets: ch.Budgets[:ch.N], Amounts: ch.Amounts[:ch.N]}
	res, err := l.c.Admit(ctx, now, a, &ch.Res)
	if err != nil {
		l.unmetered(err)
		return RateState{}, false, nil
	}
	st = tighter(out[:len(a.Windows)])
	switch res.Refused {
	case AdmitWindow:
		return st, true, l.windowRefusal(now, out[:len(a.Windows)], st)
	case AdmitConcurrency:
		return st, true, errConcurrency
	case AdmitBudget:
		return st, true, l.refusal(ctx, now, a.Budgets, a.Amounts, res.Budget, p)
	}
	ch.lease, ch.admitted = res.Lease, true
	return st, true, nil
}

// ExtendChat reserves, on top of an admitted request's reservation, what
// more input it may now cost: the prompt grew after admission (standing
// rules and recalled memory are read only for an admitted request), by at
// most extra input tokens on tier. The spend and credit budgets take
// extra at the tier's input price, the token pools extra at its weight;
// the request allowance counted the request already. A budget the growth
// does not fit refuses the request, which then gives everything back as
// any refused request does. Only the first extension of a request is
// kept; a request extends once.
func (l *Limits) ExtendChat(ctx context.Context, now time.Time, p *hotpath.Principal, tier *hotpath.Tier, ch *Charge, extra int64) *codec.Error {
	if !ch.admitted || extra <= 0 || ch.ext.N > 0 {
		return nil
	}
	var a Admission
	var budgets [MaxReservation]Budget
	var amounts [MaxReservation]int64
	n := 0
	cost := Cost(&tier.Prices, extra, 0, 0)
	for _, i := range ch.costIdx {
		if i >= 0 {
			budgets[n], amounts[n] = ch.Budgets[i], cost
			n++
		}
	}
	for _, i := range ch.poolIdx {
		if i >= 0 {
			budgets[n], amounts[n] = ch.Budgets[i], ch.weight*extra
			n++
		}
	}
	if n == 0 {
		return nil
	}
	a.Budgets, a.Amounts = budgets[:n], amounts[:n]
	res, err := l.c.Admit(ctx, now, &a, &ch.ext)
	if err != nil {
		l.unmetered(err)
		return nil
	}
	if res.Refused == AdmitBudget {
		return l.refusal(ctx, now, a.Budgets, a.Amounts, res.Budget, p)
	}
	return nil
}

// FinishChat settles the reservation to what the request really cost and
// gives the concurrency slot back, in one step. billed false (a refusal, a
// timeout, nothing served) gives everything back. It does nothing for a
// request that was not admitted.
func (l *Limits) FinishChat(ch *Charge, billed bool, costPico, tokens int64) {
	if !ch.admitted {
		return
	}
	ch.admitted = false
	actual := &ch.actual
	*actual = [MaxReservation]int64{}
	if billed {
		for _, i := range ch.costIdx {
			if i >= 0 {
				actual[i] = costPico
			}
		}
		for _, i := range ch.poolIdx {
			if i >= 0 {
				actual[i] = ch.weight * tokens
			}
		}
		if ch.requestIdx >= 0 {
			actual[ch.requestIdx] = 1
		}
	}
	if l.AsyncFinish {
		// The charge is reused once the request ends: the settlement,
		// which runs later, gets copies.
		lease, res, act, n := ch.lease, ch.Res, *actual, ch.N
		l.finishing.Go(func() { l.finish(lease, &res, act[:n]) })
		if ch.ext.N > 0 {
			ext := ch.ext
			l.finishing.Go(func() { l.finishExtension(&ext) })
		}
		ch.ext = Reservation{}
		return
	}
	l.finish(ch.lease, &ch.Res, actual[:ch.N])
	l.finishExtension(&ch.ext)
	ch.ext = Reservation{}
}

// finishExtension gives back what ExtendChat reserved: the request's whole
// cost is settled on its first reservation.
func (l *Limits) finishExtension(ext *Reservation) {
	if ext.N == 0 {
		return
	}
	var none [MaxReservation]int64
	l.finish(Lease{}, ext, none[:ext.N])
}

func (l *Limits) finish(lease Lease, r *Reservation, actual []int64) {
	// Never the request's context: it may be gone. The store bounds the
	// call itself.
	if err := l.c.Finish(context.Background(), lease, r, actual); err != nil {
		l.unmetered(err)
	}
}

// Wait returns once every settlement started by FinishChat has ended. The
// app calls it at shutdown, before it closes the store.
func (l *Limits) Wait() { l.finishing.Wait() }

// Weighted is the weighted-token count of tokens served under ch: what the
// request drew from the token pools, 0 when it drew on none.
func (ch *Charge) Weighted(tokens int64) int64 { return ch.weight * tokens }

// FillAuxCharge fills ch for a request on an auxiliary tier (embeddings,
// rerank, moderation): input tokens and output up to maxOutput at the
// tier's prices against the key's spend caps and credit, and, unless
// poolExempt, against the subscription pools at the tier's pool weight.
// Auxiliary tiers are never request-capped. Moderation is pool-exempt: it
// never answers budget_exhausted (spec: Specialised routes).
func (l *Limits) FillAuxCharge(ch *Charge, p *hotpath.Principal, tier *hotpath.Tier, input, maxOutput int64, poolExempt bool) {
	t := *tier
	t.RequestCapped = false
	if poolExempt {
		t.PoolWeight = 0
	}
	l.FillCharge(ch, p, &t, input, maxOutput)
	if poolExempt {
		// Drop the pool budgets FillCharge added at weight 0.
		n := 0
		for i := 0; i < ch.N; i++ {
			if k := ch.Budgets[i].Kind; k == BudgetPoolMonthly || k == BudgetPoolBurst {
				continue
			}
			ch.Budgets[n], ch.Amounts[n] = ch.Budgets[i], ch.Amounts[i]
			n++
		}
		ch.N, ch.poolIdx, ch.weight = n, [2]int8{-1, -1}, 0
	}
}

// AdmitAux admits one auxiliary-route request: the key's and the
// organization's request windows and the budgets in ch, in one step, with
// no concurrency lease (the ceiling counts chat requests only). Settle it
// with FinishChat.
func (l *Limits) AdmitAux(ctx context.Context, now time.Time, p *hotpath.Principal, ch *Charge) (st RateState, metered bool, refusal *codec.Error) {
	var ws [2]Window
	var out [2]WindowState
	a := Admission{Windows: l.windows(p, hotpath.RateRequests, &ws), WindowOut: out[:],
		Budgets: ch.Budgets[:ch.N], Amounts: ch.Amounts[:ch.N]}
	res, err := l.c.Admit(ctx, now, &a, &ch.Res)
	if err != nil {
		l.unmetered(err)
		return RateState{}, false, nil
	}
	st = tighter(out[:len(a.Windows)])
	switch res.Refused {
	case AdmitWindow:
		return st, true, l.windowRefusal(now, out[:len(a.Windows)], st)
	case AdmitBudget:
		return st, true, l.refusal(ctx, now, a.Budgets, a.Amounts, res.Budget, p)
	}
	ch.lease, ch.admitted = Lease{}, true
	return st, true, nil
}
