package storage

// RedisCounters is the fleet-wide meter.Counters: every gateway process
// sharing one Redis sees the same windows, leases and budgets.
//
// Every operation is one round trip (seeding aside): a Lua script (EVALSHA, with EVAL when
// Redis does not know the script yet, as rueidis.Lua does) or one command,
// auto-pipelined by rueidis with the other requests in flight. A script runs
// alone on the server, so "read every counter, check every limit, then
// change every counter" cannot interleave with another process's call: a
// Hit counts in all its windows or in none, and an Admit adds to all its
// budgets or to none. That is what keeps 200 concurrent requests from
// overshooting a cap.
//
// A chat request costs two scripts: Admit (its windows, its lease and its
// budgets, checked and changed in one script) and Finish (its settlement
// and its release). Hit and Admit count in windows with the same Lua
// function (windowsHit).
//
// Keys, all under the prefix:
//
//	<Window.Key>                              hash {c: count, r: reset ms}, expires with the window
//	lease:<key>                               sorted set, lease id scored by its expiry (ms, Redis clock)
//	budget:<kind>:<subject>:<yyyy-mm>         month counter, expires 40 days after the month began
//	budget:<kind>:<subject>                   lifetime counter, expires 30 days after its last reservation
//	budget:pool_burst:<subject>               hash {<slot start s>: usage, s: 1}, expires a window and a slot after its last reservation
//	budgetgen:<kind>:<subject>[:<yyyy-mm>]    the generation of the budget counter of the same name, expires with it
//
// Redis Cluster. A script may only touch keys of one hash slot. On a
// cluster (the client's mode says so) every key carries its counter's
// tenant (meter's Tenants: the organization) as a hash tag right after the
// prefix, <prefix>{<tenant>}<name> ("{-}" for counters without a tenant),
// so all of one organization's windows, leases and budgets live in one
// slot and every call, whose counters all belong to one organization,
// runs on one node. Organizations spread over the slots; one
// organization's traffic stays on one node, which is the unit a busy
// organization can load. On a single Redis (or behind Sentinel) keys carry
// no tag and are named as they always were. A call whose counters name two
// tenants is refused (errMixedTenants) on both, before anything is sent.
// The renewer re-scores leases in one script per tenant on a cluster, all
// pipelined in one round trip per node.
//
// Windows and budgets run on the caller's clock readings, so tests move
// time and every process agrees on calendar months. Leases run on the
// Redis clock (TIME inside the scripts): their expiry is measured by the
// one clock every process shares, and a background renewer re-scores this
// process's live leases every third of the lease TTL in one pipelined
// batch. A process that dies stops renewing, so its slots free themselves
// within the TTL.
//
// Seeding. A budget counter that does not exist (never used, or lost) makes
// Admit and Usage answer "need seed" with the budgets concerned,
// having changed nothing (no window counted, no lease taken). The process then asks the BudgetSeeder (the ledger) and
// writes the result with a script that writes only while the key is still
// missing, and runs the call once more. Reservations are only ever added to
// a key that exists, and a key is only ever created by a seed, so the
// ledger's history and the live increments never overlap: when two
// processes seed the same key at once, one write lands and the other is
// dropped, and nothing is counted twice. Within a process concurrent
// seeders of one key share a single ledger query.
//
// Generations. Each seed also writes the counter's generation, a token no
// other seed writes, in a key beside it. Admit returns the generations it
// reserved on (meter.Reservation.Generations), and Finish settles each
// counter by its generation: the same one still holds the reservation, so
// it takes the difference between the actual amount and the reservation;
// another one was rebuilt from the ledger since, never held the
// reservation, and takes the whole actual amount; a missing one is left to
// the ledger. A counter written before generations existed has none, and
// its reservations carry none: they settle by the difference.
//
// Money is exact: counters are Redis integers, and the scripts compare
// them as two base-1e9 limbs, since Lua numbers are doubles and a $100,000
// cap in pico-USD is past what a double holds exactly.
//
// What errs, and which way: the first use of a budget counter in a period
// costs three more round trips (EXISTS, the seed write, the retry). A call
// that times out after Redis ran it stays counted, so an unmetered request
// may still use up budget: over-counting, never overshooting. The lease such
// an admission may have taken (or a release that was not answered may have
// left) is removed by the renewer on its next round, within a third of the
// lease TTL, rather than holding the key's slot for the whole TTL. A counter
// rebuilt while requests it reserved for are in flight lacks their
// reservations; each gains its request's actual amount when it finishes
// (Generations), so no cap is overshot for them. That relies on a
// request's ledger row being written only after its settlement: the proxy
// calls meter.Limits.FinishChat before it records the row, on every path.
// With Redis the settlement itself runs off the request's path, a round
// trip later; a rebuild that reads the ledger in that moment, after the row
// reached it, counts the request twice: over, never under.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"golang.org/x/sync/singleflight"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
)

// counterSeedTimeout bounds one ledger query when the caller set no deadline.
const counterSeedTimeout = 5 * time.Second

// leaseRenewBatch is the most leases one renewal script re-scores.
const leaseRenewBatch = 500

// maxAbandonedRelease is the most abandoned leases one renewal round
// removes: while Redis is unreachable they pile up at the rate of
// admissions, and those left over expire by themselves.
const maxAbandonedRelease = 10 * leaseRenewBatch

// RedisCounters is the Redis meter.Counters. Close stops its renewer.
type RedisCounters struct {
	client   rueidis.Client
	prefix   string
	tagged   bool // keys carry their tenant's hash tag: the client is a cluster's
	seeder   meter.BudgetSeeder
	log      *slog.Logger
	leaseTTL time.Duration
	timeout  time.Duration
	idPrefix string
	seq      atomic.Uint64
	seeding  singleflight.Group

	mu   sync.Mutex
	held map[meter.Lease]struct{} // this process's live leases
	// abandoned are leases a failed call may have left in Redis: an
	// admission Redis ran but answered too late, a release that was not
	// answered. Nobody renews them; the renewer removes them on its next
	// round, or they expire, and it forgets them after a lease time.
	abandoned map[meter.Lease]time.Time

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	warnLog   hotpath.LogLimiter // the renewer's warnings
}

