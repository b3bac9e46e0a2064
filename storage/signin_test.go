package storage_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

func randomHash(t *testing.T) [32]byte {
	t.Helper()
	var b [32]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return sha256.Sum256(b[:])
}

// newDeviceCode starts a device login with a five-second interval.
func newDeviceCode(t *testing.T, db *storage.DB, userCode string) [32]byte {
	t.Helper()
	h := randomHash(t)
	require.NoError(t, db.CreateDeviceCode(context.Background(), storage.NewDeviceCode{Hash: h, UserCode: userCode,
		Lifetime: 15 * time.Minute, Interval: 5 * time.Second}))
	return h
}

// rewindPoll moves the last counted poll an hour back, as if the client had
// waited its interval.
func rewindPoll(t *testing.T, db *storage.DB, h [32]byte) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(),
		`update device_codes set last_polled_at = now() - interval '1 hour' where hash = $1`, h[:])
	require.NoError(t, err)
}

func poll(t *testing.T, db *storage.DB, h [32]byte) storage.DevicePoll {
	t.Helper()
	p, err := db.PollDeviceCode(context.Background(), h, 0)
	require.NoError(t, err)
	return p
}

func TestDeviceCodeApproveAndRedeemOnce(t *testing.T) {
	db := storetest.DB(t)
	ctx := context.Background()
	org, u := seed(t, db)
	h := newDeviceCode(t, db, "BCDFGHJK")

	p := poll(t, db, h)
	require.Zero(t, p.RetryAfter)
	require.Equal(t, storage.DevicePending, p.Status)
	require.False(t, p.Expired)

	require.NoError(t, db.PendingDeviceCode(ctx, "BCDFGHJK"))
	other, err := db.CreateOrg(ctx, "Elsewhere")
	require.NoError(t, err)
	_, err = db.ApproveDeviceCode(ctx, "BCDFGHJK", u.ID, other.ID)
	require.ErrorIs(t, err, storage.ErrNotMember, "only an organization of the approver's")
	_, err = db.ApproveDeviceCode(ctx, "BCDFGHJK", u.ID, "not-a-uuid")
	require.ErrorIs(t, err, storage.ErrNotMember)
	got, err := db.ApproveDeviceCode(ctx, "BCDFGHJK", u.ID, org.ID)
	require.NoError(t, err)
	require.Equal(t, storage.OrgRole{ID: org.ID, Name: "Acme", Role: hotpath.RoleAdmin}, got)
	_, err = db.ApproveDeviceCode(ctx, "BCDFGHJK", u.ID, org.ID)
	require.ErrorIs(t, err, storage.ErrNotFound, "a decided code is decided")
	require.ErrorIs(t, db.DenyDeviceCode(ctx, "BCDFGHJK", u.ID), storage.ErrNotFound)
	require.ErrorIs(t, db.PendingDeviceCode(ctx, "BCDFGHJK"), storage.ErrNotFound)

	rewindPoll(t, db, h)
	p = poll(t, db, h)
	require.Equal(t, storage.DeviceApproved, p.Status)
	issued, err := db.RedeemDeviceCode(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, u.ID, issued.UserID)
	require.Equal(t, storage.OrgRole{ID: org.ID, Name: "Acme", Role: hotpath.RoleAdmin}, issued.Org)
	require.NotNil(t, issued.ExpiresAt)
	expires, err := time.Parse(time.RFC3339, *issued.ExpiresAt)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(90*24*time.Hour), expires, time.Minute)

	principal, err := db.LookupKey(ctx, hotpath.HashToken([]byte(issued.AccessToken)))
	require.NoError(t, err)
	require.Equal(t, hotpath.KindSignedIn, principal.Kind)
	require.Equal(t, org.ID, principal.OrgID)

	_, err = db.RedeemDeviceCode(ctx, p.ID)
	require.ErrorIs(t, err, storage.ErrCodeUsed, "a code is redeemed once")
	rewindPoll(t, db, h)
	require.Equal(t, storage.DeviceRedeemed, poll(t, db, h).Status)

	var keyID string
	require.NoError(t, db.Pool.QueryRow(ctx, `select key_id from device_codes where hash = $1`, h[:]).Scan(&keyID))
	require.Equal(t, issued.KeyID, keyID)

	// The user code of a decided login may name a new one.
	newDeviceCode(t, db, "BCDFGHJK")
}

