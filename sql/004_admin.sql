-- 004_admin: operator grants, grandfather campaigns and their memberships, runtime flags,
-- and the audit log every admin mutation writes (SPEC sections 6 and 8).
-- audit_log may already exist (another migration creates it with the same base columns):
-- it is created only if missing, and the extra column is added only if missing.

CREATE TABLE IF NOT EXISTS audit_log (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
    COMMENT 'Audit sequence (also the cursor of audit listings)',
  actor VARCHAR(128) NOT NULL
    COMMENT 'Who did it: the operator named in the admin call, or the system component',
  action VARCHAR(64) NOT NULL
    COMMENT 'What was done, dotted: grants.create, grants.revoke, grandfather.apply, grandfather.revoke, users.import, users.delete, flags.set, events.reproject, ...',
  target_user_id VARCHAR(128) NULL
    COMMENT 'The user the action concerns (billing_users.id); NULL for actions on no single user',
  detail JSON NULL
    COMMENT 'Parameters and outcome of the action (ids, tiers, reasons, counts); never secrets or payloads',
  created_at DATETIME(3) NOT NULL
    COMMENT 'When it was done (UTC)',
  PRIMARY KEY (id),
  KEY audit_log_target (target_user_id, id),
  KEY audit_log_action (action, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Append-only record of every operator and system mutation';

ALTER TABLE audit_log
  ADD COLUMN IF NOT EXISTS campaign VARCHAR(64) NULL
    COMMENT 'Grandfather campaign (or grant campaign) the action belongs to; NULL otherwise',
  ADD INDEX IF NOT EXISTS audit_log_campaign (campaign, id);

CREATE TABLE billing_grants (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
    COMMENT 'Grant id (what grants.revoke takes)',
  user_id VARCHAR(128) NOT NULL
    COMMENT 'The user granted (billing_users.id)',
  tier VARCHAR(8) NOT NULL
    COMMENT 'Tier granted: plus or pro',
  starts_at DATETIME(3) NOT NULL
    COMMENT 'When the grant starts giving access (UTC); in the future = Scheduled',
  expires_at DATETIME(3) NULL
    COMMENT 'When it stops (UTC); NULL = permanent',
  reason VARCHAR(255) NOT NULL
    COMMENT 'Why it was granted (operator text)',
  campaign VARCHAR(64) NULL
    COMMENT 'Marketing/support campaign label, for reporting',
  idempotency_key VARCHAR(128) NOT NULL
    COMMENT 'Caller key: the same (user, key) always names this one grant',
  params_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL
    COMMENT 'SHA-256 (hex) of the canonical create params, so a reused key with other params is refused',
  granted_by VARCHAR(128) NOT NULL
    COMMENT 'Operator who created it (actor)',
  created_at DATETIME(3) NOT NULL
    COMMENT 'When it was created (UTC)',
  revoked_at DATETIME(3) NULL
    COMMENT 'When it was revoked (UTC); NULL while not revoked',
  revoked_by VARCHAR(128) NULL
    COMMENT 'Operator who revoked it',
  revoke_reason VARCHAR(255) NULL
    COMMENT 'Why it was revoked',
  PRIMARY KEY (id),
  UNIQUE KEY billing_grants_idempotency (user_id, idempotency_key),
  KEY billing_grants_user (user_id, revoked_at, starts_at),
  CONSTRAINT billing_grants_user_fk FOREIGN KEY (user_id) REFERENCES billing_users (id),
  CONSTRAINT billing_grants_tier_valid CHECK (tier IN ('plus', 'pro')),
  CONSTRAINT billing_grants_window CHECK (expires_at IS NULL OR expires_at > starts_at),
  CONSTRAINT billing_grants_revoked_consistent CHECK ((revoked_at IS NULL) = (revoked_by IS NULL))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Operator grants: an overlay on the store tier (highest active source wins; never demotes a payer)';

CREATE TABLE billing_campaigns (
  name VARCHAR(64) NOT NULL
    COMMENT 'Campaign name (operator chosen, unique)',
  tier VARCHAR(8) NOT NULL
    COMMENT 'Tier its members get: plus or pro',
  expires_at DATETIME(3) NULL
    COMMENT 'When membership access ends (UTC); NULL = permanent',
  reason VARCHAR(255) NOT NULL
    COMMENT 'Why the campaign exists (operator text)',
  created_by VARCHAR(128) NOT NULL
    COMMENT 'Operator who first applied it',
  created_at DATETIME(3) NOT NULL
    COMMENT 'When it was first applied (UTC)',
  revoked_at DATETIME(3) NULL
    COMMENT 'When grandfather.revoke ended it (UTC); its memberships then give nothing',
  revoked_by VARCHAR(128) NULL
    COMMENT 'Operator who ended it',
  PRIMARY KEY (name),
  CONSTRAINT billing_campaigns_tier_valid CHECK (tier IN ('plus', 'pro')),
  CONSTRAINT billing_campaigns_revoked_consistent CHECK ((revoked_at IS NULL) = (revoked_by IS NULL))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Grandfather campaigns: a tier given to a cohort or hand-picked users, audited per member';

CREATE TABLE billing_campaign_members (
  campaign VARCHAR(64) NOT NULL
    COMMENT 'The campaign (billing_campaigns.name)',
  user_id VARCHAR(128) NOT NULL
    COMMENT 'The member (billing_users.id)',
  via VARCHAR(8) NOT NULL
    COMMENT 'How the user joined: cohort (grandfather.applyCohort) or users (grandfather.applyUsers)',
  applied_by VARCHAR(128) NOT NULL
    COMMENT 'Operator who applied it',
  applied_at DATETIME(3) NOT NULL
    COMMENT 'When it was applied (UTC)',
  PRIMARY KEY (campaign, user_id),
  KEY billing_campaign_members_user (user_id),
  CONSTRAINT billing_campaign_members_campaign_fk FOREIGN KEY (campaign) REFERENCES billing_campaigns (name),
  CONSTRAINT billing_campaign_members_user_fk FOREIGN KEY (user_id) REFERENCES billing_users (id),
  CONSTRAINT billing_campaign_members_via_valid CHECK (via IN ('cohort', 'users'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Grandfather memberships: at most one per (campaign, user), so re-running a campaign never duplicates';

CREATE TABLE billing_flags (
  name VARCHAR(64) NOT NULL
    COMMENT 'Flag name, e.g. enforcement',
  value VARCHAR(64) NOT NULL
    COMMENT 'Flag value, e.g. observe or enforce',
  updated_by VARCHAR(128) NOT NULL
    COMMENT 'Operator who last set it',
  updated_at DATETIME(3) NOT NULL
    COMMENT 'When it was last set (UTC); workers re-read flags at most a second later',
  PRIMARY KEY (name),
  CONSTRAINT billing_flags_enforcement_valid CHECK (name <> 'enforcement' OR value IN ('observe', 'enforce'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Runtime switches shared by every worker (read through a cache of at most one second)';
