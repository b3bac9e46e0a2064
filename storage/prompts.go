package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Refusals of the prompt queries.
var (
	ErrPromptVersionNotFound = errors.New("prompt version not found")
)

// Prompt is a prompt with, when read, one version embedded.
type Prompt struct {
	ID            string         `json:"id"`
	Object        string         `json:"object"`
	WorkspaceID   string         `json:"workspace_id"`
	Name          string         `json:"name"`
	Slug          string         `json:"slug"`
	LatestVersion int            `json:"latest_version"`
	VersionCount  int            `json:"version_count"`
	CreatedAt     string         `json:"created_at"`
	Version       *PromptVersion `json:"version,omitempty"`
}

// PromptVersion is one immutable version.
type PromptVersion struct {
	Object    string  `json:"object"`
	PromptID  string  `json:"prompt_id"`
	Version   int     `json:"version"`
	Content   string  `json:"content"`
	AuthorID  *string `json:"author_id"`
	CreatedAt string  `json:"created_at"`
}

// Versions are never deleted one by one, so a prompt's version count is its
// latest version number; both are reported.
const promptColumns = `p.id, p.workspace_id, p.name, p.slug, p.latest_version, p.created_at`

func scanPrompt(row pgx.Row) (Prompt, error) {
	p := Prompt{Object: "prompt"}
	var created time.Time
	err := row.Scan(&p.ID, &p.WorkspaceID, &p.Name, &p.Slug, &p.LatestVersion, &created)
	p.VersionCount, p.CreatedAt = p.LatestVersion, timestamp(created)
	return p, err
}

const versionColumns = `v.prompt_id, v.version, v.content, v.author_id::text, v.created_at`

func scanVersion(row pgx.Row) (PromptVersion, error) {
	v := PromptVersion{Object: "prompt.version"}
	var created time.Time
	err := row.Scan(&v.PromptID, &v.Version, &v.Content, &v.AuthorID, &created)
	v.CreatedAt = timestamp(created)
	return v, err
}

// NewPrompt is a prompt to create in a workspace with its first version.
type NewPrompt struct {
	OrgID, WorkspaceID, AuthorID string
	Name, Slug, Content          string
}

// CreatePrompt creates a prompt and its version 1. ErrConflict: the slug is
// used in the workspace.
func (db *DB) CreatePrompt(ctx context.Context, n NewPrompt) (Prompt, error) {
	var p Prompt
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var err error
		p, err = scanPrompt(tx.QueryRow(ctx, `insert into prompts as p (org_id, workspace_id, name, slug, created_by)
			values ($1, $2, $3, $4, $5) returning `+promptColumns, n.OrgID, n.WorkspaceID, n.Name, n.Slug, n.AuthorID))
		if err != nil {
			return err
		}
		v, err := scanVersion(tx.QueryRow(ctx, `insert into prompt_versions as v (prompt_id, version, content, author_id)
			values ($1, 1, $2, $3) returning `+versionColumns, p.ID, n.Content, n.AuthorID))
		p.Version = &v
		return err
	})
	switch pgErrCode(err) {
	case "":
	case "23505":
		return Prompt{}, ErrConflict
	case "23514":
		return Prompt{}, fmt.Errorf("cannot create prompt: %w", ErrInvalid)
	}
	if err != nil {
		return Prompt{}, fmt.Errorf("cannot create prompt: %w", err)
	}
	return p, nil
}