func TestDeviceCodeUserCodeIsUniqueWhilePending(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	newDeviceCode(t, db, "ZZZZXXXX")
	err := db.CreateDeviceCode(ctx, storage.NewDeviceCode{Hash: randomHash(t), UserCode: "ZZZZXXXX",
		Lifetime: time.Minute, Interval: time.Second})
	require.ErrorIs(t, err, storage.ErrConflict)
	err = db.CreateDeviceCode(ctx, storage.NewDeviceCode{Hash: randomHash(t), UserCode: "AEIOU123",
		Lifetime: time.Minute, Interval: time.Second})
	require.Error(t, err, "the table refuses letters outside the alphabet")
}

func TestDevicePollPacing(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	h := newDeviceCode(t, db, "BBBBCCCC")
	require.Zero(t, poll(t, db, h).RetryAfter, "the first poll counts")
	p := poll(t, db, h)
	require.Greater(t, p.RetryAfter, 4*time.Second, "a second poll at once waits about the interval")
	require.LessOrEqual(t, p.RetryAfter, 5*time.Second)
	require.Empty(t, p.Status, "a refused poll reports nothing else")

	// A refused poll does not count: the wait keeps shrinking.
	_, err := db.Pool.Exec(ctx, `update device_codes set last_polled_at = now() - interval '4 seconds' where hash = $1`, h[:])
	require.NoError(t, err)
	p = poll(t, db, h)
	require.Greater(t, p.RetryAfter, time.Duration(0))
	require.LessOrEqual(t, p.RetryAfter, time.Second)

	// The tolerance admits a poll that comes a little early.
	p, err = db.PollDeviceCode(ctx, h, 1500*time.Millisecond)
	require.NoError(t, err)
	require.Zero(t, p.RetryAfter)

	_, err = db.PollDeviceCode(ctx, randomHash(t), 0)
	require.ErrorIs(t, err, storage.ErrNotFound)

	// A decided code is answered at once, however fast it is polled.
	require.NoError(t, db.DenyDeviceCode(ctx, "BBBBCCCC", ""))
	for range 3 {
		p = poll(t, db, h)
		require.Zero(t, p.RetryAfter)
		require.Equal(t, storage.DeviceDenied, p.Status)
	}
	expired := newDeviceCode(t, db, "BBBBDDDD")
	_, err = db.Pool.Exec(ctx, `update device_codes set expires_at = now() - interval '1 second' where hash = $1`, expired[:])
	require.NoError(t, err)
	for range 2 {
		require.True(t, poll(t, db, expired).Expired)
	}
}

// TestDevicePollPacingAcrossProcesses polls one code at once from two pools
// (two gateway processes): exactly one poll counts.
func TestDevicePollPacingAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	url := storetest.DatabaseURL(t)
	var dbs [2]*storage.DB
	for i := range dbs {
		db, err := storage.Open(ctx, storage.Config{URL: url, MaxConns: 8})
		require.NoError(t, err)
		t.Cleanup(db.Close)
		dbs[i] = db
	}
	_, _, err := dbs[0].Migrate(ctx)
	require.NoError(t, err)
	h := newDeviceCode(t, dbs[0], "DDDDFFFF")
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := dbs[i%2].PollDeviceCode(ctx, h, 0)
			if err != nil {
				t.Error(err)
				return
			}
			if p.RetryAfter == 0 {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, n, "one poll per interval, whichever process serves it")
}

