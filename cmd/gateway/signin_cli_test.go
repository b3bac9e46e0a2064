package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// pendingCode starts a device login directly in the database and returns
// its hash.
func pendingCode(t *testing.T, db *storage.DB, userCode string) [32]byte {
	t.Helper()
	var b [32]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	h := sha256.Sum256(b[:])
	require.NoError(t, db.CreateDeviceCode(context.Background(), storage.NewDeviceCode{Hash: h, UserCode: userCode,
		Lifetime: 15 * time.Minute, Interval: 5 * time.Second}))
	return h
}

func TestAdminDeviceCommands(t *testing.T) {
	db := storetest.DB(t)
	url := db.Pool.Config().ConnString()
	ctx := context.Background()
	org := admin(t, url, "org", "create", "--name", "Acme")
	solo := admin(t, url, "user", "create", "--email", "solo@example.com")
	member := admin(t, url, "user", "create", "--email", "mem@example.com", "--org", org["id"].(string), "--role", "admin")

	h := pendingCode(t, db, "BCDFGHJK")
	out := admin(t, url, "device", "approve", "--user-code", "bcdf-ghjk", "--user", solo["id"].(string))
	require.Equal(t, map[string]any{"user_code": "BCDF-GHJK", "status": "approved", "user_id": solo["id"],
		"org": map[string]any{"id": solo["personal_org_id"], "name": "solo@example.com", "role": "owner"}}, out,
		"a user with one organization needs no --org")
	p, err := db.PollDeviceCode(ctx, h, 0)
	require.NoError(t, err)
	require.Equal(t, storage.DeviceApproved, p.Status)

	pendingCode(t, db, "LMNPQRST")
	out = admin(t, url, "device", "approve", "--user-code", "LMNP-QRST", "--user", member["id"].(string),
		"--org", org["id"].(string))
	require.Equal(t, map[string]any{"id": org["id"], "name": "Acme", "role": "admin"}, out["org"])

	h = pendingCode(t, db, "VWXZBCDF")
	require.Equal(t, map[string]any{"user_code": "VWXZ-BCDF", "status": "denied"},
		admin(t, url, "device", "deny", "--user-code", "vwxz bcdf"))
	p, err = db.PollDeviceCode(ctx, h, 0)
	require.NoError(t, err)
	require.Equal(t, storage.DeviceDenied, p.Status)

	pendingCode(t, db, "GHJKLMNP")
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no code", []string{"device", "approve", "--user", solo["id"].(string)}, 2, "--user-code is required"},
		{"no user", []string{"device", "approve", "--user-code", "GHJK-LMNP"}, 2, "--user is required"},
		{"malformed code", []string{"device", "approve", "--user-code", "HELLO", "--user", solo["id"].(string)}, 2,
			"not a device code"},
		{"several organizations", []string{"device", "approve", "--user-code", "GHJK-LMNP", "--user", member["id"].(string)},
			2, "--org is required"},
		{"not a member", []string{"device", "approve", "--user-code", "GHJK-LMNP", "--user", solo["id"].(string),
			"--org", org["id"].(string)}, 1, "not a member"},
		{"unknown user", []string{"device", "approve", "--user-code", "GHJK-LMNP", "--user", "nobody"}, 1, "does not exist"},
		{"unknown code", []string{"device", "approve", "--user-code", "ZZZZ-ZZZZ", "--user", solo["id"].(string)}, 1,
			"unknown, expired or already decided"},
		{"decided code", []string{"device", "deny", "--user-code", "BCDF-GHJK"}, 1, "unknown, expired or already decided"},
		{"deny without code", []string{"device", "deny"}, 2, "--user-code is required"},
		{"unknown verb", []string{"device", "revoke", "--user-code", "GHJK-LMNP"}, 2, "unknown command"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(append(append([]string{"admin"}, c.args...), "--database-url", url)...)
			require.Equal(t, c.code, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, c.msg)
		})
	}
	require.NoError(t, db.PendingDeviceCode(ctx, "GHJKLMNP"), "no failed command decided the code")
	code, _, stderr := runCLI("admin")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "device approve --user-code CODE --user USER_ID [--org ORG_ID]")
	require.Contains(t, stderr, "device deny --user-code CODE")
}
