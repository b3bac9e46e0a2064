package meter

// MemoryCounters keeps every counter in the process: the single-process
// default, and the reference the Redis store is held to by the contract
// suite in hotpath/meter/metertest.
//
// State lives in 64 shards, each a mutex over four maps (windows, lease
// sets, held leases, budgets); a key's shard is a hash of its name. A call
// touching several counters (a Hit on the key's and the organization's
// window, an Admit over windows, a lease
// and budgets, a Finish) locks every shard involved in ascending order,
// checks all, then changes all: atomic, and free of lock order deadlocks. Entries are created on first use with the key cloned, so
// a steady state allocates nothing.
//
// Memory stays bounded without a goroutine: whenever a call with a clock
// reading reaches a shard whose sweep is due (every 30 s of caller time),
// that shard drops ended windows, idle empty lease sets, month counters 40
// days after their month began, burst rings with no usage left in the
// trailing window and lifetime counters idle for 30 days (the ledger seeds
// them again when they come back).
//
// Seeding: the first call that needs a budget counter for a period inserts
// an unready entry, calls the BudgetSeeder without holding the shard lock,
// then stores the seeded usage and wakes the calls that waited for it. So a
// counter is seeded exactly once, and no reservation can be added to a
// counter before its history is: nothing is counted twice. A seeding error
// removes the entry (the next call tries again) and fails every waiter with
// ErrCountersUnavailable, unless only the seeding caller's context ran out:
// a waiter then seeds the counter itself.
//
// Leases never expire here: a lease is live while its process is, and the
// process is this one. A lease the caller never finishes holds its slot
// until the process exits, exactly as the Redis store's renewer keeps it.

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	memShards = 64
	// memSweepEvery is how often, in caller time, a shard drops what has
	// ended.
	memSweepEvery = 30 * time.Second
	// memLeaseIdle is how long an empty lease set is kept for reuse.
	memLeaseIdle = time.Minute
	// MonthCounterKeep is how long after its month began a month counter
	// is kept: past the month's end, so that a Finish arriving after the
	// rollover still corrects it.
	MonthCounterKeep = 40 * 24 * time.Hour
	// LifetimeCounterIdle is how long a lifetime counter nobody uses is
	// kept before it is dropped and, on its next use, seeded again.
	LifetimeCounterIdle = 30 * 24 * time.Hour
	// seedTimeout bounds a seeding call when the caller set no deadline.
	seedTimeout = 5 * time.Second
	// leaseIDLen is the length of a lease id: a sequence number in hex.
	leaseIDLen = 16
	// leaseIDChunk is how many lease ids are made in one allocation.
	leaseIDChunk = 256
)

var errSeederPanicked = errors.New("budget seeder panicked")

// MemoryCounters is the in-process Counters. It is safe for concurrent use
// and starts no goroutine.
type MemoryCounters struct {
	seeder   BudgetSeeder
	hashSeed maphash.Seed
	leaseSeq atomic.Uint64
	shards   [memShards]memShard
}

var _ Counters = (*MemoryCounters)(nil)

type memShard struct {
	mu      sync.Mutex
	windows map[string]*memWindow
	leases  map[string]*memLeaseSet
	held    map[uint64]*memLeaseSet
	budgets map[budgetKey]*memBudget
	// ids holds leaseIDChunk lease ids in hex, handed out in order from
	// idPos; idBase is the sequence number of the first.
	ids       string
	idBase    uint64
	idPos     int
	nextSweep int64 // Unix ms of caller time
	_         [64]byte
}

type memWindow struct {
	count int64
	reset int64 // Unix ms the window ends
}

type memLeaseSet struct {
	key     string
	held    int64
	touched int64 // Unix ms of the last Admit that used it
}

type budgetKey struct {
	subject string
	slot    int64 // the month's start in Unix seconds for monthly budgets, else 0
	kind    BudgetKind
}

type memBudget struct {
	ready   chan struct{} // closed when seeding ended, either way
	err     error         // why seeding failed; read after ready is closed
	seeded  bool
	dead    bool  // removed from its shard: callers holding it look it up again
	used    int64 // monthly and lifetime budgets
	expires int64 // Unix second after which a sweep drops the entry
	burst   *memBurst
}

// memBurst is a trailing budget's ring of BurstSlots slots; a cell belongs
// to the slot whose start it records.
type memBurst struct {
	start [BurstSlots]int64 // Unix seconds
	used  [BurstSlots]int64
}