func TestDeviceCodeExpiryAndDenial(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, u := seed(t, db)

	expired := newDeviceCode(t, db, "GGGGHHHH")
	_, err := db.Pool.Exec(ctx, `update device_codes set expires_at = now() - interval '1 second' where hash = $1`, expired[:])
	require.NoError(t, err)
	p := poll(t, db, expired)
	require.True(t, p.Expired)
	require.Equal(t, storage.DevicePending, p.Status)
	_, err = db.ApproveDeviceCode(ctx, "GGGGHHHH", u.ID, org.ID)
	require.ErrorIs(t, err, storage.ErrNotFound, "an expired code cannot be approved")
	require.ErrorIs(t, db.DenyDeviceCode(ctx, "GGGGHHHH", ""), storage.ErrNotFound)

	denied := newDeviceCode(t, db, "JJJJKKKK")
	require.NoError(t, db.DenyDeviceCode(ctx, "JJJJKKKK", u.ID))
	require.ErrorIs(t, db.DenyDeviceCode(ctx, "JJJJKKKK", u.ID), storage.ErrNotFound)
	p = poll(t, db, denied)
	require.Equal(t, storage.DeviceDenied, p.Status)
	_, err = db.RedeemDeviceCode(ctx, p.ID)
	require.ErrorIs(t, err, storage.ErrCodeUsed, "a denied code issues nothing")
	var keys int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from api_keys`).Scan(&keys))
	require.Zero(t, keys)
}

func TestRedeemRefusesEndedMembershipAndSuspension(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, u := seed(t, db)

	h := newDeviceCode(t, db, "LLLLMMMM")
	_, err := db.ApproveDeviceCode(ctx, "LLLLMMMM", u.ID, org.ID)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `delete from memberships where user_id = $1 and org_id = $2`, u.ID, org.ID)
	require.NoError(t, err)
	p := poll(t, db, h)
	_, err = db.RedeemDeviceCode(ctx, p.ID)
	require.ErrorIs(t, err, storage.ErrMembershipEnded)
	rewindPoll(t, db, h)
	p = poll(t, db, h)
	require.Equal(t, storage.DeviceRefused, p.Status)
	require.Equal(t, storage.RefusalMembershipRevoked, p.Refusal)
	_, err = db.RedeemDeviceCode(ctx, p.ID)
	require.ErrorIs(t, err, storage.ErrCodeUsed, "a refused code stays refused")

	h = newDeviceCode(t, db, "NNNNPPPP")
	_, err = db.ApproveDeviceCode(ctx, "NNNNPPPP", u.ID, u.PersonalOrgID)
	require.NoError(t, err)
	require.NoError(t, db.SetUserSuspended(ctx, u.ID, true))
	p = poll(t, db, h)
	_, err = db.RedeemDeviceCode(ctx, p.ID)
	require.ErrorIs(t, err, storage.ErrAccountSuspended)
	rewindPoll(t, db, h)
	require.Equal(t, storage.RefusalAccountSuspended, poll(t, db, h).Refusal)

	newDeviceCode(t, db, "QQQQRRRR")
	_, err = db.ApproveDeviceCode(ctx, "QQQQRRRR", u.ID, u.PersonalOrgID)
	require.ErrorIs(t, err, storage.ErrAccountSuspended, "a suspended account approves nothing")

	var keys int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from api_keys`).Scan(&keys))
	require.Zero(t, keys, "nothing was issued")
}

func TestRedeemConcurrentlyIssuesOneKey(t *testing.T) {
	storetest.EachDB(t, testRedeemConcurrentlyIssuesOneKey)
}

