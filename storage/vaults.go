package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Refusals of the vault queries. A vault the caller cannot read is
// ErrVaultNotFound, whatever the reason (missing, another organization's,
// no membership, no read grant, held); ErrVaultForbidden is a readable
// vault without the grant the operation needs.
var (
	// ErrVaultExternalIDConflict: the external id names a vault somebody
	// else owns.
	ErrVaultExternalIDConflict = errors.New("external id names another owner's vault")
	// ErrUserNotFound: the user is not a member of the organization (or of
	// the vault, for member operations).
	ErrUserNotFound = errors.New("user not found")
)

// VaultPermissions are one caller's grants on a vault. CanAdminister is
// structural authority (delete, hold, restore): the vault's owner or an
// owner or admin of the organization.
type VaultPermissions struct {
	CanRead       bool `json:"can_read"`
	CanWrite      bool `json:"can_write"`
	CanShare      bool `json:"can_share"`
	CanAdminister bool `json:"can_administer"`
}

// Vault is a vault as one caller sees it.
type Vault struct {
	ID              string           `json:"id"`
	Object          string           `json:"object"`
	OrgID           string           `json:"org_id"`
	OwnerID         *string          `json:"owner_id"`
	Name            string           `json:"name"`
	Description     *string          `json:"description"`
	Icon            *string          `json:"icon"`
	Color           *string          `json:"color"`
	MemoryScope     string           `json:"memory_scope"`
	ExternalID      *string          `json:"external_id"`
	Archived        bool             `json:"archived"`
	Pinned          bool             `json:"pinned"`
	InheritOrgRules bool             `json:"inherit_org_rules"`
	CreatedAt       string           `json:"created_at"`
	UpdatedAt       string           `json:"updated_at"`
	Permissions     VaultPermissions `json:"permissions"`
	Created         *bool            `json:"created,omitempty"`
}

// VaultFields are the writable fields of a vault. On create nil means
// unset; on update the Set flags say which fields the patch names (a nil
// value with its flag set clears the field).
type VaultFields struct {
	Name           *string
	Description    *string
	Icon           *string
	Color          *string
	MemoryScope    *string
	ExternalID     *string
	SetDescription bool
	SetIcon        bool
	SetColor       bool
}

// vaultView selects a vault with the caller's ($1) membership and
// organization role; $2 is the organization.
const vaultView = `select v.id, v.org_id, v.owner_id, v.name, v.description, v.icon, v.color, v.memory_scope,
		v.external_id, v.archived_at is not null, coalesce(m.pinned, false), v.inherit_org_rules, v.created_at,
		v.updated_at, m.user_id is not null, coalesce(m.held, false), coalesce(m.can_read, false),
		coalesce(m.can_write, false), coalesce(m.can_share, false), coalesce(o.role, '')
	from vaults v
	left join vault_members m on m.vault_id = v.id and m.user_id = $1
	left join memberships o on o.org_id = v.org_id and o.user_id = $1`

// vaultAccess is a caller's standing in one vault.
type vaultAccess struct {
	Vault
	member, held bool
	flags        VaultPermissions // the stored flags, held or not
	orgAdmin     bool
}

// visible reports whether the vault exists for the caller at all: a
// membership that is not held. Another organization's vault, a missing
// one, one the caller is not a member of and one where they are held are
// all 404, never 403.
func (a vaultAccess) visible() bool { return a.member && !a.held }

// administers reports structural authority, which an organization admin
// holds over every vault of the organization.
func (a vaultAccess) administers(userID string) bool {
	return a.orgAdmin || (a.OwnerID != nil && *a.OwnerID == userID)
}

func scanVaultAccess(row pgx.Row, userID string) (vaultAccess, error) {
	a := vaultAccess{Vault: Vault{Object: "vault"}}
	var created, updated time.Time
	var role string
	err := row.Scan(&a.ID, &a.OrgID, &a.OwnerID, &a.Name, &a.Description, &a.Icon, &a.Color, &a.MemoryScope,
		&a.ExternalID, &a.Archived, &a.Pinned, &a.InheritOrgRules, &created, &updated, &a.member, &a.held,
		&a.flags.CanRead, &a.flags.CanWrite, &a.flags.CanShare, &role)
	if err != nil {
		return a, err
	}
	a.CreatedAt, a.UpdatedAt = timestamp(created), microTimestamp(updated)
	a.orgAdmin = role == "owner" || role == "admin"
	if a.member && !a.held {
		a.Permissions = a.flags
	}
	a.Permissions.CanAdminister = a.administers(userID)
	return a, nil
}

