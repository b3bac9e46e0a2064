package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgegw/gateway/hotpath"
)

// Errors of the sign-in queries.
var (
	// ErrMembershipEnded: the organization membership a device login was
	// approved for has ended.
	ErrMembershipEnded = errors.New("organization membership has ended")
	// ErrAccountSuspended: the account is suspended.
	ErrAccountSuspended = errors.New("account is suspended")
	// ErrCodeUsed: the device code was redeemed (or refused) already.
	ErrCodeUsed = errors.New("device code already used")
)

// Device code states as stored.
const (
	DevicePending  = "pending"
	DeviceApproved = "approved"
	DeviceDenied   = "denied"
	DeviceRedeemed = "redeemed"
	DeviceRefused  = "refused"
)

// Refusal reasons of an approved device code that could not be redeemed.
const (
	RefusalMembershipRevoked = "org_membership_revoked"
	RefusalAccountSuspended  = "account_suspended"
)

// signInRetention is how long rows outlive their expiry before
// PurgeSignIn deletes them: long enough to answer expired_token rather than
// invalid_grant to a client that polls late.
const signInRetention = 24 * time.Hour

// SignInAccount is an account as sign-in sees it: the user, whether the
// account is suspended, and every organization the user belongs to (the
// personal one first, then the oldest membership first).
type SignInAccount struct {
	User      User
	Suspended bool
	Orgs      []OrgRole
}

// SignInAccountByEmail resolves the account of an e-mail address,
// case-insensitively. It never creates one: an unknown address is
// ErrNotFound.
func (db *DB) SignInAccountByEmail(ctx context.Context, email string) (SignInAccount, error) {
	return db.signInAccount(ctx, `lower(u.email) = lower($1)`, email)
}

// SignInAccountByID reads the account of a user id; ErrNotFound when there
// is none.
func (db *DB) SignInAccountByID(ctx context.Context, userID string) (SignInAccount, error) {
	return db.signInAccount(ctx, `u.id = $1`, userID)
}

func (db *DB) signInAccount(ctx context.Context, where, arg string) (SignInAccount, error) {
	var a SignInAccount
	err := db.Pool.QueryRow(ctx, `select u.id, u.email, u.personal_org_id, u.suspended_at is not null
		from users u where `+where, arg).Scan(&a.User.ID, &a.User.Email, &a.User.PersonalOrgID, &a.Suspended)
	if errors.Is(err, pgx.ErrNoRows) || pgErrCode(err) == "22P02" {
		return SignInAccount{}, ErrNotFound
	}
	if err != nil {
		return SignInAccount{}, fmt.Errorf("cannot read account: %w", err)
	}
	rows, err := db.Pool.Query(ctx, `select o.id, o.name, m.role from memberships m
		join organizations o on o.id = m.org_id where m.user_id = $1
		order by o.id = $2 desc, m.created_at, o.name, o.id`, a.User.ID, a.User.PersonalOrgID)
	if err != nil {
		return SignInAccount{}, fmt.Errorf("cannot read memberships: %w", err)
	}
	a.Orgs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (OrgRole, error) {
		var o OrgRole
		var role string
		err := r.Scan(&o.ID, &o.Name, &role)
		o.Role = hotpath.Role(role)
		return o, err
	})
	if err != nil {
		return SignInAccount{}, fmt.Errorf("cannot read memberships: %w", err)
	}
	return a, nil
}

// NewDeviceCode is a device login to start.
type NewDeviceCode struct {
	// Hash is the SHA-256 of the device_code; the code itself is never stored.
	Hash [32]byte
	// UserCode is the normalized user code: eight letters, no dash.
	UserCode string
	// Lifetime is how long the codes work.
	Lifetime time.Duration
	// Interval is the least time between two counted polls, whole seconds.
	Interval time.Duration
}

