-- Conversations: a tree of messages per conversation, private to its author,
-- optionally held in a vault; full-text search over every message; the
-- Idempotency-Key replays of appends; and the metadata-only record of each
-- deletion.

-- btree_gin lets one GIN index hold the author's id beside the text-search
-- vector, so a search intersects "this author" and "these words" inside the
-- index instead of ranking every author's matches. It is a trusted contrib
-- extension: a database owner may create it without being a superuser.
create extension if not exists btree_gin;

-- Vaults, as far as conversations need them: a conversation may be held in
-- one, and then follows its author's read and write grants on it. The vaults
-- change extends these tables (description, sharing, holds, pins ...).
create table if not exists vaults (
    id          uuid primary key default gen_random_uuid(),
    org_id      uuid not null references organizations(id) on delete cascade,
    name        text not null check (octet_length(name) between 1 and 128),
    created_at  timestamptz not null default now()
);

create table if not exists vault_members (
    vault_id    uuid not null references vaults(id) on delete cascade,
    user_id     uuid not null references users(id) on delete cascade,
    can_read    boolean not null default false,
    can_write   boolean not null default false,
    created_at  timestamptz not null default now(),
    primary key (vault_id, user_id)
);
create index if not exists vault_members_user_idx on vault_members (user_id);

-- vault_grants is the one place conversation queries read vault access
-- from: a row per member with the grants in effect. A later change that adds
-- holds (a held member's grants are inert) replaces this view, and every
-- conversation query follows.
create view vault_grants as
    select m.vault_id, m.user_id, v.org_id, m.can_read, m.can_write
    from vault_members m
    join vaults v on v.id = m.vault_id;

create table conversations (
    id                      uuid primary key default gen_random_uuid(),
    org_id                  uuid not null references organizations(id) on delete cascade,
    user_id                 uuid not null references users(id) on delete cascade,
    -- Deleting a vault deletes the conversations it holds (and records each
    -- deletion, below).
    vault_id                uuid references vaults(id) on delete cascade,
    title                   text,
    model                   text,
    source                  text not null default 'chat' check (source in ('chat', 'cli', 'agent')),
    -- The object as the client sent it, compacted: json (not jsonb) keeps
    -- the text verbatim, key order and all.
    meta                    json check (meta is null or octet_length(meta::text) <= 4096),
    archived_at             timestamptz,
    -- Null while the conversation is one chain (never branched); then the
    -- leaf is the newest message. No foreign key: deleting a conversation's
    -- messages would otherwise probe this table once per message.
    active_leaf_message_id  uuid,
    -- Messages appended so far, which is also the last sequence number.
    message_count           integer not null default 0 check (message_count >= 0),
    created_at              timestamptz not null default now(),
    updated_at              timestamptz not null default now(),
    retention_until         timestamptz not null
);
-- The list: one author's conversations in one organization, by source and
-- shelf, most recently active first (keyset pagination on updated_at, id).
create index conversations_list_idx on conversations
    (user_id, org_id, source, (archived_at is not null), updated_at desc, id desc);
create index conversations_retention_idx on conversations (retention_until);
create index conversations_vault_idx on conversations (vault_id) where vault_id is not null;

create table conversation_messages (
    id               uuid primary key default gen_random_uuid(),
    conversation_id  uuid not null references conversations(id) on delete cascade,
    -- The conversation's author, copied here for the search index.
    user_id          uuid not null,
    -- Null for a root. Always a message of the same conversation.
    parent_id        uuid references conversation_messages(id),
    sequence         integer not null check (sequence > 0),
    role             text not null check (role in ('system', 'user', 'assistant', 'tool')),
    content          text not null,
    status           text not null default 'complete' check (status in ('complete', 'incomplete', 'cancelled')),
    tool_calls       json check (tool_calls is null or role = 'assistant'),
    tool_call_id     text check ((tool_call_id is not null) = (role = 'tool')),
    file_ids         text[] not null default '{}' check (cardinality(file_ids) <= 20),
    created_at       timestamptz not null default now(),
    -- The first 100,000 characters are indexed: a tsvector cannot exceed
    -- 1 MB, and no search snippet comes from further in.
    search           tsvector generated always as (to_tsvector('english', left(content, 100000))) stored,
    unique (conversation_id, sequence)
);
-- Children of a message, newest last: sibling_ids, the deepest newest
-- descendant, and the parent foreign key's checks.
create index conversation_messages_parent_idx on conversation_messages (parent_id, sequence);
-- The roots of a conversation (siblings of one another).
create index conversation_messages_roots_idx on conversation_messages (conversation_id, sequence)
    where parent_id is null;
create index conversation_messages_search_idx on conversation_messages using gin (user_id, search);

-- Idempotency-Key replays of appends: the stored 201 body, written in the
-- append's transaction. Kept 24 hours; the retention job removes older ones.
create table conversation_appends (
    conversation_id  uuid not null references conversations(id) on delete cascade,
    key_hash         bytea not null check (length(key_hash) = 32),
    body_hash        bytea not null check (length(body_hash) = 32),
    response         bytea not null,
    created_at       timestamptz not null default now(),
    primary key (conversation_id, key_hash)
);
create index conversation_appends_created_idx on conversation_appends (created_at);

-- One row per deleted conversation, however it was deleted (the API, the
-- retention job, its vault or its organization going away). Metadata only:
-- never a title, a message or a file name.
create table conversation_deletions (
    id                       uuid primary key default gen_random_uuid(),
    conversation_id          uuid not null,
    org_id                   uuid not null,
    user_id                  uuid not null,
    vault_id                 uuid,
    message_count            integer not null,
    conversation_created_at  timestamptz not null,
    -- X-Request-Id of the deleting request; null for the retention job and
    -- for cascades.
    request_id               text,
    created_at               timestamptz not null default now()
);
create index conversation_deletions_org_idx on conversation_deletions (org_id, created_at);

-- The request id reaches the trigger through the transaction-local setting
-- gw.request_id.
create function gw_record_conversation_deletions() returns trigger language plpgsql as $$
begin
    insert into conversation_deletions
        (conversation_id, org_id, user_id, vault_id, message_count, conversation_created_at, request_id)
    select id, org_id, user_id, vault_id, message_count, created_at,
        nullif(current_setting('gw.request_id', true), '')
    from gone;
    return null;
end $$;

create trigger conversations_record_deletions after delete on conversations
    referencing old table as gone
    for each statement execute function gw_record_conversation_deletions();