// loadVault reads vaultID in orgID with userID's standing; ErrVaultNotFound
// when it does not exist there. lock takes the vault's row lock.
func loadVault(ctx context.Context, q convQuerier, orgID, userID, vaultID string, lock bool) (vaultAccess, error) {
	if !ValidUUID(vaultID) {
		return vaultAccess{}, ErrVaultNotFound
	}
	sql := vaultView + ` where v.id = $3 and v.org_id = $2`
	if lock {
		sql += ` for update of v`
	}
	a, err := scanVaultAccess(q.QueryRow(ctx, sql, userID, orgID, vaultID), userID)
	if errors.Is(err, pgx.ErrNoRows) {
		return vaultAccess{}, ErrVaultNotFound
	}
	if err != nil {
		return vaultAccess{}, fmt.Errorf("cannot read vault: %w", err)
	}
	return a, nil
}

// gate checks userID's standing for an operation. need is "read" (the
// vault's content, and pins: a caller without can_read is answered as if
// the vault did not exist), "write", "share" (member management: an
// administrator, or a member with can_share), "administer" (structural:
// the vault's owner or an organization admin, member or not) or
// "administer-or-read". The four grants do not imply one another: a
// member without the one an operation needs gets ErrVaultForbidden; a
// caller to whom the vault is not visible (see visible) gets
// ErrVaultNotFound, so a denial never reveals that the vault exists.
func (a vaultAccess) gate(userID, need string) error {
	adm := a.administers(userID)
	if need != "read" && need != "write" && adm {
		return nil
	}
	if !a.visible() || (need == "read" && !a.flags.CanRead) {
		return ErrVaultNotFound
	}
	var ok bool
	switch need {
	case "read":
		ok = true
	case "write":
		ok = a.flags.CanWrite
	case "share":
		ok = a.flags.CanShare
	case "administer-or-read":
		ok = a.flags.CanRead
	}
	if !ok {
		return ErrVaultForbidden
	}
	return nil
}

// vaultTx runs f in a transaction over vaultID as userID sees it, locked,
// once the gate named by need (see gate) lets the caller through.
func (db *DB) vaultTx(ctx context.Context, orgID, userID, vaultID, need string, f func(tx pgx.Tx, a vaultAccess) error) error {
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		a, err := loadVault(ctx, tx, orgID, userID, vaultID, true)
		if err != nil {
			return err
		}
		if err := a.gate(userID, need); err != nil {
			return err
		}
		return f(tx, a)
	})
	return vaultError(err)
}

// microTimestamp is RFC 3339 with microseconds, so that every change
// visibly advances updated_at.
func microTimestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

func vaultError(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range []error{ErrVaultNotFound, ErrVaultForbidden, ErrVaultExternalIDConflict, ErrUserNotFound,
		ErrConflict, ErrOwnerImmutable, ErrInvalid} {
		if errors.Is(err, s) {
			return err
		}
	}
	if pgErrCode(err) == "23505" {
		return ErrConflict
	}
	return fmt.Errorf("cannot change vault: %w", err)
}

// CreateVault creates a vault owned by userID, who becomes a member with
// read, write and share. With an external id, a vault of userID's that
// already carries it is returned unchanged (created false); one somebody
// else owns is ErrVaultExternalIDConflict. A taken name is ErrConflict.
func (db *DB) CreateVault(ctx context.Context, orgID, userID string, f VaultFields) (Vault, error) {
	memScope := "default"
	if f.MemoryScope != nil {
		memScope = *f.MemoryScope
	}
	var out Vault
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var id string
		err := tx.QueryRow(ctx, `insert into vaults (org_id, owner_id, name, description, icon, color, memory_scope, external_id)
			values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict do nothing returning id`,
			orgID, userID, *f.Name, f.Description, f.Icon, f.Color, memScope, f.ExternalID).Scan(&id)
		created := err == nil
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// Another vault holds the name or the external id (a
			// concurrent create has committed by now: the insert waited).
			if f.ExternalID == nil {
				return ErrConflict
			}
			var owner *string
			err = tx.QueryRow(ctx, `select id, owner_id from vaults where org_id = $1 and external_id = $2`,
				orgID, *f.ExternalID).Scan(&id, &owner)
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrConflict
			}
			if err != nil {
				return err
			}
			if owner == nil || *owner != userID {
				return ErrVaultExternalIDConflict
			}
		case err != nil:
			return err
		default:
			if _, err := tx.Exec(ctx, `insert into vault_members (vault_id, user_id, can_read, can_write, can_share)
				values ($1, $2, true, true, true)`, id, userID); err != nil {
				return err
			}
		}
		a, err := loadVault(ctx, tx, orgID, userID, id, false)
		if err != nil {
			return err
		}
		out = a.Vault
		out.Created = &created
		return nil
	})
	return out, vaultError(err)
}