var _ meter.Counters = (*RedisCounters)(nil)

// RedisCountersConfig is where a RedisCounters keeps its counters and how
// it behaves.
type RedisCountersConfig struct {
	Client rueidis.Client
	// Prefix starts every key the store writes.
	Prefix string
	// Seeder rebuilds lost budget counters; nil seeds them empty
	// (meter.NoSeeder).
	Seeder meter.BudgetSeeder
	// Log receives the renewer's warnings; nil logs to slog.Default.
	Log *slog.Logger
	// LeaseTTL is how long a lease outlives a process that stops renewing
	// it (0: meter.LeaseTTL). Renewal runs every third of it.
	LeaseTTL time.Duration
	// CallTimeout bounds one call to Redis, past which it fails with
	// meter.ErrCountersUnavailable (0: RedisCallTimeout).
	CallTimeout time.Duration
}

// NewRedisCounters returns counters as cfg says. It starts the lease
// renewer; Close stops it.
func NewRedisCounters(cfg RedisCountersConfig) *RedisCounters {
	if cfg.Seeder == nil {
		cfg.Seeder = meter.NoSeeder{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = meter.LeaseTTL
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = RedisCallTimeout
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	ctx, stop := context.WithCancel(context.Background())
	c := &RedisCounters{
		client:    cfg.Client,
		prefix:    cfg.Prefix,
		tagged:    cfg.Client.Mode() == rueidis.ClientModeCluster,
		seeder:    cfg.Seeder,
		log:       cfg.Log,
		leaseTTL:  cfg.LeaseTTL,
		timeout:   cfg.CallTimeout,
		idPrefix:  hex.EncodeToString(id[:]) + "-",
		held:      make(map[meter.Lease]struct{}),
		abandoned: make(map[meter.Lease]time.Time),
		stop:      stop,
		done:      make(chan struct{}),
	}
	go c.renew(ctx)
	return c
}

// Close stops renewing this process's leases; those not released expire
// within the lease TTL. It does not close the client.
func (c *RedisCounters) Close() {
	c.closeOnce.Do(func() {
		c.stop()
		<-c.done
	})
}

// call bounds one round trip.
func (c *RedisCounters) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// detached bounds a call that must happen even when the request is gone
// (Finish): the caller's cancellation does not apply.
func (c *RedisCounters) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
}

// noTenant is the hash tag of counters without a tenant, on a cluster.
const noTenant = "-"

// errMixedTenants refuses a call whose counters belong to several tenants:
// on a cluster their keys would lie in several slots, which one script
// cannot touch.
var errMixedTenants = errors.New("counters of several tenants in one call")

// key names a window or a lease: prefix, the tenant's hash tag on a
// cluster, kind, name. One allocation.
func (c *RedisCounters) key(tenant, kind, name string) string {
	if !c.tagged {
		return c.prefix + kind + name
	}
	if tenant == "" {
		tenant = noTenant
	}
	return c.prefix + "{" + tenant + "}" + kind + name
}

// tenants checks that the counters of one call share a tenant.
type tenants struct {
	first       string
	seen, mixed bool
}

func (t *tenants) add(tenant string) {
	if !t.seen {
		t.first, t.seen = tenant, true
	} else if tenant != t.first {
		t.mixed = true
	}
}

func (t *tenants) windows(ws []meter.Window) *tenants {
	for i := range ws {
		t.add(ws[i].Tenant)
	}
	return t
}

func (t *tenants) budgets(bs []meter.Budget) *tenants {
	for i := range bs {
		t.add(bs[i].Tenant)
	}
	return t
}

func (t *tenants) err(verb string) error {
	if t.mixed {
		return fmt.Errorf("cannot %s: %w", verb, errMixedTenants)
	}
	return nil
}

func countersDown(verb string, err error) error {
	return fmt.Errorf("cannot %s: %w: %w", verb, meter.ErrCountersUnavailable, err)
}

// windowsHit is the Lua function hitting windows, shared by hitScript and
// admitScript: hit(k, a, n, now, out) counts one request in each of the n
// windows KEYS[k+1..k+n] when none is full, and returns 1 if it did, else
// 0. Window i's arguments are ARGV[a+3i-2..a+3i]: limit, length (ms), the
// reset (ms) a window opened now gets. It appends each window's count and
// reset after the call to out (reset 0 for a window not open).
const windowsHit = `
local function hit(k, a, n, now, out)
  local c, r, ok = {}, {}, 1
  for i = 1, n do
    local v = redis.call('HMGET', KEYS[k + i], 'c', 'r')
    local cnt, rst = tonumber(v[1]) or 0, tonumber(v[2]) or 0
    if rst <= now then cnt, rst = 0, 0 end
    c[i], r[i] = cnt, rst
    if cnt >= tonumber(ARGV[a + 3 * i - 2]) then ok = 0 end
  end
  local o = #out
  for i = 1, n do
    if ok == 1 then
      if r[i] == 0 then
        redis.call('HSET', KEYS[k + i], 'c', 1, 'r', ARGV[a + 3 * i])
        redis.call('PEXPIRE', KEYS[k + i], ARGV[a + 3 * i - 1])
        c[i], r[i] = 1, tonumber(ARGV[a + 3 * i])
      else
        c[i] = redis.call('HINCRBY', KEYS[k + i], 'c', 1)
      end
    end
    out[o + 2 * i - 1], out[o + 2 * i] = c[i], r[i]
  end
  return ok
end
`

// hitScript counts one request in every window when none is full.
//
// KEYS: the windows. ARGV[1]: now (ms). Then per window: limit, length
// (ms), the reset (ms) a window opened now gets.
// Returns {allowed 0|1, count1, reset1, count2, reset2, ...} after the call;
// reset 0 for a window not open.
var hitScript = rueidis.NewLuaScript(windowsHit + `
local out = {0}
out[1] = hit(0, 1, #KEYS, tonumber(ARGV[1]), out)
return out
`)

// peekScript reads windows. KEYS: the windows. ARGV[1]: now (ms).
// Returns {count1, reset1, ...}, reset 0 for a window not open.
var peekScript = rueidis.NewLuaScriptReadOnly(`
local now = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'c', 'r')
  local cnt, rst = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  if rst <= now then cnt, rst = 0, 0 end
  out[2 * i - 1], out[2 * i] = cnt, rst
end
return out
`)

func (c *RedisCounters) windowArgs(now time.Time, ws []meter.Window) (keys, args []string) {
	nowMs := now.UnixMilli()
	args = make([]string, 1, 1+3*len(ws))
	args[0] = strconv.FormatInt(nowMs, 10)
	return c.appendWindowArgs(make([]string, 0, len(ws)), args, nowMs, ws)
}

// appendWindowArgs appends the windows' keys and their arguments as
// windowsHit reads them.
func (c *RedisCounters) appendWindowArgs(keys, args []string, nowMs int64, ws []meter.Window) ([]string, []string) {
	for i := range ws {
		keys = append(keys, c.key(ws[i].Tenant, "", ws[i].Key))
		l := ws[i].Length.Milliseconds()
		args = append(args, strconv.FormatInt(ws[i].Limit, 10), strconv.FormatInt(l, 10), strconv.FormatInt(nowMs+l, 10))
	}
	return keys, args
}

func windowStates(vals []rueidis.RedisMessage, ws []meter.Window, out []meter.WindowState) error {
	if len(vals) != 2*len(ws) {
		return fmt.Errorf("%d values for %d windows", len(vals), len(ws))
	}
	for i := range ws {
		n, err := vals[2*i].AsInt64()
		if err != nil {
			return err
		}
		reset, err := vals[2*i+1].AsInt64()
		if err != nil {
			return err
		}
		out[i] = meter.WindowState{Limit: ws[i].Limit, Remaining: max(ws[i].Limit-n, 0)}
		if reset > 0 {
			out[i].ResetAt = meter.ResetSecond(reset)
		}
	}
	return nil
}

// Hit implements meter.Counters.
func (c *RedisCounters) Hit(ctx context.Context, now time.Time, ws []meter.Window, out []meter.WindowState) (bool, error) {
	if err := meter.CheckWindows(ws, out); err != nil {
		return false, err
	}
	if len(ws) == 0 {
		return true, nil
	}
	if err := new(tenants).windows(ws).err("count requests"); err != nil {
		return false, err
	}
	keys, args := c.windowArgs(now, ws)
	ctx, cancel := c.call(ctx)
	defer cancel()
	vals, err := hitScript.Exec(ctx, c.client, keys, args).ToArray()
	if err != nil {
		return false, countersDown("count requests", err)
	}
	if len(vals) == 0 {
		return false, countersDown("count requests", errors.New("empty answer"))
	}
	allowed, err := vals[0].AsInt64()
	if err == nil {
		err = windowStates(vals[1:], ws, out)
	}
	if err != nil {
		return false, countersDown("count requests", err)
	}
	return allowed == 1, nil
}

// PeekWindows implements meter.Counters.
func (c *RedisCounters) PeekWindows(ctx context.Context, now time.Time, ws []meter.Window, out []meter.WindowState) error {
	if err := meter.CheckWindows(ws, out); err != nil {
		return err
	}
	if len(ws) == 0 {
		return nil
	}
	if err := new(tenants).windows(ws).err("read request windows"); err != nil {
		return err
	}
	keys, args := c.windowArgs(now, ws)
	ctx, cancel := c.call(ctx)
	defer cancel()
	vals, err := peekScript.Exec(ctx, c.client, keys, args[:1]).ToArray()
	if err == nil {
		err = windowStates(vals, ws, out)
	}
	if err != nil {
		return countersDown("read request windows", err)
	}
	return nil
}

// redisNowMs is the Redis clock in milliseconds, inside a script.
const redisNowMs = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// leaseSlots is the Lua functions admitScript takes a lease with; now is
// the Redis clock (ms). leaseFull(k, limit, now)
// drops the expired leases of set k and reports whether limit are live;
// leaseTake(k, ttl, id, now) then adds lease id, expiring after ttl (ms).
const leaseSlots = `
local function leaseFull(k, limit, now)
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
  return redis.call('ZCARD', k) >= tonumber(limit)
end
local function leaseTake(k, ttl, id, now)
  redis.call('ZADD', k, now + tonumber(ttl), id)
  redis.call('PEXPIRE', k, ttl)
end
`

// renewScript re-scores leases still in their sets; a lease released
// meanwhile, or already dropped as expired by another process, stays gone.
//
// KEYS: lease sets. ARGV[1]: TTL (ms); ARGV[1+i]: the lease id in KEYS[i].
// Returns, per lease, 1 when renewed and 0 when it was no longer there.
var renewScript = rueidis.NewLuaScript(redisNowMs + `
local exp = now + tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS do
  out[i] = 0
  if redis.call('ZSCORE', KEYS[i], ARGV[i + 1]) then
    redis.call('ZADD', KEYS[i], 'XX', exp, ARGV[i + 1])
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    out[i] = 1
  end
end
return out
`)

func (c *RedisCounters) leaseKey(tenant, key string) string { return c.key(tenant, "lease:", key) }

// newLease names a lease of this process under key.
func (c *RedisCounters) newLease(tenant, key string) meter.Lease {
	return meter.Lease{Key: key, ID: c.idPrefix + strconv.FormatUint(c.seq.Add(1), 36), Tenant: tenant}
}

// hold hands a lease just taken to the renewer.
func (c *RedisCounters) hold(l meter.Lease) {
	c.mu.Lock()
	c.held[l] = struct{}{}
	c.mu.Unlock()
}

// forget stops renewing a lease about to be released.
func (c *RedisCounters) forget(l meter.Lease) {
	c.mu.Lock()
	delete(c.held, l)
	c.mu.Unlock()
}

// abandon hands the renewer a lease that a failed call may have left in
// Redis, to remove on its next round: a call that timed out after Redis ran
// it would otherwise hold one of the key's slots fleet-wide for the whole
// lease time while its request runs unmetered.
func (c *RedisCounters) abandon(l meter.Lease) {
	c.mu.Lock()
	c.abandoned[l] = time.Now()
	c.mu.Unlock()
}

// renew re-scores this process's live leases every third of the TTL until
// Close.
func (c *RedisCounters) renew(run context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.leaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-run.Done():
			return
		case <-t.C:
		}
		c.renewOnce(run)
	}
}

