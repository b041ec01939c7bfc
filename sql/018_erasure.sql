-- 018_erasure (SPEC §19): users.delete erases. What is removed, re-keyed and scrubbed is
-- UserErasure's documentation and docs/operations.md ("Erasure"); the schema keeps:
-- the SHA-256 of each erased id, so the id is refused from then on, and nothing else of it.
CREATE TABLE billing_erased_users (
  id_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL
    COMMENT 'SHA-256 (hex) of the UTF-8 bytes of an erased user id; the id itself is kept nowhere: a token or an admin call naming it is refused (410 / 1005 user_deleted)',
  erased_at DATETIME(3) NOT NULL
    COMMENT 'When users.delete erased him (UTC)',
  PRIMARY KEY (id_sha256),
  CONSTRAINT billing_erased_users_sha256_format CHECK (id_sha256 REGEXP '^[0-9a-f]{64}$')
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='Erased users (users.delete, SPEC §19): one row per erased id, by hash only';

-- The usage ledger stays immutable, except that its rows go with their user's erasure
-- (users.delete marks him deleted first, in the same transaction).
DROP TRIGGER usage_ledger_no_delete;
CREATE TRIGGER usage_ledger_no_delete BEFORE DELETE ON usage_ledger FOR EACH ROW
  IF NOT EXISTS (SELECT 1 FROM billing_users u WHERE u.id = OLD.user_id AND u.deleted_at IS NOT NULL) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'usage_ledger rows are immutable (they go only with their user''s erasure: users.delete)';
  END IF;

ALTER TABLE billing_users
  MODIFY id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL
    COMMENT 'Opaque user id: the sub of the app ID token (compared byte for byte); erased users are tombstones, erased: and 32 hex digits, linked to nothing (SPEC §19)',
  MODIFY deleted_at DATETIME(3) NULL
    COMMENT 'When the user was erased (UTC): set on his tombstone row, which keeps his events and audits their owner and statistics their cohort';
