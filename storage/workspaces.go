package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Refusals of workspace deletion.
var (
	ErrWorkspaceIsDefault = errors.New("the default workspace cannot be deleted")
	ErrWorkspaceNotEmpty  = errors.New("the workspace holds or has held a credential")
)

const workspaceColumns = `id, org_id, name, slug, spend_cap_micros, is_default, created_at, updated_at`

func scanWorkspace(row pgx.Row) (Workspace, error) {
	w := Workspace{Object: "workspace"}
	var created, updated time.Time
	err := row.Scan(&w.ID, &w.OrgID, &w.Name, &w.Slug, &w.SpendCapMicros, &w.IsDefault, &created, &updated)
	w.CreatedAt, w.UpdatedAt = timestamp(created), timestamp(updated)
	return w, err
}

// ListWorkspaces lists an organization's workspaces: the default first,
// then the others oldest first.
func (db *DB) ListWorkspaces(ctx context.Context, orgID string) ([]Workspace, error) {
	rows, err := db.Pool.Query(ctx, `select `+workspaceColumns+` from workspaces where org_id = $1
		order by is_default desc, created_at, id`, orgID)
	if err != nil {
		return nil, fmt.Errorf("cannot list workspaces: %w", err)
	}
	defer rows.Close()
	out := []Workspace{}
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			return nil, fmt.Errorf("cannot list workspaces: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list workspaces: %w", err)
	}
	return out, nil
}

// GetWorkspace reads one workspace of orgID; ErrNotFound for a malformed,
// missing or other-organization id.
func (db *DB) GetWorkspace(ctx context.Context, orgID, id string) (Workspace, error) {
	if !ValidUUID(id) {
		return Workspace{}, ErrNotFound
	}
	w, err := scanWorkspace(db.Pool.QueryRow(ctx, `select `+workspaceColumns+` from workspaces
		where id = $1 and org_id = $2`, id, orgID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Workspace{}, ErrNotFound
	}
	if err != nil {
		return Workspace{}, fmt.Errorf("cannot read workspace: %w", err)
	}
	return w, nil
}

// WorkspacePatch names what to change: Name when non-nil; the cap when
// SetCap (nil Cap clears it).
type WorkspacePatch struct {
	Name   *string
	SetCap bool
	Cap    *int64
}

// UpdateWorkspace renames a workspace and/or sets or clears its cap. A cap
// change reaches every process's key cache through the workspaces trigger,
// so it applies from the next request.
func (db *DB) UpdateWorkspace(ctx context.Context, orgID, id string, p WorkspacePatch) (Workspace, error) {
	if !ValidUUID(id) {
		return Workspace{}, ErrNotFound
	}
	w, err := scanWorkspace(db.Pool.QueryRow(ctx, `update workspaces set name = coalesce($3, name),
			spend_cap_micros = case when $4 then $5 else spend_cap_micros end, updated_at = now()
		where id = $1 and org_id = $2 returning `+workspaceColumns, id, orgID, p.Name, p.SetCap, p.Cap))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Workspace{}, ErrNotFound
	case pgErrCode(err) == "23514":
		return Workspace{}, fmt.Errorf("cannot update workspace: %w", ErrInvalid)
	case err != nil:
		return Workspace{}, fmt.Errorf("cannot update workspace: %w", err)
	}
	return w, nil
}

// DeleteWorkspace deletes a workspace of orgID that never held a
// credential. The row is locked first: a key being issued into it at the
// same moment waits and then fails its foreign key.
func (db *DB) DeleteWorkspace(ctx context.Context, orgID, id string) error {
	if !ValidUUID(id) {
		return ErrNotFound
	}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var isDefault, held bool
		err := tx.QueryRow(ctx, `select is_default, held_credential from workspaces where id = $1 and org_id = $2 for update`,
			id, orgID).Scan(&isDefault, &held)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return ErrNotFound
		case err != nil:
			return err
		case isDefault:
			return ErrWorkspaceIsDefault
		case held:
			return ErrWorkspaceNotEmpty
		}
		_, err = tx.Exec(ctx, `delete from workspaces where id = $1`, id)
		return err
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrWorkspaceIsDefault), errors.Is(err, ErrWorkspaceNotEmpty):
		return err
	case pgErrCode(err) == "23503":
		return ErrWorkspaceNotEmpty
	}
	return fmt.Errorf("cannot delete workspace: %w", err)
}
