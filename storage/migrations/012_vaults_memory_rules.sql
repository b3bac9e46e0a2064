-- Vaults in full (owner, description, vocabularies, isolation, external ids,
-- archive, sharing, holds and pins), memories at three scopes with the
-- embeddings chat recall ranks by, and standing rulesets whose caps the
-- database enforces.

alter table vaults
    add column owner_id          uuid references users(id) on delete set null,
    add column description       text check (char_length(description) <= 2000),
    add column icon              text check (icon in ('folder', 'book', 'briefcase', 'code', 'flask', 'globe',
        'heart', 'home', 'lightbulb', 'lock', 'music', 'rocket', 'shield', 'star', 'users', 'wrench')),
    add column color             text check (color in ('gray', 'red', 'orange', 'amber', 'yellow', 'green',
        'teal', 'blue', 'indigo', 'purple', 'pink')),
    add column memory_scope      text not null default 'default' check (memory_scope in ('default', 'vault_only')),
    add column external_id       text check (octet_length(external_id) between 1 and 255),
    add column archived_at       timestamptz,
    add column inherit_org_rules boolean not null default true,
    add column updated_at        timestamptz not null default now();

-- Names are unique within an organization, byte for byte; the index is
-- what makes two concurrent creates of one name end with one vault.
create unique index vaults_org_name_key on vaults (org_id, name);
-- An external id names one vault in the organization, whoever owns it.
create unique index vaults_org_external_key on vaults (org_id, external_id) where external_id is not null;

-- can_share is a grant over content like read and write. A hold suspends
-- every grant without touching them; clearing it restores them exactly.
-- The pin is the member's own bookmark.
alter table vault_members
    add column can_share boolean not null default false,
    add column held      boolean not null default false,
    add column pinned    boolean not null default false;

-- Conversations read vault access only through this view: a held member's
-- grants are inert.
create or replace view vault_grants as
    select m.vault_id, m.user_id, v.org_id,
        m.can_read and not m.held as can_read,
        m.can_write and not m.held as can_write,
        m.can_share and not m.held as can_share
    from vault_members m
    join vaults v on v.id = m.vault_id;

-- Memories. A personal memory belongs to owner_id; org and vault memory to
-- the organization or the vault, with author_id recording who wrote it (the
-- departed-member settlement finds a member's memory by it). One value per
-- key in each place: a second write of a key replaces the value.
-- embedding is the gw-embed vector of key and value as little-endian
-- float32, scaled to unit length; null until (or unless) the embed tier
-- answered.
create table memories (
    id          uuid primary key default gen_random_uuid(),
    org_id      uuid not null references organizations(id) on delete cascade,
    scope       text not null check (scope in ('personal', 'org', 'vault')),
    owner_id    uuid references users(id) on delete cascade,
    vault_id    uuid references vaults(id) on delete cascade,
    author_id   uuid references users(id) on delete set null,
    key         text not null check (octet_length(key) between 1 and 128),
    value       text not null check (char_length(value) between 1 and 2000),
    source      text not null check (source in ('manual', 'capture')),
    embedding   bytea,
    search      tsvector generated always as (to_tsvector('simple', key || ' ' || value)) stored,
    created_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now(),
    check ((scope = 'personal') = (owner_id is not null)),
    check ((scope = 'vault') = (vault_id is not null))
);
create unique index memories_personal_key on memories (org_id, owner_id, key) where scope = 'personal';
create unique index memories_org_key on memories (org_id, key) where scope = 'org';
create unique index memories_vault_key on memories (vault_id, key) where scope = 'vault';
create index memories_author_idx on memories (org_id, author_id) where scope <> 'personal';
create index memories_search_idx on memories using gin (search);

-- Standing rules: one ruleset per organization (vault_id null) and per
-- vault. The caps are check constraints, checked in name order, so the
-- first cap a ruleset breaks is the one reported.
create function gw_rules_longest(r text[]) returns integer language sql immutable as
    $$ select coalesce(max(char_length(x)), 0) from unnest(r) x $$;
create function gw_rules_total(r text[]) returns integer language sql immutable as
    $$ select coalesce(sum(char_length(x)), 0)::integer from unnest(r) x $$;
create function gw_rules_trimmed(r text[]) returns boolean language sql immutable as
    $$ select coalesce(bool_and(x <> '' and x = btrim(x, E' \t\r\n')), true) from unnest(r) x $$;

create table rulesets (
    org_id      uuid not null references organizations(id) on delete cascade,
    vault_id    uuid references vaults(id) on delete cascade,
    rules       text[] not null,
    updated_by  uuid references users(id) on delete set null,
    updated_at  timestamptz not null default now(),
    constraint rulesets_cap_1_count check (cardinality(rules) <= 50),
    constraint rulesets_cap_2_rule check (gw_rules_longest(rules) <= 1000),
    constraint rulesets_cap_3_total check (gw_rules_total(rules) <= 8000),
    constraint rulesets_trimmed check (gw_rules_trimmed(rules))
);
create unique index rulesets_org_key on rulesets (org_id) where vault_id is null;
create unique index rulesets_vault_key on rulesets (vault_id) where vault_id is not null;
