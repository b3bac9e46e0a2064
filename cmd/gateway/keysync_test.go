package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
)

// laggard is one more process of the app's fleet, as PostgreSQL sees it: a
// key listener that answers each sync marker only after a pause. An answer
// that comes before its acknowledgement was sent without waiting for the
// fleet.
type laggard struct {
	mu    sync.Mutex
	acked int
}

func startLaggard(t *testing.T, dbURL string) *laggard {
	t.Helper()
	cc, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	cc.RuntimeParams["application_name"] = storage.ListenerApplicationName
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.ConnectConfig(ctx, cc)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "listen "+storage.KeySyncChannel)
	require.NoError(t, err)
	l := &laggard{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			token := n.Payload
			time.Sleep(200 * time.Millisecond)
			l.mu.Lock()
			l.acked++
			l.mu.Unlock()
			if _, err := conn.Exec(ctx, "select pg_notify($1, $2)", storage.KeyAckChannel, token); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; conn.Close(context.Background()) })
	return l
}

func (l *laggard) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked
}

// Every change to what the processes cache about keys answers only once
// every process has applied it, so the next request anywhere obeys it
// (spec: key validity, "401 from the next request").
func TestKeyChangesAnswerOnceTheFleetHasThem(t *testing.T) {
	ta := startTestApp(t)
	lag := startLaggard(t, ta.dbURL)
	owner := newTenant(t, ta.dbURL, "sync-owner@example.com")
	member := func(email string) (userID, key string) {
		u := admin(t, ta.dbURL, "user", "create", "--email", email, "--org", owner.orgID, "--role", "member")
		k := admin(t, ta.dbURL, "key", "create", "--user", u["id"].(string), "--org", owner.orgID)
		return u["id"].(string), k["access_token"].(string)
	}
	demoted, _ := member("sync-demoted@example.com")
	removed, _ := member("sync-removed@example.com")
	_, leaving := member("sync-leaving@example.com")
	ws := ta.call(t, "GET", "/api/v1/workspaces", owner.key, nil)
	require.Equal(t, 200, ws.status, "%s", ws.raw)
	wsID := ws.body["data"].([]any)[0].(map[string]any)["id"].(string)

	spare := admin(t, ta.dbURL, "key", "create", "--user", owner.userID, "--org", owner.orgID)
	key := owner.key
	for _, c := range []struct {
		name string
		do   func() int
	}{
		{"rotate", func() int {
			r := ta.call(t, "POST", "/api/v1/keys/"+owner.keyID+"/rotate", key, nil)
			if r.status == 200 {
				key = r.body["access_token"].(string)
			}
			return r.status
		}},
		{"role", func() int {
			return ta.call(t, "PATCH", "/api/v1/org/members/"+demoted, key, map[string]any{"role": "admin"}).status
		}},
		{"remove", func() int { return ta.call(t, "DELETE", "/api/v1/org/members/"+removed, key, nil).status }},
		{"leave", func() int { return ta.call(t, "DELETE", "/api/v1/org/memberships/"+owner.orgID, leaving, nil).status }},
		{"cap", func() int {
			return ta.call(t, "PATCH", "/api/v1/workspaces/"+wsID, key, map[string]any{"spend_cap_micros": 1000}).status
		}},
		{"revoke", func() int { return ta.call(t, "DELETE", "/api/v1/keys/"+spare["key_id"].(string), key, nil).status }},
		{"admin revoke", func() int {
			admin(t, ta.dbURL, "key", "revoke", "--key-id", owner.keyID)
			return 200
		}},
	} {
		before := lag.count()
		status := c.do()
		require.Less(t, status, 300, c.name)
		require.Greater(t, lag.count(), before, "%s answered before every process had applied it", c.name)
	}
}
