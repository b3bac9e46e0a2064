-- The request log and usage ledger: one row per request the gateway served
-- or refused, written by the ledger's batch writer (storage/ledger.go).
--
-- A row never holds prompt or reply text, and never a key: only the key's id.
--
-- Identity. row_id is minted by the gateway when the request is recorded
-- (a time-ordered UUID, version 7) and travels with the row into the spool
-- file, so a batch written twice (a commit whose acknowledgement was lost, a
-- spool replayed after a crash) inserts nothing the second time:
-- `on conflict (row_id) do nothing`. request_id is not unique: clients set
-- X-Request-Id, so two callers may send the same one, and one caller may
-- reuse one for two billed requests; every such request keeps its own row.
-- The logs route reads a request id only among the caller's own rows.
--
-- No foreign keys: a money record outlives the key, workspace or user it
-- names, and a row must never be refused because one of them was deleted.
--
-- A plain table, not partitioned: every query reads it through a narrow
-- index on (subject, created_at), and monthly partitions would need a job
-- creating them ahead of time and row_id widened to (row_id, created_at).
-- Partitioning is the way to cheap retention when that is wanted.
create table request_log (
    row_id           uuid primary key,
    request_id       text not null,
    created_at       timestamptz not null,      -- when the request arrived
    key_id           uuid,                      -- null when no key was verified
    user_id          uuid,
    org_id           uuid,
    workspace_id     uuid,
    bucket           text,                      -- subscription, apikey or headless
    route            text not null,
    tier             text,                      -- the serving tier; null when none was chosen
    status           integer not null,
    error_code       text,                      -- null on success
    input_tokens     bigint not null default 0,
    output_tokens    bigint not null default 0,
    weighted_tokens  bigint not null default 0,
    cost_pico        bigint not null default 0, -- pico-USD (1e-12)
    estimated        boolean not null default false,
    billed           boolean not null default false,
    stream           boolean not null default false,
    duration_us      bigint not null default 0,
    ttft_us          bigint,                    -- null when no content token was sent
    written_at       timestamptz not null default now()
);

-- Rebuilding counters (SeedBudget) reads billed rows of one subject in a time
-- range and sums one column: each index carries that column, so the sums are
-- index-only scans.
create index request_log_key_billed_idx on request_log (key_id, created_at)
    include (cost_pico) where billed;
create index request_log_workspace_billed_idx on request_log (workspace_id, created_at)
    include (cost_pico) where billed and workspace_id is not null;
create index request_log_org_billed_idx on request_log (org_id, created_at)
    include (weighted_tokens) where billed;
create index request_log_org_mira_idx on request_log (org_id, created_at)
    where billed and tier = 'mira' and bucket = 'subscription';

-- GET /api/v1/logs/{request_id}: the request id, then the caller's own rows.
create index request_log_request_idx on request_log (request_id);
