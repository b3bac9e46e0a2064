package storage

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgegw/gateway/hotpath/memory"
)

var _ memory.Store = (*DB)(nil)

// Refusals of the memory queries.
var (
	// ErrMemoryNotFound: the memory is missing, another organization's,
	// another member's personal memory, or in a vault the caller cannot
	// read.
	ErrMemoryNotFound = errors.New("memory not found")
	// ErrSettled: the departed member's memory was settled the other way.
	ErrSettled = errors.New("departed member's memory is already settled")
	// ErrMemoryFrozen: the memory is a departed member's, frozen until an
	// owner or admin settles it; nothing may replace or delete it before.
	ErrMemoryFrozen = errors.New("memory is frozen until its departed author's memory is settled")
)

// memoryFrozen is true for a memory row mem that is frozen: org- or
// vault-scope memory whose author departed and is not yet settled.
const memoryFrozen = `(mem.scope <> 'personal' and exists (select 1 from membership_departures d
	where d.org_id = mem.org_id and d.user_id = mem.author_id and d.memory_frozen))`

// Memory is one stored memory as its reader sees it.
type Memory struct {
	ID        string  `json:"id"`
	Object    string  `json:"object"`
	Scope     string  `json:"scope"`
	Key       string  `json:"key"`
	Value     string  `json:"value"`
	VaultID   *string `json:"vault_id"`
	VaultName *string `json:"vault_name"`
	Source    string  `json:"source"`
	Frozen    bool    `json:"frozen"`
	CreatedAt string  `json:"created_at"`
	UpdatedAt string  `json:"updated_at"`

	embedding []byte
	textRank  float32
	mentioned bool
	updated   time.Time
}

// vaultStanding is a caller's standing in a vault for memory and rules.
type vaultStanding struct {
	id, name, memoryScope         string
	inherit                       bool
	member, read, write, orgAdmin bool
}

// standing reads userID's standing in vaultID (ErrVaultNotFound when it
// is not a vault of orgID). member is a membership that is not held; read
// and write are the member's grants in effect (false when held or not a
// member).
func standing(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, orgID, userID, vaultID string) (vaultStanding, error) {
	s := vaultStanding{id: vaultID}
	if !ValidUUID(vaultID) {
		return s, ErrVaultNotFound
	}
	err := q.QueryRow(ctx, `select v.name, v.memory_scope, v.inherit_org_rules, coalesce(not m.held, false),
			coalesce(m.can_read and not m.held, false), coalesce(m.can_write and not m.held, false),
			coalesce(o.role in ('owner', 'admin'), false)
		from vaults v
		left join vault_members m on m.vault_id = v.id and m.user_id = $3
		left join memberships o on o.org_id = v.org_id and o.user_id = $3
		where v.id = $1 and v.org_id = $2`, vaultID, orgID, userID).
		Scan(&s.name, &s.memoryScope, &s.inherit, &s.member, &s.read, &s.write, &s.orgAdmin)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, ErrVaultNotFound
	}
	if err != nil {
		return s, fmt.Errorf("cannot read vault standing: %w", err)
	}
	return s, nil
}

// MemoryFilter narrows a memory list.
type MemoryFilter struct {
	Scope  string // empty for every scope
	Limit  int
	Cursor string
}