// GetVault reads a vault visible to the caller, with their permissions.
func (db *DB) GetVault(ctx context.Context, orgID, userID, vaultID string) (Vault, error) {
	var out Vault
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		a, err := loadVault(ctx, tx, orgID, userID, vaultID, false)
		if err != nil {
			return err
		}
		if !a.visible() {
			return ErrVaultNotFound
		}
		out = a.Vault
		return nil
	})
	return out, vaultError(err)
}

// VaultFilter selects the vaults a list returns.
type VaultFilter struct {
	Scope    string // all, owned or shared
	Archived bool
}

// VaultListMax bounds one vault list.
const VaultListMax = 1000

// ListVaults lists the vaults where userID holds a membership that is not
// held, whatever it grants: pinned first, then by name. Organization
// admins are listed only into vaults they are members of.
func (db *DB) ListVaults(ctx context.Context, orgID, userID string, f VaultFilter) ([]Vault, error) {
	rows, err := db.Pool.Query(ctx, vaultView+` where v.org_id = $2 and m.user_id is not null and not m.held
		and (v.archived_at is not null) = $3
		and ($4::text = 'all' or ($4::text = 'owned') = (v.owner_id is not distinct from $1::uuid))
		order by m.pinned desc, v.name, v.id limit `+fmt.Sprint(VaultListMax),
		userID, orgID, f.Archived, f.Scope)
	if err != nil {
		return nil, fmt.Errorf("cannot list vaults: %w", err)
	}
	defer rows.Close()
	out := []Vault{}
	for rows.Next() {
		a, err := scanVaultAccess(rows, userID)
		if err != nil {
			return nil, fmt.Errorf("cannot list vaults: %w", err)
		}
		out = append(out, a.Vault)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list vaults: %w", err)
	}
	return out, nil
}

// UpdateVault applies a patch; it needs can_write.
func (db *DB) UpdateVault(ctx context.Context, orgID, userID, vaultID string, f VaultFields) (Vault, error) {
	var out Vault
	err := db.vaultTx(ctx, orgID, userID, vaultID, "write", func(tx pgx.Tx, a vaultAccess) error {
		_, err := tx.Exec(ctx, `update vaults set
				name = coalesce($2, name),
				description = case when $3 then $4 else description end,
				icon = case when $5 then $6 else icon end,
				color = case when $7 then $8 else color end,
				memory_scope = coalesce($9, memory_scope),
				updated_at = greatest(now(), updated_at + interval '1 microsecond')
			where id = $1`, vaultID, f.Name, f.SetDescription, f.Description, f.SetIcon, f.Icon,
			f.SetColor, f.Color, f.MemoryScope)
		if err != nil {
			return err
		}
		a2, err := loadVault(ctx, tx, orgID, userID, vaultID, false)
		out = a2.Vault
		return err
	})
	return out, err
}

// SetVaultArchived archives or restores a vault; it needs can_write and
// is idempotent. Memory is untouched.
func (db *DB) SetVaultArchived(ctx context.Context, orgID, userID, vaultID string, archived bool) error {
	return db.vaultTx(ctx, orgID, userID, vaultID, "write", func(tx pgx.Tx, a vaultAccess) error {
		_, err := tx.Exec(ctx, `update vaults set archived_at = case when $2 then coalesce(archived_at, now()) end
			where id = $1`, vaultID, archived)
		return err
	})
}

// DeleteVault deletes a vault with its membership, memory, ruleset and the
// conversations it holds, in one transaction; the vault's owner or an
// organization owner or admin only.
func (db *DB) DeleteVault(ctx context.Context, orgID, userID, vaultID string) error {
	return db.vaultTx(ctx, orgID, userID, vaultID, "administer", func(tx pgx.Tx, a vaultAccess) error {
		_, err := tx.Exec(ctx, `delete from vaults where id = $1`, vaultID)
		return err
	})
}