// NewMemoryCounters returns an empty in-process store seeding budgets from
// seeder (NoSeeder when nil).
func NewMemoryCounters(seeder BudgetSeeder) *MemoryCounters {
	if seeder == nil {
		seeder = NoSeeder{}
	}
	m := &MemoryCounters{seeder: seeder, hashSeed: maphash.MakeSeed()}
	for i := range m.shards {
		sh := &m.shards[i]
		sh.windows = make(map[string]*memWindow)
		sh.leases = make(map[string]*memLeaseSet)
		sh.held = make(map[uint64]*memLeaseSet)
		sh.budgets = make(map[budgetKey]*memBudget)
	}
	return m
}

func (m *MemoryCounters) shardOf(key string) uint8 {
	return uint8(maphash.String(m.hashSeed, key) % memShards)
}

func (m *MemoryCounters) budgetShard(k BudgetKind, subject string) uint8 {
	h := maphash.String(m.hashSeed, subject) ^ uint64(k)*0x9e3779b97f4a7c15
	return uint8(h % memShards)
}

// lockSet is the shards one call locks, ascending; past its capacity it
// locks them all. The capacity covers an Admit's two windows, lease and
// six budgets with room to spare.
type lockSet struct {
	idx [12]uint8
	n   int
	all bool
}

func (l *lockSet) add(s uint8) {
	if l.all {
		return
	}
	i := 0
	for i < l.n && l.idx[i] < s {
		i++
	}
	if i < l.n && l.idx[i] == s {
		return
	}
	if l.n == len(l.idx) {
		l.all = true
		return
	}
	copy(l.idx[i+1:l.n+1], l.idx[i:l.n])
	l.idx[i] = s
	l.n++
}

// lock locks the set's shards and, with a clock reading (nowMs > 0), sweeps
// those that are due.
func (m *MemoryCounters) lock(l *lockSet, nowMs int64) {
	if l.all {
		for i := range m.shards {
			m.shards[i].mu.Lock()
			m.shards[i].maybeSweep(nowMs)
		}
		return
	}
	for _, s := range l.idx[:l.n] {
		m.shards[s].mu.Lock()
		m.shards[s].maybeSweep(nowMs)
	}
}

func (m *MemoryCounters) unlock(l *lockSet) {
	if l.all {
		for i := range m.shards {
			m.shards[i].mu.Unlock()
		}
		return
	}
	for _, s := range l.idx[:l.n] {
		m.shards[s].mu.Unlock()
	}
}

func (sh *memShard) maybeSweep(nowMs int64) {
	if nowMs <= 0 || nowMs < sh.nextSweep {
		return
	}
	sh.nextSweep = nowMs + memSweepEvery.Milliseconds()
	for k, w := range sh.windows {
		if nowMs >= w.reset {
			delete(sh.windows, k)
		}
	}
	for k, s := range sh.leases {
		if s.held == 0 && nowMs-s.touched >= memLeaseIdle.Milliseconds() {
			delete(sh.leases, k)
		}
	}
	nowSec := nowMs / 1000
	for k, b := range sh.budgets {
		if b.seeded && nowSec >= b.expires {
			b.dead = true
			delete(sh.budgets, k)
		}
	}
}

// CheckWindows validates a Hit's or a PeekWindows' arguments: room for
// every state, lengths of at least a millisecond and no window named twice.
func CheckWindows(ws []Window, out []WindowState) error {
	if len(out) < len(ws) {
		return fmt.Errorf("cannot count requests: %d windows but room for %d states", len(ws), len(out))
	}
	for i := range ws {
		if ws[i].Length < time.Millisecond {
			return fmt.Errorf("cannot count requests: window length %v is under a millisecond", ws[i].Length)
		}
		for j := range i {
			if ws[j].Key == ws[i].Key {
				return errors.New("cannot count requests: a window is named twice")
			}
		}
	}
	return nil
}

// windowState reports w (nil when absent) at nowMs.
func windowState(w *memWindow, nowMs, limit int64) WindowState {
	if w == nil || nowMs >= w.reset {
		return WindowState{Limit: limit, Remaining: max(limit, 0)}
	}
	return WindowState{Limit: limit, Remaining: max(limit-w.count, 0), ResetAt: ResetSecond(w.reset)}
}