func testRedeemConcurrentlyIssuesOneKey(t *testing.T, db *storage.DB) {
	ctx := context.Background()
	org, u := seed(t, db)
	h := newDeviceCode(t, db, "SSSSTTTT")
	_, err := db.ApproveDeviceCode(ctx, "SSSSTTTT", u.ID, org.ID)
	require.NoError(t, err)
	id := poll(t, db, h).ID
	var wg sync.WaitGroup
	var mu sync.Mutex
	issued := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := db.RedeemDeviceCode(ctx, id)
			if err == nil {
				mu.Lock()
				issued++
				mu.Unlock()
				return
			}
			if err != storage.ErrCodeUsed {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, issued)
	var keys int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from api_keys where kind = 'signed_in'`).Scan(&keys))
	require.Equal(t, 1, keys)
}

func TestOAuthStateIsSingleUse(t *testing.T) {
	db := storetest.DB(t)
	ctx := context.Background()
	h := randomHash(t)
	in := storage.OAuthState{Hash: h, Purpose: storage.StateNative, Provider: "corp", ClientID: "gw",
		RedirectURI: "com.example.app:/cb", CodeChallenge: "challenge", Nonce: "nonce", Lifetime: time.Minute}
	require.NoError(t, db.CreateOAuthState(ctx, in))

	_, err := db.ConsumeOAuthState(ctx, h, storage.StateApproval)
	require.ErrorIs(t, err, storage.ErrNotFound, "a state serves its own purpose only")
	got, err := db.ConsumeOAuthState(ctx, h, storage.StateNative)
	require.NoError(t, err)
	require.Equal(t, "corp", got.Provider)
	require.Equal(t, "gw", got.ClientID)
	require.Equal(t, "com.example.app:/cb", got.RedirectURI)
	require.Equal(t, "challenge", got.CodeChallenge)
	require.Equal(t, "nonce", got.Nonce)
	_, err = db.ConsumeOAuthState(ctx, h, storage.StateNative)
	require.ErrorIs(t, err, storage.ErrNotFound, "a state works once")

	expired := randomHash(t)
	in.Hash = expired
	require.NoError(t, db.CreateOAuthState(ctx, in))
	_, err = db.Pool.Exec(ctx, `update oauth_states set expires_at = now() - interval '1 second' where hash = $1`, expired[:])
	require.NoError(t, err)
	_, err = db.ConsumeOAuthState(ctx, expired, storage.StateNative)
	require.ErrorIs(t, err, storage.ErrNotFound)

	binding := randomHash(t)
	approval := storage.OAuthState{Hash: randomHash(t), Purpose: storage.StateApproval, Provider: "corp",
		ClientID: "gw", RedirectURI: "https://gw.example.com/device/callback", CodeVerifier: "verifier",
		Nonce: "n", BindingHash: binding[:], UserCode: "BCDFGHJK", Lifetime: time.Minute}
	require.NoError(t, db.CreateOAuthState(ctx, approval))
	got, err = db.ConsumeOAuthState(ctx, approval.Hash, storage.StateApproval)
	require.NoError(t, err)
	require.Equal(t, binding[:], got.BindingHash)
	require.Equal(t, "verifier", got.CodeVerifier)
	require.Equal(t, "BCDFGHJK", got.UserCode)

	noChallenge := in
	noChallenge.Hash, noChallenge.CodeChallenge = randomHash(t), ""
	require.Error(t, db.CreateOAuthState(ctx, noChallenge), "a native state needs its challenge")
}

func TestApprovalSessions(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	_, u := seed(t, db)
	h := randomHash(t)
	require.NoError(t, db.CreateApprovalSession(ctx, h, u.ID, time.Minute))
	got, err := db.ApprovalSessionUser(ctx, h)
	require.NoError(t, err)
	require.Equal(t, u.ID, got)
	_, err = db.ApprovalSessionUser(ctx, randomHash(t))
	require.ErrorIs(t, err, storage.ErrNotFound)

	require.NoError(t, db.SetUserSuspended(ctx, u.ID, true))
	_, err = db.ApprovalSessionUser(ctx, h)
	require.ErrorIs(t, err, storage.ErrNotFound, "a suspended account's session is over")
	require.NoError(t, db.SetUserSuspended(ctx, u.ID, false))

	_, err = db.Pool.Exec(ctx, `update approval_sessions set expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	_, err = db.ApprovalSessionUser(ctx, h)
	require.ErrorIs(t, err, storage.ErrNotFound)

	other := randomHash(t)
	require.NoError(t, db.CreateApprovalSession(ctx, other, u.ID, time.Minute))
	require.NoError(t, db.DeleteApprovalSession(ctx, other))
	_, err = db.ApprovalSessionUser(ctx, other)
	require.ErrorIs(t, err, storage.ErrNotFound)
	require.NoError(t, db.DeleteApprovalSession(ctx, other), "ending an ended session is fine")
}