func (c *RedisCounters) renewOnce(run context.Context) {
	c.releaseAbandoned(run)
	c.mu.Lock()
	leases := make([]meter.Lease, 0, len(c.held))
	for l := range c.held {
		leases = append(leases, l)
	}
	c.mu.Unlock()
	if len(leases) == 0 {
		return
	}
	if c.tagged {
		// One script touches one slot: one tenant's leases per batch.
		slices.SortFunc(leases, func(a, b meter.Lease) int { return strings.Compare(a.Tenant, b.Tenant) })
	}
	var batch []rueidis.LuaExec
	var spans [][2]int // each batch's leases: leases[start:end]
	ttl := millis(c.leaseTTL)
	for start := 0; start < len(leases); {
		end := min(start+leaseRenewBatch, len(leases))
		if c.tagged {
			for i := start + 1; i < end; i++ {
				if leases[i].Tenant != leases[start].Tenant {
					end = i
					break
				}
			}
		}
		part := leases[start:end]
		e := rueidis.LuaExec{Keys: make([]string, len(part)), Args: make([]string, 1, 1+len(part))}
		e.Args[0] = ttl
		for i, l := range part {
			e.Keys[i] = c.leaseKey(l.Tenant, l.Key)
			e.Args = append(e.Args, l.ID)
		}
		batch = append(batch, e)
		spans = append(spans, [2]int{start, end})
		start = end
	}
	ctx, cancel := c.call(run)
	defer cancel()
	lost := 0
	for bi, res := range renewScript.ExecMulti(ctx, c.client, batch...) {
		flags, err := res.AsIntSlice()
		if err == nil && len(flags) != len(batch[bi].Args)-1 {
			err = fmt.Errorf("%d answers for %d leases", len(flags), len(batch[bi].Args)-1)
		}
		if err != nil {
			if run.Err() == nil { // not closing
				c.warn("cannot renew concurrency leases; they expire unless Redis answers soon", "leases", len(leases), "error", err)
			}
			return
		}
		c.mu.Lock()
		for i, ok := range flags {
			l := leases[spans[bi][0]+i]
			if _, held := c.held[l]; ok == 0 && held {
				delete(c.held, l)
				lost++
			}
		}
		c.mu.Unlock()
	}
	if lost > 0 {
		// Still held by requests here, but gone from Redis (it was
		// unreachable for a whole TTL, or lost its data): other processes
		// may use those slots until the requests end.
		c.warn("concurrency leases expired while held", "lost", lost)
	}
}