// SetVaultPinned pins or unpins the vault for userID alone; it needs read.
func (db *DB) SetVaultPinned(ctx context.Context, orgID, userID, vaultID string, pinned bool) error {
	return db.vaultTx(ctx, orgID, userID, vaultID, "read", func(tx pgx.Tx, a vaultAccess) error {
		_, err := tx.Exec(ctx, `update vault_members set pinned = $3 where vault_id = $1 and user_id = $2`,
			vaultID, userID, pinned)
		return err
	})
}

// VaultMember is one membership of a vault, with its stored grants (a held
// member's grants are listed intact).
type VaultMember struct {
	Object   string `json:"object"`
	UserID   string `json:"user_id"`
	Email    string `json:"email"`
	IsOwner  bool   `json:"is_owner"`
	CanRead  bool   `json:"can_read"`
	CanWrite bool   `json:"can_write"`
	CanShare bool   `json:"can_share"`
	Held     bool   `json:"held"`
	AddedAt  string `json:"added_at"`
}

const vaultMemberColumns = `m.user_id, u.email, v.owner_id is not distinct from m.user_id, m.can_read, m.can_write,
	m.can_share, m.held, m.created_at`

func scanVaultMember(row pgx.Row) (VaultMember, error) {
	m := VaultMember{Object: "vault.member"}
	var at time.Time
	err := row.Scan(&m.UserID, &m.Email, &m.IsOwner, &m.CanRead, &m.CanWrite, &m.CanShare, &m.Held, &at)
	m.AddedAt = timestamp(at)
	return m, err
}

// ListVaultMembers lists every member, held ones included, oldest first.
// Any reader of the vault and its administrators may list.
func (db *DB) ListVaultMembers(ctx context.Context, orgID, userID, vaultID string) ([]VaultMember, error) {
	out := []VaultMember{}
	err := db.vaultTx(ctx, orgID, userID, vaultID, "administer-or-read", func(tx pgx.Tx, a vaultAccess) error {
		rows, err := tx.Query(ctx, `select `+vaultMemberColumns+` from vault_members m
			join vaults v on v.id = m.vault_id join users u on u.id = m.user_id
			where m.vault_id = $1 order by m.created_at, m.user_id`, vaultID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			m, err := scanVaultMember(rows)
			if err != nil {
				return err
			}
			out = append(out, m)
		}
		return rows.Err()
	})
	return out, err
}

// MemberGrants are the grants a member operation names; nil keeps the
// stored value (or false for a new member).
type MemberGrants struct {
	CanRead, CanWrite, CanShare *bool
}

func (g MemberGrants) over(read, write, share bool) (bool, bool, bool) {
	if g.CanRead != nil {
		read = *g.CanRead
	}
	if g.CanWrite != nil {
		write = *g.CanWrite
	}
	if g.CanShare != nil {
		share = *g.CanShare
	}
	return read, write, share
}

// shareTx gates member management: an administrator may grant anything; a
// member with can_share may grant only what they hold themselves.
func (db *DB) shareTx(ctx context.Context, orgID, userID, vaultID string, f func(tx pgx.Tx, a vaultAccess, escalates func(r, w, s bool) bool) error) error {
	return db.vaultTx(ctx, orgID, userID, vaultID, "share", func(tx pgx.Tx, a vaultAccess) error {
		escalates := func(r, w, s bool) bool {
			if a.administers(userID) {
				return false
			}
			return (r && !a.flags.CanRead) || (w && !a.flags.CanWrite) || (s && !a.flags.CanShare)
		}
		return f(tx, a, escalates)
	})
}