// memoryRows runs the resolved view of c: the caller's personal memory,
// the organization's and the readable default vaults', or inside a
// readable vault_only vault that vault's alone. isolated is the vault_only
// vault in force ("" for none); text ranks the rows (any of its words
// matches; a row matching none ranks 0); mentioned marks rows of the
// accepted mentions.
func (db *DB) memoryRows(ctx context.Context, c memory.Caller, isolated, text string, mentioned []string, f MemoryFilter) ([]Memory, error) {
	args := []any{c.OrgID, c.UserID, nil, text, mentioned, f.Scope}
	if isolated != "" {
		args[2] = isolated
	}
	sql := `with rv as (
			select v.id, v.name, v.memory_scope from vaults v
			join vault_members m on m.vault_id = v.id and m.user_id = $2 and m.can_read and not m.held
			where v.org_id = $1)
		select mem.id, mem.scope, mem.key, mem.value, mem.vault_id, rv.name, mem.source, mem.created_at, mem.updated_at,
			` + memoryFrozen + `,
			mem.embedding,
			case when q.q is not null and mem.search @@ q.q then ts_rank(mem.search, q.q) else 0 end,
			coalesce(mem.vault_id = any($5::uuid[]), false)
		from memories mem left join rv on rv.id = mem.vault_id
		cross join (select case when $4 = '' then null
			else replace(plainto_tsquery('simple', $4)::text, ' & ', ' | ')::tsquery end as q) q
		where mem.org_id = $1 and ($6 = '' or mem.scope = $6) and case
			when $3::uuid is not null then mem.vault_id = $3::uuid and rv.id is not null
			else (mem.scope = 'personal' and mem.owner_id = $2) or mem.scope = 'org'
				or (rv.id is not null and rv.memory_scope = 'default') end`
	if f.Cursor != "" {
		at, id, ok := parseMemoryCursor(f.Cursor)
		if !ok {
			return nil, ErrBadCursor
		}
		args = append(args, at, id)
		sql += ` and (mem.updated_at, mem.id) < ($7, $8::uuid)`
	}
	limit := f.Limit
	if limit <= 0 || limit > memory.MaxCandidates {
		limit = memory.MaxCandidates
	}
	sql += ` order by mem.updated_at desc, mem.id desc limit ` + strconv.Itoa(limit)
	rows, err := db.Pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot read memories: %w", err)
	}
	defer rows.Close()
	out := []Memory{}
	for rows.Next() {
		m := Memory{Object: "memory"}
		var created time.Time
		if err := rows.Scan(&m.ID, &m.Scope, &m.Key, &m.Value, &m.VaultID, &m.VaultName, &m.Source, &created,
			&m.updated, &m.Frozen, &m.embedding, &m.textRank, &m.mentioned); err != nil {
			return nil, fmt.Errorf("cannot read memories: %w", err)
		}
		m.CreatedAt, m.UpdatedAt = timestamp(created), microTimestamp(m.updated)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read memories: %w", err)
	}
	return out, nil
}

// MemoryCursor is the cursor of the page after m.
func MemoryCursor(m Memory) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(m.updated.UnixMicro(), 10) + ":" + m.ID))
}

func parseMemoryCursor(s string) (time.Time, string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", false
	}
	at, id, ok := strings.Cut(string(raw), ":")
	us, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || !ValidUUID(id) {
		return time.Time{}, "", false
	}
	t, ok := CursorTime(us)
	return t, id, ok
}

// ListMemories lists the resolved view a chat of c would recall from
// (vaultID "" for none; an unreadable one is ErrVaultNotFound here),
// newest change first.
func (db *DB) ListMemories(ctx context.Context, c memory.Caller, f MemoryFilter) ([]Memory, error) {
	isolated := ""
	if c.VaultID != "" {
		s, err := standing(ctx, db.Pool, c.OrgID, c.UserID, c.VaultID)
		if err != nil {
			return nil, err
		}
		if !s.read {
			return nil, ErrVaultNotFound
		}
		if s.memoryScope == "vault_only" {
			isolated = s.id
		}
	}
	return db.memoryRows(ctx, c, isolated, "", nil, f)
}