// ListPrompts lists a workspace's prompts, oldest first, with no content:
// at most limit of them.
func (db *DB) ListPrompts(ctx context.Context, workspaceID string, limit int) ([]Prompt, error) {
	rows, err := db.Pool.Query(ctx, `select `+promptColumns+` from prompts p where p.workspace_id = $1
		order by p.created_at, p.id limit $2`, workspaceID, limit)
	if err != nil {
		return nil, fmt.Errorf("cannot list prompts: %w", err)
	}
	defer rows.Close()
	out := []Prompt{}
	for rows.Next() {
		p, err := scanPrompt(rows)
		if err != nil {
			return nil, fmt.Errorf("cannot list prompts: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list prompts: %w", err)
	}
	return out, nil
}

// GetPrompt reads a prompt of the workspace with one version: the latest
// when version is 0. ErrNotFound: no such prompt in the workspace;
// ErrPromptVersionNotFound: the prompt has no such version.
func (db *DB) GetPrompt(ctx context.Context, workspaceID, id string, version int) (Prompt, error) {
	if !ValidUUID(id) {
		return Prompt{}, ErrNotFound
	}
	p, err := scanPrompt(db.Pool.QueryRow(ctx, `select `+promptColumns+` from prompts p
		where p.id = $1 and p.workspace_id = $2`, id, workspaceID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Prompt{}, ErrNotFound
	}
	if err != nil {
		return Prompt{}, fmt.Errorf("cannot read prompt: %w", err)
	}
	if version == 0 {
		version = p.LatestVersion
	}
	if version > math.MaxInt32 {
		// Versions are int4: a larger number is one the prompt cannot have
		// and would not encode as a parameter.
		return Prompt{}, ErrPromptVersionNotFound
	}
	v, err := scanVersion(db.Pool.QueryRow(ctx, `select `+versionColumns+` from prompt_versions v
		where v.prompt_id = $1 and v.version = $2`, id, version))
	if errors.Is(err, pgx.ErrNoRows) {
		return Prompt{}, ErrPromptVersionNotFound
	}
	if err != nil {
		return Prompt{}, fmt.Errorf("cannot read prompt: %w", err)
	}
	p.Version = &v
	return p, nil
}

// DeletePrompt deletes a prompt of the workspace and, by cascade, its
// versions.
func (db *DB) DeletePrompt(ctx context.Context, workspaceID, id string) error {
	if !ValidUUID(id) {
		return ErrNotFound
	}
	tag, err := db.Pool.Exec(ctx, `delete from prompts where id = $1 and workspace_id = $2`, id, workspaceID)
	if err != nil {
		return fmt.Errorf("cannot delete prompt: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// AppendPromptVersion adds the next version. The number is taken by
// advancing latest_version under the prompt's row lock, so concurrent
// appends get distinct consecutive numbers.
func (db *DB) AppendPromptVersion(ctx context.Context, workspaceID, id, authorID, content string) (PromptVersion, error) {
	if !ValidUUID(id) {
		return PromptVersion{}, ErrNotFound
	}
	var v PromptVersion
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var n int
		err := tx.QueryRow(ctx, `update prompts set latest_version = latest_version + 1
			where id = $1 and workspace_id = $2 returning latest_version`, id, workspaceID).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		v, err = scanVersion(tx.QueryRow(ctx, `insert into prompt_versions as v (prompt_id, version, content, author_id)
			values ($1, $2, $3, $4) returning `+versionColumns, id, n, content, authorID))
		return err
	})
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, ErrNotFound):
		return PromptVersion{}, err
	case pgErrCode(err) == "23514":
		return PromptVersion{}, fmt.Errorf("cannot append version: %w", ErrInvalid)
	}
	return PromptVersion{}, fmt.Errorf("cannot append version: %w", err)
}

// ListPromptVersions lists a prompt's versions newest first, limit of them
// below version before (0: from the newest). ErrNotFound: no such prompt in
// the workspace.
func (db *DB) ListPromptVersions(ctx context.Context, workspaceID, id string, before, limit int) ([]PromptVersion, error) {
	if !ValidUUID(id) {
		return nil, ErrNotFound
	}
	var exists bool
	if err := db.Pool.QueryRow(ctx, `select exists (select 1 from prompts where id = $1 and workspace_id = $2)`,
		id, workspaceID).Scan(&exists); err != nil {
		return nil, fmt.Errorf("cannot list versions: %w", err)
	}
	if !exists {
		return nil, ErrNotFound
	}
	rows, err := db.Pool.Query(ctx, `select `+versionColumns+` from prompt_versions v
		where v.prompt_id = $1 and ($2 = 0 or v.version < $2) order by v.version desc limit $3`, id, before, limit)
	if err != nil {
		return nil, fmt.Errorf("cannot list versions: %w", err)
	}
	defer rows.Close()
	out := []PromptVersion{}
	for rows.Next() {
		v, err := scanVersion(rows)
		if err != nil {
			return nil, fmt.Errorf("cannot list versions: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list versions: %w", err)
	}
	return out, nil
}