// CreateDeviceCode stores a device login. A user code that names a live
// login already is ErrConflict: draw another one.
func (db *DB) CreateDeviceCode(ctx context.Context, d NewDeviceCode) error {
	_, err := db.Pool.Exec(ctx, `insert into device_codes (hash, user_code, interval_seconds, expires_at)
		values ($1, $2, $3, now() + make_interval(secs => $4))`,
		d.Hash[:], d.UserCode, int(d.Interval/time.Second), d.Lifetime.Seconds())
	if pgErrCode(err) == "23505" {
		return fmt.Errorf("cannot create device code: %w", ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("cannot create device code: %w", err)
	}
	return nil
}

// DevicePoll is what one poll of a device code found.
type DevicePoll struct {
	// RetryAfter is positive when the poll came sooner than the code's
	// interval after the last counted one; nothing else is set then, and
	// the poll does not count.
	RetryAfter time.Duration
	ID         string
	Status     string
	// Expired reports that the code's lifetime has passed.
	Expired bool
	// Refusal says why a refused code was refused.
	Refusal string
}

// PollDeviceCode counts one poll of the device code with hash h. While the
// code waits for a decision, a poll counts only when it comes at least the
// code's interval, less tolerance, after the last counted one; the check and
// the update are one statement on the row, so the pace holds across every
// gateway process. A code that is decided or expired is answered at once:
// its answer is final, and a client that polls it fast learns to stop
// sooner. An unknown code is ErrNotFound.
func (db *DB) PollDeviceCode(ctx context.Context, h [32]byte, tolerance time.Duration) (DevicePoll, error) {
	var p DevicePoll
	var refusal *string
	err := db.Pool.QueryRow(ctx, `update device_codes set last_polled_at = now()
		where hash = $1 and (status <> 'pending' or expires_at <= now() or last_polled_at is null
			or last_polled_at <= now() - make_interval(secs => interval_seconds - $2::float8))
		returning id, status, expires_at <= now(), refusal`,
		h[:], tolerance.Seconds()).Scan(&p.ID, &p.Status, &p.Expired, &refusal)
	if err == nil {
		if refusal != nil {
			p.Refusal = *refusal
		}
		return p, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return DevicePoll{}, fmt.Errorf("cannot poll device code: %w", err)
	}
	var wait float64
	err = db.Pool.QueryRow(ctx, `select extract(epoch from
			last_polled_at + make_interval(secs => interval_seconds - $2::float8) - now())::float8
		from device_codes where hash = $1`, h[:], tolerance.Seconds()).Scan(&wait)
	if errors.Is(err, pgx.ErrNoRows) {
		return DevicePoll{}, ErrNotFound
	}
	if err != nil {
		return DevicePoll{}, fmt.Errorf("cannot poll device code: %w", err)
	}
	// The row was polled by someone else in between: answer "wait" rather
	// than count a second poll here.
	p.RetryAfter = time.Duration(math.Max(wait, 0.001) * float64(time.Second))
	return p, nil
}

// RedeemDeviceCode issues the signed-in key of an approved device code,
// once. The code is marked redeemed before the key is created, so two
// concurrent polls never mint two keys. It refuses a code whose
// organization membership has ended (ErrMembershipEnded) or whose account
// is suspended (ErrAccountSuspended), and marks it refused so that it stays
// refused; a code not approved (or already redeemed) is ErrCodeUsed.
func (db *DB) RedeemDeviceCode(ctx context.Context, id string) (IssuedKey, error) {
	var userID, orgID string
	var refusal error
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var status string
		var user, org *string
		var member, suspended bool
		err := tx.QueryRow(ctx, `select d.status, d.user_id, d.org_id,
				exists (select 1 from memberships m where m.user_id = d.user_id and m.org_id = d.org_id),
				coalesce((select u.suspended_at is not null from users u where u.id = d.user_id), false)
			from device_codes d where d.id = $1 for update of d`, id).
			Scan(&status, &user, &org, &member, &suspended)
		if errors.Is(err, pgx.ErrNoRows) || pgErrCode(err) == "22P02" || err == nil && status != DeviceApproved {
			return ErrCodeUsed
		}
		if err != nil {
			return err
		}
		userID, orgID = *user, *org // an approved code names both (a table check)
		reason := ""
		switch {
		case !member:
			reason, refusal = RefusalMembershipRevoked, ErrMembershipEnded
		case suspended:
			reason, refusal = RefusalAccountSuspended, ErrAccountSuspended
		}
		if reason != "" {
			_, err = tx.Exec(ctx, `update device_codes set status = 'refused', refusal = $2 where id = $1`, id, reason)
			return err
		}
		_, err = tx.Exec(ctx, `update device_codes set status = 'redeemed', redeemed_at = now() where id = $1`, id)
		return err
	})
	if errors.Is(err, ErrCodeUsed) {
		return IssuedKey{}, ErrCodeUsed
	}
	if err != nil {
		return IssuedKey{}, fmt.Errorf("cannot redeem device code: %w", err)
	}
	if refusal != nil {
		return IssuedKey{}, refusal
	}
	issued, err := db.CreateKey(ctx, NewKey{UserID: userID, OrgID: orgID, Kind: hotpath.KindSignedIn})
	if errors.Is(err, ErrNotMember) {
		// The membership ended between the check and the insert.
		_, _ = db.Pool.Exec(ctx, `update device_codes set status = 'refused', refusal = $2 where id = $1`,
			id, RefusalMembershipRevoked)
		return IssuedKey{}, ErrMembershipEnded
	}
	if err != nil {
		return IssuedKey{}, fmt.Errorf("cannot redeem device code: %w", err)
	}
	if _, err := db.Pool.Exec(ctx, `update device_codes set key_id = $2 where id = $1`, id, issued.KeyID); err != nil {
		return IssuedKey{}, fmt.Errorf("cannot redeem device code: %w", err)
	}
	return issued, nil
}

