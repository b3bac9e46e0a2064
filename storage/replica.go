package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A read replica takes the reads that tolerate a bounded staleness — the
// status document's measurements and breaker reports, request-log lookups
// — off the primary. Everything a client writes and then reads back
// (keys, conversations, memories, vaults, organizations) stays on the
// primary: read-your-writes matters more there than the offload, and those
// reads are a small share of a fleet's queries next to the status document
// every process polls.
//
// The replica is used only while it is known to be caught up: every
// ReplicaCheckInterval the watcher samples the primary's WAL position and
// the replica's replay position, and the replica's staleness is the age of
// the newest primary sample it has replayed past. Above ReadMaxLag, or while
// the replica cannot be reached, reads go to the primary; a read that fails
// on the replica is tried once on the primary.

// ReplicaCheckInterval is how often the replica's staleness is measured.
const ReplicaCheckInterval = 250 * time.Millisecond

// replica is a read replica and what is known of its staleness.
type replica struct {
	pool   *pgxpool.Pool
	maxLag time.Duration
	// usable is set while the last check found the replica within maxLag.
	usable atomic.Bool
	// lag is the staleness the last check measured, in nanoseconds; -1
	// when the replica could not be measured.
	lag atomic.Int64
	// reads counts the reads served by the replica and by the primary
	// instead (the replica unusable, or failing).
	reads, fallbacks atomic.Uint64
}

// querier is what the read paths need of a pool.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// openReplica creates the replica's pool; like the primary's, it does not
// wait for the server.
func openReplica(ctx context.Context, cfg Config) (*replica, error) {
	pc, err := pgxpool.ParseConfig(cfg.ReadURL)
	if err != nil {
		return nil, fmt.Errorf("cannot parse database read url: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	if cfg.DirectURL != "" && !namesExecMode(cfg.ReadURL) {
		// Behind the same kind of pooler as the primary's pool.
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("cannot create read replica pool: %w", err)
	}
	r := &replica{pool: pool, maxLag: cfg.ReadMaxLag}
	r.lag.Store(-1)
	return r, nil
}

// read runs fn on the replica when it is usable, else (or when fn fails
// there for a reason other than finding no row) on the primary.
func (db *DB) read(fn func(q querier) error) error {
	r := db.replica
	if r == nil {
		return fn(db.Pool)
	}
	if r.usable.Load() {
		err := fn(r.pool)
		if err == nil || errors.Is(err, pgx.ErrNoRows) {
			r.reads.Add(1)
			return err
		}
	}
	r.fallbacks.Add(1)
	return fn(db.Pool)
}

// ReplicaStats reports the read replica: whether one is configured, its
// last measured staleness (negative when it could not be measured), and
// the reads it served and those that went to the primary instead.
func (db *DB) ReplicaStats() (configured bool, lag time.Duration, reads, fallbacks uint64) {
	r := db.replica
	if r == nil {
		return false, 0, 0, 0
	}
	return true, time.Duration(r.lag.Load()), r.reads.Load(), r.fallbacks.Load()
}

// WatchReplica measures the replica's staleness every interval until ctx
// ends (see the package comment above). Without a replica it returns at
// once.
func (db *DB) WatchReplica(ctx context.Context, interval time.Duration, log *slog.Logger) {
	r := db.replica
	if r == nil {
		return
	}
	w := lagWatch{keep: int(r.maxLag/interval) + 2, maxLag: r.maxLag}
	t := time.NewTicker(interval)
	defer t.Stop()
	wasUsable := false
	for {
		lag, err := w.check(ctx, db.Pool, r.pool, time.Now)
		usable := err == nil && lag <= r.maxLag
		r.usable.Store(usable)
		if err != nil {
			r.lag.Store(-1)
		} else {
			r.lag.Store(int64(lag))
		}
		if usable != wasUsable && ctx.Err() == nil {
			if usable {
				log.Info("read replica in use", "lag", lag)
			} else {
				log.Warn("read replica not in use; reads go to the primary", "lag", lag, "max_lag", r.maxLag, "err", err)
			}
			wasUsable = usable
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lagWatch keeps the recent samples of the primary's WAL position.
type lagWatch struct {
	keep    int
	maxLag  time.Duration
	samples []lsnSample // oldest first
}

type lsnSample struct {
	at  time.Time
	lsn uint64
}

// errNotReplica: the read URL names a server that is not replaying a
// primary's WAL, whose data may be anything.
var errNotReplica = errors.New("the read database is not a replica (pg_is_in_recovery is false)")

// check samples the primary, then the replica, and returns how stale the
// replica is: zero when it has replayed past the primary's position of this
// check, else the age of the newest earlier sample it has replayed past.
// Behind every kept sample, it is staler than the oldest, and at least
// more than maxLag (the history may be short: the first check has one
// sample).
func (w *lagWatch) check(ctx context.Context, primary, replica querier, now func() time.Time) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var text string
	if err := primary.QueryRow(cctx, `select pg_current_wal_lsn()::text`).Scan(&text); err != nil {
		return 0, fmt.Errorf("cannot read the primary's WAL position: %w", err)
	}
	p, err := parseLSN(text)
	if err != nil {
		return 0, err
	}
	at := now()
	w.samples = append(w.samples, lsnSample{at: at, lsn: p})
	if len(w.samples) > w.keep {
		w.samples = append(w.samples[:0], w.samples[len(w.samples)-w.keep:]...)
	}
	var recovering bool
	if err := replica.QueryRow(cctx, `select pg_is_in_recovery(), coalesce(pg_last_wal_replay_lsn(), '0/0')::text`).
		Scan(&recovering, &text); err != nil {
		return 0, fmt.Errorf("cannot read the replica's replay position: %w", err)
	}
	if !recovering {
		return 0, errNotReplica
	}
	r, err := parseLSN(text)
	if err != nil {
		return 0, err
	}
	for i := len(w.samples) - 1; i >= 0; i-- {
		if r >= w.samples[i].lsn {
			return at.Sub(w.samples[i].at), nil
		}
	}
	return max(at.Sub(w.samples[0].at), w.maxLag) + 1, nil
}

// parseLSN reads a pg_lsn's text form, two hexadecimal halves: "16/B374D848".
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("cannot parse WAL position %q", s)
	}
	return h<<32 | l, nil
}
