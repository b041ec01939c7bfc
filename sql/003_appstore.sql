-- PLACEHOLDER on the admin branch only: migration numbers must run without gaps and 003 is
-- reserved for the App Store branch (sql/003_appstore.sql there). When merging, take that
-- branch's file (git reports an add/add conflict on this path by design). 004_admin does
-- not depend on anything 003 creates (audit_log is CREATE TABLE IF NOT EXISTS there).
DO 0;