// Candidates implements memory.Store.
func (db *DB) Candidates(ctx context.Context, c memory.Caller, text string) ([]memory.Candidate, error) {
	isolated := ""
	if c.VaultID != "" {
		s, err := standing(ctx, db.Pool, c.OrgID, c.UserID, c.VaultID)
		switch {
		case errors.Is(err, ErrVaultNotFound):
			c.VaultID = "" // an unreadable vault_id is none, silently
		case err != nil:
			return nil, err
		case !s.read:
			c.VaultID = ""
		case s.memoryScope == "vault_only":
			isolated = s.id
		}
	}
	var mentioned []string
	if isolated == "" && len(c.Mentions) > 0 {
		var err error
		if mentioned, err = db.acceptedMentions(ctx, c); err != nil {
			return nil, err
		}
	}
	rows, err := db.memoryRows(ctx, c, isolated, text, mentioned, MemoryFilter{})
	if err != nil {
		return nil, err
	}
	out := make([]memory.Candidate, len(rows))
	for i := range rows {
		m := &rows[i]
		out[i] = memory.Candidate{Scope: m.Scope, Key: m.Key, Value: m.Value, Vector: memory.Decode(m.embedding),
			TextRank: m.textRank, Mentioned: m.mentioned}
		if m.VaultID != nil {
			out[i].VaultID = *m.VaultID
		}
		if m.VaultName != nil {
			out[i].VaultName = *m.VaultName
		}
	}
	return out, nil
}