// PendingDeviceCode reports whether userCode names a live login waiting for
// a decision: ErrNotFound when it does not (unknown, expired or decided).
func (db *DB) PendingDeviceCode(ctx context.Context, userCode string) error {
	var one int
	err := db.Pool.QueryRow(ctx, `select 1 from device_codes
		where user_code = $1 and status = 'pending' and expires_at > now()`, userCode).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("cannot read device code: %w", err)
	}
	return nil
}

// ApproveDeviceCode approves the live login userCode for userID, binding the
// key to orgID, and returns the organization as the user sees it. A code
// that is not live is ErrNotFound; an organization the user does not belong
// to is ErrNotMember; a suspended account is ErrAccountSuspended.
func (db *DB) ApproveDeviceCode(ctx context.Context, userCode, userID, orgID string) (OrgRole, error) {
	var org OrgRole
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var role string
		var suspended bool
		err := tx.QueryRow(ctx, `select o.id, o.name, m.role, u.suspended_at is not null
			from memberships m join organizations o on o.id = m.org_id join users u on u.id = m.user_id
			where m.user_id = $1 and m.org_id = $2 for share of m`, userID, orgID).
			Scan(&org.ID, &org.Name, &role, &suspended)
		if errors.Is(err, pgx.ErrNoRows) || pgErrCode(err) == "22P02" {
			return ErrNotMember
		}
		if err != nil {
			return err
		}
		if suspended {
			return ErrAccountSuspended
		}
		org.Role = hotpath.Role(role)
		tag, err := tx.Exec(ctx, `update device_codes set status = 'approved', user_id = $2, org_id = $3, decided_at = now()
			where user_code = $1 and status = 'pending' and expires_at > now()`, userCode, userID, orgID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return nil
	})
	switch {
	case err == nil:
		return org, nil
	case errors.Is(err, ErrNotMember), errors.Is(err, ErrNotFound), errors.Is(err, ErrAccountSuspended):
		return OrgRole{}, err
	}
	return OrgRole{}, fmt.Errorf("cannot approve device code: %w", err)
}

