-- Sign-in: device login (RFC 8628), native OAuth states (RFC 7636) and the
-- approval page's browser sessions. No secret is stored in the clear: device
-- codes, states and session cookies are kept as SHA-256 hashes. Rows are
-- purged a day after they expire.

-- One device login. The device_code is known only by its hash; user_code is
-- the short code a person types (eight letters of an unambiguous alphabet,
-- stored without the dash). Polls are paced here, on the row, so that every
-- gateway process enforces one interval: a poll counts only when it comes
-- interval_seconds after the last counted one.
create table device_codes (
    id                uuid primary key default gen_random_uuid(),
    hash              bytea not null unique check (length(hash) = 32),
    user_code         text not null check (user_code ~ '^[BCDFGHJKLMNPQRSTVWXZ]{8}$'),
    status            text not null default 'pending'
                      check (status in ('pending', 'approved', 'denied', 'redeemed', 'refused')),
    interval_seconds  integer not null check (interval_seconds between 1 and 60),
    created_at        timestamptz not null default now(),
    expires_at        timestamptz not null,
    last_polled_at    timestamptz,
    -- Who decided and, on approval, the organization the key is bound to.
    user_id           uuid references users(id) on delete cascade,
    org_id            uuid references organizations(id) on delete cascade,
    decided_at        timestamptz,
    -- Why an approved code was refused at redemption.
    refusal           text check (refusal in ('org_membership_revoked', 'account_suspended')),
    -- The key issued when the code was redeemed: a code is redeemed once.
    redeemed_at       timestamptz,
    key_id            uuid references api_keys(id) on delete set null,
    check (status not in ('approved', 'redeemed', 'refused') or (user_id is not null and org_id is not null)),
    check ((status = 'refused') = (refusal is not null))
);
-- A person's code names one live login at a time.
create unique index device_codes_user_code_idx on device_codes (user_code) where status = 'pending';
create index device_codes_expires_idx on device_codes (expires_at);

-- An authorization request sent to an identity provider: a native client's
-- (purpose native: the client holds the PKCE verifier, the gateway keeps its
-- challenge) or the approval page's own (purpose approval: the gateway holds
-- the verifier, and the state is bound to the browser that started it).
-- A state is used once.
create table oauth_states (
    hash            bytea primary key check (length(hash) = 32),
    purpose         text not null check (purpose in ('native', 'approval')),
    provider        text not null,
    client_id       text not null,
    redirect_uri    text not null,
    code_challenge  text not null default '',
    code_verifier   text not null default '',
    nonce           text not null,
    binding_hash    bytea check (binding_hash is null or length(binding_hash) = 32),
    user_code       text not null default '',
    created_at      timestamptz not null default now(),
    expires_at      timestamptz not null,
    used_at         timestamptz,
    check (purpose <> 'native' or code_challenge <> ''),
    check (purpose <> 'approval' or (code_verifier <> '' and binding_hash is not null))
);
create index oauth_states_expires_idx on oauth_states (expires_at);

-- A person signed in on the approval page. The cookie holds the secret; the
-- row holds its hash.
create table approval_sessions (
    hash        bytea primary key check (length(hash) = 32),
    user_id     uuid not null references users(id) on delete cascade,
    created_at  timestamptz not null default now(),
    expires_at  timestamptz not null
);
create index approval_sessions_expires_idx on approval_sessions (expires_at);
