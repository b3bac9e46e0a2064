package storage_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/logtest"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/hotpath/meter/metertest"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// The contract, on one Redis and on a Redis Cluster; then again with every
// counter of a test under a tenant of its own (the test's name), so that on
// the cluster the tests' counters spread over its slots and nodes.
func TestRedisCountersContract(t *testing.T) {
	storetest.EachRedisDeployment(t, func(t *testing.T, connect func(testing.TB) rueidis.Client) {
		client := connect(t)
		newCounters := func(t *testing.T, seeder meter.BudgetSeeder) *storage.RedisCounters {
			c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: storetest.Prefix(), Seeder: seeder})
			t.Cleanup(c.Close)
			return c
		}
		metertest.Run(t, func(t *testing.T, seeder meter.BudgetSeeder) meter.Counters {
			return newCounters(t, seeder)
		})
		t.Run("Tenants", func(t *testing.T) {
			metertest.Run(t, func(t *testing.T, seeder meter.BudgetSeeder) meter.Counters {
				return tenantCounters{Counters: newCounters(t, untenanted{seeder}), tenant: t.Name()}
			})
		})
	})
}

// tenantCounters puts every counter of its calls under one tenant, and
// hides it from the test: reservations and the seeder's budgets come back
// without it.
type tenantCounters struct {
	meter.Counters
	tenant string
}

func (c tenantCounters) windows(ws []meter.Window) []meter.Window {
	out := slices.Clone(ws)
	for i := range out {
		out[i].Tenant = c.tenant
	}
	return out
}

func (c tenantCounters) budgets(bs []meter.Budget) []meter.Budget {
	out := slices.Clone(bs)
	for i := range out {
		out[i].Tenant = c.tenant
	}
	return out
}

func (c tenantCounters) Hit(ctx context.Context, now time.Time, ws []meter.Window, out []meter.WindowState) (bool, error) {
	return c.Counters.Hit(ctx, now, c.windows(ws), out)
}

func (c tenantCounters) PeekWindows(ctx context.Context, now time.Time, ws []meter.Window, out []meter.WindowState) error {
	return c.Counters.PeekWindows(ctx, now, c.windows(ws), out)
}

func (c tenantCounters) Usage(ctx context.Context, now time.Time, bs []meter.Budget, out []meter.BudgetState) error {
	return c.Counters.Usage(ctx, now, c.budgets(bs), out)
}

func (c tenantCounters) Admit(ctx context.Context, now time.Time, a *meter.Admission, r *meter.Reservation) (meter.AdmitResult, error) {
	t := *a
	t.Windows, t.Budgets, t.LeaseTenant = c.windows(a.Windows), c.budgets(a.Budgets), c.tenant
	res, err := c.Counters.Admit(ctx, now, &t, r)
	for i := range r.N {
		r.Budgets[i].Tenant = ""
	}
	if err == nil && res.Refused == meter.AdmitOK && a.LeaseKey != "" && res.Lease.Tenant != c.tenant {
		err = fmt.Errorf("lease of tenant %q, admitted under %q", res.Lease.Tenant, c.tenant)
	}
	return res, err
}

// untenanted hands the seeder budgets as the test made them.
type untenanted struct{ meter.BudgetSeeder }

func (s untenanted) SeedBudget(ctx context.Context, b meter.Budget, from, to time.Time, slot time.Duration) ([]int64, error) {
	b.Tenant = ""
	return s.BudgetSeeder.SeedBudget(ctx, b, from, to, slot)
}

func (c tenantCounters) Finish(ctx context.Context, lease meter.Lease, r *meter.Reservation, actual []int64) error {
	lease.Tenant = c.tenant // leases the test makes up
	for i := range r.N {
		r.Budgets[i].Tenant = c.tenant
	}
	return c.Counters.Finish(ctx, lease, r, actual)
}

// The keys a call writes and how long they live: on a cluster each carries
// its tenant's hash tag, so one organization's counters share a slot.
func TestRedisCountersKeys(t *testing.T) {
	storetest.EachRedis(t, testRedisCountersKeys)
}

func testRedisCountersKeys(t *testing.T, connect func(testing.TB) rueidis.Client) {
	client := connect(t)
	prefix := storetest.Prefix()
	c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: prefix})
	t.Cleanup(c.Close)
	ctx := t.Context()
	now := time.Now()

	out := make([]meter.WindowState, 1)
	_, err := c.Hit(ctx, now, []meter.Window{{Key: "rl:key:k1:requests", Limit: 5, Length: time.Minute, Tenant: "org_1"}}, out)
	require.NoError(t, err)
	res, err := c.Admit(ctx, now, &meter.Admission{LeaseKey: "cc:k1", LeaseLimit: 2, LeaseTenant: "org_1", Budgets: []meter.Budget{
		{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: -1, Tenant: "org_1"},
		{Kind: meter.BudgetCredits, Subject: "key_2", Cap: -1, Tenant: "org_1"},
		{Kind: meter.BudgetPoolBurst, Subject: "org_1", Cap: -1, Tenant: "org_1"},
	}, Amounts: []int64{1, 2, 3}}, new(meter.Reservation))
	require.NoError(t, err)
	require.Equal(t, meter.AdmitOK, res.Refused)

	month := meter.MonthStart(now).Format("2006-01")
	head := prefix
	if client.Mode() == rueidis.ClientModeCluster {
		head += "{org_1}"
	}
	want := map[string]time.Duration{
		head + "rl:key:k1:requests":                 time.Minute,
		head + "lease:cc:k1":                        meter.LeaseTTL,
		head + "budget:key_spend:key_1:" + month:    meter.MonthStart(now).Add(meter.MonthCounterKeep).Sub(now),
		head + "budget:credits:key_2":               meter.LifetimeCounterIdle,
		head + "budget:pool_burst:org_1":            meter.BurstWindow + meter.BurstSlot,
		head + "budgetgen:key_spend:key_1:" + month: meter.MonthStart(now).Add(meter.MonthCounterKeep).Sub(now),
		head + "budgetgen:credits:key_2":            meter.LifetimeCounterIdle,
		head + "budgetgen:pool_burst:org_1":         meter.BurstWindow + meter.BurstSlot,
	}
	require.ElementsMatch(t, ttlKeys(want), allKeys(t, client, prefix+"*"))
	for k, ttl := range want {
		ms, err := client.Do(ctx, client.B().Pttl().Key(k).Build()).AsInt64()
		require.NoError(t, err)
		require.InDelta(t, ttl, time.Duration(ms)*time.Millisecond, float64(5*time.Second), k)
	}
	slot, err := client.Do(ctx, client.B().Hget().Key(head+"budget:pool_burst:org_1").Field(fmt.Sprint(meter.BurstSlotStart(now).Unix())).Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "3", slot, "a burst slot is a hash field named by its start")
}