// releaseAbandoned removes the abandoned leases from Redis in one
// pipelined round trip. A lease Redis never took, or that expired, is
// removed by nobody's loss. Those it cannot remove now are tried again on
// the next round, until a lease time has passed since they were abandoned:
// by then they have expired.
func (c *RedisCounters) releaseAbandoned(run context.Context) {
	c.mu.Lock()
	if len(c.abandoned) == 0 {
		c.mu.Unlock()
		return
	}
	leases := make([]meter.Lease, 0, min(len(c.abandoned), maxAbandonedRelease))
	for l, at := range c.abandoned {
		if time.Since(at) >= c.leaseTTL {
			delete(c.abandoned, l)
			continue
		}
		if len(leases) < maxAbandonedRelease {
			leases = append(leases, l)
		}
	}
	c.mu.Unlock()
	if len(leases) == 0 {
		return
	}
	cmds := make(rueidis.Commands, len(leases))
	for i, l := range leases {
		cmds[i] = c.client.B().Zrem().Key(c.leaseKey(l.Tenant, l.Key)).Member(l.ID).Build()
	}
	ctx, cancel := c.call(run)
	defer cancel()
	res := c.client.DoMulti(ctx, cmds...)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range res {
		if r.Error() == nil {
			delete(c.abandoned, leases[i])
		}
	}
}

// warn logs at most once every hotpath.DefaultLogEvery.
func (c *RedisCounters) warn(msg string, args ...any) {
	if ok, _ := c.warnLog.Allow(); ok {
		c.log.Warn(msg, args...)
	}
}

// budgetLimbs compares and adds counters exactly: a value is {high, low}
// with low below 1e9, so every part stays well inside a double's exact
// range. Counters are never negative.
const budgetLimbs = `
local B = 1000000000
local function num(s)
  local n = #s
  if n <= 9 then return {0, tonumber(s)} end
  return {tonumber(string.sub(s, 1, n - 9)), tonumber(string.sub(s, n - 8))}
end
local function add(a, b)
  local l = a[2] + b[2]
  if l >= B then return {a[1] + b[1] + 1, l - B} end
  return {a[1] + b[1], l}
end
local function gt(a, b) return a[1] > b[1] or (a[1] == b[1] and a[2] > b[2]) end
local function str(a)
  if a[1] > 0 then return string.format('%d%09d', a[1], a[2]) end
  return string.format('%d', a[2])
end
`

