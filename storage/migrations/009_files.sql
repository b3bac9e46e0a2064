-- Files: uploaded bytes live in a file store (PostgreSQL chunks below, or an
-- S3-compatible bucket), keyed by store_key; this table is the record every
-- read goes through, with the text read once at upload.

create table files (
    id            uuid primary key default gen_random_uuid(),
    org_id        uuid not null references organizations(id) on delete cascade,
    user_id       uuid not null references users(id) on delete cascade,
    filename      text not null check (octet_length(filename) between 1 and 255),
    bytes         bigint not null check (bytes >= 0),
    content_type  text not null,
    purpose       text not null check (purpose in ('chat_attachment')),
    -- pending while the bytes are being written; ready once readable;
    -- deleted once deleted or expired (gone to every read; the janitor
    -- deletes the bytes and then the row).
    state         text not null default 'pending' check (state in ('pending', 'ready', 'deleted')),
    text_status   text not null check (text_status in ('ready', 'not_text', 'image')),
    -- Why the text could not be read, when text_status is not_text.
    text_reason   text check ((text_reason is null) = (text_status <> 'not_text')),
    text_tokens   integer not null default 0 check (text_tokens >= 0),
    -- The text read at upload; null unless text_status is ready and the
    -- text is within the counting bound.
    text          text,
    -- Pages of a PDF; null for other types.
    pages         integer,
    store_key     text not null unique,
    created_at    timestamptz not null default now(),
    expires_at    timestamptz,
    deleted_at    timestamptz
);
-- The owner's listing, newest first (keyset on created_at, id).
create index files_owner_idx on files (org_id, user_id, created_at desc, id desc) where state = 'ready';
-- The janitor's work: deleted rows, expired rows, abandoned uploads.
create index files_deleted_idx on files (deleted_at) where state = 'deleted';
create index files_expiry_idx on files (expires_at) where state = 'ready' and expires_at is not null;
create index files_pending_idx on files (created_at) where state = 'pending';

-- The PostgreSQL file store: a file's bytes in order, in chunks.
create table file_chunks (
    store_key  text not null,
    seq        integer not null check (seq >= 0),
    data       bytea not null,
    primary key (store_key, seq)
);

-- Messages that attach a file, found without scanning every message.
create index conversation_messages_file_ids_idx on conversation_messages using gin (file_ids)
    where cardinality(file_ids) > 0;

-- Deleting messages (a conversation deleted through the API, by retention,
-- with its vault or its organization) deletes every chat_attachment file
-- they attached that no remaining message attaches. Files of other
-- purposes are only detached. The janitor deletes the bytes.
create function gw_release_message_files() returns trigger language plpgsql as $$
begin
    update files f set state = 'deleted', deleted_at = now()
    where f.state <> 'deleted' and f.purpose = 'chat_attachment'
      and f.id::text in (select unnest(g.file_ids) from gone_messages g where cardinality(g.file_ids) > 0)
      and not exists (select 1 from conversation_messages m
                      where cardinality(m.file_ids) > 0 and m.file_ids @> array[f.id::text]);
    return null;
end $$;

create trigger conversation_messages_release_files after delete on conversation_messages
    referencing old table as gone_messages
    for each statement execute function gw_release_message_files();