// allKeys lists the keys matching pattern on every node of the client's
// Redis.
func allKeys(t *testing.T, client rueidis.Client, pattern string) []string {
	t.Helper()
	var keys []string
	for _, n := range client.Nodes() {
		ks, err := n.Do(t.Context(), n.B().Keys().Pattern(pattern).Build()).AsStrSlice()
		require.NoError(t, err)
		keys = append(keys, ks...)
	}
	return keys
}

// rawKey is the Redis name of the counter name without a tenant under
// prefix, as RedisCounters writes it on the client's Redis.
func rawKey(client rueidis.Client, prefix, name string) string {
	if client.Mode() == rueidis.ClientModeCluster {
		return prefix + "{-}" + name
	}
	return prefix + name
}

func ttlKeys(m map[string]time.Duration) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A process that dies holding leases frees them within the lease TTL; one
// that lives keeps them however long its requests run.
func TestRedisCountersCrashedProcessFreesItsSlots(t *testing.T) {
	storetest.EachRedis(t, testRedisCountersCrashedProcessFreesItsSlots)
}

func testRedisCountersCrashedProcessFreesItsSlots(t *testing.T, connect func(testing.TB) rueidis.Client) {
	const ttl = 600 * time.Millisecond
	prefix := storetest.Prefix()
	crashing := connect(t)
	a := storage.NewRedisCounters(storage.RedisCountersConfig{Client: crashing, Prefix: prefix, LeaseTTL: ttl})
	b := storage.NewRedisCounters(storage.RedisCountersConfig{Client: connect(t), Prefix: prefix, LeaseTTL: ttl})
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)

	for range 2 {
		_, ok := metertest.TakeSlot(t, a, time.Now(), "cc:k1", 2)
		require.True(t, ok)
	}
	time.Sleep(3 * ttl)
	_, ok := metertest.TakeSlot(t, b, time.Now(), "cc:k1", 2)
	require.False(t, ok, "the live process renewed its leases past their TTL")

	a.Close() // the process dies: no renewal, no release
	crashing.Close()
	crashed := time.Now()
	require.Equal(t, int64(2), metertest.InFlight(t, b, time.Now(), "cc:k1"), "the slots are held until their TTL runs out")

	var freed time.Duration
	require.Eventually(t, func() bool {
		_, ok := metertest.TakeSlot(t, b, time.Now(), "cc:k1", 1)
		freed = time.Since(crashed)
		return ok
	}, 3*ttl, 10*time.Millisecond)
	require.LessOrEqual(t, freed, ttl+300*time.Millisecond, "freed within the TTL (and a poll)")
	require.Equal(t, int64(1), metertest.InFlight(t, b, time.Now(), "cc:k1"))
}

// Leases Redis lost while their requests run are reported, once, and
// no longer renewed.
func TestRedisCountersReportLostLeases(t *testing.T) {
	storetest.EachRedis(t, testRedisCountersReportLostLeases)
}

func testRedisCountersReportLostLeases(t *testing.T, connect func(testing.TB) rueidis.Client) {
	const ttl = 300 * time.Millisecond
	client := connect(t)
	prefix := storetest.Prefix()
	var logs logtest.Buffer
	c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: prefix, Log: slog.New(slog.NewJSONHandler(&logs, nil)), LeaseTTL: ttl})
	t.Cleanup(c.Close)
	ctx := t.Context()
	for _, key := range []string{"cc:k1", "cc:k2"} {
		_, ok := metertest.TakeSlot(t, c, time.Now(), key, 1)
		require.True(t, ok)
	}
	require.NoError(t, client.Do(ctx, client.B().Del().Key(rawKey(client, prefix, "lease:cc:k1")).Build()).Error())
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "concurrency leases expired while held") }, 3*ttl, 10*time.Millisecond)
	require.Contains(t, logs.String(), `"lost":1`)
	require.NotContains(t, logs.String(), "cc:k1", "lease keys are not logged")
	time.Sleep(2 * ttl)
	require.Equal(t, int64(1), metertest.InFlight(t, c, time.Now(), "cc:k2"), "the other lease is still renewed")
	require.Zero(t, metertest.InFlight(t, c, time.Now(), "cc:k1"), "the lost one is not brought back")
}

// fixedSeeder is a ledger of fixed usage that counts its queries and may be
// slow.
type fixedSeeder struct {
	usage int64
	delay time.Duration
	calls atomic.Int64
}