// budgetReserve is the Lua functions admitScript reserves budgets with
// (after budgetLimbs). The n budgets' counters are KEYS[k+1..k+n], their
// generations KEYS[k+n+1..k+2n]; budget i's arguments are six from
// ARGV[a+6(i-1)+1]: period ('m' month, 'l' lifetime, 'b' burst), cap
// (negative: none), amount, TTL (ms; not used for months, whose expiry is
// fixed when seeded), the current burst slot and the oldest burst slot in
// the window (Unix seconds).
//
// budgetsUsed(k, a, n) reads the counters, dropping burst slots that left
// the window, and returns their usage and {-2, i, ...} naming (0-based)
// those missing. budgetsOver(k, a, n, used) returns the 0-based index of
// the first budget the amounts would take over its cap, or -1.
// budgetsAdd(k, a, n) adds the amounts, and returns the counters'
// generations (empty for a counter that has none).
const budgetReserve = `
local function budgetsUsed(k, a, n)
  local need, used = {-2}, {}
  for i = 1, n do
    local b, key = a + (i - 1) * 6, KEYS[k + i]
    if ARGV[b + 1] == 'b' then
      local f = redis.call('HGETALL', key)
      if #f == 0 then
        need[#need + 1] = i - 1
      else
        local oldest, s = tonumber(ARGV[b + 6]), {0, 0}
        for j = 1, #f, 2 do
          local slot = tonumber(f[j])
          if slot then
            if slot < oldest then redis.call('HDEL', key, f[j]) else s = add(s, num(f[j + 1])) end
          end
        end
        used[i] = s
      end
    else
      local v = redis.call('GET', key)
      if v then used[i] = num(v) else need[#need + 1] = i - 1 end
    end
  end
  return used, need
end
local function budgetsOver(k, a, n, used)
  local pend = {}
  for i = 1, n do
    local b, key = a + (i - 1) * 6, KEYS[k + i]
    local p = add(pend[key] or {0, 0}, num(ARGV[b + 3]))
    pend[key] = p
    local cap = ARGV[b + 2]
    if string.sub(cap, 1, 1) ~= '-' and gt(add(used[i], p), num(cap)) then return i - 1 end
  end
  return -1
end
local function budgetsAdd(k, a, n)
  local gens = {}
  for i = 1, n do
    local b, key, gen = a + (i - 1) * 6, KEYS[k + i], KEYS[k + n + i]
    local per = ARGV[b + 1]
    if per == 'b' then
      redis.call('HINCRBY', key, ARGV[b + 5], ARGV[b + 3])
    else
      redis.call('INCRBY', key, ARGV[b + 3])
    end
    if per ~= 'm' then
      redis.call('PEXPIRE', key, ARGV[b + 4])
      redis.call('PEXPIRE', gen, ARGV[b + 4])
    end
    gens[i] = redis.call('GET', gen) or ''
  end
  return gens
end
`

// usageScript reads budgets.
//
// KEYS: the counters. ARGV, two per budget: period and the oldest burst
// slot in the window. Returns {0, used1, first1, ...} with used as a
// decimal string and first the oldest burst slot holding usage (0 for none
// and for other periods), or {-2, i, ...} for missing counters.
var usageScript = rueidis.NewLuaScriptReadOnly(budgetLimbs + `
local out, need = {0}, {-2}
for i = 1, #KEYS do
  local k = KEYS[i]
  if ARGV[2 * i - 1] == 'b' then
    local f = redis.call('HGETALL', k)
    if #f == 0 then
      need[#need + 1] = i - 1
    else
      local oldest, s, first = tonumber(ARGV[2 * i]), {0, 0}, 0
      for j = 1, #f, 2 do
        local slot = tonumber(f[j])
        if slot and slot >= oldest and f[j + 1] ~= '0' then
          s = add(s, num(f[j + 1]))
          if first == 0 or slot < first then first = slot end
        end
      end
      out[#out + 1] = str(s)
      out[#out + 1] = first
    end
  else
    local v = redis.call('GET', k)
    if v then
      out[#out + 1] = v
      out[#out + 1] = 0
    else
      need[#need + 1] = i - 1
    end
  end
end
if #need > 1 then return need end
return out
`)

// seedScript creates a missing counter from the ledger's usage, with its
// new generation, and does nothing when the counter exists: a concurrent
// seeder got there first.
//
// KEYS: the counter, its generation. ARGV: period, TTL (ms), the
// generation, then the usage (month, lifetime) or slot and usage pairs
// (burst). Returns 1 when written.
var seedScript = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if ARGV[1] == 'b' then
  redis.call('HSET', KEYS[1], 's', '1', unpack(ARGV, 4))
else
  redis.call('SET', KEYS[1], ARGV[4])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
return 1
`)

// budgetSettle is the Lua function finishScript settles reservations with:
// settle(k, a, n) settles the counters KEYS[k+1..k+n] that still exist,
// whose generations are KEYS[k+n+1..k+2n], never leaving one below 0. A
// counter of the reservation's generation takes the difference; one
// rebuilt since (another generation) never held the reservation and takes
// the actual amount. A missing counter is left missing: the ledger that
// seeds it again will hold the actual amount. Counter i's arguments are
// five from ARGV[a+5(i-1)+1]: period, difference, burst slot, actual
// amount, the reservation's generation.
const budgetSettle = `
local function settle(k, a, n)
  for i = 1, n do
    local b, key = a + (i - 1) * 5, KEYS[k + i]
    if redis.call('EXISTS', key) == 1 then
      local d = ARGV[b + 2]
      if (redis.call('GET', KEYS[k + n + i]) or '') ~= ARGV[b + 5] then d = ARGV[b + 4] end
      if d ~= '0' then
        if ARGV[b + 1] == 'b' then
          if redis.call('HINCRBY', key, ARGV[b + 3], d) < 0 then redis.call('HSET', key, ARGV[b + 3], '0') end
        elseif redis.call('INCRBY', key, d) < 0 then
          redis.call('SET', key, '0', 'KEEPTTL')
        end
      end
    end
  end
