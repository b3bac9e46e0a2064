package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgegw/gateway/hotpath"
)

// Refusals of the organization queries.
var (
	// ErrForbidden is an authority refusal: the acting member's role (read
	// under lock, so a demotion that raced the request counts) does not
	// allow the change.
	ErrForbidden = errors.New("not allowed")
	// ErrOwnerImmutable refuses any change to an owner's membership.
	ErrOwnerImmutable = errors.New("an owner's membership cannot be changed")
)

// Member is a membership as an owner or admin lists it.
type Member struct {
	UserID   string       `json:"user_id"`
	Email    string       `json:"email"`
	Role     hotpath.Role `json:"role"`
	JoinedAt string       `json:"joined_at"`
}

// Departure is what removing or leaving did.
type Departure struct {
	// Revoked are the hashes of the keys revoked with the membership, so
	// the acting process drops them from its cache before it answers.
	Revoked []hotpath.TokenHash
}

// ListMembers lists an organization's members, oldest first.
func (db *DB) ListMembers(ctx context.Context, orgID string) ([]Member, error) {
	rows, err := db.Pool.Query(ctx, `select m.user_id, u.email, m.role, m.created_at
		from memberships m join users u on u.id = m.user_id
		where m.org_id = $1 order by m.created_at, m.user_id`, orgID)
	if err != nil {
		return nil, fmt.Errorf("cannot list members: %w", err)
	}
	out := []Member{}
	for rows.Next() {
		var m Member
		var role string
		var at time.Time
		if err := rows.Scan(&m.UserID, &m.Email, &role, &at); err != nil {
			return nil, fmt.Errorf("cannot list members: %w", err)
		}
		m.Role, m.JoinedAt = hotpath.Role(role), timestamp(at)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list members: %w", err)
	}
	return out, nil
}

// ListMemberships lists the organizations userID belongs to with its role
// in each, oldest membership first.
func (db *DB) ListMemberships(ctx context.Context, userID string) ([]OrgRole, error) {
	rows, err := db.Pool.Query(ctx, `select o.id, o.name, m.role from memberships m
		join organizations o on o.id = m.org_id where m.user_id = $1 order by m.created_at, o.id`, userID)
	if err != nil {
		return nil, fmt.Errorf("cannot list memberships: %w", err)
	}
	out := []OrgRole{}
	for rows.Next() {
		var o OrgRole
		var role string
		if err := rows.Scan(&o.ID, &o.Name, &role); err != nil {
			return nil, fmt.Errorf("cannot list memberships: %w", err)
		}
		o.Role = hotpath.Role(role)
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list memberships: %w", err)
	}
	return out, nil
}

// lockMembers locks the memberships of the given users in orgID, in user id
// order (so two requests locking the same pair never deadlock), and returns
// their roles. A user who is not a member is absent from the map.
func lockMembers(ctx context.Context, tx pgx.Tx, orgID string, userIDs ...string) (map[string]hotpath.Role, error) {
	rows, err := tx.Query(ctx, `select user_id::text, role from memberships
		where org_id = $1 and user_id = any($2::uuid[]) order by user_id for update`, orgID, userIDs)
	if err != nil {
		return nil, err
	}
	out := map[string]hotpath.Role{}
	for rows.Next() {
		var id, role string
		if err := rows.Scan(&id, &role); err != nil {
			return nil, err
		}
		out[id] = hotpath.Role(role)
	}
	return out, rows.Err()
}

// canManage reports whether a role may manage the organization.
func canManage(r hotpath.Role) bool { return r == hotpath.RoleOwner || r == hotpath.RoleAdmin }

// SetMemberRole changes target's role in orgID on behalf of actor. Both
// memberships are locked first, so concurrent changes serialise and each
// sees the other's result: the actor's authority is what it is at that
// moment. ErrForbidden: the actor no longer manages the organization, or
// grants owner without being one; ErrOwnerImmutable: target is an owner;
// ErrNotMember: target is not a member (or the id is malformed).
func (db *DB) SetMemberRole(ctx context.Context, orgID, actorID, targetID string, role hotpath.Role) (Member, error) {
	if !CanonUUID(&targetID) {
		return Member{}, ErrNotMember
	}
	var m Member
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		roles, err := lockMembers(ctx, tx, orgID, actorID, targetID)
		if err != nil {
			return err
		}
		actor := roles[actorID]
		if !canManage(actor) {
			return ErrForbidden
		}
		current, ok := roles[targetID]
		if !ok {
			return ErrNotMember
		}
		if current == hotpath.RoleOwner {
			return ErrOwnerImmutable
		}
		if role == hotpath.RoleOwner && actor != hotpath.RoleOwner {
			return ErrForbidden
		}
		var at time.Time
		var r string
		if err := tx.QueryRow(ctx, `update memberships m set role = $3 from users u
			where m.org_id = $1 and m.user_id = $2 and u.id = m.user_id
			returning m.user_id, u.email, m.role, m.created_at`, orgID, targetID, string(role)).
			Scan(&m.UserID, &m.Email, &r, &at); err != nil {
			return err
		}
		m.Role, m.JoinedAt = hotpath.Role(r), timestamp(at)
		return nil
	})
	if err != nil {
		return Member{}, orgTxError("change role", err)
	}
	return m, nil
}

