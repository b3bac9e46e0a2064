package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/edgegw/gateway/hotpath"
)

// KeyChannel is the PostgreSQL notification channel the key triggers use.
const KeyChannel = "gw_keys"

// ListenerApplicationName marks the listener's connection in
// pg_stat_activity. The part after the slash is the version of its
// protocol: 2 answers sync markers (SyncKeys).
const ListenerApplicationName = listenerNamePrefix + "2"

// listenerNamePrefix starts the name of every listener that answers sync
// markers, whatever later protocol version it speaks.
const listenerNamePrefix = "gateway-key-listener/"

// LegacyListenerApplicationName marks the listener of a release from
// before sync markers (schema version 14 and older): it applies
// notifications but answers no marker, so a mixed fleet's writers do not
// wait for it, and while one is connected the races it still runs may
// need mending afterwards (MendAfterOlderProcesses).
const LegacyListenerApplicationName = "gateway-key-listener"

// KeySyncChannel carries sync markers: a token each listener answers with
// on KeyAckChannel. PostgreSQL delivers the notifications of every channel
// in one order, that of their commits, so a listener reading a marker has
// read every key notification committed before it. A channel of its own
// keeps markers from releases that listen on KeyChannel only.
const KeySyncChannel = "gw_keys_sync"

// KeyAckChannel is where each listener answers a sync marker.
const KeyAckChannel = "gw_keys_ack"

// syncApplicationName marks SyncKeys' connection in pg_stat_activity.
const syncApplicationName = "gateway-key-sync"

// Invalidator is what the listener keeps true: hotpath.Verifier.
type Invalidator interface {
	Invalidate(h hotpath.TokenHash)
	Reset()
	SetLive(live bool)
}

var _ Invalidator = (*hotpath.Verifier)(nil)

// ListenConfig tunes the listener. Zero values take the defaults.
type ListenConfig struct {
	// Probe is how long the connection may sit silent before it is pinged.
	// Default 10s.
	Probe time.Duration
	// MaxBackoff caps the wait between reconnection attempts. Default 2s.
	MaxBackoff time.Duration
}

// ListenKeys holds one connection outside the pool (and outside any
// pooler: Config.DirectURL), LISTENs on KeyChannel and
// forwards every notification to inv until ctx ends. While it is not
// listening, inv is told so (SetLive(false)) and trusts nothing it caches;
// once listening again it goes live with a reset cache, since notifications
// may have been missed meanwhile.
func (db *DB) ListenKeys(ctx context.Context, inv Invalidator, cfg ListenConfig, log *slog.Logger) {
	if cfg.Probe == 0 {
		cfg.Probe = 10 * time.Second
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 2 * time.Second
	}
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := db.listenOnce(ctx, inv, cfg, log)
		inv.SetLive(false)
		if ctx.Err() != nil {
			return
		}
		log.Warn("key invalidation channel lost; key cache bypassed until it returns", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, cfg.MaxBackoff)
	}
}

func (db *DB) listenOnce(ctx context.Context, inv Invalidator, cfg ListenConfig, log *slog.Logger) error {
	conn, err := db.connectDirect(ctx, ListenerApplicationName)
	if err != nil {
		return fmt.Errorf("cannot connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "listen "+KeyChannel+"; listen "+KeySyncChannel); err != nil {
		return fmt.Errorf("cannot listen: %w", err)
	}
	inv.SetLive(true)
	log.Info("key invalidation channel listening")
	for {
		wctx, cancel := context.WithTimeout(ctx, cfg.Probe)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			if n.Channel == KeySyncChannel {
				// Every notification before the marker is applied: say so.
				if _, err := conn.Exec(ctx, "select pg_notify($1, $2)", KeyAckChannel, n.Payload); err != nil {
					return fmt.Errorf("cannot acknowledge sync: %w", err)
				}
				continue
			}
			dispatch(inv, n.Payload)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			pctx, cancel := context.WithTimeout(ctx, cfg.Probe)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("cannot ping: %w", err)
			}
		default:
			return fmt.Errorf("cannot wait for notification: %w", err)
		}
	}
}

// dispatch applies one payload: "k:<hex hash>" drops one key, anything else
// distrusts the whole cache.
func dispatch(inv Invalidator, payload string) {
	if hexHash, ok := strings.CutPrefix(payload, "k:"); ok {
		var h hotpath.TokenHash
		if n, err := hex.Decode(h[:], []byte(hexHash)); err == nil && n == len(h) {
			inv.Invalidate(h)
			return
		}
	}
	inv.Reset()
}

// SyncKeys returns once every process listening for key notifications has
// applied every one committed before the call: a key revoked, rotated or
// restricted, a membership, role or workspace cap changed. It counts the
// listeners' connections, sends a marker on KeySyncChannel and waits for
// each listener's answer on KeyAckChannel. A process that starts meanwhile
// starts with an empty cache, and one whose listener is down trusts
// nothing it caches (ListenKeys), so neither is waited for; nor is a
// release from before markers (LegacyListenerApplicationName), which
// applies the notification as it always did, within milliseconds. It
// returns how many answered and how many were counted; a listener that
// never answers (a process stopped in its tracks) holds it until ctx
// ends, which is then the error.
func (db *DB) SyncKeys(ctx context.Context) (acked, listeners int, err error) {
	conn, err := db.connectDirect(ctx, syncApplicationName)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot sync key caches: cannot connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "listen "+KeyAckChannel); err != nil {
		return 0, 0, fmt.Errorf("cannot sync key caches: %w", err)
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	if err := conn.QueryRow(ctx, `select count(*) from pg_stat_activity
		where datname = current_database() and starts_with(application_name, $1)`, listenerNamePrefix).Scan(&listeners); err != nil {
		return 0, 0, fmt.Errorf("cannot sync key caches: %w", err)
	}
	if listeners == 0 {
		return 0, 0, nil
	}
	if _, err := conn.Exec(ctx, "select pg_notify($1, $2)", KeySyncChannel, token); err != nil {
		return 0, listeners, fmt.Errorf("cannot sync key caches: %w", err)
	}
	for acked < listeners {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return acked, listeners, fmt.Errorf("cannot sync key caches: %d of %d processes answered: %w", acked, listeners, err)
		}
		if n.Channel == KeyAckChannel && n.Payload == token {
			acked++
		}
	}
	return acked, listeners, nil
}
