-- A new key or service token names its hash on gw_keys too: each gateway
-- process remembers hashes it looked up and did not find (so a repeated
-- forged key costs no query), and a row created under such a hash must be
-- served at once, not after that memory expires.
create trigger api_keys_insert_notify after insert on api_keys
    for each row execute function gw_notify_key();
create trigger service_tokens_insert_notify after insert on service_tokens
    for each row execute function gw_notify_key();
