package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgegw/gateway/hotpath"
)

// InvitationWindow is how long an invitation can be accepted.
const InvitationWindow = 14 * 24 * time.Hour

// Invitation is an invitation as an owner or admin lists it. It never
// carries the invitee's user id: an invitation addressed by user id shows a
// null email and addressed_by "user_id".
type Invitation struct {
	ID          string       `json:"id"`
	Object      string       `json:"object"`
	Email       *string      `json:"email"`
	AddressedBy string       `json:"addressed_by"`
	Role        hotpath.Role `json:"role"`
	Status      string       `json:"status"`
	CreatedAt   string       `json:"created_at"`
	ExpiresAt   string       `json:"expires_at"`
	SettledAt   *string      `json:"settled_at"`
}

// NewInvitation is an invitation to issue: Email or UserID, exactly one.
type NewInvitation struct {
	OrgID     string
	InviterID string
	Email     string
	UserID    string
	Role      hotpath.Role
}

// MailFacts is what an invitation message names: composed by the caller
// inside the invitation's transaction.
type MailFacts struct {
	InvitationID string
	OrgName      string
	InviterEmail string
	Role         hotpath.Role
	ExpiresAt    time.Time
}

// Mail is one message for the outbox.
type Mail struct {
	Subject, Text, HTML string
}

const invitationColumns = `i.id, i.email, i.user_id is not null, i.role, i.created_at, i.expires_at, i.status, i.settled_at`

func scanInvitation(row pgx.Row, now time.Time) (Invitation, error) {
	inv := Invitation{Object: "invitation", AddressedBy: "email"}
	var role string
	var byUser bool
	var status *string
	var created, expires time.Time
	var settled *time.Time
	if err := row.Scan(&inv.ID, &inv.Email, &byUser, &role, &created, &expires, &status, &settled); err != nil {
		return Invitation{}, err
	}
	if byUser {
		inv.AddressedBy = "user_id"
	}
	inv.Role = hotpath.Role(role)
	inv.CreatedAt, inv.ExpiresAt = timestamp(created), timestamp(expires)
	switch {
	case status != nil:
		inv.Status = *status
		inv.SettledAt = optTimestamp(settled)
	case !now.Before(expires):
		// Lapsing is read from the clock, never written by a job.
		inv.Status = "lapsed"
		inv.SettledAt = optTimestamp(&expires)
	default:
		inv.Status = "live"
	}
	return inv, nil
}

// actorManages reads the actor's role under a share lock: a demotion that
// commits first is seen, and one that comes later waits for this change.
func actorManages(ctx context.Context, tx pgx.Tx, orgID, actorID string) error {
	var role string
	err := tx.QueryRow(ctx, `select role from memberships where org_id = $1 and user_id = $2 for share`,
		orgID, actorID).Scan(&role)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrForbidden
	}
	if err != nil {
		return err
	}
	if !canManage(hotpath.Role(role)) {
		return ErrForbidden
	}
	return nil
}