// RemoveMember ends target's membership of orgID on behalf of actor (who
// may be target: leaving). In the same transaction every key of target
// bound to orgID is revoked, with the reason recorded, and the departure is
// marked, freezing target's org- and vault-scope memory there until it is
// settled. ErrForbidden: actor (when not target) does not manage the
// organization; ErrOwnerImmutable: target is an owner; ErrNotMember:
// target is not a member.
func (db *DB) RemoveMember(ctx context.Context, orgID, actorID, targetID string) (Departure, error) {
	if !CanonUUID(&targetID) || !CanonUUID(&orgID) {
		return Departure{}, ErrNotMember
	}
	leaving := actorID == targetID
	var d Departure
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		roles, err := lockMembers(ctx, tx, orgID, actorID, targetID)
		if err != nil {
			return err
		}
		if !leaving && !canManage(roles[actorID]) {
			return ErrForbidden
		}
		current, ok := roles[targetID]
		if !ok {
			return ErrNotMember
		}
		if current == hotpath.RoleOwner {
			return ErrOwnerImmutable
		}
		if _, err := tx.Exec(ctx, `delete from memberships where org_id = $1 and user_id = $2`, orgID, targetID); err != nil {
			return err
		}
		// Grants in the organization's vaults end with the membership, as
		// the keys do, so a member re-added later starts without them. A
		// vault the member owns keeps its owner: nobody can remove a
		// vault's owner, and the organization's admins still administer it.
		if _, err := tx.Exec(ctx, `delete from vault_members m using vaults v
			where m.vault_id = v.id and v.org_id = $1 and m.user_id = $2
				and v.owner_id is distinct from m.user_id`, orgID, targetID); err != nil {
			return err
		}
		reason, keyReason := "removed", "member_removed"
		if leaving {
			reason, keyReason = "left", "member_left"
		}
		rows, err := tx.Query(ctx, `update api_keys set revoked_at = now(), revoked_reason = $3
			where org_id = $1 and user_id = $2 and revoked_at is null returning hash`, orgID, targetID, keyReason)
		if err != nil {
			return err
		}
		for rows.Next() {
			var h []byte
			if err := rows.Scan(&h); err != nil {
				return err
			}
			d.Revoked = append(d.Revoked, hotpath.TokenHash(h))
		}
		if err := rows.Err(); err != nil {
			return err
		}
		var removedBy *string
		if !leaving {
			removedBy = &actorID
		}
		_, err = tx.Exec(ctx, `insert into membership_departures (org_id, user_id, role, reason, removed_by)
			values ($1, $2, $3, $4, $5)
			on conflict (org_id, user_id) do update set role = excluded.role, reason = excluded.reason,
				departed_at = now(), removed_by = excluded.removed_by, memory_frozen = true,
				memory_decision = null, memory_settled_at = null`,
			orgID, targetID, string(current), reason, removedBy)
		return err
	})
	if err != nil {
		return Departure{}, orgTxError("remove member", err)
	}
	return d, nil
}

// DepartureMarker is a departed member's frozen-memory marker.
type DepartureMarker struct {
	Reason       string `json:"reason"`
	Role         string `json:"role"`
	DepartedAt   string `json:"departed_at"`
	MemoryFrozen bool   `json:"memory_frozen"`
}

// Departed returns the departure marker of userID in orgID, or ErrNotFound.
func (db *DB) Departed(ctx context.Context, orgID, userID string) (DepartureMarker, error) {
	var d DepartureMarker
	var at time.Time
	err := db.Pool.QueryRow(ctx, `select reason, role, departed_at, memory_frozen from membership_departures
		where org_id = $1 and user_id = $2`, orgID, userID).Scan(&d.Reason, &d.Role, &at, &d.MemoryFrozen)
	if errors.Is(err, pgx.ErrNoRows) || pgErrCode(err) == "22P02" {
		return DepartureMarker{}, ErrNotFound
	}
	if err != nil {
		return DepartureMarker{}, fmt.Errorf("cannot read departure: %w", err)
	}
	d.DepartedAt = timestamp(at)
	return d, nil
}

// orgTxError wraps an organization transaction's error, passing the
// sentinels through.
func orgTxError(what string, err error) error {
	for _, s := range []error{ErrForbidden, ErrOwnerImmutable, ErrNotMember, ErrNotFound, ErrConflict, ErrInvalid} {
		if errors.Is(err, s) {
			return err
		}
	}
	if pgErrCode(err) == "22P02" {
		return ErrNotFound
	}
	return fmt.Errorf("cannot %s: %w", what, err)
}

func hotpathRole(s string) hotpath.Role { return hotpath.Role(s) }
