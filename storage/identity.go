package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/edgegw/gateway/hotpath"
)

// Errors the identity queries return; callers map them to their own codes.
var (
	ErrNotFound  = errors.New("not found")
	ErrConflict  = errors.New("already exists")
	ErrNotMember = errors.New("user is not a member of the organization")
)

// SignedInKeyLifetime is how long a signed-in credential works after issue.
const SignedInKeyLifetime = 90 * 24 * time.Hour

// Org is an organization.
type Org struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// User is an account.
type User struct {
	ID            string `json:"id"`
	Email         string `json:"email"`
	PersonalOrgID string `json:"personal_org_id"`
}

// OrgRole is an organization as a key bound to it sees it.
type OrgRole struct {
	ID   string       `json:"id"`
	Name string       `json:"name"`
	Role hotpath.Role `json:"role"`
}

// pgErrCode returns the SQLSTATE of a PostgreSQL error, or "".
func pgErrCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// CreateOrg creates an organization.
func (db *DB) CreateOrg(ctx context.Context, name string) (Org, error) {
	o := Org{Name: name}
	err := db.Pool.QueryRow(ctx, `insert into organizations (name) values ($1) returning id`, name).Scan(&o.ID)
	if err != nil {
		return Org{}, fmt.Errorf("cannot create organization: %w", err)
	}
	return o, nil
}

// CreateUser creates an account with its personal organization (which it
// owns) and, when orgID is set, a membership in that organization.
func (db *DB) CreateUser(ctx context.Context, email, orgID string, role hotpath.Role) (User, error) {
	u := User{Email: email}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `insert into organizations (name, personal) values ($1, true) returning id`,
			email).Scan(&u.PersonalOrgID); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `insert into users (email, personal_org_id) values ($1, $2) returning id`,
			email, u.PersonalOrgID).Scan(&u.ID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `insert into memberships (org_id, user_id, role) values ($1, $2, 'owner')`,
			u.PersonalOrgID, u.ID); err != nil {
			return err
		}
		if orgID != "" && orgID != u.PersonalOrgID {
			if _, err := tx.Exec(ctx, `insert into memberships (org_id, user_id, role) values ($1, $2, $3)`,
				orgID, u.ID, string(role)); err != nil {
				return err
			}
		}
		return nil
	})
	switch pgErrCode(err) {
	case "":
	case "23505": // unique_violation
		return User{}, fmt.Errorf("cannot create user: email %w", ErrConflict)
	case "23503", "22P02": // foreign_key_violation, invalid_text_representation
		return User{}, fmt.Errorf("cannot create user: organization %w", ErrNotFound)
	}
	if err != nil {
		return User{}, fmt.Errorf("cannot create user: %w", err)
	}
	return u, nil
}

// UserByEmail finds an account by e-mail, case-insensitively.
func (db *DB) UserByEmail(ctx context.Context, email string) (User, error) {
	u := User{}
	err := db.Pool.QueryRow(ctx, `select id, email, personal_org_id from users where lower(email) = lower($1)`,
		email).Scan(&u.ID, &u.Email, &u.PersonalOrgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return User{}, ErrNotFound
	}
	if err != nil {
		return User{}, fmt.Errorf("cannot read user: %w", err)
	}
	return u, nil
}

// SetUserSuspended suspends or reinstates an account. Every process's key
// cache hears of it through the users trigger. A suspension ends the
// account's approval-page sessions in the same transaction: reinstating the
// account does not bring them back (docs/signin.md).
func (db *DB) SetUserSuspended(ctx context.Context, userID string, suspended bool) error {
	return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `update users set suspended_at = case when $2 then coalesce(suspended_at, now()) end
			where id = $1`, userID, suspended)
		if pgErrCode(err) == "22P02" {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("cannot update user: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		if !suspended {
			return nil
		}
		if _, err := tx.Exec(ctx, `delete from approval_sessions where user_id = $1`, userID); err != nil {
			return fmt.Errorf("cannot end approval sessions: %w", err)
		}
		return nil
	})
}

// Membership returns the organization as userID sees it, or ErrNotMember.
func (db *DB) Membership(ctx context.Context, userID, orgID string) (OrgRole, error) {
	var o OrgRole
	var role string
	err := db.Pool.QueryRow(ctx, `select o.id, o.name, m.role from memberships m join organizations o on o.id = m.org_id
		where m.user_id = $1 and m.org_id = $2`, userID, orgID).Scan(&o.ID, &o.Name, &role)
	if errors.Is(err, pgx.ErrNoRows) || pgErrCode(err) == "22P02" {
		return OrgRole{}, ErrNotMember
	}
	if err != nil {
		return OrgRole{}, fmt.Errorf("cannot read membership: %w", err)
	}
	o.Role = hotpath.Role(role)
	return o, nil
}

// FirstOrgByName returns the oldest non-personal organization with the name.
func (db *DB) FirstOrgByName(ctx context.Context, name string) (Org, error) {
	o := Org{}
	err := db.Pool.QueryRow(ctx, `select id, name from organizations where name = $1 and not personal
		order by created_at, id limit 1`, name).Scan(&o.ID, &o.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return Org{}, ErrNotFound
	}
	if err != nil {
		return Org{}, fmt.Errorf("cannot read organization: %w", err)
	}
	return o, nil
}