func (s *fixedSeeder) SeedBudget(ctx context.Context, _ meter.Budget, from, to time.Time, slot time.Duration) ([]int64, error) {
	s.calls.Add(1)
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	n := max(int((to.Sub(from)+slot-1)/slot), 1)
	out := make([]int64, n)
	out[n-1] = s.usage
	return out, nil
}

// Redis forgetting a counter (restart, eviction) rebuilds it from the
// ledger; a settlement meanwhile never takes it below zero nor recreates it.
func TestRedisCountersRebuildLostCounters(t *testing.T) {
	storetest.EachRedis(t, testRedisCountersRebuildLostCounters)
}

func testRedisCountersRebuildLostCounters(t *testing.T, connect func(testing.TB) rueidis.Client) {
	client := connect(t)
	prefix := storetest.Prefix()
	s := &fixedSeeder{usage: 500}
	c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: prefix, Seeder: s})
	t.Cleanup(c.Close)
	ctx := t.Context()
	now := time.Date(2026, 3, 10, 12, 5, 0, 0, time.UTC) // the ledger's usage lands in the current burst slot
	spend := meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 10_000}
	burst := meter.Budget{Kind: meter.BudgetPoolBurst, Subject: "org_1", Cap: 10_000}
	budgets := []meter.Budget{spend, burst}
	usage := func() []meter.BudgetState {
		out := make([]meter.BudgetState, 2)
		require.NoError(t, c.Usage(ctx, now, budgets, out))
		return out
	}

	var r meter.Reservation
	refused, err := metertest.Reserve(ctx, c, now, budgets, []int64{1000, 1000}, &r)
	require.NoError(t, err)
	require.Equal(t, -1, refused)
	require.Equal(t, []int64{1500, 1500}, []int64{usage()[0].Used, usage()[1].Used})
	require.Equal(t, int64(2), s.calls.Load())

	// Holding less than was reserved on it (written by hand, its
	// generation kept: a rebuild would have changed it).
	spendKey, burstKey := rawKey(client, prefix, "budget:key_spend:key_1:2026-03"), rawKey(client, prefix, "budget:pool_burst:org_1")
	require.NoError(t, client.Do(ctx, client.B().Set().Key(spendKey).Value("300").Build()).Error())
	field := fmt.Sprint(meter.BurstSlotStart(now).Unix())
	require.NoError(t, client.Do(ctx, client.B().Hset().Key(burstKey).FieldValue().FieldValue(field, "300").Build()).Error())
	require.NoError(t, metertest.Settle(ctx, c, &r, []int64{100, 100}))
	require.Equal(t, []int64{0, 0}, []int64{usage()[0].Used, usage()[1].Used}, "a settlement never leaves a counter below zero")

	require.NoError(t, client.Do(ctx, client.B().Del().Key(spendKey, burstKey).Build()).Error())
	refused, err = metertest.Reserve(ctx, c, now, budgets, []int64{10, 10}, &r)
	require.NoError(t, err)
	require.Equal(t, -1, refused)
	require.NoError(t, client.Do(ctx, client.B().Del().Key(spendKey, burstKey).Build()).Error())
	require.NoError(t, metertest.Settle(ctx, c, &r, []int64{5, 5}))
	n, err := client.Do(ctx, client.B().Exists().Key(spendKey, burstKey).Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "a settlement does not recreate a lost counter")
	require.Equal(t, []meter.BudgetState{
		{Used: 500, ResetAt: meter.NextMonth(now).Unix()},
		{Used: 500, ResetAt: meter.BurstSlotStart(now).Add(meter.BurstWindow).Unix()},
	}, usage(), "lost counters come back from the ledger")
	require.Equal(t, int64(6), s.calls.Load())
}

// A counter rebuilt while a request it reserved for was in flight never
// held that reservation: the request's settlement counts its whole cost
// there (its ledger row is written after it settles, so the rebuild lacks
// it) instead of taking the reservation off what the ledger rebuilt.
// Spend, credits, the burst pool and the request allowance (whose amount
// settles unchanged) alike; a settlement on the counter it reserved on
// still replaces the reservation with the cost.
func TestRedisCountersSettleOnARebuiltCounter(t *testing.T) {
	storetest.EachRedis(t, testRedisCountersSettleOnARebuiltCounter)
}