// ResetSecond is the Unix second a window ending at Unix millisecond ms
// reports: rounded up, so that a client retrying at that second finds the
// window over.
func ResetSecond(ms int64) int64 { return (ms + 999) / 1000 }

// Hit implements Counters.
func (m *MemoryCounters) Hit(_ context.Context, now time.Time, ws []Window, out []WindowState) (bool, error) {
	if err := CheckWindows(ws, out); err != nil {
		return false, err
	}
	nowMs := now.UnixMilli()
	var ls lockSet
	for i := range ws {
		ls.add(m.shardOf(ws[i].Key))
	}
	m.lock(&ls, nowMs)
	allowed := m.hitLocked(ws, out, nowMs)
	m.unlock(&ls)
	return allowed, nil
}

// hitLocked is Hit with every window's shard held.
func (m *MemoryCounters) hitLocked(ws []Window, out []WindowState, nowMs int64) bool {
	allowed := true
	for i := range ws {
		w := m.shards[m.shardOf(ws[i].Key)].windows[ws[i].Key]
		if ws[i].Limit <= 0 || (w != nil && nowMs < w.reset && w.count >= ws[i].Limit) {
			allowed = false
			break
		}
	}
	for i := range ws {
		sh := &m.shards[m.shardOf(ws[i].Key)]
		w := sh.windows[ws[i].Key]
		if allowed {
			if w == nil {
				w = &memWindow{}
				sh.windows[strings.Clone(ws[i].Key)] = w
			}
			if nowMs >= w.reset {
				w.count, w.reset = 0, nowMs+ws[i].Length.Milliseconds()
			}
			w.count++
		}
		out[i] = windowState(w, nowMs, ws[i].Limit)
	}
	return allowed
}

// PeekWindows implements Counters.
func (m *MemoryCounters) PeekWindows(_ context.Context, now time.Time, ws []Window, out []WindowState) error {
	if err := CheckWindows(ws, out); err != nil {
		return err
	}
	nowMs := now.UnixMilli()
	for i := range ws {
		sh := &m.shards[m.shardOf(ws[i].Key)]
		sh.mu.Lock()
		sh.maybeSweep(nowMs)
		out[i] = windowState(sh.windows[ws[i].Key], nowMs, ws[i].Limit)
		sh.mu.Unlock()
	}
	return nil
}

// leaseSet returns key's lease set, creating it, and marks it used at
// nowMs; the caller holds sh.
func (sh *memShard) leaseSet(key string, nowMs int64) *memLeaseSet {
	s := sh.leases[key]
	if s == nil {
		s = &memLeaseSet{key: strings.Clone(key)}
		sh.leases[s.key] = s
	}
	s.touched = nowMs
	return s
}

// take holds one more slot of s; the caller holds sh and checked the limit.
func (sh *memShard) take(s *memLeaseSet, seq *atomic.Uint64) Lease {
	s.held++
	id, name := sh.nextLeaseID(seq)
	sh.held[id] = s
	return Lease{Key: s.key, ID: name}
}

// release frees the slot lease id holds under key, if it still does; the
// caller holds sh.
func (sh *memShard) release(id uint64, key string) {
	if s := sh.held[id]; s != nil && s.key == key {
		delete(sh.held, id)
		s.held--
	}
}

// nextLeaseID hands out the next lease id, making leaseIDChunk of them in
// one allocation when the last chunk is spent.
func (sh *memShard) nextLeaseID(seq *atomic.Uint64) (uint64, string) {
	if sh.idPos >= len(sh.ids) {
		base := seq.Add(leaseIDChunk) - leaseIDChunk
		var b strings.Builder
		b.Grow(leaseIDChunk * leaseIDLen)
		var buf [leaseIDLen]byte
		for i := range uint64(leaseIDChunk) {
			v := base + i
			for j := leaseIDLen - 1; j >= 0; j-- {
				buf[j] = "0123456789abcdef"[v&0xf]
				v >>= 4
			}
			b.Write(buf[:])
		}
		sh.ids, sh.idBase, sh.idPos = b.String(), base, 0
	}
	name := sh.ids[sh.idPos : sh.idPos+leaseIDLen]
	id := sh.idBase + uint64(sh.idPos/leaseIDLen)
	sh.idPos += leaseIDLen
	return id, name
}

