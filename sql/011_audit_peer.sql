-- 011: who really called. audit_log records the admin socket's peer (SO_PEERCRED: the uid
-- the kernel saw at connect time, and its user name) beside the actor the caller claims,
-- which alone proves nothing (SPEC §8, §13).
--
-- billing-rpc opens each admin connection's database session with
-- `SET @billing_peer_uid = ?, @billing_peer_user = ?` (re-run on every reconnect), and this
-- trigger copies them into every audit row written on that session, so no mutation can
-- forget them. Rows written by other components (workers, migrations) leave them NULL.

ALTER TABLE audit_log
  ADD COLUMN peer_uid INT UNSIGNED NULL
    COMMENT 'uid of the process on the admin socket (SO_PEERCRED) that made the call; NULL for components other than billing-rpc'
    AFTER actor,
  ADD COLUMN peer_user VARCHAR(64) NULL
    COMMENT 'User name of peer_uid at the time of the call (NULL when it had none)'
    AFTER peer_uid,
  ALGORITHM=INSTANT;

CREATE TRIGGER audit_log_peer BEFORE INSERT ON audit_log FOR EACH ROW
  SET NEW.peer_uid = COALESCE(NEW.peer_uid, @billing_peer_uid),
      NEW.peer_user = COALESCE(NEW.peer_user, @billing_peer_user);