// acceptedMentions drops unreadable, repeated and active-vault mentions
// and keeps the first memory.MaxMentions of the rest.
func (db *DB) acceptedMentions(ctx context.Context, c memory.Caller) ([]string, error) {
	var ids []string
	active := c.VaultID
	CanonUUID(&active)
	for _, id := range c.Mentions {
		if CanonUUID(&id) && id != active {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := db.Pool.Query(ctx, `select v.id::text from vaults v
		join vault_members m on m.vault_id = v.id and m.user_id = $2 and m.can_read and not m.held
		where v.org_id = $1 and v.id = any($3::uuid[])`, c.OrgID, c.UserID, ids)
	if err != nil {
		return nil, fmt.Errorf("cannot read mentioned vaults: %w", err)
	}
	readable := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		readable[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	for _, id := range ids {
		if readable[id] && !seen[id] && len(out) < memory.MaxMentions {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// MemoryWrite is one memory to store.
type MemoryWrite struct {
	Scope, Key, Value, VaultID string
	Source                     string // manual or capture
	Vector                     []float32
}

// writeMemory upserts w by its key in its place. A frozen memory under
// that key is left as it is (ErrMemoryFrozen): replacing it would make the
// writer its author and so take it out of the departed member's settlement.
func writeMemory(ctx context.Context, tx pgx.Tx, orgID, userID string, w MemoryWrite) (string, error) {
	var owner, vault any
	conflict := `(org_id, key) where scope = 'org'`
	switch w.Scope {
	case memory.ScopePersonal:
		owner = userID
		conflict = `(org_id, owner_id, key) where scope = 'personal'`
	case memory.ScopeVault:
		vault = w.VaultID
		conflict = `(vault_id, key) where scope = 'vault'`
	}
	var emb []byte
	if w.Vector != nil {
		emb = memory.Encode(nil, w.Vector)
	}
	var id string
	err := tx.QueryRow(ctx, `insert into memories as mem (org_id, scope, owner_id, vault_id, author_id, key, value, source, embedding)
		values ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		on conflict `+conflict+` do update set value = excluded.value, source = excluded.source,
			author_id = excluded.author_id, embedding = excluded.embedding,
			updated_at = greatest(now(), mem.updated_at + interval '1 microsecond')
			where not `+memoryFrozen+`
		returning id`, orgID, w.Scope, owner, vault, userID, w.Key, w.Value, w.Source, emb).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrMemoryFrozen
	}
	return id, err
}

// WriteMemory stores a memory written by hand: personal memory is the
// caller's own; organization memory needs an owner or admin of the
// organization (ErrForbidden); vault memory needs can_write on a readable
// vault (ErrVaultNotFound, ErrVaultForbidden). A key already present in
// that place gets the new value, unless that memory is frozen
// (ErrMemoryFrozen).
func (db *DB) WriteMemory(ctx context.Context, orgID, userID string, w MemoryWrite) (Memory, error) {
	var out Memory
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		switch w.Scope {
		case memory.ScopeOrg:
			var role string
			err := tx.QueryRow(ctx, `select role from memberships where org_id = $1 and user_id = $2 for share`,
				orgID, userID).Scan(&role)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if role != "owner" && role != "admin" {
				return ErrForbidden
			}
		case memory.ScopeVault:
			s, err := standing(ctx, tx, orgID, userID, w.VaultID)
			if err != nil {
				return err
			}
			if !s.member {
				return ErrVaultNotFound
			}
			if !s.write {
				return ErrVaultForbidden
			}
		}
		id, err := writeMemory(ctx, tx, orgID, userID, w)
		if err != nil {
			return err
		}
		out, err = readMemory(ctx, tx, orgID, id)
		return err
	})
	if err != nil {
		for _, s := range []error{ErrForbidden, ErrVaultNotFound, ErrVaultForbidden, ErrMemoryFrozen} {
			if errors.Is(err, s) {
				return Memory{}, err
			}
		}
		return Memory{}, fmt.Errorf("cannot write memory: %w", err)
	}
	return out, nil
}

func readMemory(ctx context.Context, tx pgx.Tx, orgID, id string) (Memory, error) {
	m := Memory{Object: "memory"}
	var created time.Time
	err := tx.QueryRow(ctx, `select mem.id, mem.scope, mem.key, mem.value, mem.vault_id, v.name, mem.source,
			mem.created_at, mem.updated_at,
			`+memoryFrozen+`
		from memories mem left join vaults v on v.id = mem.vault_id
		where mem.id = $1 and mem.org_id = $2`, id, orgID).
		Scan(&m.ID, &m.Scope, &m.Key, &m.Value, &m.VaultID, &m.VaultName, &m.Source, &created, &m.updated, &m.Frozen)
	m.CreatedAt, m.UpdatedAt = timestamp(created), microTimestamp(m.updated)
	return m, err
}

// DeleteMemory removes one stored memory: the caller's own personal
// memory; organization memory as an owner or admin (ErrForbidden
// otherwise); vault memory with can_write (ErrVaultForbidden with read
// only). Anything the caller cannot see is ErrMemoryNotFound; a frozen
// memory the caller could otherwise delete is ErrMemoryFrozen.
func (db *DB) DeleteMemory(ctx context.Context, orgID, userID, id string) error {
	if !ValidUUID(id) {
		return ErrMemoryNotFound
	}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var scope string
		var owner, vault *string
		var frozen bool
		err := tx.QueryRow(ctx, `select scope, owner_id, vault_id, `+memoryFrozen+` from memories mem
			where id = $1 and org_id = $2 for update`,
			id, orgID).Scan(&scope, &owner, &vault, &frozen)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrMemoryNotFound
		}
		if err != nil {
			return err
		}
		switch scope {
		case memory.ScopePersonal:
			if *owner != userID {
				return ErrMemoryNotFound
			}
		case memory.ScopeOrg:
			var role string
			err := tx.QueryRow(ctx, `select role from memberships where org_id = $1 and user_id = $2`, orgID, userID).Scan(&role)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if role != "owner" && role != "admin" {
				return ErrForbidden
			}
		case memory.ScopeVault:
			s, err := standing(ctx, tx, orgID, userID, *vault)
			if err != nil {
				return err
			}
			if !s.read {
				return ErrMemoryNotFound
			}
			if !s.write {
				return ErrVaultForbidden
			}
		}
		if frozen {
			return ErrMemoryFrozen
		}
		_, err = tx.Exec(ctx, `delete from memories where id = $1`, id)
		return err
	})
	if err != nil {
		for _, s := range []error{ErrForbidden, ErrMemoryNotFound, ErrVaultForbidden, ErrMemoryFrozen} {
			if errors.Is(err, s) {
				return err
			}
		}
		return fmt.Errorf("cannot delete memory: %w", err)
	}
	return nil
}

