package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/edgegw/gateway/hotpath/memory"
)

// RulesCapError is a ruleset the database refused for a cap: Bound names
// it (rules, rule_characters, total_characters) and Limit is its value.
type RulesCapError struct {
	Bound string
	Limit int64
}

func (e *RulesCapError) Error() string { return "ruleset exceeds its " + e.Bound + " cap" }

// The database's rule caps, by constraint.
var rulesCaps = map[string]RulesCapError{
	"rulesets_cap_1_count": {"rules", 50},
	"rulesets_cap_2_rule":  {"rule_characters", 1000},
	"rulesets_cap_3_total": {"total_characters", 8000},
}

// Ruleset is one stored ruleset.
type Ruleset struct {
	Object          string          `json:"object"`
	Scope           string          `json:"scope"`
	VaultID         *string         `json:"vault_id"`
	Rules           []string        `json:"rules"`
	InheritOrgRules *bool           `json:"inherit_org_rules,omitempty"`
	UpdatedAt       *string         `json:"updated_at"`
	Permissions     RulesPermission `json:"permissions"`
}

// RulesPermission says whether the caller may replace the ruleset.
type RulesPermission struct {
	CanWrite bool `json:"can_write"`
}

func orgRole(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, orgID, userID string, lock bool) (string, error) {
	sql := `select role from memberships where org_id = $1 and user_id = $2`
	if lock {
		sql += ` for share`
	}
	var role string
	err := q.QueryRow(ctx, sql, orgID, userID).Scan(&role)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return role, err
}

func isAdminRole(role string) bool { return role == "owner" || role == "admin" }

// rulesVault reads the vault a rules route names: readable to a member
// with read (not held) and to any owner or admin of the organization.
func rulesVault(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, orgID, userID, vaultID string) (vaultStanding, error) {
	s, err := standing(ctx, q, orgID, userID, vaultID)
	if err != nil {
		return s, err
	}
	if !s.read && !s.orgAdmin {
		return s, ErrVaultNotFound
	}
	return s, nil
}

// GetRuleset reads one stored ruleset: the organization's (vaultID "") or
// a vault's. A never-written ruleset is empty.
func (db *DB) GetRuleset(ctx context.Context, orgID, userID, vaultID string) (Ruleset, error) {
	out := Ruleset{Object: "ruleset", Scope: "org", Rules: []string{}}
	role, err := orgRole(ctx, db.Pool, orgID, userID, false)
	if err != nil {
		return out, fmt.Errorf("cannot read ruleset: %w", err)
	}
	out.Permissions.CanWrite = isAdminRole(role)
	var vault any
	if vaultID != "" {
		s, err := rulesVault(ctx, db.Pool, orgID, userID, vaultID)
		if err != nil {
			return out, err
		}
		out.Scope, out.VaultID, out.InheritOrgRules, vault = "vault", &s.id, &s.inherit, s.id
	}
	var rules []string
	var at time.Time
	err = db.Pool.QueryRow(ctx, `select rules, updated_at from rulesets
		where org_id = $1 and vault_id is not distinct from $2::uuid`, orgID, vault).Scan(&rules, &at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return out, fmt.Errorf("cannot read ruleset: %w", err)
	default:
		out.Rules = rules
		ts := microTimestamp(at)
		out.UpdatedAt = &ts
	}
	return out, nil
}

// PutRuleset replaces a ruleset (rules nil leaves the rules as they are)
// and, for a vault, sets inherit_org_rules when inherit is not nil, in one
// transaction. The caller must be an owner or admin (ErrForbidden, checked
// before the vault); a cap the database refuses is *RulesCapError.
func (db *DB) PutRuleset(ctx context.Context, orgID, userID, vaultID string, rules []string, inherit *bool) (Ruleset, error) {
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		role, err := orgRole(ctx, tx, orgID, userID, true)
		if err != nil {
			return err
		}
		if !isAdminRole(role) {
			return ErrForbidden
		}
		var vault any
		if vaultID != "" {
			if _, err := rulesVault(ctx, tx, orgID, userID, vaultID); err != nil {
				return err
			}
			vault = vaultID
			if inherit != nil {
				if _, err := tx.Exec(ctx, `update vaults set inherit_org_rules = $2 where id = $1`, vaultID, *inherit); err != nil {
					return err
				}
			}
		}
		if rules == nil {
			return nil
		}
		conflict := `(org_id) where vault_id is null`
		if vault != nil {
			conflict = `(vault_id) where vault_id is not null`
		}
		_, err = tx.Exec(ctx, `insert into rulesets (org_id, vault_id, rules, updated_by) values ($1, $2, $3, $4)
			on conflict `+conflict+` do update set rules = excluded.rules, updated_by = excluded.updated_by,
				updated_at = greatest(now(), rulesets.updated_at + interval '1 microsecond')`,
			orgID, vault, rules, userID)
		return err
	})
	if err != nil {
		return Ruleset{}, rulesError(err)
	}
	return db.GetRuleset(ctx, orgID, userID, vaultID)
}