// parseLeaseID reads an id nextLeaseID made; ok is false for anything else.
func parseLeaseID(s string) (v uint64, ok bool) {
	if len(s) != leaseIDLen {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

// BurstWindowStart returns the start of the oldest burst slot inside the
// trailing window at now: the window is the BurstSlots slots ending with
// the one holding now, so usage leaves it BurstWindow after the start of
// its slot.
func BurstWindowStart(now time.Time) time.Time {
	return BurstSlotStart(now).Add(BurstSlot - BurstWindow)
}

// SeedSpan is what a store asks the BudgetSeeder for when a budget of kind
// k has no counter at now: the usage from `from` up to now in slots of
// slot. A month is seeded from its start in one slot, the trailing burst
// from BurstWindowStart in BurstSlot slots, and a lifetime budget from the
// Unix epoch in one slot.
func SeedSpan(k BudgetKind, now time.Time) (from time.Time, slot time.Duration) {
	switch k.Period() {
	case PeriodTrailing:
		return BurstWindowStart(now), BurstSlot
	case PeriodLifetime:
		from = time.Unix(0, 0)
		return from, max(now.Sub(from), time.Nanosecond)
	}
	from = MonthStart(now)
	return from, NextMonth(now).Sub(from)
}

// CheckAmounts validates the budgets and amounts an Admit reserves.
func CheckAmounts(budgets []Budget, amounts []int64) error {
	if len(budgets) != len(amounts) {
		return fmt.Errorf("cannot reserve budgets: %d budgets and %d amounts", len(budgets), len(amounts))
	}
	if len(budgets) > MaxReservation {
		return fmt.Errorf("cannot reserve budgets: %d budgets, at most %d", len(budgets), MaxReservation)
	}
	for i := range budgets {
		if err := CheckBudget(&budgets[i]); err != nil {
			return err
		}
		if amounts[i] < 0 {
			return fmt.Errorf("cannot reserve budgets: negative amount for %s", budgets[i].Kind)
		}
	}
	return nil
}

// CheckBudget validates one budget's name.
func CheckBudget(b *Budget) error {
	if b.Kind == 0 || b.Kind >= budgetKindCount {
		return fmt.Errorf("cannot use budget: unknown kind %d", b.Kind)
	}
	if b.Subject == "" {
		return fmt.Errorf("cannot use %s budget: no subject", b.Kind)
	}
	return nil
}

// CheckFinish validates the actual amounts a Finish settles r to.
func CheckFinish(r *Reservation, actual []int64) error {
	if len(actual) < r.N {
		return fmt.Errorf("cannot settle reservation: %d budgets but %d amounts", r.N, len(actual))
	}
	for _, a := range actual[:r.N] {
		if a < 0 {
			return errors.New("cannot settle reservation: negative amount")
		}
	}
	return nil
}

// budgetClock is a clock reading in the units budget counters use, worked
// out once per call.
type budgetClock struct {
	now    time.Time
	ms     int64 // Unix ms
	sec    int64 // Unix seconds
	month  int64 // start of the month, Unix seconds
	cur    int64 // start of the burst slot holding now
	oldest int64 // start of the oldest burst slot in the window
}

func newBudgetClock(now time.Time) budgetClock {
	cur := BurstSlotStart(now).Unix()
	return budgetClock{
		now: now, ms: now.UnixMilli(), sec: now.Unix(),
		month: MonthStart(now).Unix(),
		cur:   cur, oldest: cur - int64((BurstWindow-BurstSlot)/time.Second),
	}
}

// budget returns b's counter for the period holding now, seeding it first
// when the store does not hold it.
func (m *MemoryCounters) budget(ctx context.Context, c *budgetClock, b *Budget) (*memBudget, uint8, error) {
	k := budgetKey{subject: b.Subject, kind: b.Kind}
	if b.Kind.Period() == PeriodMonth {
		k.slot = c.month
	}
	si := m.budgetShard(b.Kind, b.Subject)
	sh := &m.shards[si]
	for {
		sh.mu.Lock()
		sh.maybeSweep(c.ms)
		e := sh.budgets[k]
		if e == nil {
			e = &memBudget{ready: make(chan struct{})}
			k.subject = strings.Clone(k.subject)
			sh.budgets[k] = e
			sh.mu.Unlock()
			if err := m.seed(ctx, c, b, k, e, sh); err != nil {
				return nil, 0, err
			}
			return e, si, nil
		}
		if e.seeded {
			sh.mu.Unlock()
			return e, si, nil
		}
		ready := e.ready
		sh.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("cannot seed %s budget: %w: %w", b.Kind, ErrCountersUnavailable, ctx.Err())
		}
		if e.err != nil {
			if ctx.Err() == nil && (errors.Is(e.err, context.Canceled) || errors.Is(e.err, context.DeadlineExceeded)) {
				continue // the seeding caller gave up, not the ledger: seed it here
			}
			return nil, 0, fmt.Errorf("cannot seed %s budget: %w: %w", b.Kind, ErrCountersUnavailable, e.err)
		}
	}
}

// seed fills e, which budget just inserted unready under k, from the
// seeder.
func (m *MemoryCounters) seed(ctx context.Context, c *budgetClock, b *Budget, k budgetKey, e *memBudget, sh *memShard) error {
	done := false
	defer func() {
		if !done { // the seeder panicked: let waiters go, then go on panicking
			sh.mu.Lock()
			if sh.budgets[k] == e {
				delete(sh.budgets, k)
			}
			e.dead, e.err = true, errSeederPanicked
			close(e.ready)
			sh.mu.Unlock()
		}
	}()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, seedTimeout)
		defer cancel()
	}
	from, slot := SeedSpan(b.Kind, c.now)
	vals, err := m.seeder.SeedBudget(ctx, *b, from, c.now, slot)
	sh.mu.Lock()
	if err != nil {
		if sh.budgets[k] == e {
			delete(sh.budgets, k)
		}
		e.dead, e.err = true, err
	} else {
		e.apply(b.Kind, c, from, vals)
		e.seeded = true
	}
	close(e.ready)
	sh.mu.Unlock()
	done = true
	if err != nil {
		return fmt.Errorf("cannot seed %s budget: %w: %w", b.Kind, ErrCountersUnavailable, err)
	}
	return nil
}