// Settlement is a departed member's settled memory.
type Settlement struct {
	Object    string `json:"object"`
	UserID    string `json:"user_id"`
	Decision  string `json:"decision"`
	SettledAt string `json:"settled_at"`
	Purged    int64  `json:"purged"`
}

// SettleDeparted settles the frozen org- and vault-scope memory of a
// member who left orgID or was removed: keep unfreezes it, purge deletes
// it, in the transaction that records the decision. Settling again with
// the recorded decision returns it unchanged; the other decision is
// ErrSettled. A user with no departure marker is ErrNotFound; the caller
// must be an owner or admin (ErrForbidden, checked first).
func (db *DB) SettleDeparted(ctx context.Context, orgID, actorID, userID, decision string) (Settlement, error) {
	out := Settlement{Object: "memory.settlement", UserID: userID, Decision: decision}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var role string
		err := tx.QueryRow(ctx, `select role from memberships where org_id = $1 and user_id = $2 for share`,
			orgID, actorID).Scan(&role)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if role != "owner" && role != "admin" {
			return ErrForbidden
		}
		if !ValidUUID(userID) {
			return ErrNotFound
		}
		var frozen bool
		var recorded *string
		var settled *time.Time
		err = tx.QueryRow(ctx, `select memory_frozen, memory_decision, memory_settled_at from membership_departures
			where org_id = $1 and user_id = $2 for update`, orgID, userID).Scan(&frozen, &recorded, &settled)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if !frozen && recorded != nil {
			if *recorded != decision {
				return ErrSettled
			}
			out.SettledAt = timestamp(*settled)
			return nil
		}
		if decision == "purge" {
			tag, err := tx.Exec(ctx, `delete from memories where org_id = $1 and author_id = $2 and scope <> 'personal'`,
				orgID, userID)
			if err != nil {
				return err
			}
			out.Purged = tag.RowsAffected()
		}
		var at time.Time
		err = tx.QueryRow(ctx, `update membership_departures set memory_frozen = false, memory_decision = $3,
			memory_settled_at = now() where org_id = $1 and user_id = $2 returning memory_settled_at`,
			orgID, userID, decision).Scan(&at)
		out.SettledAt = timestamp(at)
		return err
	})
	if err != nil {
		for _, s := range []error{ErrForbidden, ErrNotFound, ErrSettled} {
			if errors.Is(err, s) {
				return Settlement{}, err
			}
		}
		return Settlement{}, fmt.Errorf("cannot settle departed memory: %w", err)
	}
	return out, nil
}

// Capture implements memory.Store: facts go to the caller's vault when
// they may write it, otherwise to their personal memory; never to the
// organization's. A fact whose key would replace a frozen memory is
// skipped and not reported, like any fact that was not stored.
func (db *DB) Capture(ctx context.Context, c memory.Caller, facts []memory.Fact, vectors [][]float32) ([]memory.Captured, error) {
	var out []memory.Captured
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		scope, vault := memory.ScopePersonal, ""
		if c.VaultID != "" {
			s, err := standing(ctx, tx, c.OrgID, c.UserID, c.VaultID)
			if err != nil && !errors.Is(err, ErrVaultNotFound) {
				return err
			}
			if err == nil && s.write {
				scope, vault = memory.ScopeVault, s.id
			}
		}
		for i, f := range facts {
			w := MemoryWrite{Scope: scope, VaultID: vault, Key: f.Key, Value: f.Value, Source: "capture"}
			if i < len(vectors) {
				w.Vector = vectors[i]
			}
			_, err := writeMemory(ctx, tx, c.OrgID, c.UserID, w)
			if errors.Is(err, ErrMemoryFrozen) {
				continue
			}
			if err != nil {
				return err
			}
			out = append(out, memory.Captured{Scope: scope, Key: f.Key, VaultID: vault})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot capture memory: %w", err)
	}
	return out, nil
}
