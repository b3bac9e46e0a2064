package meter

import (
	"context"
	"errors"
	"time"
)

// Counters is the store behind every limit the gateway enforces: per-minute
// request windows, concurrency leases and budget reservations. Two
// implementations pass the same contract suite (hotpath/meter/metertest): the
// in-process MemoryCounters, the single-process default, and the Redis one in
// storage, which makes every counter fleet-wide.
//
// Every method takes the caller's clock reading so that tests can move time.
// A returned error means the store could not be reached or answered nonsense;
// the caller then serves the request unmetered and counts it.
type Counters interface {
	// Hit counts one request in every window of ws, atomically: when any
	// window is already full nothing is counted anywhere and allowed is
	// false. out (len(out) >= len(ws)) receives each window's state after
	// the call. A window opens at the first request counted in it and lasts
	// its Length.
	Hit(ctx context.Context, now time.Time, ws []Window, out []WindowState) (allowed bool, err error)
	// PeekWindows reads windows without counting; a window no request has
	// opened reports Remaining = Limit and ResetAt = 0.
	PeekWindows(ctx context.Context, now time.Time, ws []Window, out []WindowState) error

	// Usage reads budgets without changing them: out[i] for budgets[i].
	Usage(ctx context.Context, now time.Time, budgets []Budget, out []BudgetState) error

	// Admit admits one request in a single step (one round trip to a
	// remote store), atomically, checking in this order:
	//   - when a window is full, nothing changes: Refused is AdmitWindow;
	//   - otherwise the request counts in every window; then when the
	//     lease's slots are all held, Refused is AdmitConcurrency;
	//   - otherwise when adding Amounts[i] to Budgets[i] would take a
	//     budget over its cap (used + amount > Cap; a Cap below 0 never
	//     refuses), no slot is taken and nothing is reserved: Refused is
	//     AdmitBudget and Budget is the index of the first such budget;
	//   - otherwise the slot is held (Lease) and every amount is added,
	//     recorded in r for Finish.
	// a.WindowOut receives the windows' states after the call in every
	// case. An empty LeaseKey skips the lease, no budgets skip the
	// reservation. A budget counter the store does not hold (never used,
	// or lost) is first seeded from the BudgetSeeder the store was built
	// with, before anything changes. A lease is held until Finish gives it
	// back; a process that dies holding one loses it within LeaseTTL.
	Admit(ctx context.Context, now time.Time, a *Admission, r *Reservation) (AdmitResult, error)
	// Finish replaces each amount r reserved with the actual one (actual[i]
	// for r.Budgets[i]; a smaller amount gives the difference back) and
	// gives lease back, in a single step; either may be empty. Finishing a
	// reservation or a lease twice is harmless: the second time settles
	// and frees nothing. A counter rebuilt since Admit (Generations) never
	// held the reserved amount: it gains the actual one. A counter lost and
	// not rebuilt yet is left alone: its rebuild reads the request from the
	// ledger.
	Finish(ctx context.Context, lease Lease, r *Reservation, actual []int64) error
}

// Admission is what one chat request is admitted against.
type Admission struct {
	Windows    []Window
	WindowOut  []WindowState // len >= len(Windows)
	LeaseKey   string
	LeaseLimit int64
	// LeaseTenant is the lease's tenant (see Tenants).
	LeaseTenant string
	Budgets     []Budget
	Amounts     []int64
}

// Tenants. Every counter belongs to a tenant, the organization whose
// requests it counts: Window.Tenant, Budget.Tenant, Admission.LeaseTenant
// (and the Lease Admit returns). Every counter one call touches must have
// the same tenant, so that a store spread over several servers (a Redis
// Cluster) keeps one tenant's counters together and still changes them in
// one atomic step; such a store refuses a call that mixes tenants. A
// counter is named by its Key (Kind and Subject for a budget); its tenant
// only says where it lives, so a name is always used with one tenant. The
// in-process store ignores tenants.

// AdmitRefusal says which check refused a request.
type AdmitRefusal uint8

// The outcomes of Admit.
const (
	AdmitOK AdmitRefusal = iota
	AdmitWindow
	AdmitConcurrency
	AdmitBudget
)

// AdmitResult is what Admit decided.
type AdmitResult struct {
	Refused AdmitRefusal
	Budget  int   // with AdmitBudget: the index of the budget that is spent
	Lease   Lease // with AdmitOK and a LeaseKey: the slot held
}

// LeaseTTL is how long a concurrency lease outlives the process holding it.
// Live leases are renewed well within it.
const LeaseTTL = 15 * time.Second

// ErrCountersUnavailable wraps a store failure.
var ErrCountersUnavailable = errors.New("counters unavailable")

// Window names one fixed request window and its limit.
type Window struct {
	Key    string // e.g. "rl:key:<key id>:requests"
	Limit  int64
	Length time.Duration
	Tenant string // see Tenants
}

// WindowState is a window after a Hit or a Peek.
type WindowState struct {
	Limit     int64
	Remaining int64 // never below 0
	// ResetAt is the Unix second the window ends; 0 while no request has
	// opened it.
	ResetAt int64
}

// Lease is one held concurrency slot.
type Lease struct {
	Key    string
	ID     string
	Tenant string // the Admission's LeaseTenant
}