// AddVaultMember adds targetID (a member of the organization) with the
// grants named (omitted ones false). A user who is already a member gets
// exactly these grants, under the same rules as a change; created reports
// a new membership.
func (db *DB) AddVaultMember(ctx context.Context, orgID, userID, vaultID, targetID string, g MemberGrants) (VaultMember, bool, error) {
	var out VaultMember
	var created bool
	err := db.shareTx(ctx, orgID, userID, vaultID, func(tx pgx.Tx, a vaultAccess, escalates func(r, w, s bool) bool) error {
		if !CanonUUID(&targetID) {
			return ErrUserNotFound
		}
		// The membership stays locked until the grant commits: a removal
		// in flight (it locks the row first) is waited for, and then the
		// target is no member; a removal that comes later finds the grant
		// and ends it with the membership.
		var one int
		err := tx.QueryRow(ctx, `select 1 from memberships where org_id = $1 and user_id = $2 for key share`,
			orgID, targetID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrUserNotFound
		}
		if err != nil {
			return err
		}
		if a.OwnerID != nil && *a.OwnerID == targetID {
			return ErrOwnerImmutable
		}
		r, w, s := g.over(false, false, false)
		if escalates(r, w, s) {
			return ErrVaultForbidden
		}
		err = tx.QueryRow(ctx, `insert into vault_members (vault_id, user_id, can_read, can_write, can_share)
			values ($1, $2, $3, $4, $5)
			on conflict (vault_id, user_id) do update set can_read = excluded.can_read,
				can_write = excluded.can_write, can_share = excluded.can_share
			returning xmax = 0`, vaultID, targetID, r, w, s).Scan(&created)
		if err != nil {
			return err
		}
		out, err = readVaultMember(ctx, tx, vaultID, targetID)
		return err
	})
	return out, created, err
}

func readVaultMember(ctx context.Context, tx pgx.Tx, vaultID, targetID string) (VaultMember, error) {
	m, err := scanVaultMember(tx.QueryRow(ctx, `select `+vaultMemberColumns+` from vault_members m
		join vaults v on v.id = m.vault_id join users u on u.id = m.user_id
		where m.vault_id = $1 and m.user_id = $2`, vaultID, targetID))
	if errors.Is(err, pgx.ErrNoRows) {
		return m, ErrUserNotFound
	}
	return m, err
}

// lockVaultMember reads targetID's membership under lock: ErrUserNotFound
// when there is none, ErrOwnerImmutable for the vault's owner.
func lockVaultMember(ctx context.Context, tx pgx.Tx, a vaultAccess, targetID string) (r, w, s bool, err error) {
	if !CanonUUID(&targetID) {
		return false, false, false, ErrUserNotFound
	}
	err = tx.QueryRow(ctx, `select can_read, can_write, can_share from vault_members
		where vault_id = $1 and user_id = $2 for update`, a.ID, targetID).Scan(&r, &w, &s)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, false, ErrUserNotFound
	}
	if err == nil && a.OwnerID != nil && *a.OwnerID == targetID {
		err = ErrOwnerImmutable
	}
	return r, w, s, err
}

// UpdateVaultMember changes targetID's grants: omitted ones keep their
// value and the resulting set must not exceed the caller's own (unless the
// caller administers the vault). The owner's membership never changes.
func (db *DB) UpdateVaultMember(ctx context.Context, orgID, userID, vaultID, targetID string, g MemberGrants) (VaultMember, error) {
	var out VaultMember
	err := db.shareTx(ctx, orgID, userID, vaultID, func(tx pgx.Tx, a vaultAccess, escalates func(r, w, s bool) bool) error {
		r, w, s, err := lockVaultMember(ctx, tx, a, targetID)
		if err != nil {
			return err
		}
		r, w, s = g.over(r, w, s)
		if escalates(r, w, s) {
			return ErrVaultForbidden
		}
		if _, err := tx.Exec(ctx, `update vault_members set can_read = $3, can_write = $4, can_share = $5
			where vault_id = $1 and user_id = $2`, vaultID, targetID, r, w, s); err != nil {
			return err
		}
		out, err = readVaultMember(ctx, tx, vaultID, targetID)
		return err
	})
	return out, err
}

// RemoveVaultMember ends targetID's membership at once (with their pin).
func (db *DB) RemoveVaultMember(ctx context.Context, orgID, userID, vaultID, targetID string) error {
	return db.shareTx(ctx, orgID, userID, vaultID, func(tx pgx.Tx, a vaultAccess, _ func(r, w, s bool) bool) error {
		if _, _, _, err := lockVaultMember(ctx, tx, a, targetID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `delete from vault_members where vault_id = $1 and user_id = $2`, vaultID, targetID)
		return err
	})
}

// SetVaultMemberHeld sets or clears targetID's hold; the vault's owner or
// an organization owner or admin only. Grants are never touched.
func (db *DB) SetVaultMemberHeld(ctx context.Context, orgID, userID, vaultID, targetID string, held bool) error {
	return db.vaultTx(ctx, orgID, userID, vaultID, "administer", func(tx pgx.Tx, a vaultAccess) error {
		if _, _, _, err := lockVaultMember(ctx, tx, a, targetID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `update vault_members set held = $3 where vault_id = $1 and user_id = $2`,
			vaultID, targetID, held)
		return err
	})
}
