-- Organization management, invitations with their e-mail outbox, profiles,
-- workspaces' default and history, prompts, and key rotation.

-- Profile fields. updated_at moves with every profile write.
alter table users
    add column work_type text check (work_type in ('engineering', 'data_science', 'product', 'design',
        'marketing', 'sales', 'finance', 'operations', 'people_hr', 'legal', 'student', 'other')),
    add column completed_onboarding boolean not null default false,
    add column updated_at timestamptz not null default now();

-- Why a key was revoked: a recorded fact, so re-adding a member never brings
-- old keys back. Null for revocations recorded before this column.
alter table api_keys
    add column revoked_reason text check (revoked_reason in ('holder', 'admin', 'member_removed', 'member_left')),
    add column rotated_at timestamptz;

-- A rotated key keeps its id and changes its hash: every process must drop
-- the old hash, so an update that changes the hash names both.
create or replace function gw_notify_key() returns trigger language plpgsql as $$
begin
    if tg_op = 'UPDATE' and new.hash is distinct from old.hash then
        perform pg_notify('gw_keys', 'k:' || encode(old.hash, 'hex'));
    end if;
    perform pg_notify('gw_keys', 'k:' || encode(coalesce(new.hash, old.hash), 'hex'));
    return null;
end $$;

-- A member who was removed or left. Their org- and vault-scope memory stays,
-- frozen, until an owner or admin settles it (keep or purge); one marker per
-- (organization, user), refreshed by a later departure.
create table membership_departures (
    org_id              uuid not null references organizations(id) on delete cascade,
    user_id             uuid not null references users(id) on delete cascade,
    role                text not null check (role in ('admin', 'member')),
    reason              text not null check (reason in ('removed', 'left')),
    departed_at         timestamptz not null default now(),
    removed_by          uuid references users(id) on delete set null,
    memory_frozen       boolean not null default true,
    memory_decision     text check (memory_decision in ('keep', 'purge')),
    memory_settled_at   timestamptz,
    primary key (org_id, user_id)
);

-- Every organization has exactly one default workspace (slug "default"),
-- created with the organization; keys bound to no workspace spend in it.
insert into workspaces (org_id, name, slug, is_default)
    select o.id, 'Default', 'default', true from organizations o
    where not exists (select 1 from workspaces w where w.org_id = o.id and w.is_default);

create function gw_org_default_workspace() returns trigger language plpgsql as $$
begin
    insert into workspaces (org_id, name, slug, is_default) values (new.id, 'Default', 'default', true);
    return null;
end $$;
create trigger organizations_default_workspace after insert on organizations
    for each row execute function gw_org_default_workspace();

-- A workspace that ever held a credential cannot be deleted: the mark is set
-- by the database whenever a key names it, and never cleared.
alter table workspaces add column held_credential boolean not null default false;
update workspaces w set held_credential = true where exists (select 1 from api_keys k where k.workspace_id = w.id);

create function gw_workspace_held() returns trigger language plpgsql as $$
begin
    if new.workspace_id is not null then
        update workspaces set held_credential = true where id = new.workspace_id and not held_credential;
    end if;
    return null;
end $$;
create trigger api_keys_workspace_held after insert or update of workspace_id on api_keys
    for each row execute function gw_workspace_held();

alter table workspaces add column updated_at timestamptz not null default now();

-- Invitations: addressed by e-mail or by user id, exactly one. The user id is
-- not a foreign key: an invitation never reveals whether an account exists.
-- status is the settled state; a live row lapses by the clock (expires_at),
-- and is marked lapsed only when a re-invite replaces it.
create table invitations (
    id           uuid primary key default gen_random_uuid(),
    org_id       uuid not null references organizations(id) on delete cascade,
    email        text check (length(email) between 3 and 320),
    user_id      uuid,
    role         text not null check (role in ('admin', 'member')),
    invited_by   uuid references users(id) on delete set null,
    created_at   timestamptz not null default now(),
    expires_at   timestamptz not null,
    status       text check (status in ('accepted', 'declined', 'revoked', 'lapsed')),
    settled_at   timestamptz,
    check ((email is null) <> (user_id is null))
);
-- One unsettled invitation per address and organization.
create unique index invitations_one_open on invitations (org_id, coalesce(lower(email), user_id::text))
    where status is null;
create index invitations_org_idx on invitations (org_id, created_at);
create index invitations_email_idx on invitations (lower(email)) where status is null;
create index invitations_user_idx on invitations (user_id) where status is null;

-- The transactional outbox: a message is written in the transaction that
-- decides to send it, and delivered afterwards by a worker. A delivery
-- attempt leases the row (lease_until), so a crash mid-send retries it.
create table outbox (
    id               uuid primary key default gen_random_uuid(),
    kind             text not null check (kind in ('invitation')),
    org_id           uuid references organizations(id) on delete cascade,
    invitation_id    uuid references invitations(id) on delete cascade,
    to_email         text,
    to_user_id       uuid,
    subject          text not null,
    body_text        text not null,
    body_html        text not null,
    status           text not null default 'pending' check (status in ('pending', 'sent', 'failed')),
    attempts         integer not null default 0,
    next_attempt_at  timestamptz not null default now(),
    lease_until      timestamptz,
    last_error       text,
    created_at       timestamptz not null default now(),
    sent_at          timestamptz,
    check ((to_email is null) <> (to_user_id is null))
);
create index outbox_due_idx on outbox (next_attempt_at) where status = 'pending';

-- Prompts: named containers of immutable numbered versions in a workspace.
-- latest_version is advanced under the prompt's row lock, so concurrent
-- appends get distinct consecutive numbers.
create table prompts (
    id              uuid primary key default gen_random_uuid(),
    org_id          uuid not null references organizations(id) on delete cascade,
    workspace_id    uuid not null references workspaces(id) on delete cascade,
    name            text not null check (octet_length(name) between 1 and 128),
    slug            text not null check (slug ~ '^[a-z0-9]+(-[a-z0-9]+)*$'),
    latest_version  integer not null default 1,
    created_by      uuid references users(id) on delete set null,
    created_at      timestamptz not null default now(),
    unique (workspace_id, slug)
);
create index prompts_workspace_idx on prompts (workspace_id, created_at, id);

create table prompt_versions (
    prompt_id   uuid not null references prompts(id) on delete cascade,
    version     integer not null check (version >= 1),
    content     text not null check (octet_length(content) between 1 and 102400),
    author_id   uuid references users(id) on delete set null,
    created_at  timestamptz not null default now(),
    primary key (prompt_id, version)
);
