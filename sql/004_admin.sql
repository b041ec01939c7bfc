-- PLACEHOLDER on the stats branch only: migration numbers must run without gaps and 004 is
-- reserved for the admin branch (sql/004_admin.sql there). When merging, take that
-- branch's file (git reports an add/add conflict on this path by design). 005_stats does
-- not depend on anything 004 creates.
DO 0;