func testRedisCountersSettleOnARebuiltCounter(t *testing.T, connect func(testing.TB) rueidis.Client) {
	client := connect(t)
	prefix := storetest.Prefix()
	ledger := &fixedSeeder{usage: 500}
	a := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: prefix, Seeder: ledger})
	b := storage.NewRedisCounters(storage.RedisCountersConfig{Client: connect(t), Prefix: prefix, Seeder: ledger})
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	ctx := t.Context()
	now := time.Date(2026, 3, 10, 12, 5, 0, 0, time.UTC) // the ledger's usage lands in the current burst slot
	budgets := []meter.Budget{
		{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 100_000},
		{Kind: meter.BudgetCredits, Subject: "key_1", Cap: 100_000},
		{Kind: meter.BudgetPoolBurst, Subject: "org_1", Cap: 100_000},
		{Kind: meter.BudgetMiraRequests, Subject: "org_1", Cap: 100_000},
	}
	used := func() []int64 {
		out := make([]meter.BudgetState, len(budgets))
		require.NoError(t, a.Usage(ctx, now, budgets, out))
		u := make([]int64, len(out))
		for i := range out {
			u[i] = out[i].Used
		}
		return u
	}

	var first, second meter.Reservation
	refused, err := metertest.Reserve(ctx, a, now, budgets, []int64{1000, 1000, 1000, 1}, &first)
	require.NoError(t, err)
	require.Equal(t, -1, refused)
	require.Equal(t, []int64{1500, 1500, 1500, 501}, used())

	// Redis restarts and forgets the counters; meanwhile the ledger
	// recorded another request. The next admission, on another process,
	// rebuilds them from the ledger.
	for _, k := range allKeys(t, client, prefix+"*") {
		require.NoError(t, client.Do(ctx, client.B().Del().Key(k).Build()).Error())
	}
	ledger.usage = 700
	refused, err = metertest.Reserve(ctx, b, now, budgets, []int64{10, 10, 10, 1}, &second)
	require.NoError(t, err)
	require.Equal(t, -1, refused)
	require.Equal(t, []int64{710, 710, 710, 701}, used())

	require.NoError(t, metertest.Settle(ctx, a, &first, []int64{100, 100, 100, 1}))
	require.Equal(t, []int64{810, 810, 810, 702}, used(),
		"the rebuilt counters hold the ledger, the reservation made on them and the whole cost of the request reserved before")
	require.NoError(t, metertest.Settle(ctx, b, &second, []int64{5, 5, 5, 1}))
	require.Equal(t, []int64{805, 805, 805, 702}, used(), "a reservation made on the rebuilt counters settles to its cost")
}

// Two processes seeding the same missing counter at once count the ledger
// once.
func TestRedisCountersConcurrentSeedersAcrossProcesses(t *testing.T) {
	storetest.EachRedis(t, testRedisCountersConcurrentSeedersAcrossProcesses)
}

func testRedisCountersConcurrentSeedersAcrossProcesses(t *testing.T, connect func(testing.TB) rueidis.Client) {
	prefix := storetest.Prefix()
	s := &fixedSeeder{usage: 400, delay: 30 * time.Millisecond}
	procs := []*storage.RedisCounters{
		storage.NewRedisCounters(storage.RedisCountersConfig{Client: connect(t), Prefix: prefix, Seeder: s}),
		storage.NewRedisCounters(storage.RedisCountersConfig{Client: connect(t), Prefix: prefix, Seeder: s}),
	}
	for _, p := range procs {
		t.Cleanup(p.Close)
	}
	now := time.Now()
	b := []meter.Budget{{Kind: meter.BudgetWorkspaceSpend, Subject: "ws_1", Cap: 1_000_000}}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			var r meter.Reservation
			refused, err := metertest.Reserve(context.Background(), procs[i%2], now, b, []int64{10}, &r)
			if err == nil && refused >= 0 {
				err = errors.New("refused under a large cap")
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	out := make([]meter.BudgetState, 1)
	require.NoError(t, procs[0].Usage(t.Context(), now, b, out))
	require.Equal(t, int64(400+40*10), out[0].Used)
	require.LessOrEqual(t, s.calls.Load(), int64(2), "each process asks the ledger at most once")
}

// faultProxy stands between a client and Redis and can go silent
// (packets swallowed both ways), deaf (commands go through and run, the
// answers are dropped, so the client times out as if Redis were too slow)
// or away (connections refused).
type faultProxy struct {
	ln     net.Listener
	target string
	silent atomic.Bool
	deaf   atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func startFaultProxy(t *testing.T, target string) *faultProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &faultProxy{ln: ln, target: target}
	t.Cleanup(p.cut)
	go p.serve()
	return p
}

func (p *faultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c, false)
		go p.pipe(c, up, true)
	}
}

// pipe copies src to dst; answers says the bytes are Redis's.
func (p *faultProxy) pipe(dst, src net.Conn, answers bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.silent.Load() && !(answers && p.deaf.Load()) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *faultProxy) cut() {
	p.ln.Close()
	p.hangUp()
}

// hangUp closes every connection (whose answers may have been dropped);
// the client dials again.
func (p *faultProxy) hangUp() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// throughFaultProxy returns a client of REDIS_URL's server that reaches it
// through a fault proxy, with edit applied to its options.
func throughFaultProxy(t *testing.T, edit func(*rueidis.ClientOption)) (*faultProxy, rueidis.Client) {
	t.Helper()
	opt, err := rueidis.ParseURL(storetest.RedisURL(t))
	require.NoError(t, err)
	require.Len(t, opt.InitAddress, 1)
	p := startFaultProxy(t, opt.InitAddress[0])
	opt.InitAddress = []string{p.ln.Addr().String()}
	opt.DisableCache = true
	if edit != nil {
		edit(&opt)
	}
	client, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return p, client
}

