package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/child"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/storage/storetest"
)

// killed is one request of the load on a fleet one of whose processes is
// SIGKILLed.
type killed struct {
	id    string
	proc  int
	acked time.Time // when its last frame arrived; zero when it never completed
}

// killWarmup is how long the victim serves the load before it is killed.
const killWarmup = 500 * time.Millisecond

// Three gateway processes serve a streaming load on one key with a
// concurrency ceiling; one of them, holding streams, is SIGKILLed mid-load.
// Every request it answered completely has exactly one ledger row once a
// process started on its spool directory has replayed its crash journal,
// its leases keep counting fleet-wide until they expire, and they come
// back within the lease time: not before their expiry on the Redis clock,
// and all of them by the lease time after the kill.
//
// Every check of the leases is made against what Redis holds: the test
// reads the lease set and the Redis clock, so a request of its own that
// holds a slot for a moment cannot be mistaken for a process's view of the
// slots (the old two-process test raced its own probes for them).
func TestKilledProcessLosesNoRowAndItsLeasesComeBack(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: this test builds and starts three gateway processes")
	}
	const (
		ceiling = 6 // the key's max_concurrent_requests
		held    = 2 // long streams on the process that is killed
		clients = 3 // closed-loop load clients, round-robin over the fleet
	)
	dbURL := storetest.DatabaseURL(t)
	redisURL := storetest.RedisURL(t)
	bin := buildGateway(t)
	out, err := exec.Command(bin, "migrate", "--database-url", dbURL).CombinedOutput()
	require.NoError(t, err, "%s", out)
	tn := newTenant(t, dbURL, "kill@example.com")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.yaml")
	require.NoError(t, os.WriteFile(cfgPath, fmt.Appendf(nil, "plans:\n  default:\n    max_concurrent_requests: %d\n", ceiling), 0o600))
	procs := make([]*child.Process, 3)
	for i := range procs {
		name := fmt.Sprintf("gw%d", i)
		p, err := child.Start(context.Background(), name, bin, nil, []string{"listening"},
			"serve", "--addr", "127.0.0.1:0", "--admin-addr", "", "--database-url", dbURL, "--redis-url", redisURL,
			"--config", cfgPath, "--ledger-spool-dir", filepath.Join(dir, name))
		require.NoError(t, err)
		t.Cleanup(p.Stop)
		procs[i] = p
	}
	victim, survivors := procs[0], procs[1:]
	// Every process has the key cached before the load: a first lookup on
	// a loaded machine may outlast its bound and answer 503.
	for _, p := range procs {
		require.Eventually(t, func() bool { return call(t, p.Addr, "GET", "/api/v1/me", tn.key, nil).status == 200 },
			20*time.Second, 50*time.Millisecond, "%s never accepted the key", p.Name)
	}

	rc := storetest.Redis(t)
	leaseKey := "gw:lease:cc:" + tn.keyID
	// The victim holds two streams, taken one after the other with nothing
	// else in flight: the lease set then holds its leases alone, which
	// names the victim's lease ids.
	for range held {
		require.NotNil(t, holdStream(t, victim.Addr, tn.key), "the victim refused a stream under the ceiling")
	}
	leases := readLeases(t, rc, leaseKey)
	require.Len(t, leases, held, "the victim's streams hold one lease each")
	victimIDs := leases[0].id[:strings.LastIndexByte(leases[0].id, '-')+1]

	// The load: closed-loop streams of a few tokens, round-robin over the
	// three processes, each with a request id of its own.
	var (
		mu   sync.Mutex
		reqs []killed
		seq  atomic.Int64
		stop = make(chan struct{})
		wg   sync.WaitGroup
		// acked counts the requests the victim answered at least age ago.
		acked = func(age time.Duration) int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, r := range reqs {
				if r.proc == 0 && !r.acked.IsZero() && time.Since(r.acked) >= age {
					n++
				}
			}
			return n
		}
	)
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := seq.Add(1)
				k := killed{id: fmt.Sprintf("kill-%d", n), proc: int(n % int64(len(procs)))}
				if streamOnce(procs[k.proc].Addr, tn.key, k.id) {
					k.acked = time.Now()
				}
				mu.Lock()
				reqs = append(reqs, k)
				mu.Unlock()
			}
		})
	}
	// Mid-load, once the victim has been answering for a while.
	require.Eventually(t, func() bool { return acked(killWarmup) >= 5 }, 30*time.Second, 50*time.Millisecond,
		"the victim answered too little load")
	require.NoError(t, syscall.Kill(victim.PID, syscall.SIGKILL))
	kill := time.Now()
	close(stop)
	wg.Wait()

	// The leases first: the check that they still count must come before
	// the first of them expires. The survivors' own load has ended; once
	// its releases are done the set holds the victim's leases alone: its
	// held streams and whatever load it was serving when it died.
	var dead []lease
	require.Eventually(t, func() bool {
		dead = dead[:0]
		for _, l := range readLeases(t, rc, leaseKey) {
			if !strings.HasPrefix(l.id, victimIDs) {
				return false
			}
			dead = append(dead, l)
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "the survivors' load never released its slots")
	require.GreaterOrEqual(t, len(dead), held, "the victim's held streams' leases are gone before their time")
	expiries := make([]int64, len(dead))
	for i, l := range dead {
		expiries[i] = l.expiry
	}
	slices.Sort(expiries)
	// No lease of the dead process outlives the lease time from the kill
	// (its last renewal was before the kill).
	require.LessOrEqual(t, expiries[len(expiries)-1]-redisNow(t, rc), meter.LeaseTTL.Milliseconds())

	// The dead process's leases still count: the survivors fill the rest
	// of the ceiling and are refused one more, before the first expiry.
	survivor := func(i int) string { return survivors[i%len(survivors)].Addr }
	for i := range ceiling - len(dead) {
		require.NotNil(t, holdStream(t, survivor(i), tn.key), "a survivor refused a slot the dead process did not hold")
	}
	require.Nil(t, holdStream(t, survivor(0), tn.key), "the dead process's leases stopped counting")
	require.Less(t, redisNow(t, rc), expiries[0], "the check that they still count came after they expired: inconclusive")

	// They come back one by one as they expire on the Redis clock: an
	// attempt is admitted only once another lease has expired, and refused
	// only while it has not.
	back := 0
	for i := 0; back < len(dead); i++ {
		require.Less(t, time.Since(kill), meter.LeaseTTL+5*time.Second, "the dead process's leases did not come back within their lease time (%d of %d)", back, len(dead))
		before := redisNow(t, rc)
		s := holdStream(t, survivor(i), tn.key)
		after := redisNow(t, rc)
		if s != nil {
			require.GreaterOrEqual(t, after, expiries[back], "a slot came back before the dead process's lease expired")
			back++
			t.Logf("slot %d of %d came back %v after the kill", back, len(dead), time.Since(kill).Round(time.Millisecond))
			continue
		}
		require.Less(t, before, expiries[back], "a slot whose lease had expired was refused")
		time.Sleep(50 * time.Millisecond)
	}
	require.Nil(t, holdStream(t, survivor(0), tn.key), "the survivors hold the whole ceiling")
	t.Logf("lease time %v; the victim answered %d requests and held %d slots when it died", meter.LeaseTTL, acked(0), len(dead))

	// The ledger: a process started on the victim's spool directory
	// replays the journal the victim left (its lock died with it), so every
	// request the victim answered completely has exactly one row, however
	// close to the kill it was answered; the survivors' rows all arrive.
	replacement, err := child.Start(context.Background(), "gw0-replacement", bin, nil, []string{"listening"},
		"serve", "--addr", "127.0.0.1:0", "--admin-addr", "", "--database-url", dbURL, "--redis-url", redisURL,
		"--config", cfgPath, "--ledger-spool-dir", filepath.Join(dir, "gw0"))
	require.NoError(t, err)
	t.Cleanup(replacement.Stop)
	conn, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rowsOf := func(ids []string) map[string]int {
		rows, err := conn.Query(context.Background(), "select request_id, status from request_log where request_id = any($1)", ids)
		require.NoError(t, err)
		got := map[string]int{}
		for rows.Next() {
			var id string
			var status int
			require.NoError(t, rows.Scan(&id, &status))
			require.Equal(t, 200, status, "request %s", id)
			got[id]++
		}
		require.NoError(t, rows.Err())
		return got
	}
	var mustVictim, mustSurvivors []string
	var lastVictim time.Duration // how long before the kill the victim's last answer completed
	lastVictim = time.Hour
	for _, r := range reqs {
		switch {
		case r.acked.IsZero():
		case r.proc != 0:
			mustSurvivors = append(mustSurvivors, r.id)
		default:
			mustVictim = append(mustVictim, r.id)
			lastVictim = min(lastVictim, kill.Sub(r.acked))
		}
	}
	require.NotEmpty(t, mustVictim)
	missing := func(ids []string) []string {
		got := rowsOf(ids)
		var out []string
		for _, id := range ids {
			if got[id] == 0 {
				out = append(out, id)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(missing(mustVictim)) == 0 }, 20*time.Second, 50*time.Millisecond,
		"a request the victim answered completely has no ledger row after its journal was replayed")
	for id, n := range rowsOf(mustVictim) {
		require.Equal(t, 1, n, "the victim's request %s has %d rows", id, n)
	}
	require.Eventually(t, func() bool { return len(missing(mustSurvivors)) == 0 }, 10*time.Second, 50*time.Millisecond,
		"a survivor's answered request has no ledger row")
	for id, n := range rowsOf(mustSurvivors) {
		require.Equal(t, 1, n, "request %s has %d rows", id, n)
	}
	t.Logf("ledger: all %d rows of the victim's answers (the last answered %v before the kill), %d of the survivors'",
		len(mustVictim), lastVictim.Round(time.Millisecond), len(mustSurvivors))
}

// streamOnce sends one short stream to addr and reports whether it
// completed: a 200 whose body ended with its usage and [DONE].
func streamOnce(addr, key, requestID string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/api/v1/chat", strings.NewReader(
		`{"model":"mira","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"load [[sim:tokens=4]] [[sim:itl_ms=20]]"}]}`))
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", requestID)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer r.Body.Close()
	body, err := io.ReadAll(bufio.NewReader(r.Body))
	if err != nil || r.StatusCode != http.StatusOK {
		if r.StatusCode == http.StatusTooManyRequests {
			time.Sleep(20 * time.Millisecond) // the ceiling, for a moment: back off as clients do
		}
		return false
	}
	return strings.Contains(string(body), `"usage"`) && strings.HasSuffix(string(body), "data: [DONE]\n\n")
}

// lease is one member of a key's lease set: its id and its expiry on the
// Redis clock (ms).
type lease struct {
	id     string
	expiry int64
}

func readLeases(t *testing.T, rc rueidis.Client, key string) []lease {
	t.Helper()
	zs, err := rc.Do(context.Background(), rc.B().Zrange().Key(key).Min("0").Max("-1").Withscores().Build()).AsZScores()
	require.NoError(t, err)
	out := make([]lease, len(zs))
	for i, z := range zs {
		out[i] = lease{id: z.Member, expiry: int64(z.Score)}
	}
	return out
}

// redisNow is the Redis clock in milliseconds, the clock leases expire by.
func redisNow(t *testing.T, rc rueidis.Client) int64 {
	t.Helper()
	v, err := rc.Do(context.Background(), rc.B().Time().Build()).AsIntSlice()
	require.NoError(t, err)
	require.Len(t, v, 2)
	return v[0]*1000 + v[1]/1000
}
