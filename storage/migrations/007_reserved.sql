-- Migration number 007 is reserved for a change developed beside this one;
-- the change that owns the number replaces this file when they meet.
select 1;
