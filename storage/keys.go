package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgegw/gateway/hotpath"
)

var _ hotpath.KeySource = (*DB)(nil)

// NewKey describes a user key to issue.
type NewKey struct {
	UserID         string
	OrgID          string
	Kind           hotpath.KeyKind
	Scopes         hotpath.Scopes
	Models         []string
	ReadOnly       bool
	SpendCapMicros *int64
	CreditsMicros  *int64
	WorkspaceID    string
}

// IssuedKey is the token response: the one time the secret is shown.
type IssuedKey struct {
	AccessToken string  `json:"access_token"`
	TokenType   string  `json:"token_type"`
	KeyID       string  `json:"key_id"`
	UserID      string  `json:"user_id"`
	ExpiresAt   *string `json:"expires_at"`
	Org         OrgRole `json:"org"`
}

// KeyInfo is a key as its owner may list it: never the secret or its hash.
type KeyInfo struct {
	ID        string   `json:"id"`
	Kind      string   `json:"kind"`
	OrgID     string   `json:"org_id"`
	Scopes    []string `json:"allowed_scopes"`
	Models    []string `json:"models"`
	ReadOnly  bool     `json:"read_only"`
	CreatedAt string   `json:"created_at"`
	ExpiresAt *string  `json:"expires_at"`
	RevokedAt *string  `json:"revoked_at"`
	// RevokedReason says why: holder, admin, member_removed or member_left.
	RevokedReason *string `json:"revoked_reason"`
	RotatedAt     *string `json:"rotated_at"`
}

func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func optTimestamp(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := timestamp(*t)
	return &s
}

// CreateKey issues a user key bound to one organization the user belongs
// to. Only the key's hash is stored; the secret is in the result and nowhere
// else.
func (db *DB) CreateKey(ctx context.Context, k NewKey) (IssuedKey, error) {
	org, err := db.Membership(ctx, k.UserID, k.OrgID)
	if err != nil {
		return IssuedKey{}, fmt.Errorf("cannot create key: %w", err)
	}
	token, hash := hotpath.GenerateToken(hotpath.TokenUser)
	var expires *time.Time
	if k.Kind == hotpath.KindSignedIn {
		t := time.Now().Add(SignedInKeyLifetime).Truncate(time.Second)
		expires = &t
	}
	var workspace *string
	if k.WorkspaceID != "" {
		workspace = &k.WorkspaceID
	}
	models := k.Models
	if models == nil {
		models = []string{}
	}
	out := IssuedKey{AccessToken: token, TokenType: "bearer", UserID: k.UserID, Org: org, ExpiresAt: optTimestamp(expires)}
	err = db.Pool.QueryRow(ctx, `insert into api_keys
		(hash, kind, user_id, org_id, scopes, models, read_only, spend_cap_micros, credits_micros, workspace_id, expires_at)
		select $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11
		where $10::uuid is null or exists (select 1 from workspaces where id = $10::uuid and org_id = $4)
		returning id`,
		hash[:], k.Kind.String(), k.UserID, k.OrgID, k.Scopes.Stored(), models, k.ReadOnly,
		k.SpendCapMicros, k.CreditsMicros, workspace, expires).Scan(&out.KeyID)
	if pgErrCode(err) == "22P02" {
		return IssuedKey{}, fmt.Errorf("cannot create key: workspace id is not a UUID")
	}
	if errors.Is(err, pgx.ErrNoRows) || pgErrCode(err) == "23503" {
		return IssuedKey{}, fmt.Errorf("cannot create key: workspace %w in the organization", ErrNotFound)
	}
	if err != nil {
		return IssuedKey{}, fmt.Errorf("cannot create key: %w", err)
	}
	return out, nil
}

