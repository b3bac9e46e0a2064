-- Feedback on a prior request: one row per (caller, request id, type). A
-- repeated report of the same type for the same request replaces the
-- earlier one (POST /api/v1/feedback upserts on the unique key).
--
-- The request must be one of the caller's own rows in request_log (same
-- user, same organization); the insert checks it in the same statement.
-- payload is the validated, re-encoded payload of its type (docs/feedback.md),
-- never the client's raw bytes. No foreign key to request_log: that table
-- has no unique request id, and a ledger row is never deleted for feedback's
-- sake.
create table feedback (
    org_id      uuid not null references organizations(id) on delete cascade,
    user_id     uuid not null references users(id) on delete cascade,
    request_id  text not null,
    type        text not null check (type in ('thumbs', 'edit_accepted', 'edit_rejected', 'test_result')),
    payload     jsonb not null,
    created_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now(),
    primary key (org_id, user_id, request_id, type)
);