// Every call on a Redis that is gone, silent or closed fails promptly
// with meter.ErrCountersUnavailable.
func TestRedisCountersUnavailable(t *testing.T) {
	through := func(t *testing.T) (*faultProxy, *storage.RedisCounters) {
		p, client := throughFaultProxy(t, nil)
		c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: storetest.Prefix()})
		t.Cleanup(c.Close)
		return p, c
	}
	cases := map[string]func(t *testing.T) *storage.RedisCounters{
		"Silent": func(t *testing.T) *storage.RedisCounters {
			p, c := through(t)
			requireCountersWork(t, c)
			p.silent.Store(true)
			return c
		},
		"Gone": func(t *testing.T) *storage.RedisCounters {
			p, c := through(t)
			requireCountersWork(t, c)
			p.cut()
			return c
		},
		"ClientClosed": func(t *testing.T) *storage.RedisCounters {
			client := storetest.Redis(t)
			c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: storetest.Prefix()})
			t.Cleanup(c.Close)
			requireCountersWork(t, c)
			client.Close()
			return c
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			c := setup(t)
			ctx := context.Background() // no deadline: the store brings its own
			now := time.Now()
			ws := []meter.Window{{Key: "rl:key:k1:requests", Limit: 5, Length: time.Minute}}
			budgets := []meter.Budget{{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 100}}
			r := meter.Reservation{N: 1, Budgets: [meter.MaxReservation]meter.Budget{budgets[0]}, Amounts: [meter.MaxReservation]int64{50}}
			calls := map[string]func() error{
				"Hit": func() error {
					_, err := c.Hit(ctx, now, ws, make([]meter.WindowState, 1))
					return err
				},
				"PeekWindows": func() error { return c.PeekWindows(ctx, now, ws, make([]meter.WindowState, 1)) },
				"Usage":       func() error { return c.Usage(ctx, now, budgets, make([]meter.BudgetState, 1)) },
				"Admit": func() error {
					a := &meter.Admission{Windows: ws, WindowOut: make([]meter.WindowState, 1), LeaseKey: "cc:k1", LeaseLimit: 2, Budgets: budgets, Amounts: []int64{10}}
					_, err := c.Admit(ctx, now, a, new(meter.Reservation))
					return err
				},
				"Finish": func() error {
					return c.Finish(ctx, meter.Lease{Key: "cc:k1", ID: "x"}, &r, []int64{10})
				},
			}
			for op, call := range calls {
				start := time.Now()
				err := call()
				took := time.Since(start)
				require.ErrorIs(t, err, meter.ErrCountersUnavailable, op)
				require.Less(t, took, time.Second, "%s took %v", op, took)
			}
		})
	}
}

// A Redis that hangs holds no call much past its bound, also once the
// client has dropped its silent connection and must dial again. The calls
// share one client, and while one of them dials, every other call waits for
// that dial: so every call the gateway makes on it (the counters', their
// lease renewals, the replay store's) carries the same bound, and none may
// hold a dial longer.
func TestRedisHungAcrossReconnectHoldsNoCallPastItsBound(t *testing.T) {
	// The client drops a connection that answers nothing after 300 ms
	// (10 s by default), and the next call dials again.
	p, client := throughFaultProxy(t, func(o *rueidis.ClientOption) { o.ConnWriteTimeout = 300 * time.Millisecond })
	prefix := storetest.Prefix()
	// Renewals every 2 s: at least one while the test runs.
	c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: prefix, LeaseTTL: 6 * time.Second})
	t.Cleanup(c.Close)
	idem := storage.NewRedisIdempotency(client, prefix, time.Minute, 0)
	_, held := metertest.TakeSlot(t, c, time.Now(), "cc:held", 1) // the renewer has a lease to renew
	require.True(t, held)
	_, _, err := idem.Begin(t.Context(), "scope", "warm", [32]byte{}) // the replay store's script is loaded
	require.NoError(t, err)

	p.silent.Store(true)
	ctx := context.Background() // no deadline: each store brings its own
	ws := []meter.Window{{Key: "rl:key:k1:requests", Limit: 5, Length: time.Minute}}
	var worst atomic.Int64
	timed := func(call func()) {
		start := time.Now()
		call()
		took := int64(time.Since(start))
		for w := worst.Load(); took > w && !worst.CompareAndSwap(w, took); w = worst.Load() {
		}
	}
	until := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(until) {
				timed(func() { _, _ = c.Hit(ctx, time.Now(), ws, make([]meter.WindowState, 1)) })
			}
		})
	}
	wg.Go(func() { // a request with an Idempotency-Key now and then
		for time.Now().Before(until) {
			timed(func() { _, _, _ = idem.Begin(ctx, "scope", "k", [32]byte{1}) })
			time.Sleep(50 * time.Millisecond)
		}
	})
	wg.Wait()
	t.Logf("the longest call took %v", time.Duration(worst.Load()).Round(time.Millisecond))
	require.Less(t, time.Duration(worst.Load()), time.Second,
		"a call on a hung Redis waited far past the %v bound", storage.RedisCallTimeout)
}

// Every call the counters (their lease renewals included) and the replay
// store make carries RedisCallTimeout, whatever deadline the caller brought:
// the rule the test above depends on, checked on each call path.
func TestRedisEveryCallCarriesTheBound(t *testing.T) {
	client := &deadlineClient{Client: storetest.Redis(t)}
	prefix := storetest.Prefix()
	c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: prefix, LeaseTTL: 1500 * time.Millisecond}) // renewals every 500 ms
	t.Cleanup(c.Close)
	idem := storage.NewRedisIdempotency(client, prefix, time.Minute, 0)
	ctx := context.Background()
	now := time.Now()
	ws := []meter.Window{{Key: "rl:key:k1:requests", Limit: 5, Length: time.Minute}}
	budgets := []meter.Budget{{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 100}}

	_, err := c.Hit(ctx, now, ws, make([]meter.WindowState, 1))
	require.NoError(t, err)
	require.NoError(t, c.PeekWindows(ctx, now, ws, make([]meter.WindowState, 1)))
	require.NoError(t, c.Usage(ctx, now, budgets, make([]meter.BudgetState, 1)))
	r := new(meter.Reservation)
	res, err := c.Admit(ctx, now, &meter.Admission{LeaseKey: "cc:k1", LeaseLimit: 2, Budgets: budgets, Amounts: []int64{10}}, r)
	require.NoError(t, err)
	renewals := client.multi.Load()
	require.Eventually(t, func() bool { return client.multi.Load() >= renewals+2 }, 5*time.Second, 10*time.Millisecond,
		"the lease was renewed")
	require.NoError(t, c.Finish(ctx, res.Lease, r, []int64{10}))

	_, claim, err := idem.Begin(ctx, "scope", "k", [32]byte{})
	require.NoError(t, err)
	require.NoError(t, claim.Renew(ctx))
	require.NoError(t, claim.Complete(ctx, hotpath.Replay{Status: 200, Body: []byte("{}")}))
	_, claim, err = idem.Begin(ctx, "scope", "k2", [32]byte{})
	require.NoError(t, err)
	require.NoError(t, claim.Abandon(ctx))

	require.Zero(t, client.unbounded.Load(), "calls without a deadline")
	require.LessOrEqual(t, time.Duration(client.longest.Load()), storage.RedisCallTimeout)
}