// RevokeKey revokes a key by id. Revoking twice is not an error.
func (db *DB) RevokeKey(ctx context.Context, keyID string) error {
	tag, err := db.Pool.Exec(ctx, `update api_keys set revoked_at = coalesce(revoked_at, now()),
		revoked_reason = coalesce(revoked_reason, 'admin') where id = $1`, keyID)
	if pgErrCode(err) == "22P02" {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("cannot revoke key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// RevokeOwnKey revokes a developer or headless key of userID bound to orgID
// and returns its hash, so the revoking process can drop it from its cache
// before it answers. Signed-in credentials are not revocable by their holder,
// and a key of somebody else's is ErrNotFound, like a missing one.
func (db *DB) RevokeOwnKey(ctx context.Context, keyID, userID, orgID string) (hotpath.TokenHash, error) {
	var h []byte
	err := db.Pool.QueryRow(ctx, `update api_keys set revoked_at = coalesce(revoked_at, now()),
			revoked_reason = coalesce(revoked_reason, 'holder')
		where id = $1 and user_id = $2 and org_id = $3 and kind <> 'signed_in' returning hash`,
		keyID, userID, orgID).Scan(&h)
	if errors.Is(err, pgx.ErrNoRows) || pgErrCode(err) == "22P02" {
		return hotpath.TokenHash{}, ErrNotFound
	}
	if err != nil {
		return hotpath.TokenHash{}, fmt.Errorf("cannot revoke key: %w", err)
	}
	return hotpath.TokenHash(h), nil
}

// ListKeys lists the keys of userID bound to orgID, newest first.
func (db *DB) ListKeys(ctx context.Context, userID, orgID string) ([]KeyInfo, error) {
	rows, err := db.Pool.Query(ctx, `select id, kind, org_id, scopes, models, read_only, created_at, expires_at, revoked_at,
			revoked_reason, rotated_at
		from api_keys where user_id = $1 and org_id = $2 order by created_at desc, id`, userID, orgID)
	if err != nil {
		return nil, fmt.Errorf("cannot list keys: %w", err)
	}
	out := []KeyInfo{}
	for rows.Next() {
		var k KeyInfo
		var created time.Time
		var expires, revoked, rotated *time.Time
		if err := rows.Scan(&k.ID, &k.Kind, &k.OrgID, &k.Scopes, &k.Models, &k.ReadOnly, &created, &expires, &revoked,
			&k.RevokedReason, &rotated); err != nil {
			return nil, fmt.Errorf("cannot list keys: %w", err)
		}
		if scopes, err := hotpath.ParseScopes(k.Scopes); err == nil {
			k.Scopes = scopes.Names()
		}
		k.CreatedAt, k.ExpiresAt, k.RevokedAt = timestamp(created), optTimestamp(expires), optTimestamp(revoked)
		k.RotatedAt = optTimestamp(rotated)
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list keys: %w", err)
	}
	return out, nil
}

// LookupKey implements hotpath.KeySource.
func (db *DB) LookupKey(ctx context.Context, h hotpath.TokenHash) (*hotpath.Principal, error) {
	return db.lookupKey(ctx, "k.hash = $1", h[:])
}

// LookupKeyByID reads a key's record by its id, for work done later on the
// key's behalf (an eval run): revocation, suspension and caps as they are
// now. An unknown id is hotpath.ErrKeyNotFound.
func (db *DB) LookupKeyByID(ctx context.Context, keyID string) (*hotpath.Principal, error) {
	p, err := db.lookupKey(ctx, "k.id = $1", keyID)
	if pgErrCode(err) == "22P02" {
		return nil, hotpath.ErrKeyNotFound
	}
	return p, err
}

func (db *DB) lookupKey(ctx context.Context, where string, arg any) (*hotpath.Principal, error) {
	p := &hotpath.Principal{SpendCapMicros: -1, CreditsMicros: -1, WorkspaceCapMicros: -1}
	var kind string
	var scopes []string
	var role, orgName, workspace, plan *string
	var spendCap, credits, workspaceCap *int64
	var expires *time.Time
	err := db.Pool.QueryRow(ctx, `select k.id, k.user_id, k.org_id, k.kind, k.scopes, k.models, k.read_only,
			k.spend_cap_micros, k.credits_micros, k.credits_adjustment_micros, w.id::text, w.spend_cap_micros,
			k.expires_at, k.revoked_at is not null, u.suspended_at is not null, m.role, o.name, o.plan
		from api_keys k
		join users u on u.id = k.user_id
		left join memberships m on m.org_id = k.org_id and m.user_id = k.user_id
		left join organizations o on o.id = k.org_id
		left join workspaces w on w.id = k.workspace_id or (k.workspace_id is null and w.org_id = k.org_id and w.is_default)
		where `+where, arg).Scan(&p.KeyID, &p.UserID, &p.OrgID, &kind, &scopes, &p.Models, &p.ReadOnly,
		&spendCap, &credits, &p.CreditsAdjustMicros, &workspace, &workspaceCap, &expires, &p.Revoked, &p.Suspended,
		&role, &orgName, &plan)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, hotpath.ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("cannot look up key: %w", err)
	}
	if p.Kind, err = hotpath.ParseKeyKind(kind); err != nil {
		return nil, fmt.Errorf("cannot look up key %s: %w", p.KeyID, err)
	}
	if p.Scopes, err = hotpath.ParseScopes(scopes); err != nil {
		return nil, fmt.Errorf("cannot look up key %s: %w", p.KeyID, err)
	}
	if role == nil || orgName == nil {
		// The membership the key was bound to has ended.
		p.Revoked = true
	} else {
		p.Role, p.OrgName = hotpath.Role(*role), *orgName
	}
	if spendCap != nil {
		p.SpendCapMicros = *spendCap
	}
	if credits != nil {
		p.CreditsMicros = *credits
	}
	if workspace != nil {
		p.WorkspaceID = *workspace
	}
	if workspaceCap != nil {
		p.WorkspaceCapMicros = *workspaceCap
	}
	if plan != nil {
		p.PlanName = *plan
	}
	if expires != nil {
		p.ExpiresAt = expires.Unix()
	}
	return p, nil
}

// NewServiceToken describes a service token to mint.
type NewServiceToken struct {
	Name      string
	Scopes    hotpath.Scopes
	ReadOnly  bool
	ExpiresIn time.Duration // 0 never expires
}

// IssuedServiceToken is shown once, when the token is minted.
type IssuedServiceToken struct {
	Token         string   `json:"token"`
	ID            string   `json:"id"`
	Name          string   `json:"name"`
	AllowedScopes []string `json:"allowed_scopes"`
	ReadOnly      bool     `json:"read_only"`
	ExpiresAt     *string  `json:"expires_at"`
}

// CreateServiceToken mints a gw_svc_ token. Only its hash is stored.
func (db *DB) CreateServiceToken(ctx context.Context, t NewServiceToken) (IssuedServiceToken, error) {
	token, hash := hotpath.GenerateToken(hotpath.TokenService)
	var expires *time.Time
	if t.ExpiresIn > 0 {
		e := time.Now().Add(t.ExpiresIn).Truncate(time.Second)
		expires = &e
	}
	out := IssuedServiceToken{Token: token, Name: t.Name, AllowedScopes: t.Scopes.Names(), ReadOnly: t.ReadOnly,
		ExpiresAt: optTimestamp(expires)}
	err := db.Pool.QueryRow(ctx, `insert into service_tokens (hash, name, scopes, read_only, expires_at)
		values ($1, $2, $3, $4, $5) returning id`, hash[:], t.Name, t.Scopes.Stored(), t.ReadOnly, expires).Scan(&out.ID)
	if err != nil {
		return IssuedServiceToken{}, fmt.Errorf("cannot create service token: %w", err)
	}
	return out, nil
}

// LookupServiceToken implements hotpath.KeySource.
func (db *DB) LookupServiceToken(ctx context.Context, h hotpath.TokenHash) (*hotpath.ServiceToken, error) {
	s := &hotpath.ServiceToken{}
	var scopes []string
	var expires *time.Time
	err := db.Pool.QueryRow(ctx, `select id, name, scopes, read_only, expires_at, revoked_at is not null
		from service_tokens where hash = $1`, h[:]).Scan(&s.ID, &s.Name, &scopes, &s.ReadOnly, &expires, &s.Revoked)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, hotpath.ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("cannot look up service token: %w", err)
	}
	if s.Scopes, err = hotpath.ParseScopes(scopes); err != nil {
		return nil, fmt.Errorf("cannot look up service token %s: %w", s.ID, err)
	}
	if expires != nil {
		s.ExpiresAt = expires.Unix()
	}
	return s, nil
}

// RevokeServiceToken revokes a service token by id.
func (db *DB) RevokeServiceToken(ctx context.Context, id string) error {
	tag, err := db.Pool.Exec(ctx, `update service_tokens set revoked_at = coalesce(revoked_at, now()) where id = $1`, id)
	if pgErrCode(err) == "22P02" {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("cannot revoke service token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// ErrKeyNotRotatable refuses rotating a key that is not a live developer
// key: a signed-in credential (not by its holder), a headless key, or one
// already revoked.
var ErrKeyNotRotatable = errors.New("only a live developer key can be rotated")

// ErrKeySuperseded refuses a rotation sent with the very secret it would
// replace, when another rotation replaced that secret first.
var ErrKeySuperseded = errors.New("the secret presented was rotated meanwhile")

// RotateOwnKey gives a developer key of userID bound to orgID a new secret:
// same id, restrictions and workspace; only the hash changes. It returns the
// new secret (shown once) and the old hash, which the rotating process drops
// from its cache before it answers; the other processes hear of both hashes
// through the api_keys trigger. presented, when not nil, is the hash of the
// secret the request was sent with, when that is the key's own: the
// rotation then happens only while that secret is still the key's, so of
// several rotations sent at once with one secret a single one wins and the
// others are ErrKeySuperseded, as each would be once the first had
// answered.
func (db *DB) RotateOwnKey(ctx context.Context, keyID, userID, orgID string, presented *hotpath.TokenHash) (IssuedKey, hotpath.TokenHash, error) {
	if !ValidUUID(keyID) {
		return IssuedKey{}, hotpath.TokenHash{}, ErrNotFound
	}
	org, err := db.Membership(ctx, userID, orgID)
	if err != nil {
		return IssuedKey{}, hotpath.TokenHash{}, fmt.Errorf("cannot rotate key: %w", err)
	}
	token, hash := hotpath.GenerateToken(hotpath.TokenUser)
	var old []byte
	var kind string
	var revoked bool
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `select hash, kind, revoked_at is not null from api_keys
			where id = $1 and user_id = $2 and org_id = $3 for update`, keyID, userID, orgID).Scan(&old, &kind, &revoked)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if presented != nil && !bytes.Equal(old, presented[:]) {
			return ErrKeySuperseded
		}
		if kind != hotpath.KindDeveloper.String() || revoked {
			return ErrKeyNotRotatable
		}
		_, err = tx.Exec(ctx, `update api_keys set hash = $2, rotated_at = now() where id = $1`, keyID, hash[:])
		return err
	})
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrKeyNotRotatable), errors.Is(err, ErrKeySuperseded):
		return IssuedKey{}, hotpath.TokenHash{}, err
	case err != nil:
		return IssuedKey{}, hotpath.TokenHash{}, fmt.Errorf("cannot rotate key: %w", err)
	}
	return IssuedKey{AccessToken: token, TokenType: "bearer", KeyID: keyID, UserID: userID, Org: org},
		hotpath.TokenHash(old), nil
}
