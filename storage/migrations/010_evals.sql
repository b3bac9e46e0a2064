-- Evals: suites of cases, runs, and one result row per case and repeat,
-- which is also the run's work item in the durable queue (docs/evals.md).
--
-- Ownership is (org_id, workspace_id): the key's workspace, its
-- organization's default one when the key is bound to none. workspace_id
-- stays nullable so that a key record without any workspace still has a
-- space of its own. Every query filters on both.

create table eval_suites (
    id            uuid primary key default gen_random_uuid(),
    org_id        uuid not null references organizations(id) on delete cascade,
    workspace_id  uuid references workspaces(id) on delete cascade,
    name          text not null check (octet_length(name) between 1 and 200),
    slug          text not null check (slug ~ '^[a-z0-9]+(-[a-z0-9]+)*$' and octet_length(slug) <= 64),
    description   text not null default '' check (octet_length(description) <= 2000),
    tier          text not null,
    case_count    integer not null default 0 check (case_count >= 0),
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now()
);
-- Slugs are unique per workspace; the unassigned space is one workspace.
create unique index eval_suites_slug_key on eval_suites
    (org_id, coalesce(workspace_id, '00000000-0000-0000-0000-000000000000'::uuid), slug);
create index eval_suites_list_idx on eval_suites (org_id, workspace_id, created_at desc, id desc);

create table eval_cases (
    id          uuid primary key default gen_random_uuid(),
    suite_id    uuid not null references eval_suites(id) on delete cascade,
    -- The case as validated, compacted: name, messages, tools,
    -- response_format, assertions.
    body        jsonb not null check (octet_length(body::text) <= 131072),
    created_at  timestamptz not null default clock_timestamp(),
    updated_at  timestamptz not null default now()
);
create index eval_cases_suite_idx on eval_cases (suite_id, created_at, id);

create table eval_runs (
    id             uuid primary key default gen_random_uuid(),
    suite_id       uuid not null references eval_suites(id) on delete cascade,
    org_id         uuid not null,
    workspace_id   uuid,
    -- The key the run is made under; looked up afresh for every item.
    key_id         uuid not null,
    tier           text not null,
    concurrency    integer not null check (concurrency between 1 and 16),
    repeats        integer not null check (repeats between 1 and 5),
    on_budget      text not null check (on_budget in ('continue', 'stop')),
    status         text not null default 'queued'
                   check (status in ('queued', 'running', 'completed', 'failed', 'cancelled')),
    reason         text,
    created_at     timestamptz not null default now(),
    started_at     timestamptz,
    finished_at    timestamptz
);
create index eval_runs_suite_idx on eval_runs (suite_id, created_at desc, id desc);
create index eval_runs_active_idx on eval_runs (created_at) where status in ('queued', 'running');

-- One row per case and repeat: the work item while queued or running, the
-- result once done. The case is a snapshot taken when the run was created.
create table eval_results (
    id             uuid primary key default gen_random_uuid(),
    run_id         uuid not null references eval_runs(id) on delete cascade,
    case_id        uuid not null,
    case_seq       integer not null,
    repeat         integer not null,
    body           jsonb not null,
    status         text not null default 'queued'
                   check (status in ('queued', 'running', 'passed', 'failed', 'errored', 'cancelled')),
    attempts       integer not null default 0,
    lease_token    uuid,
    lease_until    timestamptz,
    -- Every request id an attempt used, written before the call: the
    -- run's cost is the sum of the ledger rows with these ids.
    request_ids    text[] not null default '{}',
    error_code     text,
    reply          text,
    tool_calls     jsonb,
    verdicts       jsonb,
    input_tokens   bigint not null default 0,
    output_tokens  bigint not null default 0,
    cost_pico      bigint not null default 0,
    latency_ms     bigint not null default 0,
    finished_at    timestamptz,
    unique (run_id, case_seq, repeat)
);
-- The claim: queued items, and running ones whose lease may have expired.
create index eval_results_work_idx on eval_results (run_id, case_seq, repeat)
    where status in ('queued', 'running');
create index eval_results_running_idx on eval_results (lease_until) where status = 'running';