// deadlineClient records the longest deadline its calls carried, and how
// many carried none.
type deadlineClient struct {
	rueidis.Client
	longest, unbounded, multi atomic.Int64
}

func (c *deadlineClient) note(ctx context.Context) {
	d, ok := ctx.Deadline()
	if !ok {
		c.unbounded.Add(1)
		return
	}
	left := int64(time.Until(d))
	for l := c.longest.Load(); left > l && !c.longest.CompareAndSwap(l, left); l = c.longest.Load() {
	}
}

func (c *deadlineClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.note(ctx)
	return c.Client.Do(ctx, cmd)
}

func (c *deadlineClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.note(ctx)
	c.multi.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

func requireCountersWork(t *testing.T, c *storage.RedisCounters) {
	t.Helper()
	_, ok := metertest.TakeSlot(t, c, time.Now(), "cc:probe", 1)
	require.True(t, ok)
}

// countingClient counts round trips: one per Do, one per pipelined DoMulti.
type countingClient struct {
	rueidis.Client
	n atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

// Every call is one round trip once its counters exist.
func TestRedisCountersOneRoundTripEach(t *testing.T) {
	storetest.EachRedis(t, testRedisCountersOneRoundTripEach)
}

func testRedisCountersOneRoundTripEach(t *testing.T, connect func(testing.TB) rueidis.Client) {
	client := &countingClient{Client: connect(t)}
	c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: storetest.Prefix()})
	t.Cleanup(c.Close)
	ctx := t.Context()
	now := time.Now()
	ws := []meter.Window{
		{Key: "rl:key:k1:requests", Limit: 100, Length: time.Minute},
		{Key: "rl:org:o1:requests", Limit: 100, Length: time.Minute},
	}
	out := make([]meter.WindowState, 2)
	budgets := []meter.Budget{
		{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 1 << 40},
		{Kind: meter.BudgetWorkspaceSpend, Subject: "ws_1", Cap: 1 << 40},
		{Kind: meter.BudgetCredits, Subject: "key_1", Cap: 1 << 40},
		{Kind: meter.BudgetPoolMonthly, Subject: "org_1", Cap: 1 << 40},
		{Kind: meter.BudgetPoolBurst, Subject: "org_1", Cap: 1 << 40},
		{Kind: meter.BudgetMiraRequests, Subject: "org_1", Cap: 1 << 40},
	}
	amounts := []int64{10, 10, 10, 10, 10, 1}
	states := make([]meter.BudgetState, len(budgets))
	var r meter.Reservation
	admission := &meter.Admission{Windows: ws, WindowOut: out, LeaseKey: "cc:k2", LeaseLimit: 10, Budgets: budgets, Amounts: amounts}
	var admitted meter.AdmitResult
	calls := []struct {
		name string
		call func() error
	}{
		{"Hit", func() error { _, err := c.Hit(ctx, now, ws, out); return err }},
		{"PeekWindows", func() error { return c.PeekWindows(ctx, now, ws, out) }},
		{"Usage", func() error { return c.Usage(ctx, now, budgets, states) }},
		{"Admit", func() error {
			var err error
			if admitted, err = c.Admit(ctx, now, admission, &r); err == nil && admitted.Refused != meter.AdmitOK {
				err = fmt.Errorf("refused: %d", admitted.Refused)
			}
			return err
		}},
		{"Finish", func() error { return c.Finish(ctx, admitted.Lease, &r, []int64{5, 5, 5, 5, 5, 1}) }},
	}
	for _, warm := range []bool{true, false} {
		for _, cl := range calls {
			before := client.n.Load()
			require.NoError(t, cl.call(), cl.name)
			if !warm { // the first calls load the scripts and seed the counters
				require.Equal(t, int64(1), client.n.Load()-before, cl.name)
			}
		}
	}
}

// Admit's first use of a budget counter costs the seeding round trips
// (EXISTS, the seed write, the retry) on top of its one script call, and
// nothing more once the counters exist.
func TestRedisCountersAdmitSeedsThenOneRoundTrip(t *testing.T) {
	storetest.EachRedis(t, testRedisCountersAdmitSeedsThenOneRoundTrip)
}