func rulesError(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "23514" {
		if c, ok := rulesCaps[pg.ConstraintName]; ok {
			return &c
		}
	}
	for _, s := range []error{ErrForbidden, ErrVaultNotFound} {
		if errors.Is(err, s) {
			return err
		}
	}
	return fmt.Errorf("cannot write ruleset: %w", err)
}

// DeleteRuleset deletes a stored ruleset; deleting a missing one succeeds.
// A vault's inherit_org_rules is left as it is, and the organization's
// deletion leaves every vault's rules alone.
func (db *DB) DeleteRuleset(ctx context.Context, orgID, userID, vaultID string) error {
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		role, err := orgRole(ctx, tx, orgID, userID, true)
		if err != nil {
			return err
		}
		if !isAdminRole(role) {
			return ErrForbidden
		}
		var vault any
		if vaultID != "" {
			if _, err := rulesVault(ctx, tx, orgID, userID, vaultID); err != nil {
				return err
			}
			vault = vaultID
		}
		_, err = tx.Exec(ctx, `delete from rulesets where org_id = $1 and vault_id is not distinct from $2::uuid`, orgID, vault)
		return err
	})
	if err != nil {
		return rulesError(err)
	}
	return nil
}

// effectiveRules returns the rules in force: the organization's alone
// without a vault; in a vault the organization's first when it inherits,
// then the vault's.
func (db *DB) effectiveRules(ctx context.Context, orgID string, vault *vaultStanding) ([]memory.Rule, error) {
	var vaultID any
	inherit := true
	if vault != nil {
		vaultID, inherit = vault.id, vault.inherit
	}
	rows, err := db.Pool.Query(ctx, `select vault_id is not null, rules from rulesets
		where org_id = $1 and ((vault_id is null and $3) or vault_id = $2::uuid)
		order by vault_id nulls first`, orgID, vaultID, inherit)
	if err != nil {
		return nil, fmt.Errorf("cannot read rules: %w", err)
	}
	defer rows.Close()
	out := []memory.Rule{}
	for rows.Next() {
		var inVault bool
		var rules []string
		if err := rows.Scan(&inVault, &rules); err != nil {
			return nil, fmt.Errorf("cannot read rules: %w", err)
		}
		source := "org"
		if inVault {
			source = "vault"
		}
		for _, r := range rules {
			out = append(out, memory.Rule{Text: r, Source: source})
		}
	}
	return out, rows.Err()
}

// ResolvedRules returns the effective rules for the caller, in a vault
// when vaultID is set (an unreadable one is ErrVaultNotFound), and that
// vault's inherit_org_rules.
func (db *DB) ResolvedRules(ctx context.Context, orgID, userID, vaultID string) ([]memory.Rule, *bool, error) {
	if vaultID == "" {
		rules, err := db.effectiveRules(ctx, orgID, nil)
		return rules, nil, err
	}
	s, err := rulesVault(ctx, db.Pool, orgID, userID, vaultID)
	if err != nil {
		return nil, nil, err
	}
	rules, err := db.effectiveRules(ctx, orgID, &s)
	return rules, &s.inherit, err
}

// Rules implements memory.Store: the resolved rules of c's vault, or the
// organization's when c names none or one the caller cannot read.
func (db *DB) Rules(ctx context.Context, c memory.Caller) ([]memory.Rule, error) {
	if c.VaultID != "" {
		s, err := rulesVault(ctx, db.Pool, c.OrgID, c.UserID, c.VaultID)
		if err == nil {
			return db.effectiveRules(ctx, c.OrgID, &s)
		}
		if !errors.Is(err, ErrVaultNotFound) {
			return nil, err
		}
	}
	return db.effectiveRules(ctx, c.OrgID, nil)
}
