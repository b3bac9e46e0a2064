-- Rejoining an organization ends the departure: the marker goes with the
-- membership insert, in its transaction, whichever path inserts it
-- (an accepted invitation, the admin CLI, hand-written SQL). The member's
-- org- and vault-scope memory is theirs again, unfrozen, and the settlement
-- route no longer finds them. A later departure writes a fresh marker.
create function gw_membership_rejoined() returns trigger language plpgsql as $$
begin
    delete from membership_departures where org_id = new.org_id and user_id = new.user_id;
    return null;
end $$;
create trigger memberships_rejoined after insert on memberships
    for each row execute function gw_membership_rejoined();

-- Markers of members who rejoined before this migration.
delete from membership_departures d using memberships m
    where m.org_id = d.org_id and m.user_id = d.user_id;
