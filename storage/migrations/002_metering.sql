-- Filled in by the change that introduces this schema.
select 1;
