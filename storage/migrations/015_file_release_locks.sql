-- Deleting messages deletes the chat attachments no remaining message
-- attaches (009_files.sql). The check ran on the statement's snapshot, so
-- it raced two other writers of the same file:
-- - two conversations sharing a file, deleted at once: each saw the other's
--   messages, not yet gone, and the file outlived both;
-- - an append attaching the file to a third conversation: its message was
--   not yet visible, and the file was deleted under it.
-- The release now locks the files first, in id order, and checks on a
-- snapshot taken after the lock: a concurrent release or append of the same
-- file (an append locks its files FOR SHARE) has committed by then and is
-- seen. A PL/pgSQL statement in a volatile function takes a fresh snapshot
-- at read committed, the isolation every writer here runs at.
create or replace function gw_release_message_files() returns trigger language plpgsql as $$
begin
    perform 1 from files f
    where f.state <> 'deleted' and f.purpose = 'chat_attachment'
      and f.id::text in (select unnest(g.file_ids) from gone_messages g where cardinality(g.file_ids) > 0)
    order by f.id
    for update;
    update files f set state = 'deleted', deleted_at = now()
    where f.state <> 'deleted' and f.purpose = 'chat_attachment'
      and f.id::text in (select unnest(g.file_ids) from gone_messages g where cardinality(g.file_ids) > 0)
      and not exists (select 1 from conversation_messages m
                      where cardinality(m.file_ids) > 0 and m.file_ids @> array[f.id::text]);
    return null;
end $$;

-- What a release from before this one may leave behind while it runs
-- beside newer ones, and left before: files deleted under messages that
-- list them, vault grants that outlived a membership. The gateway mends
-- both once no older process is connected (storage.MendAfterOlderProcesses,
-- run by the file janitor); this row says a mend is due.
create table maintenance_flags (
    name    text primary key,
    set_at  timestamptz not null default now()
);
insert into maintenance_flags (name) values ('mend_after_older_processes');
