package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// WorkTypes is the work_type vocabulary, in the spec's order.
var WorkTypes = []string{"engineering", "data_science", "product", "design", "marketing", "sales",
	"finance", "operations", "people_hr", "legal", "student", "other"}

// Profile is the caller's own account as the profile routes show it.
type Profile struct {
	ID                  string  `json:"id"`
	Object              string  `json:"object"`
	Email               string  `json:"email"`
	WorkType            *string `json:"work_type"`
	CompletedOnboarding bool    `json:"completed_onboarding"`
	CreatedAt           string  `json:"created_at"`
	UpdatedAt           string  `json:"updated_at"`
	Org                 OrgRole `json:"org"`
}

// ProfilePatch names the fields to write; a nil field is left unchanged.
type ProfilePatch struct {
	WorkType            *string
	CompletedOnboarding *bool
}

// UpdateProfile writes the fields the patch names (none: nothing is
// written) and returns the stored row, with the organization orgID as the
// user sees it. ErrNotMember when the membership has ended.
func (db *DB) UpdateProfile(ctx context.Context, userID, orgID string, p ProfilePatch) (Profile, error) {
	out := Profile{Object: "profile"}
	var created, updated time.Time
	var role string
	err := db.Pool.QueryRow(ctx, `with upd as (
			update users set work_type = coalesce($3, work_type),
				completed_onboarding = coalesce($4, completed_onboarding), updated_at = now()
			where id = $1 and ($3::text is not null or $4::boolean is not null)
				and exists (select 1 from memberships where user_id = $1 and org_id = $2)
			returning id, email, work_type, completed_onboarding, created_at, updated_at)
		select u.id, u.email, u.work_type, u.completed_onboarding, u.created_at, u.updated_at, o.id, o.name, m.role
		from (select * from upd union all
			select id, email, work_type, completed_onboarding, created_at, updated_at from users
			where id = $1 and not exists (select 1 from upd)) u
		join memberships m on m.user_id = u.id and m.org_id = $2
		join organizations o on o.id = m.org_id`, userID, orgID, p.WorkType, p.CompletedOnboarding).
		Scan(&out.ID, &out.Email, &out.WorkType, &out.CompletedOnboarding, &created, &updated,
			&out.Org.ID, &out.Org.Name, &role)
	if errors.Is(err, pgx.ErrNoRows) {
		return Profile{}, ErrNotMember
	}
	if pgErrCode(err) == "23514" {
		return Profile{}, fmt.Errorf("cannot update profile: work_type %w", ErrInvalid)
	}
	if err != nil {
		return Profile{}, fmt.Errorf("cannot update profile: %w", err)
	}
	out.Org.Role = hotpathRole(role)
	out.CreatedAt, out.UpdatedAt = timestamp(created), timestamp(updated)
	return out, nil
}