// TestSuspensionEndsApprovalSessions: a suspension deletes the account's
// sessions, so reinstating it does not bring them back; other accounts'
// sessions and a reinstatement end nothing.
func TestSuspensionEndsApprovalSessions(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, u := seed(t, db)
	other, err := db.CreateUser(ctx, "bea@example.com", org.ID, hotpath.RoleMember)
	require.NoError(t, err)
	mine, theirs := randomHash(t), randomHash(t)
	require.NoError(t, db.CreateApprovalSession(ctx, mine, u.ID, time.Minute))
	require.NoError(t, db.CreateApprovalSession(ctx, theirs, other.ID, time.Minute))

	require.NoError(t, db.SetUserSuspended(ctx, u.ID, false), "reinstating an active account")
	got, err := db.ApprovalSessionUser(ctx, mine)
	require.NoError(t, err)
	require.Equal(t, u.ID, got)

	require.NoError(t, db.SetUserSuspended(ctx, u.ID, true))
	require.NoError(t, db.SetUserSuspended(ctx, u.ID, false))
	_, err = db.ApprovalSessionUser(ctx, mine)
	require.ErrorIs(t, err, storage.ErrNotFound, "the suspension ended the session")
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from approval_sessions where user_id = $1`, u.ID).Scan(&n))
	require.Zero(t, n)
	got, err = db.ApprovalSessionUser(ctx, theirs)
	require.NoError(t, err)
	require.Equal(t, other.ID, got)

	require.ErrorIs(t, db.SetUserSuspended(ctx, "00000000-0000-0000-0000-000000000000", true), storage.ErrNotFound)
	require.ErrorIs(t, db.SetUserSuspended(ctx, "not-a-uuid", true), storage.ErrNotFound)
}

func TestSignInAccount(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, u := seed(t, db)
	a, err := db.SignInAccountByEmail(ctx, "ADA@example.COM")
	require.NoError(t, err)
	require.Equal(t, u, a.User)
	require.False(t, a.Suspended)
	require.Len(t, a.Orgs, 2, "the personal organization and Acme")
	require.Equal(t, u.PersonalOrgID, a.Orgs[0].ID, "oldest membership first")
	require.Equal(t, hotpath.RoleOwner, a.Orgs[0].Role)
	require.Equal(t, storage.OrgRole{ID: org.ID, Name: "Acme", Role: hotpath.RoleAdmin}, a.Orgs[1])

	b, err := db.SignInAccountByID(ctx, u.ID)
	require.NoError(t, err)
	require.Equal(t, a, b)

	_, err = db.SignInAccountByEmail(ctx, "nobody@example.com")
	require.ErrorIs(t, err, storage.ErrNotFound, "sign-in never creates an account")
	_, err = db.SignInAccountByID(ctx, "not-a-uuid")
	require.ErrorIs(t, err, storage.ErrNotFound)

	require.NoError(t, db.SetUserSuspended(ctx, u.ID, true))
	a, err = db.SignInAccountByEmail(ctx, "ada@example.com")
	require.NoError(t, err)
	require.True(t, a.Suspended)
}

func TestPurgeSignIn(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	_, u := seed(t, db)
	old := newDeviceCode(t, db, "VVVVWWWW")
	fresh := newDeviceCode(t, db, "XXXXZZZZ")
	require.NoError(t, db.CreateApprovalSession(ctx, randomHash(t), u.ID, time.Minute))
	require.NoError(t, db.CreateOAuthState(ctx, storage.OAuthState{Hash: randomHash(t), Purpose: storage.StateNative,
		Provider: "p", ClientID: "c", RedirectURI: "app:/cb", CodeChallenge: "x", Nonce: "n", Lifetime: time.Minute}))
	for _, table := range []string{"oauth_states", "approval_sessions"} {
		_, err := db.Pool.Exec(ctx, `update `+table+` set expires_at = now() - interval '25 hours'`)
		require.NoError(t, err)
	}
	_, err := db.Pool.Exec(ctx, `update device_codes set expires_at = now() - interval '25 hours' where hash = $1`, old[:])
	require.NoError(t, err)
	n, err := db.PurgeSignIn(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	_, err = db.PollDeviceCode(ctx, old, 0)
	require.ErrorIs(t, err, storage.ErrNotFound)
	_, err = db.PollDeviceCode(ctx, fresh, 0)
	require.NoError(t, err)
}

func TestOwnKeyKind(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, u := seed(t, db)
	k, err := db.CreateKey(ctx, storage.NewKey{UserID: u.ID, OrgID: org.ID, Kind: hotpath.KindSignedIn})
	require.NoError(t, err)
	kind, err := db.OwnKeyKind(ctx, k.KeyID, u.ID, org.ID)
	require.NoError(t, err)
	require.Equal(t, hotpath.KindSignedIn, kind)
	_, err = db.OwnKeyKind(ctx, k.KeyID, u.ID, u.PersonalOrgID)
	require.ErrorIs(t, err, storage.ErrNotFound, "another organization's key")
	_, err = db.OwnKeyKind(ctx, "nope", u.ID, org.ID)
	require.ErrorIs(t, err, storage.ErrNotFound)
}
