-- 009: billing_access.snapshot_version, the key under which workers cache a user's access
-- record (docs/operations.md, "Snapshot cache"). It changes, in the same transaction, with
-- anything GET /billing/access reads for that user: the access row itself, his store
-- subscriptions, grants, campaign memberships, the campaigns he belongs to, his usage
-- ledger and his sign-up instant. Triggers do it, so no code path (and no DBA fixing a row
-- by hand) can change what a user sees without the workers noticing on his next request.
--
-- Values come from UUID_SHORT(), not a per-row counter: unique across rows and increasing
-- across server restarts, so a row deleted and created again never reuses a version a
-- worker may still hold. (A SEQUENCE drawn from these triggers crashed MariaDB 10.11.)

ALTER TABLE billing_access
  ADD COLUMN snapshot_version BIGINT UNSIGNED NOT NULL DEFAULT (UUID_SHORT())
    COMMENT 'Changes with anything the access snapshot reads for this user (triggers, migration 009); the key of the workers'' snapshot cache'
    AFTER revision;

-- Every UPDATE of an access row takes a new version. The triggers below only touch the
-- row (`SET snapshot_version = snapshot_version`) and let this one assign it.
CREATE TRIGGER billing_access_snapshot_version BEFORE UPDATE ON billing_access FOR EACH ROW
  SET NEW.snapshot_version = UUID_SHORT();

CREATE TRIGGER billing_subscriptions_snapshot_insert AFTER INSERT ON billing_subscriptions FOR EACH ROW
  UPDATE billing_access SET snapshot_version = snapshot_version WHERE user_id = NEW.user_id;

CREATE TRIGGER billing_subscriptions_snapshot_update AFTER UPDATE ON billing_subscriptions FOR EACH ROW
  UPDATE billing_access SET snapshot_version = snapshot_version WHERE user_id IN (OLD.user_id, NEW.user_id);

CREATE TRIGGER billing_subscriptions_snapshot_delete AFTER DELETE ON billing_subscriptions FOR EACH ROW
  UPDATE billing_access SET snapshot_version = snapshot_version WHERE user_id = OLD.user_id;

CREATE TRIGGER billing_grants_snapshot_insert AFTER INSERT ON billing_grants FOR EACH ROW
  UPDATE billing_access SET snapshot_version = snapshot_version WHERE user_id = NEW.user_id;

CREATE TRIGGER billing_grants_snapshot_update AFTER UPDATE ON billing_grants FOR EACH ROW
  UPDATE billing_access SET snapshot_version = snapshot_version WHERE user_id IN (OLD.user_id, NEW.user_id);

CREATE TRIGGER billing_grants_snapshot_delete AFTER DELETE ON billing_grants FOR EACH ROW
  UPDATE billing_access SET snapshot_version = snapshot_version WHERE user_id = OLD.user_id;

CREATE TRIGGER billing_campaign_members_snapshot_insert AFTER INSERT ON billing_campaign_members FOR EACH ROW
  UPDATE billing_access SET snapshot_version = snapshot_version WHERE user_id = NEW.user_id;

CREATE TRIGGER billing_campaign_members_snapshot_update AFTER UPDATE ON billing_campaign_members FOR EACH ROW
  UPDATE billing_access SET snapshot_version = snapshot_version WHERE user_id IN (OLD.user_id, NEW.user_id);

CREATE TRIGGER billing_campaign_members_snapshot_delete AFTER DELETE ON billing_campaign_members FOR EACH ROW
  UPDATE billing_access SET snapshot_version = snapshot_version WHERE user_id = OLD.user_id;

CREATE TRIGGER billing_campaigns_snapshot_update AFTER UPDATE ON billing_campaigns FOR EACH ROW
  UPDATE billing_access a JOIN billing_campaign_members m ON m.user_id = a.user_id
  SET a.snapshot_version = a.snapshot_version WHERE m.campaign IN (OLD.name, NEW.name);

CREATE TRIGGER billing_campaigns_snapshot_delete AFTER DELETE ON billing_campaigns FOR EACH ROW
  UPDATE billing_access a JOIN billing_campaign_members m ON m.user_id = a.user_id
  SET a.snapshot_version = a.snapshot_version WHERE m.campaign = OLD.name;

CREATE TRIGGER usage_ledger_snapshot_insert AFTER INSERT ON usage_ledger FOR EACH ROW
  UPDATE billing_access SET snapshot_version = snapshot_version WHERE user_id = NEW.user_id;

CREATE TRIGGER billing_users_snapshot_update AFTER UPDATE ON billing_users FOR EACH ROW
BEGIN
  IF NOT (OLD.created_at <=> NEW.created_at) THEN
    UPDATE billing_access SET snapshot_version = snapshot_version WHERE user_id = NEW.id;
  END IF;
END;
