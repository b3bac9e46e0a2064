-- Organizations, users, memberships, user keys and service tokens.
-- Secrets are never stored: keys and tokens are kept as SHA-256 hashes.

create table organizations (
    id          uuid primary key default gen_random_uuid(),
    name        text not null check (length(name) between 1 and 200),
    personal    boolean not null default false,
    created_at  timestamptz not null default now()
);

create table users (
    id               uuid primary key default gen_random_uuid(),
    email            text not null check (length(email) between 3 and 320),
    personal_org_id  uuid not null references organizations(id),
    suspended_at     timestamptz,
    created_at       timestamptz not null default now()
);
create unique index users_email_key on users (lower(email));

create table memberships (
    org_id      uuid not null references organizations(id) on delete cascade,
    user_id     uuid not null references users(id) on delete cascade,
    role        text not null check (role in ('owner', 'admin', 'member')),
    created_at  timestamptz not null default now(),
    primary key (org_id, user_id)
);
create index memberships_user_idx on memberships (user_id);

create table api_keys (
    id                uuid primary key default gen_random_uuid(),
    hash              bytea not null unique check (length(hash) = 32),
    kind              text not null check (kind in ('developer', 'signed_in', 'headless')),
    user_id           uuid not null references users(id) on delete cascade,
    org_id            uuid not null references organizations(id) on delete cascade,
    scopes            text[] not null default '{}',
    models            text[] not null default '{}',
    read_only         boolean not null default false,
    spend_cap_micros  bigint check (spend_cap_micros >= 0),
    credits_micros    bigint check (credits_micros >= 0),
    workspace_id      uuid,
    created_at        timestamptz not null default now(),
    expires_at        timestamptz,
    revoked_at        timestamptz
);
create index api_keys_user_org_idx on api_keys (user_id, org_id);

create table service_tokens (
    id          uuid primary key default gen_random_uuid(),
    hash        bytea not null unique check (length(hash) = 32),
    name        text not null check (length(name) between 1 and 200),
    scopes      text[] not null default '{}',
    read_only   boolean not null default false,
    created_at  timestamptz not null default now(),
    expires_at  timestamptz,
    revoked_at  timestamptz
);

-- Every gateway process caches key records and listens on gw_keys. A change
-- to a key names its hash; a change that can touch many keys at once (a
-- user's suspension, a membership's role) asks every process to distrust its
-- whole cache. The triggers make every writer, the admin CLI and hand-written
-- SQL included, invalidate the caches.
create function gw_notify_key() returns trigger language plpgsql as $$
begin
    perform pg_notify('gw_keys', 'k:' || encode(coalesce(new.hash, old.hash), 'hex'));
    return null;
end $$;

create function gw_notify_all() returns trigger language plpgsql as $$
begin
    perform pg_notify('gw_keys', 'all');
    return null;
end $$;

create trigger api_keys_notify after update or delete on api_keys
    for each row execute function gw_notify_key();
create trigger service_tokens_notify after update or delete on service_tokens
    for each row execute function gw_notify_key();
create trigger users_notify after update of suspended_at or delete on users
    for each row execute function gw_notify_all();
create trigger memberships_notify after update or delete on memberships
    for each row execute function gw_notify_all();
create trigger organizations_notify after update of name or delete on organizations
    for each row execute function gw_notify_all();