end
`

func periodArg(p meter.Period) string {
	switch p {
	case meter.PeriodTrailing:
		return "b"
	case meter.PeriodLifetime:
		return "l"
	}
	return "m"
}

// budgetKeys names b's counter for the period slot (a month's start in
// Unix seconds; ignored for other periods) and the key of its generation,
// in one allocation. A generation key differs from every counter key in
// its kind ("budgetgen:"), whatever the subject.
func (c *RedisCounters) budgetKeys(b *meter.Budget, slot int64) (counter, gen string) {
	one := len(c.prefix) + len("{}") + max(len(b.Tenant), len(noTenant)) + len("budgetgen:") + len("workspace_spend:") + len(b.Subject) + len(":2006-01")
	buf := make([]byte, 0, 2*one)
	buf = c.appendBudgetKey(buf, "budget:", b, slot)
	n := len(buf)
	buf = c.appendBudgetKey(buf, "budgetgen:", b, slot)
	s := string(buf)
	return s[:n], s[n:]
}

func (c *RedisCounters) appendBudgetKey(buf []byte, kind string, b *meter.Budget, slot int64) []byte {
	buf = append(buf, c.prefix...)
	if c.tagged {
		buf = append(buf, '{')
		if b.Tenant == "" {
			buf = append(buf, noTenant...)
		} else {
			buf = append(buf, b.Tenant...)
		}
		buf = append(buf, '}')
	}
	buf = append(buf, kind...)
	buf = append(buf, b.Kind.String()...)
	buf = append(buf, ':')
	buf = append(buf, b.Subject...)
	if b.Kind.Period() == meter.PeriodMonth {
		y, m, _ := time.Unix(slot, 0).UTC().Date()
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, int64(y), 10)
		buf = append(buf, '-', byte('0'+m/10), byte('0'+m%10))
	}
	return buf
}

var (
	burstTTL    = millis(meter.BurstWindow + meter.BurstSlot)
	lifetimeTTL = millis(meter.LifetimeCounterIdle)
)

// ttlArg is how long a counter written at now lives, in milliseconds.
func ttlArg(p meter.Period, now time.Time) string {
	switch p {
	case meter.PeriodTrailing:
		return burstTTL
	case meter.PeriodLifetime:
		return lifetimeTTL
	}
	return millis(meter.MonthStart(now).Add(meter.MonthCounterKeep).Sub(now))
}

// appendBudgetArgs appends the budgets' counter keys, then their
// generations' keys, and their arguments as budgetReserve reads them, and
// returns the period slot each amount goes to.
func (c *RedisCounters) appendBudgetArgs(keys, args []string, now time.Time, budgets []meter.Budget, amounts []int64) ([]string, []string, [meter.MaxReservation]int64) {
	month := meter.MonthStart(now).Unix()
	cur := meter.BurstSlotStart(now).Unix()
	curArg := strconv.FormatInt(cur, 10)
	oldestArg := strconv.FormatInt(meter.BurstWindowStart(now).Unix(), 10)
	var slots [meter.MaxReservation]int64
	var gens [meter.MaxReservation]string
	for i := range budgets {
		b := &budgets[i]
		p := b.Kind.Period()
		switch p {
		case meter.PeriodMonth:
			slots[i] = month
		case meter.PeriodTrailing:
			slots[i] = cur
		}
		var key string
		key, gens[i] = c.budgetKeys(b, slots[i])
		keys = append(keys, key)
		args = append(args, periodArg(p), strconv.FormatInt(b.Cap, 10), strconv.FormatInt(amounts[i], 10), ttlArg(p, now), curArg, oldestArg)
	}
	return append(keys, gens[:len(budgets)]...), args, slots
}

// recordReservation fills r with a reservation the store made on the
// counters of generations gens.
func recordReservation(r *meter.Reservation, budgets []meter.Budget, amounts []int64, slots *[meter.MaxReservation]int64, gens []rueidis.RedisMessage) error {
	if len(gens) != len(budgets) {
		return fmt.Errorf("%d generations for %d budgets", len(gens), len(budgets))
	}
	for i := range gens {
		g, err := gens[i].ToString()
		if err != nil {
			return err
		}
		r.Generations[i] = g
	}
	r.N = len(budgets)
	copy(r.Budgets[:], budgets)
	copy(r.Amounts[:], amounts)
	r.Slots = *slots
	return nil
}

// exec runs one script call and returns its array answer, never empty.
func (c *RedisCounters) exec(ctx context.Context, s *rueidis.Lua, keys, args []string) ([]rueidis.RedisMessage, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	vals, err := s.Exec(ctx, c.client, keys, args).ToArray()
	if err == nil && len(vals) == 0 {
		err = errors.New("empty answer")
	}
	return vals, err
}

// seedMissing seeds the counters a script reported missing (0-based
// indexes into budgets).
func (c *RedisCounters) seedMissing(ctx context.Context, now time.Time, budgets []meter.Budget, keys []string, missing []rueidis.RedisMessage) error {
	for _, m := range missing {
		i, err := m.AsInt64()
		if err != nil || i < 0 || int(i) >= len(budgets) {
			return countersDown("seed budget", fmt.Errorf("unexpected answer %v", m))
		}
		key, b := keys[i], budgets[i]
		// The ledger query is shared by this process's callers, so no
		// one caller's cancellation cuts it short; each waits only as
		// long as its own context allows.
		ch := c.seeding.DoChan(key, func() (any, error) { return nil, c.seed(context.WithoutCancel(ctx), now, &b, key) })
		select {
		case res := <-ch:
			if res.Err != nil {
				return res.Err
			}
		case <-ctx.Done():
			return countersDown(fmt.Sprintf("seed %s budget", b.Kind), ctx.Err())
		}
	}
	return nil
}

// seed writes b's counter at key from the ledger, with a new generation,
// unless it exists.
func (c *RedisCounters) seed(ctx context.Context, now time.Time, b *meter.Budget, key string) error {
	cctx, cancel := c.call(ctx)
	n, err := c.client.Do(cctx, c.client.B().Exists().Key(key).Build()).AsInt64()
	cancel()
	if err != nil {
		return countersDown(fmt.Sprintf("seed %s budget", b.Kind), err)
	}
	if n == 1 {
		return nil // seeded meanwhile
	}
	sctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, counterSeedTimeout)
		defer cancel()
	}
	from, slot := meter.SeedSpan(b.Kind, now)
	vals, err := c.seeder.SeedBudget(sctx, *b, from, now, slot)
	if err != nil {
		return countersDown(fmt.Sprintf("seed %s budget", b.Kind), err)
	}
	p := b.Kind.Period()
	// Unique across processes as lease ids are: no other seed of this
	// counter, before or after, writes the same generation.
	args := []string{periodArg(p), ttlArg(p, now), c.idPrefix + strconv.FormatUint(c.seq.Add(1), 36)}
	if p == meter.PeriodTrailing {
		cur := meter.BurstSlotStart(now).Unix()
		for i, v := range vals {
			s := from.Unix() + int64(i)*int64(meter.BurstSlot/time.Second)
			if s > cur {
				break
			}
			if v > 0 {
				args = append(args, strconv.FormatInt(s, 10), strconv.FormatInt(v, 10))
			}
		}
	} else {
		var sum int64
		for _, v := range vals {
			sum += max(v, 0)
		}
		args = append(args, strconv.FormatInt(sum, 10))
	}
	_, gen := c.budgetKeys(b, meter.MonthStart(now).Unix())
	cctx, cancel = c.call(ctx)
	defer cancel()
	if err := seedScript.Exec(cctx, c.client, []string{key, gen}, args).Error(); err != nil {
		return countersDown(fmt.Sprintf("seed %s budget", b.Kind), err)
	}
	return nil
}

// appendSettleArgs appends the keys of the counters settling r to actual
// may change, each in the period slot its amount went to, then their
// generations' keys, and their arguments as budgetSettle reads them. An
// amount settling unchanged still changes a counter rebuilt since it was
// reserved; only one reserved and costing nothing changes none.
func (c *RedisCounters) appendSettleArgs(keys, args []string, r *meter.Reservation, actual []int64) ([]string, []string) {
	var gens [meter.MaxReservation]string
	n := 0
	for i := range r.N {
		if actual[i] == 0 && r.Amounts[i] == 0 {
			continue
		}
		b := &r.Budgets[i]
		var key string
		key, gens[n] = c.budgetKeys(b, r.Slots[i])
		n++
		keys = append(keys, key)
		args = append(args, periodArg(b.Kind.Period()), strconv.FormatInt(actual[i]-r.Amounts[i], 10), strconv.FormatInt(r.Slots[i], 10),
			strconv.FormatInt(actual[i], 10), r.Generations[i])
	}
	return append(keys, gens[:n]...), args
}

// Usage implements meter.Counters.
func (c *RedisCounters) Usage(ctx context.Context, now time.Time, budgets []meter.Budget, out []meter.BudgetState) error {
	if len(out) < len(budgets) {
		return fmt.Errorf("cannot read budgets: %d budgets but room for %d states", len(budgets), len(out))
	}
	for i := range budgets {
		if err := meter.CheckBudget(&budgets[i]); err != nil {
			return err
		}
	}
	if len(budgets) == 0 {
		return nil
	}
	if err := new(tenants).budgets(budgets).err("read budgets"); err != nil {
		return err
	}
	month := meter.MonthStart(now).Unix()
	oldestArg := strconv.FormatInt(meter.BurstWindowStart(now).Unix(), 10)
	keys := make([]string, len(budgets))
	args := make([]string, 0, 2*len(budgets))
	for i := range budgets {
		keys[i], _ = c.budgetKeys(&budgets[i], month)
		args = append(args, periodArg(budgets[i].Kind.Period()), oldestArg)
	}
	for attempt := 0; ; attempt++ {
		vals, err := c.exec(ctx, usageScript, keys, args)
		if err != nil {
			return countersDown("read budgets", err)
		}
		first, err := vals[0].AsInt64()
		switch {
		case err != nil:
			return countersDown("read budgets", err)
		case first == 0 && len(vals) == 1+2*len(budgets):
			return budgetStates(vals[1:], budgets, now, out)
		case first != -2 || attempt > 0:
			return countersDown("read budgets", fmt.Errorf("unexpected answer %d", first))
		}
		if err := c.seedMissing(ctx, now, budgets, keys, vals[1:]); err != nil {
			return err
		}
	}
}

func budgetStates(vals []rueidis.RedisMessage, budgets []meter.Budget, now time.Time, out []meter.BudgetState) error {
	for i := range budgets {
		s, err := vals[2*i].ToString()
		if err != nil {
			return countersDown("read budgets", err)
		}
		used, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return countersDown("read budgets", err)
		}
		first, err := vals[2*i+1].AsInt64()
		if err != nil {
			return countersDown("read budgets", err)
		}
		out[i] = meter.BudgetState{Used: used}
		switch budgets[i].Kind.Period() {
		case meter.PeriodMonth:
			out[i].ResetAt = meter.NextMonth(now).Unix()
		case meter.PeriodTrailing:
			if first > 0 {
				out[i].ResetAt = first + int64(meter.BurstWindow/time.Second)
			}
		}
	}
	return nil
}

// admitScript admits one request in one script: every counter is
// read, checked and changed with no other call in between.
//
// KEYS: the windows, then the lease set (when there is a lease), then the
// budgets' counters, then their generations. ARGV: the number of windows,
// 1 when there is a lease else 0, now (ms); three per window as windowsHit
// reads them; the lease's limit, TTL (ms) and id; six per budget as
// budgetReserve reads them.
//
// Returns {-2, i, ...} (0-based budget indexes) when budget counters are
// missing, having changed nothing; else {outcome, budget index, count1,
// reset1, ...} with outcome 0 admitted, 1 a window is full, 2 the lease's
// slots are all held, 3 the budget at the index would go over its cap;
// once admitted, the budgets' generations follow the windows.
var admitScript = rueidis.NewLuaScript(windowsHit + leaseSlots + budgetLimbs + budgetReserve + redisNowMs + `
local nw, nl = tonumber(ARGV[1]), tonumber(ARGV[2])
local bk, la = nw + nl, 3 + 3 * nw
local ba, nb = la + 3 * nl, (#KEYS - nw - nl) / 2
local used, need = budgetsUsed(bk, ba, nb)
if #need > 1 then return need end
local out = {0, 0}
if hit(0, 3, nw, tonumber(ARGV[3]), out) == 0 then
  out[1] = 1
  return out
end
if nl == 1 and leaseFull(KEYS[nw + 1], ARGV[la + 1], now) then
  out[1] = 2
  return out
end
local over = budgetsOver(bk, ba, nb, used)
if over >= 0 then
  out[1], out[2] = 3, over
  return out
end
if nl == 1 then leaseTake(KEYS[nw + 1], ARGV[la + 2], ARGV[la + 3], now) end
for _, g in ipairs(budgetsAdd(bk, ba, nb)) do out[#out + 1] = g end
return out
`)

// finishScript settles a reservation and releases a lease in one script.
//
// KEYS: the counters whose amount may change, then their generations,
// then the lease set (when there is a lease). ARGV[1]: the lease id, empty
// for none; then five per counter as budgetSettle reads them.
var finishScript = rueidis.NewLuaScript(budgetSettle + `
local nl = 0
if ARGV[1] ~= '' then nl = 1 end
settle(0, 1, (#KEYS - nl) / 2)
if nl == 1 then redis.call('ZREM', KEYS[#KEYS], ARGV[1]) end
return 0
`)

// The outcomes admitScript answers.
var admitOutcomes = [...]meter.AdmitRefusal{meter.AdmitOK, meter.AdmitWindow, meter.AdmitConcurrency, meter.AdmitBudget}

// Admit implements meter.Counters: one script call, plus the seeding
// round trips when a budget counter is missing (the script then answers
// which, having changed nothing; the counters are seeded and the script
// runs once more). The lease runs on the Redis clock, and an admitted lease
// is renewed from the moment Admit returns it until Finish. A lease limit of 0 or
// less admits nobody.
func (c *RedisCounters) Admit(ctx context.Context, now time.Time, a *meter.Admission, r *meter.Reservation) (meter.AdmitResult, error) {
	*r = meter.Reservation{}
	if err := meter.CheckWindows(a.Windows, a.WindowOut); err != nil {
		return meter.AdmitResult{}, err
	}
	if err := meter.CheckAmounts(a.Budgets, a.Amounts); err != nil {
		return meter.AdmitResult{}, err
	}
	nw, nb, nl := len(a.Windows), len(a.Budgets), 0
	if a.LeaseKey != "" {
		nl = 1
	}
	if nw+nl+nb == 0 {
		return meter.AdmitResult{}, nil
	}
	var tc tenants
	if nl == 1 {
		tc.add(a.LeaseTenant)
	}
	if err := tc.windows(a.Windows).budgets(a.Budgets).err("admit request"); err != nil {
		return meter.AdmitResult{}, err
	}
	nowMs := now.UnixMilli()
	keys := make([]string, 0, nw+nl+2*nb)
	args := make([]string, 3, 3+3*nw+3*nl+6*nb)
	args[0], args[1], args[2] = strconv.Itoa(nw), strconv.Itoa(nl), strconv.FormatInt(nowMs, 10)
	keys, args = c.appendWindowArgs(keys, args, nowMs, a.Windows)
	var lease meter.Lease
	if nl == 1 {
		lease = c.newLease(a.LeaseTenant, a.LeaseKey)
		keys = append(keys, c.leaseKey(a.LeaseTenant, a.LeaseKey))
		args = append(args, strconv.FormatInt(a.LeaseLimit, 10), millis(c.leaseTTL), lease.ID)
	}
	keys, args, slots := c.appendBudgetArgs(keys, args, now, a.Budgets, a.Amounts)
	for attempt := 0; ; attempt++ {
		vals, err := c.exec(ctx, admitScript, keys, args)
		if err != nil {
			if nl == 1 {
				// Redis may have run the script and taken the lease.
				c.abandon(lease)
			}
			return meter.AdmitResult{}, countersDown("admit request", err)
		}
		outcome, err := vals[0].AsInt64()
		if err != nil {
			return meter.AdmitResult{}, countersDown("admit request", err)
		}
		if outcome == -2 && attempt == 0 {
			if err := c.seedMissing(ctx, now, a.Budgets, keys[nw+nl:], vals[1:]); err != nil {
				return meter.AdmitResult{}, err
			}
			continue
		}
		if outcome < 0 || int(outcome) >= len(admitOutcomes) || len(vals) < 2 {
			return meter.AdmitResult{}, countersDown("admit request", fmt.Errorf("unexpected answer %d", outcome))
		}
		res := meter.AdmitResult{Refused: admitOutcomes[outcome]}
		if res.Refused == meter.AdmitOK && nl == 1 {
			// Renewed from now on, even should the rest of the answer
			// be unreadable: the caller then never finishes it, and
			// the slot expires within the TTL once forgotten.
			res.Lease = lease
			c.hold(lease)
		}
		states, gens := vals[2:], []rueidis.RedisMessage(nil)
		if res.Refused == meter.AdmitOK && len(states) >= 2*nw {
			states, gens = states[:2*nw], states[2*nw:]
		}
		bi, err := vals[1].AsInt64()
		if err == nil {
			err = windowStates(states, a.Windows, a.WindowOut)
		}
		switch {
		case err != nil:
		case res.Refused == meter.AdmitOK:
			err = recordReservation(r, a.Budgets, a.Amounts, &slots, gens)
		case res.Refused == meter.AdmitBudget && (bi < 0 || int(bi) >= nb):
			err = fmt.Errorf("budget index %d of %d", bi, nb)
		case res.Refused == meter.AdmitBudget:
			res.Budget = int(bi)
		}
		if err != nil {
			return meter.AdmitResult{}, countersDown("admit request", err)
		}
		return res, nil
	}
}

// Finish implements meter.Counters: one script call that settles r and
// releases lease. It runs even when ctx is cancelled: what a request cost
// is counted, and its slot given back, whether or not its client stayed. A caller error (actual not matching r) changes nothing, the
// lease included.
func (c *RedisCounters) Finish(ctx context.Context, lease meter.Lease, r *meter.Reservation, actual []int64) error {
	if err := meter.CheckFinish(r, actual); err != nil {
		return err
	}
	var tc tenants
	if lease.ID != "" {
		tc.add(lease.Tenant)
	}
	if err := tc.budgets(r.Budgets[:r.N]).err("finish request"); err != nil {
		return err
	}
	var keys []string
	args := []string{""}
	if !r.MarkSettled() {
		keys, args = c.appendSettleArgs(keys, args, r, actual)
	}
	if lease.ID != "" {
		c.forget(lease)
		keys = append(keys, c.leaseKey(lease.Tenant, lease.Key))
		args[0] = lease.ID
	}
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := c.detached(ctx)
	defer cancel()
	if err := finishScript.Exec(ctx, c.client, keys, args).Error(); err != nil {
		if lease.ID != "" {
			c.abandon(lease) // the release may not have run
		}
		return countersDown("finish request", err)
	}
	return nil
}