func testRedisCountersAdmitSeedsThenOneRoundTrip(t *testing.T, connect func(testing.TB) rueidis.Client) {
	client := &countingClient{Client: connect(t)}
	c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: storetest.Prefix()})
	t.Cleanup(c.Close)
	ctx := t.Context()
	now := time.Now()
	warm := &meter.Admission{LeaseKey: "cc:warm", LeaseLimit: 1, Budgets: []meter.Budget{{Kind: meter.BudgetCredits, Subject: "key_warm", Cap: -1}}, Amounts: []int64{1}}
	var wr meter.Reservation
	wres, err := c.Admit(ctx, now, warm, &wr) // loads the admission script
	require.NoError(t, err)
	// and the finish script: run alone, on a Redis that has never seen it,
	// the first Finish would pay EVALSHA's NOSCRIPT and the EVAL after it.
	require.NoError(t, c.Finish(ctx, wres.Lease, &wr, []int64{1}))

	a := &meter.Admission{
		Windows:   []meter.Window{{Key: "rl:key:k1:requests", Limit: 100, Length: time.Minute}},
		WindowOut: make([]meter.WindowState, 1),
		LeaseKey:  "cc:k1", LeaseLimit: 10,
		Budgets: []meter.Budget{{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 100}},
		Amounts: []int64{10},
	}
	var r meter.Reservation
	before := client.n.Load()
	res, err := c.Admit(ctx, now, a, &r)
	require.NoError(t, err)
	require.Equal(t, meter.AdmitOK, res.Refused)
	require.Equal(t, int64(4), client.n.Load()-before, "the script, EXISTS, the seed write, the script again")
	require.Equal(t, int64(99), a.WindowOut[0].Remaining, "the first answer, needing a seed, counted nothing")

	before = client.n.Load()
	res2, err := c.Admit(ctx, now, a, &r)
	require.NoError(t, err)
	require.Equal(t, meter.AdmitOK, res2.Refused)
	require.Equal(t, int64(1), client.n.Load()-before)
	before = client.n.Load()
	require.NoError(t, c.Finish(ctx, res2.Lease, &r, []int64{0}))
	require.Equal(t, int64(1), client.n.Load()-before)
	require.Equal(t, int64(1), metertest.InFlight(t, c, now, "cc:k1"))
}

// A slot Admit takes is renewed while it is held, and Finish stops
// renewing it: a finished lease is neither brought back nor reported lost.
func TestRedisCountersAdmittedLeaseIsRenewed(t *testing.T) {
	storetest.EachRedis(t, testRedisCountersAdmittedLeaseIsRenewed)
}

func testRedisCountersAdmittedLeaseIsRenewed(t *testing.T, connect func(testing.TB) rueidis.Client) {
	const ttl = 300 * time.Millisecond
	client := connect(t)
	prefix := storetest.Prefix()
	var logs logtest.Buffer
	c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: prefix, Log: slog.New(slog.NewJSONHandler(&logs, nil)), LeaseTTL: ttl})
	t.Cleanup(c.Close)
	ctx := t.Context()
	inFlight := func() int64 { return metertest.InFlight(t, c, time.Now(), "cc:k1") }
	a := &meter.Admission{LeaseKey: "cc:k1", LeaseLimit: 2}
	res, err := c.Admit(ctx, time.Now(), a, new(meter.Reservation))
	require.NoError(t, err)
	require.Equal(t, meter.AdmitOK, res.Refused)
	other, err := c.Admit(ctx, time.Now(), a, new(meter.Reservation))
	require.NoError(t, err)
	require.Equal(t, meter.AdmitOK, other.Refused)
	time.Sleep(3 * ttl)
	require.Equal(t, int64(2), inFlight(), "both slots outlived their TTL")

	require.NoError(t, c.Finish(ctx, res.Lease, new(meter.Reservation), nil))
	require.Equal(t, int64(1), inFlight())
	time.Sleep(3 * ttl)
	require.Equal(t, int64(1), inFlight(), "the finished slot stays free, the other is still renewed")
	score, err := client.Do(ctx, client.B().Zscore().Key(rawKey(client, prefix, "lease:cc:k1")).Member(res.Lease.ID).Build()).AsFloat64()
	require.True(t, rueidis.IsRedisNil(err), "the finished lease is gone: %v %v", score, err)
	require.Empty(t, logs.String(), "Finish stopped renewing it: no lease was lost")
}

func BenchmarkRedisCounters(b *testing.B) {
	client := &countingClient{Client: storetest.Redis(b)}
	c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: storetest.Prefix()})
	b.Cleanup(c.Close)
	// Many requests in flight, as in a gateway: rueidis pipelines them.
	metertest.Bench(b, c, time.Now(), 16, func(b *testing.B) {
		start := client.n.Load()
		b.Cleanup(func() { b.ReportMetric(float64(client.n.Load()-start)/float64(b.N), "roundtrips/op") })
	})
}

