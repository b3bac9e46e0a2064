-- Running totals of the ledger, per budget subject and 15-minute bin, so
-- that rebuilding a counter (SeedBudget) reads at most a few thousand
-- small rows instead of summing every billed row of a month: a workspace
-- with ten million requests a month took nine seconds to seed, longer than
-- an admission may wait.
--
-- A bin is the 15-minute interval its rows' created_at fall in, the burst
-- pool's slot; every span a counter is seeded over (a calendar month, the
-- trailing burst window, a key's lifetime) starts on a bin boundary.
--
-- The totals are kept by a statement trigger over the rows each insert or
-- COPY actually wrote (its transition table): a batch the writer sends
-- twice adds nothing the second time, as `on conflict (row_id) do nothing`
-- writes nothing. Rows are upserted in key order, so two writers adding to
-- the same totals wait for each other and never deadlock.
--
-- kind: 1 cost of a key's billed requests (key spend, credits), 2 cost of
-- a workspace's, 3 weighted tokens of an organization's (the pools), 4 an
-- organization's billed subscription requests on the mira tier.
create table ledger_totals (
    kind    smallint not null,
    subject uuid not null,
    bin     timestamptz not null,
    amount  bigint not null,
    primary key (kind, subject, bin)
);

create function request_log_totals() returns trigger language plpgsql as $$
begin
    insert into ledger_totals (kind, subject, bin, amount)
    select kind, subject, bin, sum(amount)::bigint from (
        select 1::smallint as kind, key_id as subject, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00') as bin,
            cost_pico as amount from written where billed and key_id is not null
        union all
        select 2::smallint, workspace_id, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00'),
            cost_pico from written where billed and workspace_id is not null
        union all
        select 3::smallint, org_id, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00'),
            weighted_tokens from written where billed and org_id is not null
        union all
        select 4::smallint, org_id, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00'),
            1 from written where billed and org_id is not null and tier = 'mira' and bucket = 'subscription'
    ) t
    group by 1, 2, 3
    order by 1, 2, 3
    on conflict (kind, subject, bin) do update set amount = ledger_totals.amount + excluded.amount;
    return null;
end
$$;

-- Writers wait while the totals of the rows already written are taken, so
-- no row is counted twice or missed.
lock table request_log in share row exclusive mode;

create trigger request_log_totals after insert on request_log
    referencing new table as written
    for each statement execute function request_log_totals();

insert into ledger_totals (kind, subject, bin, amount)
select kind, subject, bin, sum(amount)::bigint from (
    select 1::smallint as kind, key_id as subject, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00') as bin,
        cost_pico as amount from request_log where billed and key_id is not null
    union all
    select 2::smallint, workspace_id, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00'),
        cost_pico from request_log where billed and workspace_id is not null
    union all
    select 3::smallint, org_id, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00'),
        weighted_tokens from request_log where billed and org_id is not null
    union all
    select 4::smallint, org_id, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00'),
        1 from request_log where billed and org_id is not null and tier = 'mira' and bucket = 'subscription'
) t
group by 1, 2, 3;

-- The indexes that made those sums index-only scans have no reader left;
-- each cost every ledger row an index insertion.
drop index request_log_key_billed_idx;
drop index request_log_workspace_billed_idx;
drop index request_log_org_billed_idx;
drop index request_log_org_mira_idx;