// DenyDeviceCode declines the live login userCode. userID, when set, records
// who declined. A code that is not live is ErrNotFound.
func (db *DB) DenyDeviceCode(ctx context.Context, userCode, userID string) error {
	var who *string
	if userID != "" {
		who = &userID
	}
	tag, err := db.Pool.Exec(ctx, `update device_codes set status = 'denied', user_id = $2, decided_at = now()
		where user_code = $1 and status = 'pending' and expires_at > now()`, userCode, who)
	if pgErrCode(err) == "22P02" || pgErrCode(err) == "23503" {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("cannot deny device code: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// OAuth state purposes.
const (
	// StateNative is a native client's login: the client holds the PKCE
	// verifier and sends it to the token route.
	StateNative = "native"
	// StateApproval is the approval page's own login: the gateway holds the
	// verifier, and the state is bound to the browser that started it.
	StateApproval = "approval"
)

// OAuthState is an authorization request sent to an identity provider.
type OAuthState struct {
	// Hash is the SHA-256 of the state value; the value is never stored.
	Hash     [32]byte
	Purpose  string
	Provider string
	ClientID string
	// RedirectURI is where the provider sends the code, and what the
	// exchange must name again.
	RedirectURI string
	// CodeChallenge is a native client's S256 challenge.
	CodeChallenge string
	// CodeVerifier is the approval page's own PKCE verifier.
	CodeVerifier string
	// Nonce must come back in the ID token.
	Nonce string
	// BindingHash is the SHA-256 of the approval page's login cookie.
	BindingHash []byte
	// UserCode is the device code the approval page returns to after
	// sign-in; it may be empty.
	UserCode string
	Lifetime time.Duration
}

// CreateOAuthState stores an authorization request.
func (db *DB) CreateOAuthState(ctx context.Context, s OAuthState) error {
	_, err := db.Pool.Exec(ctx, `insert into oauth_states (hash, purpose, provider, client_id, redirect_uri,
			code_challenge, code_verifier, nonce, binding_hash, user_code, expires_at)
		values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now() + make_interval(secs => $11))`,
		s.Hash[:], s.Purpose, s.Provider, s.ClientID, s.RedirectURI, s.CodeChallenge, s.CodeVerifier, s.Nonce,
		s.BindingHash, s.UserCode, s.Lifetime.Seconds())
	if err != nil {
		return fmt.Errorf("cannot create oauth state: %w", err)
	}
	return nil
}

// ConsumeOAuthState marks the state with hash h used and returns it. A state
// that is unknown, of another purpose, expired or already used is
// ErrNotFound: a state works once.
func (db *DB) ConsumeOAuthState(ctx context.Context, h [32]byte, purpose string) (OAuthState, error) {
	s := OAuthState{Hash: h, Purpose: purpose}
	err := db.Pool.QueryRow(ctx, `update oauth_states set used_at = now()
		where hash = $1 and purpose = $2 and used_at is null and expires_at > now()
		returning provider, client_id, redirect_uri, code_challenge, code_verifier, nonce, binding_hash, user_code`,
		h[:], purpose).Scan(&s.Provider, &s.ClientID, &s.RedirectURI, &s.CodeChallenge, &s.CodeVerifier, &s.Nonce,
		&s.BindingHash, &s.UserCode)
	if errors.Is(err, pgx.ErrNoRows) {
		return OAuthState{}, ErrNotFound
	}
	if err != nil {
		return OAuthState{}, fmt.Errorf("cannot consume oauth state: %w", err)
	}
	return s, nil
}

// CreateApprovalSession stores an approval-page session of userID under the
// hash of its cookie.
func (db *DB) CreateApprovalSession(ctx context.Context, h [32]byte, userID string, lifetime time.Duration) error {
	_, err := db.Pool.Exec(ctx, `insert into approval_sessions (hash, user_id, expires_at)
		values ($1, $2, now() + make_interval(secs => $3))`, h[:], userID, lifetime.Seconds())
	if err != nil {
		return fmt.Errorf("cannot create approval session: %w", err)
	}
	return nil
}

// ApprovalSessionUser returns the user of a live approval-page session.
// A missing or expired session, or one whose account is suspended or gone,
// is ErrNotFound. A suspension deletes the account's sessions
// (SetUserSuspended); the check here also covers one made in the database
// by hand.
func (db *DB) ApprovalSessionUser(ctx context.Context, h [32]byte) (string, error) {
	var userID string
	err := db.Pool.QueryRow(ctx, `select s.user_id from approval_sessions s join users u on u.id = s.user_id
		where s.hash = $1 and s.expires_at > now() and u.suspended_at is null`, h[:]).Scan(&userID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("cannot read approval session: %w", err)
	}
	return userID, nil
}

// DeleteApprovalSession ends an approval-page session. Ending a missing one
// is not an error.
func (db *DB) DeleteApprovalSession(ctx context.Context, h [32]byte) error {
	if _, err := db.Pool.Exec(ctx, `delete from approval_sessions where hash = $1`, h[:]); err != nil {
		return fmt.Errorf("cannot delete approval session: %w", err)
	}
	return nil
}

// PurgeSignIn deletes device codes, states and sessions that expired more
// than a day ago, and returns how many rows went.
func (db *DB) PurgeSignIn(ctx context.Context) (int64, error) {
	var n int64
	for _, table := range []string{"device_codes", "oauth_states", "approval_sessions"} {
		tag, err := db.Pool.Exec(ctx, `delete from `+table+` where expires_at < now() - make_interval(secs => $1)`,
			signInRetention.Seconds())
		if err != nil {
			return n, fmt.Errorf("cannot purge %s: %w", table, err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// OwnKeyKind returns the kind of the key keyID when it belongs to userID and
// is bound to orgID; anything else (another user's key, another
// organization's, a missing one, a malformed id) is ErrNotFound.
func (db *DB) OwnKeyKind(ctx context.Context, keyID, userID, orgID string) (hotpath.KeyKind, error) {
	var kind string
	err := db.Pool.QueryRow(ctx, `select kind from api_keys where id = $1 and user_id = $2 and org_id = $3`,
		keyID, userID, orgID).Scan(&kind)
	if errors.Is(err, pgx.ErrNoRows) || pgErrCode(err) == "22P02" {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("cannot read key: %w", err)
	}
	return hotpath.ParseKeyKind(kind)
}