// Invite issues an invitation and, in the same transaction, its message in
// the outbox. The address is never looked up to see whether it names an
// account: the same queries run whatever it names. ErrConflict: the address
// or user id already belongs to a member. A live invitation of the same
// address is returned unchanged (and no second message is queued); a lapsed
// one is marked lapsed and replaced by a fresh window. Concurrent invites
// of one address serialise on a transaction lock and yield one invitation.
// The window ends on a whole second, the one the API shows.
func (db *DB) Invite(ctx context.Context, n NewInvitation, compose func(MailFacts) Mail) (Invitation, error) {
	var email, userID *string
	address := ""
	if n.Email != "" {
		e := strings.TrimSpace(n.Email)
		email, address = &e, strings.ToLower(e)
	} else {
		if !ValidUUID(n.UserID) {
			return Invitation{}, fmt.Errorf("cannot invite: user id %w", ErrInvalid)
		}
		u := strings.ToLower(n.UserID)
		userID, address = &u, u
	}
	var inv Invitation
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := actorManages(ctx, tx, n.OrgID, n.InviterID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtextextended('invitation:' || $1::text || ':' || $2, 0))`,
			n.OrgID, address); err != nil {
			return err
		}
		var member bool
		if err := tx.QueryRow(ctx, `select exists (select 1 from memberships m join users u on u.id = m.user_id
			where m.org_id = $1 and (lower(u.email) = lower($2::text) or m.user_id = $3::uuid))`,
			n.OrgID, email, userID).Scan(&member); err != nil {
			return err
		}
		if member {
			return ErrConflict
		}
		now := time.Now()
		existing, err := scanInvitation(tx.QueryRow(ctx, `select `+invitationColumns+` from invitations i
			where i.org_id = $1 and coalesce(lower(i.email), i.user_id::text) = $2 and i.status is null for update`,
			n.OrgID, address), now)
		switch {
		case err == nil && existing.Status == "live":
			inv = existing
			return nil
		case err == nil:
			if _, err := tx.Exec(ctx, `update invitations set status = 'lapsed', settled_at = expires_at where id = $1`,
				existing.ID); err != nil {
				return err
			}
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		var orgName, inviterEmail string
		if err := tx.QueryRow(ctx, `select o.name, u.email from organizations o, users u where o.id = $1 and u.id = $2`,
			n.OrgID, n.InviterID).Scan(&orgName, &inviterEmail); err != nil {
			return err
		}
		inv, err = scanInvitation(tx.QueryRow(ctx, `insert into invitations as i (org_id, email, user_id, role, invited_by, expires_at)
			values ($1, $2, $3, $4, $5, date_trunc('second', now()) + make_interval(secs => $6))
			returning `+invitationColumns, n.OrgID, email, userID, string(n.Role), n.InviterID, InvitationWindow.Seconds()), now)
		if err != nil {
			return err
		}
		expires, _ := time.Parse(time.RFC3339, inv.ExpiresAt)
		m := compose(MailFacts{InvitationID: inv.ID, OrgName: orgName, InviterEmail: inviterEmail, Role: n.Role, ExpiresAt: expires})
		_, err = tx.Exec(ctx, `insert into outbox (kind, org_id, invitation_id, to_email, to_user_id, subject, body_text, body_html)
			values ('invitation', $1, $2, $3, $4, $5, $6, $7)`, n.OrgID, inv.ID, email, userID, m.Subject, m.Text, m.HTML)
		return err
	})
	if err != nil {
		return Invitation{}, orgTxError("invite", err)
	}
	return inv, nil
}

// ListInvitations lists an organization's invitations, live and settled,
// newest first: at most limit of them.
func (db *DB) ListInvitations(ctx context.Context, orgID string, limit int) ([]Invitation, error) {
	rows, err := db.Pool.Query(ctx, `select `+invitationColumns+` from invitations i where i.org_id = $1
		order by i.created_at desc, i.id limit $2`, orgID, limit)
	if err != nil {
		return nil, fmt.Errorf("cannot list invitations: %w", err)
	}
	defer rows.Close()
	now := time.Now()
	out := []Invitation{}
	for rows.Next() {
		inv, err := scanInvitation(rows, now)
		if err != nil {
			return nil, fmt.Errorf("cannot list invitations: %w", err)
		}
		out = append(out, inv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list invitations: %w", err)
	}
	return out, nil
}

// RevokeInvitation revokes a live invitation of orgID on behalf of actor
// and cancels its undelivered message. ErrForbidden comes before any look
// at the id; a malformed, missing, other-organization, settled or lapsed
// invitation is ErrNotFound.
func (db *DB) RevokeInvitation(ctx context.Context, orgID, actorID, invitationID string) error {
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := actorManages(ctx, tx, orgID, actorID); err != nil {
			return err
		}
		if !ValidUUID(invitationID) {
			return ErrNotFound
		}
		tag, err := tx.Exec(ctx, `update invitations set status = 'revoked', settled_at = now()
			where id = $1 and org_id = $2 and status is null and expires_at > now()`, invitationID, orgID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		_, err = tx.Exec(ctx, `update outbox set status = 'failed', last_error = 'invitation revoked before delivery'
			where invitation_id = $1 and status = 'pending'`, invitationID)
		return err
	})
	if err != nil {
		return orgTxError("revoke invitation", err)
	}
	return nil
}

// PendingInvitation is a live invitation as its invitee sees it.
type PendingInvitation struct {
	ID        string       `json:"id"`
	Object    string       `json:"object"`
	Org       Org          `json:"org"`
	Role      hotpath.Role `json:"role"`
	CreatedAt string       `json:"created_at"`
	ExpiresAt string       `json:"expires_at"`
}

// addressedTo matches the invitations addressed to user $1 (by id or by
// the account's e-mail).
const addressedTo = `(i.user_id = $1 or lower(i.email) = (select lower(email) from users where id = $1))`

// PendingInvitations lists the live invitations addressed to userID, by its
// id or its account's e-mail address, newest first.
func (db *DB) PendingInvitations(ctx context.Context, userID string) ([]PendingInvitation, error) {
	rows, err := db.Pool.Query(ctx, `select i.id, o.id, o.name, i.role, i.created_at, i.expires_at
		from invitations i join organizations o on o.id = i.org_id
		where i.status is null and i.expires_at > now() and `+addressedTo+`
		order by i.created_at desc, i.id limit 100`, userID)
	if err != nil {
		return nil, fmt.Errorf("cannot list invitations: %w", err)
	}
	defer rows.Close()
	out := []PendingInvitation{}
	for rows.Next() {
		p := PendingInvitation{Object: "invitation"}
		var role string
		var created, expires time.Time
		if err := rows.Scan(&p.ID, &p.Org.ID, &p.Org.Name, &role, &created, &expires); err != nil {
			return nil, fmt.Errorf("cannot list invitations: %w", err)
		}
		p.Role, p.CreatedAt, p.ExpiresAt = hotpath.Role(role), timestamp(created), timestamp(expires)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list invitations: %w", err)
	}
	return out, nil
}

// SettleInvitation accepts or declines a live invitation on behalf of its
// invitee. Accepting creates the membership with the invited role (an
// existing membership is left as it is); the organization is returned as
// the invitee now sees it. An invitation that is not live, or not addressed
// to userID, is ErrNotFound.
func (db *DB) SettleInvitation(ctx context.Context, invitationID, userID string, accept bool) (OrgRole, error) {
	if !ValidUUID(invitationID) {
		return OrgRole{}, ErrNotFound
	}
	status := "declined"
	if accept {
		status = "accepted"
	}
	var o OrgRole
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var role string
		err := tx.QueryRow(ctx, `select i.org_id, i.role from invitations i
			where i.id = $2 and i.status is null and i.expires_at > now() and `+addressedTo+` for update`,
			userID, invitationID).Scan(&o.ID, &role)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `update invitations set status = $2, settled_at = now() where id = $1`,
			invitationID, status); err != nil {
			return err
		}
		if accept {
			if _, err := tx.Exec(ctx, `insert into memberships (org_id, user_id, role) values ($1, $2, $3)
				on conflict (org_id, user_id) do nothing`, o.ID, userID, role); err != nil {
				return err
			}
		}
		err = tx.QueryRow(ctx, `select o.name, coalesce(m.role, $3) from organizations o
			left join memberships m on m.org_id = o.id and m.user_id = $2 where o.id = $1`, o.ID, userID, role).
			Scan(&o.Name, &role)
		o.Role = hotpath.Role(role)
		return err
	})
	if err != nil {
		return OrgRole{}, orgTxError("settle invitation", err)
	}
	return o, nil
}
