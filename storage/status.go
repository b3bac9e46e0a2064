package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// statusLockKey is the session-level advisory lock the status prober holds
// while it leads: one process of the fleet probes at a time, and when it
// dies its session ends and another takes over. The value spells
// "gwstatus".
const statusLockKey int64 = 0x6777737461747573

// Probe is one measurement of a component.
type Probe struct {
	Component string
	CheckedAt time.Time
	OK        bool
	Latency   time.Duration
	// Error is a short failure class, empty on success.
	Error string
}

// BreakerReport is one process's breaker state for one component.
type BreakerReport struct {
	Component  string
	State      string
	ReportedAt time.Time
}

// StatusLeaderApplicationName marks the status lock's connection in
// pg_stat_activity.
const StatusLeaderApplicationName = "gateway-status-leader"

// StatusLeader is the advisory lock of the status prober, tried and held on
// a connection of its own, outside the pool and any pooler
// (Config.DirectURL): a session lock taken through a transaction pooler
// would stay on a server connection other clients then use. The
// connection stays open between tries, so a process that does not lead
// costs the database one idle session, not a connection a second.
type StatusLeader struct {
	db   *DB
	conn *pgx.Conn
	held bool
}

// NewStatusLeader returns a leader handle that holds nothing yet.
func (db *DB) NewStatusLeader() *StatusLeader { return &StatusLeader{db: db} }

// Lead reports whether this process leads the probing, trying to take the
// lock when it does not hold it. A held lock is checked on its connection
// first: a connection that no longer answers has lost the lock with it.
func (l *StatusLeader) Lead(ctx context.Context) (bool, error) {
	if l.held {
		if _, err := l.conn.Exec(ctx, `select 1`); err == nil {
			return true, nil
		}
		l.drop(ctx)
	}
	if l.conn == nil {
		c, err := l.db.connectDirect(ctx, StatusLeaderApplicationName)
		if err != nil {
			return false, fmt.Errorf("cannot connect for the status lock: %w", err)
		}
		l.conn = c
	}
	if err := l.conn.QueryRow(ctx, `select pg_try_advisory_lock($1)`, statusLockKey).Scan(&l.held); err != nil {
		l.drop(ctx)
		return false, fmt.Errorf("cannot take status lock: %w", err)
	}
	return l.held, nil
}

// Release gives the lock up, so another process takes over at once, and
// closes its connection.
func (l *StatusLeader) Release(ctx context.Context) {
	if l.conn == nil {
		return
	}
	if l.held {
		// Unlocked before the session ends: the server ends a session
		// after the client has gone, and the next process to try should
		// find the lock free.
		_, _ = l.conn.Exec(ctx, `select pg_advisory_unlock($1)`, statusLockKey)
	}
	l.drop(ctx)
}

// drop closes the lock's connection: whatever it held ends with it.
func (l *StatusLeader) drop(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = l.conn.Close(ctx)
	l.conn, l.held = nil, false
}

// RecordProbe stores one measurement and deletes the component's
// measurements older than keep before it.
func (db *DB) RecordProbe(ctx context.Context, p Probe, keep time.Duration) error {
	var errText *string
	if !p.OK {
		e := p.Error
		errText = &e
	}
	b := &pgx.Batch{}
	b.Queue(`insert into status_probes (component, checked_at, ok, latency_ms, error) values ($1, $2, $3, $4, $5)
		on conflict (component, checked_at) do update set ok = excluded.ok, latency_ms = excluded.latency_ms, error = excluded.error`,
		p.Component, p.CheckedAt, p.OK, p.Latency.Milliseconds(), errText)
	b.Queue(`delete from status_probes where component = $1 and checked_at < $2`, p.Component, p.CheckedAt.Add(-keep))
	if err := db.Pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("cannot record probe: %w", err)
	}
	return nil
}

// RecentProbes returns, per component, its newest measurements at or after
// since, newest first, at most limit each.
func (db *DB) RecentProbes(ctx context.Context, since time.Time, limit int) (map[string][]Probe, error) {
	var out map[string][]Probe
	err := db.read(func(q querier) error {
		out = map[string][]Probe{}
		rows, err := q.Query(ctx, `select component, checked_at, ok, latency_ms, coalesce(error, '') from (
				select *, row_number() over (partition by component order by checked_at desc) as n
				from status_probes where checked_at >= $1) p
			where n <= $2 order by component, checked_at desc`, since, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p Probe
			var ms int64
			if err := rows.Scan(&p.Component, &p.CheckedAt, &p.OK, &ms, &p.Error); err != nil {
				return err
			}
			p.Latency = time.Duration(ms) * time.Millisecond
			out[p.Component] = append(out[p.Component], p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read probes: %w", err)
	}
	return out, nil
}

// ReportBreakers replaces this process's breaker states, and deletes
// reports of any process older than forget (processes that are gone).
func (db *DB) ReportBreakers(ctx context.Context, processID string, states map[string]string, at time.Time, forget time.Duration) error {
	if processID == "" {
		return errors.New("cannot report breakers: empty process id")
	}
	b := &pgx.Batch{}
	for comp, st := range states {
		b.Queue(`insert into status_breakers (process_id, component, state, reported_at) values ($1, $2, $3, $4)
			on conflict (process_id, component) do update set state = excluded.state, reported_at = excluded.reported_at`,
			processID, comp, st, at)
	}
	b.Queue(`delete from status_breakers where reported_at < $1`, at.Add(-forget))
	if err := db.Pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("cannot report breakers: %w", err)
	}
	return nil
}

// BreakerStates returns every breaker report at or after since, per
// component.
func (db *DB) BreakerStates(ctx context.Context, since time.Time) (map[string][]string, error) {
	var out map[string][]string
	err := db.read(func(q querier) error {
		out = map[string][]string{}
		rows, err := q.Query(ctx, `select component, state from status_breakers where reported_at >= $1`, since)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c, s string
			if err := rows.Scan(&c, &s); err != nil {
				return err
			}
			out[c] = append(out[c], s)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read breaker reports: %w", err)
	}
	return out, nil
}