// apply stores seeded usage; a negative value from the seeder counts as 0.
func (e *memBudget) apply(k BudgetKind, c *budgetClock, from time.Time, vals []int64) {
	switch k.Period() {
	case PeriodTrailing:
		e.burst = new(memBurst)
		for i, v := range vals {
			s := from.Unix() + int64(i)*int64(BurstSlot/time.Second)
			if s > c.cur {
				break
			}
			*e.burst.at(s) = max(v, 0)
		}
		e.expires = c.cur + int64(BurstWindow/time.Second)
	case PeriodLifetime:
		for _, v := range vals {
			e.used = satAdd(e.used, max(v, 0))
		}
		e.expires = c.sec + int64(LifetimeCounterIdle/time.Second)
	default:
		for _, v := range vals {
			e.used = satAdd(e.used, max(v, 0))
		}
		e.expires = c.month + int64(MonthCounterKeep/time.Second)
	}
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func burstCell(slot int64) int {
	n := int64(BurstSlots)
	i := (slot / int64(BurstSlot/time.Second)) % n
	if i < 0 {
		i += n
	}
	return int(i)
}

// at returns the cell of the slot starting at Unix second slot, claiming it
// from an older slot.
func (b *memBurst) at(slot int64) *int64 {
	i := burstCell(slot)
	if b.start[i] != slot {
		b.start[i], b.used[i] = slot, 0
	}
	return &b.used[i]
}

// sum returns the usage in slots from oldest to cur, and the start of the
// oldest slot holding some (0 when none does).
func (b *memBurst) sum(oldest, cur int64) (used, first int64) {
	for i := range b.start {
		s := b.start[i]
		if s < oldest || s > cur || b.used[i] == 0 {
			continue
		}
		used = satAdd(used, b.used[i])
		if first == 0 || s < first {
			first = s
		}
	}
	return used, first
}

// usedAt is e's usage at c; the caller holds e's shard.
func (e *memBudget) usedAt(k BudgetKind, c *budgetClock) int64 {
	if k.Period() != PeriodTrailing {
		return e.used
	}
	used, _ := e.burst.sum(c.oldest, c.cur)
	return used
}

// budgetsOf fills es with the counters of budgets at c, seeding those the
// store lacks, and adds their shards to ls. It locks nothing on return.
func (m *MemoryCounters) budgetsOf(ctx context.Context, c *budgetClock, budgets []Budget, es *[MaxReservation]*memBudget, ls *lockSet) error {
	for i := range budgets {
		e, si, err := m.budget(ctx, c, &budgets[i])
		if err != nil {
			return err
		}
		es[i] = e
		ls.add(si)
	}
	return nil
}

// anyDead reports whether a sweep dropped one of es between seeding and
// locking: the caller looks them up again.
func anyDead(es []*memBudget) bool {
	for _, e := range es {
		if e.dead {
			return true
		}
	}
	return false
}

// tooManyExpiries bounds how often a call looks its counters up again.
func tooManyExpiries(attempt int) error {
	if attempt == 3 {
		return fmt.Errorf("cannot reserve budgets: %w: counters keep expiring", ErrCountersUnavailable)
	}
	return nil
}

// overCap returns the index of the first budget that adding amounts would
// take over its cap, or -1; the caller holds every counter's shard.
func overCap(c *budgetClock, budgets []Budget, amounts []int64, es *[MaxReservation]*memBudget) int {
	for i := range budgets {
		if budgets[i].Cap < 0 {
			continue
		}
		pending := amounts[i]
		for j := range i {
			if es[j] == es[i] {
				pending = satAdd(pending, amounts[j])
			}
		}
		used := es[i].usedAt(budgets[i].Kind, c)
		if used > budgets[i].Cap || pending > budgets[i].Cap-used {
			return i
		}
	}
	return -1
}

// reserveLocked adds amounts and records them in r; the caller holds every
// counter's shard and checked the caps.
func reserveLocked(c *budgetClock, budgets []Budget, amounts []int64, es *[MaxReservation]*memBudget, r *Reservation) {
	for i := range budgets {
		r.Slots[i] = es[i].add(budgets[i].Kind, c, amounts[i])
	}
	r.N = len(budgets)
	copy(r.Budgets[:], budgets)
	copy(r.Amounts[:], amounts)
}

// add counts amount at c and returns the slot it went to; the caller holds
// e's shard.
func (e *memBudget) add(k BudgetKind, c *budgetClock, amount int64) int64 {
	switch k.Period() {
	case PeriodTrailing:
		cell := e.burst.at(c.cur)
		*cell = satAdd(*cell, amount)
		e.expires = max(e.expires, c.cur+int64(BurstWindow/time.Second))
		return c.cur
	case PeriodLifetime:
		e.used = satAdd(e.used, amount)
		e.expires = max(e.expires, c.sec+int64(LifetimeCounterIdle/time.Second))
		return 0
	}
	e.used = satAdd(e.used, amount)
	return c.month
}

// settleShards adds to ls the shards of the counters settling r to actual
// changes.
func (m *MemoryCounters) settleShards(r *Reservation, actual []int64, ls *lockSet) {
	for i := range r.N {
		if actual[i] != r.Amounts[i] {
			ls.add(m.budgetShard(r.Budgets[i].Kind, r.Budgets[i].Subject))
		}
	}
}

// settleLocked replaces r's amounts with actual; the caller holds the
// shards settleShards named.
func (m *MemoryCounters) settleLocked(r *Reservation, actual []int64) {
	for i := range r.N {
		d := actual[i] - r.Amounts[i]
		if d == 0 {
			continue
		}
		b := &r.Budgets[i]
		k := budgetKey{subject: b.Subject, kind: b.Kind}
		per := b.Kind.Period()
		if per == PeriodMonth {
			k.slot = r.Slots[i]
		}
		e := m.shards[m.budgetShard(b.Kind, b.Subject)].budgets[k]
		if e == nil || !e.seeded {
			continue
		}
		if per == PeriodTrailing {
			if c := burstCell(r.Slots[i]); e.burst.start[c] == r.Slots[i] {
				e.burst.used[c] = max(satAdd(e.burst.used[c], d), 0)
			}
		} else {
			e.used = max(satAdd(e.used, d), 0)
		}
	}
}

// Usage implements Counters.
func (m *MemoryCounters) Usage(ctx context.Context, now time.Time, budgets []Budget, out []BudgetState) error {
	if len(out) < len(budgets) {
		return fmt.Errorf("cannot read budgets: %d budgets but room for %d states", len(budgets), len(out))
	}
	for i := range budgets {
		if err := CheckBudget(&budgets[i]); err != nil {
			return err
		}
	}
	c := newBudgetClock(now)
	var nextMonth int64
	for i := range budgets {
		e, si, err := m.budget(ctx, &c, &budgets[i])
		if err != nil {
			return err
		}
		sh := &m.shards[si]
		sh.mu.Lock()
		switch budgets[i].Kind.Period() {
		case PeriodTrailing:
			used, first := e.burst.sum(c.oldest, c.cur)
			out[i] = BudgetState{Used: used}
			if first != 0 {
				out[i].ResetAt = first + int64(BurstWindow/time.Second)
			}
		case PeriodLifetime:
			out[i] = BudgetState{Used: e.used}
		default:
			if nextMonth == 0 {
				nextMonth = NextMonth(now).Unix()
			}
			out[i] = BudgetState{Used: e.used, ResetAt: nextMonth}
		}
		sh.mu.Unlock()
	}
	return nil
}

// Admit implements Counters. It locks the shards of every window, the lease
// and every budget at once, in ascending order, after seeding any budget
// counter it lacks; a lease limit of 0 or less admits nobody.
func (m *MemoryCounters) Admit(ctx context.Context, now time.Time, a *Admission, r *Reservation) (AdmitResult, error) {
	*r = Reservation{}
	if err := CheckWindows(a.Windows, a.WindowOut); err != nil {
		return AdmitResult{}, err
	}
	if err := CheckAmounts(a.Budgets, a.Amounts); err != nil {
		return AdmitResult{}, err
	}
	c := newBudgetClock(now)
	var es [MaxReservation]*memBudget
	for attempt := 0; ; attempt++ {
		var ls lockSet
		if err := m.budgetsOf(ctx, &c, a.Budgets, &es, &ls); err != nil {
			return AdmitResult{}, err
		}
		for i := range a.Windows {
			ls.add(m.shardOf(a.Windows[i].Key))
		}
		var lsh *memShard
		if a.LeaseKey != "" {
			li := m.shardOf(a.LeaseKey)
			ls.add(li)
			lsh = &m.shards[li]
		}
		m.lock(&ls, c.ms)
		if anyDead(es[:len(a.Budgets)]) {
			m.unlock(&ls)
			if err := tooManyExpiries(attempt); err != nil {
				return AdmitResult{}, err
			}
			continue
		}
		res := m.admitLocked(&c, a, &es, lsh, r)
		m.unlock(&ls)
		return res, nil
	}
}

// admitLocked decides an Admit; the caller holds every shard it touches.
func (m *MemoryCounters) admitLocked(c *budgetClock, a *Admission, es *[MaxReservation]*memBudget, lsh *memShard, r *Reservation) AdmitResult {
	if !m.hitLocked(a.Windows, a.WindowOut, c.ms) {
		return AdmitResult{Refused: AdmitWindow}
	}
	var s *memLeaseSet
	if lsh != nil {
		if s = lsh.leaseSet(a.LeaseKey, c.ms); s.held >= a.LeaseLimit {
			return AdmitResult{Refused: AdmitConcurrency}
		}
	}
	if i := overCap(c, a.Budgets, a.Amounts, es); i >= 0 {
		return AdmitResult{Refused: AdmitBudget, Budget: i}
	}
	var res AdmitResult
	if s != nil {
		res.Lease = lsh.take(s, &m.leaseSeq)
		res.Lease.Tenant = a.LeaseTenant
	}
	reserveLocked(c, a.Budgets, a.Amounts, es, r)
	return res
}

// Finish implements Counters: the settlement and the release happen under
// one set of shard locks. A caller error (actual not matching r) changes
// nothing, the lease included.
func (m *MemoryCounters) Finish(_ context.Context, lease Lease, r *Reservation, actual []int64) error {
	if err := CheckFinish(r, actual); err != nil {
		return err
	}
	settle := !r.MarkSettled()
	var ls lockSet
	if settle {
		m.settleShards(r, actual, &ls)
	}
	id, release := parseLeaseID(lease.ID)
	var lsh *memShard
	if release {
		li := m.shardOf(lease.Key)
		ls.add(li)
		lsh = &m.shards[li]
	}
	m.lock(&ls, 0)
	if settle {
		m.settleLocked(r, actual)
	}
	if release {
		lsh.release(id, lease.Key)
	}
	m.unlock(&ls)
	return nil
}
