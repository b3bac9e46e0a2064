-- The status document's measurements. One process of the fleet at a time
-- probes every component and writes here; every process serves the same
-- document from these rows.
create table status_probes (
    component  text        not null,
    checked_at timestamptz not null,
    ok         boolean     not null,
    latency_ms integer     not null check (latency_ms >= 0),
    -- A short, fixed failure class (timeout, status_503, ...); never an
    -- upstream's body.
    error      text,
    primary key (component, checked_at)
);

-- Each process's circuit breakers, reported on an interval, so the
-- document can show the worst state of the fleet.
create table status_breakers (
    process_id  text        not null,
    component   text        not null,
    state       text        not null check (state in ('closed', 'open', 'half_open')),
    reported_at timestamptz not null,
    primary key (process_id, component)
);
create index status_breakers_reported_at on status_breakers (reported_at);
