-- Reserved for a migration developed on another branch; this empty file only
-- keeps the numbering contiguous until that one lands, and is replaced by it
-- at merge.
select 1;
