package storage

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Workspace is a workspace as the admin commands show it. The collaboration
// routes for workspaces build on the same table.
type Workspace struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	OrgID          string `json:"org_id"`
	Name           string `json:"name"`
	Slug           string `json:"slug"`
	SpendCapMicros *int64 `json:"spend_cap_micros"`
	IsDefault      bool   `json:"is_default"`
	CreatedAt      string `json:"created_at"`
	UpdatedAt      string `json:"updated_at"`
}

var nonSlug = regexp.MustCompile(`[^a-z0-9]+`)

// Slugify derives a workspace slug from a name: lowercased, every run of
// other characters collapsed to one hyphen, trimmed. It may be empty.
func Slugify(name string) string {
	return strings.Trim(nonSlug.ReplaceAllString(strings.ToLower(name), "-"), "-")
}

// ErrInvalid marks a value the schema refuses.
var ErrInvalid = errors.New("invalid")

// CreateWorkspace creates a workspace in an organization. The slug is
// derived from the name when empty; "default" is reserved.
func (db *DB) CreateWorkspace(ctx context.Context, orgID, name, slug string, capMicros *int64) (Workspace, error) {
	if slug == "" {
		slug = Slugify(name)
	}
	if slug == "" || slug == "default" || Slugify(slug) != slug {
		return Workspace{}, fmt.Errorf("cannot create workspace: slug %q %w (lowercase letters, digits and single hyphens; not default)", slug, ErrInvalid)
	}
	if capMicros != nil && *capMicros <= 0 {
		return Workspace{}, fmt.Errorf("cannot create workspace: spend cap %w (must be positive)", ErrInvalid)
	}
	w := Workspace{Object: "workspace", OrgID: orgID, Name: name, Slug: slug, SpendCapMicros: capMicros}
	var created time.Time
	err := db.Pool.QueryRow(ctx, `insert into workspaces (org_id, name, slug, spend_cap_micros)
		values ($1, $2, $3, $4) returning id, created_at`, orgID, name, slug, capMicros).Scan(&w.ID, &created)
	w.CreatedAt, w.UpdatedAt = timestamp(created), timestamp(created)
	switch pgErrCode(err) {
	case "":
	case "23505":
		return Workspace{}, fmt.Errorf("cannot create workspace: slug %q %w in the organization", slug, ErrConflict)
	case "23503", "22P02":
		return Workspace{}, fmt.Errorf("cannot create workspace: organization %w", ErrNotFound)
	case "23514":
		return Workspace{}, fmt.Errorf("cannot create workspace: name %w (1 to 128 bytes)", ErrInvalid)
	default:
		return Workspace{}, fmt.Errorf("cannot create workspace: %w", err)
	}
	return w, nil
}

// SetWorkspaceCap sets or (nil) clears a workspace's monthly spend cap.
// Every process's key cache learns of it through the workspaces trigger.
func (db *DB) SetWorkspaceCap(ctx context.Context, workspaceID string, capMicros *int64) error {
	if capMicros != nil && *capMicros <= 0 {
		return fmt.Errorf("cannot set spend cap: %w (must be positive)", ErrInvalid)
	}
	tag, err := db.Pool.Exec(ctx, `update workspaces set spend_cap_micros = $2 where id = $1`, workspaceID, capMicros)
	if pgErrCode(err) == "22P02" || err == nil && tag.RowsAffected() == 0 {
		return fmt.Errorf("cannot set spend cap: workspace %w", ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("cannot set spend cap: %w", err)
	}
	return nil
}

// SetOrgPlan moves an organization to a plan. The plan's limits apply from
// the next request in every process.
func (db *DB) SetOrgPlan(ctx context.Context, orgID, plan string) error {
	tag, err := db.Pool.Exec(ctx, `update organizations set plan = $2 where id = $1`, orgID, plan)
	switch {
	case pgErrCode(err) == "22P02" || err == nil && tag.RowsAffected() == 0:
		return fmt.Errorf("cannot set plan: organization %w", ErrNotFound)
	case pgErrCode(err) == "23514":
		return fmt.Errorf("cannot set plan: name %w (1 to 64 characters)", ErrInvalid)
	case err != nil:
		return fmt.Errorf("cannot set plan: %w", err)
	}
	return nil
}

// AdjustCredits adds deltaMicros (negative takes credit away) to a headless
// key's credit adjustment and returns the new adjustment.
func (db *DB) AdjustCredits(ctx context.Context, keyID string, deltaMicros int64) (int64, error) {
	var adj int64
	err := db.Pool.QueryRow(ctx, `update api_keys set credits_adjustment_micros = credits_adjustment_micros + $2
		where id = $1 and kind = 'headless' returning credits_adjustment_micros`, keyID, deltaMicros).Scan(&adj)
	if errors.Is(err, pgx.ErrNoRows) || pgErrCode(err) == "22P02" {
		return 0, fmt.Errorf("cannot adjust credits: headless key %w", ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("cannot adjust credits: %w", err)
	}
	return adj, nil
}
