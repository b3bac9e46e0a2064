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

-- Messages that kept the id of a file deleted under them by that race.
-- A file's id leaves every message when the file is deleted, so an id with
-- no row, or with a deleted one, is only ever that.
update conversation_messages m
set file_ids = array(select x from unnest(m.file_ids) x
                     where exists (select 1 from files f where f.id::text = x and f.state <> 'deleted'))
where cardinality(m.file_ids) > 0
  and exists (select 1 from unnest(m.file_ids) x
              where not exists (select 1 from files f where f.id::text = x and f.state <> 'deleted'));