// An admission that Redis ran but whose answer came after the call's bound
// is served unmetered; the lease it took is nobody's to renew or release.
// It must not hold one of the key's slots fleet-wide for the whole lease
// time: the process releases it at its next renewal.
func TestRedisCountersReleaseTheLeaseOfATimedOutAdmission(t *testing.T) {
	const ttl = 6 * time.Second
	p, client := throughFaultProxy(t, nil)
	prefix := storetest.Prefix()
	c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: prefix, LeaseTTL: ttl,
		CallTimeout: 100 * time.Millisecond})
	t.Cleanup(c.Close)
	requireCountersWork(t, c) // the scripts are loaded

	direct := storetest.Redis(t)
	inFlight := func() int64 {
		n, err := direct.Do(context.Background(), direct.B().Zcard().Key(prefix+"lease:cc:k1").Build()).AsInt64()
		require.NoError(t, err)
		return n
	}
	// Redis must run the admission and its answer be lost. Under a loaded
	// run the call can give up before its command is even written (then
	// nothing ran): try again until Redis has the lease. Each attempt
	// starts on a fresh, working connection: on one a failed attempt left
	// deaf, the client cannot even finish its handshake, and nothing would
	// reach Redis again.
	var failed time.Time
	require.Eventually(t, func() bool {
		p.deaf.Store(false)
		p.hangUp()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := client.Do(ctx, client.B().Ping().Build()).Error()
		cancel()
		if err != nil {
			return false
		}
		p.deaf.Store(true)
		_, err = c.Admit(context.Background(), time.Now(), &meter.Admission{LeaseKey: "cc:k1", LeaseLimit: 2}, new(meter.Reservation))
		if !errors.Is(err, meter.ErrCountersUnavailable) {
			return false // answered after all: not the case under test
		}
		failed = time.Now()
		deadline := failed.Add(300 * time.Millisecond)
		for time.Now().Before(deadline) {
			if inFlight() == 1 {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}, 15*time.Second, time.Millisecond, "Redis ran the admission and took the lease")
	p.deaf.Store(false)
	p.hangUp()

	// Released at a renewal (every third of the lease time; a release whose
	// answer was lost too is retried at the next), well before the lease
	// would expire by itself.
	require.Eventually(t, func() bool { return inFlight() == 0 }, ttl-time.Second, 20*time.Millisecond,
		"the lease of an admission that timed out held its slot for the lease time")
	t.Logf("released %v after the admission failed (lease time %v)", time.Since(failed).Round(time.Millisecond), ttl)
}

// A call whose counters belong to two organizations is refused before
// anything is sent: on a cluster their keys would lie in two slots.
func TestRedisCountersRefuseMixedTenants(t *testing.T) {
	storetest.EachRedis(t, func(t *testing.T, connect func(testing.TB) rueidis.Client) {
		c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: connect(t), Prefix: storetest.Prefix()})
		t.Cleanup(c.Close)
		ctx, now := t.Context(), time.Now()
		ws := []meter.Window{
			{Key: "rl:k:k1", Limit: 5, Length: time.Minute, Tenant: "org_1"},
			{Key: "rl:o:org_2", Limit: 5, Length: time.Minute, Tenant: "org_2"},
		}
		_, err := c.Hit(ctx, now, ws, make([]meter.WindowState, 2))
		require.ErrorContains(t, err, "several tenants")
		a := &meter.Admission{Windows: ws[:1], WindowOut: make([]meter.WindowState, 1), LeaseKey: "cc:k1", LeaseLimit: 1, LeaseTenant: "org_2"}
		_, err = c.Admit(ctx, now, a, new(meter.Reservation))
		require.ErrorContains(t, err, "several tenants")
		require.Zero(t, metertest.InFlight(t, tenantCounters{Counters: c, tenant: "org_2"}, now, "cc:k1"), "nothing was taken")
	})
}

// One process holding leases of many organizations, on every node of a
// cluster, renews them all: one renewal script per tenant.
func TestRedisCountersRenewLeasesOfManyTenants(t *testing.T) {
	storetest.EachRedis(t, func(t *testing.T, connect func(testing.TB) rueidis.Client) {
		const ttl = 300 * time.Millisecond
		client := connect(t)
		var logs logtest.Buffer
		c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: storetest.Prefix(), Log: slog.New(slog.NewJSONHandler(&logs, nil)), LeaseTTL: ttl})
		t.Cleanup(c.Close)
		orgs := make([]tenantCounters, 24)
		for i := range orgs {
			orgs[i] = tenantCounters{Counters: c, tenant: fmt.Sprintf("org_%d", i)}
			for range 2 {
				_, ok := metertest.TakeSlot(t, orgs[i], time.Now(), "cc:"+orgs[i].tenant, 2)
				require.True(t, ok)
			}
		}
		if client.Mode() == rueidis.ClientModeCluster {
			nodes := map[string]bool{}
			for _, o := range orgs {
				nodes[nodeOf(t, client, "{"+o.tenant+"}")] = true
			}
			require.Len(t, nodes, 3, "the organizations' counters are spread over every node")
		}
		time.Sleep(3 * ttl)
		for _, o := range orgs {
			require.Equal(t, int64(2), metertest.InFlight(t, o, time.Now(), "cc:"+o.tenant), o.tenant)
		}
		require.Empty(t, logs.String(), "no lease was lost")
	})
}

// nodeOf is the address of the cluster node serving key's slot.
func nodeOf(t *testing.T, client rueidis.Client, key string) string {
	t.Helper()
	slot, err := client.Do(t.Context(), client.B().ClusterKeyslot().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	shards, err := client.Do(t.Context(), client.B().ClusterSlots().Build()).ToArray()
	require.NoError(t, err)
	for _, s := range shards {
		v, err := s.ToArray()
		require.NoError(t, err)
		lo, _ := v[0].AsInt64()
		hi, _ := v[1].AsInt64()
		if slot >= lo && slot <= hi {
			node, err := v[2].ToArray()
			require.NoError(t, err)
			port, _ := node[1].AsInt64()
			return fmt.Sprint(port)
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return ""
}

// BenchmarkRedisClusterCounters is BenchmarkRedisCounters on the test Redis
// Cluster: the same scripts with hash-tagged keys, routed by slot.
func BenchmarkRedisClusterCounters(b *testing.B) {
	client := &countingClient{Client: storetest.RedisCluster(b)}
	c := storage.NewRedisCounters(storage.RedisCountersConfig{Client: client, Prefix: storetest.Prefix()})
	b.Cleanup(c.Close)
	metertest.Bench(b, c, time.Now(), 16, func(b *testing.B) {
		start := client.n.Load()
		b.Cleanup(func() { b.ReportMetric(float64(client.n.Load()-start)/float64(b.N), "roundtrips/op") })
	})
}