// BudgetKind says what a budget counts and over which period.
type BudgetKind uint8

// The budgets. Spend and credits count pico-USD (so a cap of one micro-USD
// means exactly that); pools count weighted tokens; the mira cap counts
// requests.
const (
	// BudgetKeySpend is a key's spend in the calendar month (UTC).
	BudgetKeySpend BudgetKind = iota + 1
	// BudgetWorkspaceSpend is a workspace's spend in the calendar month.
	BudgetWorkspaceSpend
	// BudgetCredits is a headless key's spend over its whole life.
	BudgetCredits
	// BudgetPoolMonthly is an organization's weighted tokens in the
	// calendar month.
	BudgetPoolMonthly
	// BudgetPoolBurst is an organization's weighted tokens over the trailing
	// 12 hours.
	BudgetPoolBurst
	// BudgetMiraRequests is an organization's requests on the mira tier in
	// the calendar month.
	BudgetMiraRequests
	budgetKindCount
)

var budgetKindNames = [budgetKindCount]string{"", "key_spend", "workspace_spend", "credits", "pool_monthly", "pool_burst", "mira_requests"}

// String names the kind in counter keys and metrics.
func (k BudgetKind) String() string {
	if k >= budgetKindCount {
		return "unknown"
	}
	return budgetKindNames[k]
}

// Period is how a budget's counter resets.
type Period uint8

// The periods.
const (
	PeriodMonth    Period = iota + 1 // calendar month, UTC
	PeriodTrailing                   // sliding BurstWindow, kept in BurstSlot slots
	PeriodLifetime                   // never resets
)

// Period returns the kind's period.
func (k BudgetKind) Period() Period {
	switch k {
	case BudgetCredits:
		return PeriodLifetime
	case BudgetPoolBurst:
		return PeriodTrailing
	}
	return PeriodMonth
}

// The trailing window of the burst pool and the slot its usage is kept in:
// usage leaves the window one slot at a time.
const (
	BurstWindow = 12 * time.Hour
	BurstSlot   = 15 * time.Minute
	BurstSlots  = int(BurstWindow / BurstSlot)
)

// Budget is one cap a request is admitted against.
type Budget struct {
	Kind BudgetKind
	// Subject is the id the budget belongs to: a key id for key spend and
	// credits, a workspace id, or an organization id for pools.
	Subject string
	// Cap is the most the counter may reach in its period; below 0 the
	// budget only counts.
	Cap int64
	// Tenant is the organization the counter belongs to (see Tenants).
	Tenant string
}

// BudgetState is a budget's counter as Usage reads it.
type BudgetState struct {
	Used int64
	// ResetAt is the Unix second the counter next goes down: the start of
	// the next month, when the oldest burst slot holding usage leaves the
	// trailing window, or 0 for a lifetime budget (and for an empty burst).
	ResetAt int64
}

// MonthStart returns the first instant of t's calendar month in UTC.
func MonthStart(t time.Time) time.Time {
	y, m, _ := t.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

// NextMonth returns the first instant of the calendar month after t's.
func NextMonth(t time.Time) time.Time {
	return MonthStart(t).AddDate(0, 1, 0)
}

// BurstSlotStart returns the start of the burst slot holding t.
func BurstSlotStart(t time.Time) time.Time {
	return t.UTC().Truncate(BurstSlot)
}

// MaxReservation is the most budgets one request is admitted against.
const MaxReservation = 6

// Reservation is what Admit added, for Finish to correct. The zero value is
// an empty reservation; Finish settles nothing of it.
type Reservation struct {
	N       int
	Budgets [MaxReservation]Budget
	Amounts [MaxReservation]int64
	// Slots is, per budget, the period slot the amount went to: the month's
	// or burst slot's start in Unix seconds, or 0 for a lifetime budget.
	Slots [MaxReservation]int64
	// Generations is, per budget, which build of its counter the amount
	// went to, for a store whose counters can be lost and rebuilt while
	// the request runs (the Redis one; empty in process): a counter
	// rebuilt since never held the amount, so Finish counts the actual
	// amount there instead of the difference.
	Generations [MaxReservation]string
	settled     bool
}

// MarkSettled records that the reservation was settled and reports whether it
// already was. Implementations call it first in Finish.
func (r *Reservation) MarkSettled() (already bool) {
	already = r.settled
	r.settled = true
	return already
}

// BudgetSeeder rebuilds a budget's counter from the usage ledger when the
// counter store does not hold it.
type BudgetSeeder interface {
	// SeedBudget returns the usage the ledger records for b from `from` up
	// to `to`, split into slots of length slot starting at from (one slot
	// when slot covers the whole span).
	SeedBudget(ctx context.Context, b Budget, from, to time.Time, slot time.Duration) ([]int64, error)
}

// NoSeeder seeds every budget empty: for tests and deployments with no
// ledger.
type NoSeeder struct{}

// SeedBudget returns no usage.
func (NoSeeder) SeedBudget(_ context.Context, _ Budget, from, to time.Time, slot time.Duration) ([]int64, error) {
	n := int((to.Sub(from) + slot - 1) / slot)
	if n < 1 {
		n = 1
	}
	return make([]int64, n), nil
}
