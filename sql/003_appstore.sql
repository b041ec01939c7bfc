-- PLACEHOLDER on the stats branch only: migration numbers must run without gaps and 003 is
-- reserved for the App Store branch (sql/003_appstore.sql there). When merging, take that
-- branch's file (git reports an add/add conflict on this path by design). 005_stats does
-- not depend on anything 003 creates.
DO 0;
