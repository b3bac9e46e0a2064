-- Plans, workspaces with monthly spend caps, and credit adjustments: what
-- admission reads with a key. Changes to any of them reach every process's
-- key cache through gw_keys.

alter table organizations
    add column plan text not null default 'default' check (length(plan) between 1 and 64);

create table workspaces (
    id                uuid primary key default gen_random_uuid(),
    org_id            uuid not null references organizations(id) on delete cascade,
    name              text not null check (octet_length(name) between 1 and 128),
    slug              text not null check (slug ~ '^[a-z0-9]+(-[a-z0-9]+)*$'),
    is_default        boolean not null default false,
    spend_cap_micros  bigint check (spend_cap_micros > 0),
    created_at        timestamptz not null default now(),
    unique (org_id, slug)
);
create unique index workspaces_one_default on workspaces (org_id) where is_default;

alter table api_keys
    add constraint api_keys_workspace_fk foreign key (workspace_id) references workspaces(id),
    add column credits_adjustment_micros bigint not null default 0;
create index api_keys_workspace_idx on api_keys (workspace_id) where workspace_id is not null;

drop trigger organizations_notify on organizations;
create trigger organizations_notify after update of name, plan or delete on organizations
    for each row execute function gw_notify_all();
create trigger workspaces_notify after update of spend_cap_micros or delete on workspaces
    for each row execute function gw_notify_all();
