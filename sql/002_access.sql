-- 002_access: the store projection (one access row per user, one row per subscription),
-- event parties (which users an event concerns, transfers included) and the columns the
-- fold reads from the inbox.

ALTER TABLE billing_events
  ADD COLUMN new_tier VARCHAR(8) NULL
    COMMENT 'Tier of new_product_id (pending plan change target); NULL when unknown' AFTER new_product_id,
  ADD COLUMN effective_at DATETIME(3) NULL
    COMMENT 'When a pending plan change takes effect, when the provider says (UTC)' AFTER new_tier,
  ADD COLUMN will_renew TINYINT(1) NULL
    COMMENT 'Auto-renew state stated by the event itself (App Store renewal info); NULL when the event does not say' AFTER effective_at,
  DROP CONSTRAINT billing_events_kind_valid,
  ADD CONSTRAINT billing_events_kind_valid CHECK (kind IN (
    'purchase', 'renewal', 'cancellation', 'uncancellation', 'expiration', 'billing_issue',
    'product_change', 'non_renewing_purchase', 'extension', 'pause', 'temporary_grant', 'refund',
    'refund_reversed', 'refund_declined', 'revoke', 'promotional', 'transfer', 'grant', 'price_increase',
    'offer_redeemed', 'transaction', 'consumption_request', 'test', 'unknown')),
  ADD CONSTRAINT billing_events_new_tier_valid CHECK (new_tier IS NULL OR new_tier IN ('plus', 'pro')),
  ADD CONSTRAINT billing_events_will_renew_bool CHECK (will_renew IS NULL OR will_renew IN (0, 1));

ALTER TABLE billing_event_user_candidates
  ADD COLUMN role VARCHAR(16) NOT NULL DEFAULT 'subject'
    COMMENT 'What the candidate would be: subject (the buyer), transfer_from or transfer_to (a TRANSFER party)',
  ADD CONSTRAINT billing_event_user_candidates_role_valid CHECK (role IN ('subject', 'transfer_from', 'transfer_to'));

CREATE TABLE billing_event_parties (
  user_id VARCHAR(128) NOT NULL
    COMMENT 'A known user this applied event concerns (billing_users.id)',
  event_id BIGINT UNSIGNED NOT NULL
    COMMENT 'The inbox event (billing_events.id)',
  role VARCHAR(16) NOT NULL
    COMMENT 'subject (the event is about this user''s purchase), transfer_from (loses its store access), transfer_to (gains it)',
  PRIMARY KEY (user_id, event_id),
  KEY billing_event_parties_event (event_id),
  CONSTRAINT billing_event_parties_event_fk FOREIGN KEY (event_id) REFERENCES billing_events (id) ON DELETE CASCADE,
  CONSTRAINT billing_event_parties_role_valid CHECK (role IN ('subject', 'transfer_from', 'transfer_to'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Which known users each applied event concerns: the fold of a user reads its events through this table';

CREATE TABLE billing_access (
  user_id VARCHAR(128) NOT NULL
    COMMENT 'The user (billing_users.id)',
  revision BIGINT UNSIGNED NOT NULL DEFAULT 0
    COMMENT 'Increases on every change of this user''s projected access; the snapshot returns it',
  tier VARCHAR(8) NOT NULL DEFAULT 'free'
    COMMENT 'Store tier as of folded_at (free, plus, pro); the snapshot re-judges expiry at read time',
  phase VARCHAR(16) NOT NULL DEFAULT 'none'
    COMMENT 'Store phase as of folded_at: none, trial, active, canceled, grace, billingRetry, expired, revoked',
  subscription_id VARCHAR(191) NULL
    COMMENT 'The subscription deciding the tier as of folded_at (billing_subscriptions.subscription_id)',
  product_id VARCHAR(191) NULL
    COMMENT 'Its product',
  expires_at DATETIME(3) NULL
    COMMENT 'Its expiry (UTC)',
  will_renew TINYINT(1) NOT NULL DEFAULT 0
    COMMENT '1 when it auto-renews',
  last_event_at DATETIME(3) NULL
    COMMENT 'Intrinsic time of the latest event folded (UTC)',
  applied_events INT UNSIGNED NOT NULL DEFAULT 0
    COMMENT 'How many events the last fold applied',
  folded_at DATETIME(3) NULL
    COMMENT 'When the projection was last recomputed from the inbox (UTC)',
  updated_at DATETIME(3) NOT NULL
    COMMENT 'When revision last changed (UTC)',
  PRIMARY KEY (user_id),
  CONSTRAINT billing_access_user_fk FOREIGN KEY (user_id) REFERENCES billing_users (id),
  CONSTRAINT billing_access_tier_valid CHECK (tier IN ('free', 'plus', 'pro')),
  CONSTRAINT billing_access_phase_valid CHECK (phase IN ('none', 'trial', 'active', 'canceled', 'grace', 'billingRetry', 'expired', 'revoked')),
  CONSTRAINT billing_access_will_renew_bool CHECK (will_renew IN (0, 1))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='One row per known user: the summary of the store projection and its revision; locked (FOR UPDATE) while the user is re-folded';

CREATE TABLE billing_subscriptions (
  user_id VARCHAR(128) NOT NULL
    COMMENT 'Owner (billing_users.id)',
  subscription_id VARCHAR(191) NOT NULL
    COMMENT 'originalTransactionId (product:<id> for store grants without one)',
  provider VARCHAR(32) NOT NULL
    COMMENT 'Provider of the latest event folded: revenuecat, apple_notification, apple_transaction',
  platform VARCHAR(32) NULL
    COMMENT 'Store managing it: app_store, play_store, stripe, promotional, ...',
  environment VARCHAR(16) NOT NULL
    COMMENT 'production or sandbox',
  product_id VARCHAR(191) NULL
    COMMENT 'Current product (changes only with a confirmed transaction)',
  tier VARCHAR(8) NULL
    COMMENT 'Tier of the current product; NULL when it grants nothing',
  phase VARCHAR(16) NOT NULL
    COMMENT 'Phase as folded: trial, active, canceled, grace, billingRetry, expired, revoked (expiry is judged at read time)',
  will_renew TINYINT(1) NOT NULL
    COMMENT '1 when auto-renew is on',
  in_trial_period TINYINT(1) NOT NULL
    COMMENT '1 when the current period is a free trial',
  purchased_at DATETIME(3) NULL COMMENT 'Start of the current period (UTC)',
  expires_at DATETIME(3) NULL COMMENT 'End of access (UTC); NULL = no end (lifetime non-renewing purchase)',
  grace_expires_at DATETIME(3) NULL COMMENT 'End of the billing grace period (UTC)',
  trial_starts_at DATETIME(3) NULL COMMENT 'Trial window start (UTC)',
  trial_ends_at DATETIME(3) NULL COMMENT 'Trial window end (UTC)',
  pending_product_id VARCHAR(191) NULL COMMENT 'Product of a recorded but not yet effective plan change',
  pending_tier VARCHAR(8) NULL COMMENT 'Its tier',
  pending_effective_at DATETIME(3) NULL COMMENT 'When it is expected to take effect (UTC)',
  expires_before_revocation DATETIME(3) NULL COMMENT 'Expiry before a refund cut it short (restored by a reversal)',
  last_event_at DATETIME(3) NOT NULL COMMENT 'Intrinsic time of the latest event folded into it (UTC)',
  PRIMARY KEY (user_id, subscription_id),
  KEY billing_subscriptions_subscription (subscription_id),
  CONSTRAINT billing_subscriptions_user_fk FOREIGN KEY (user_id) REFERENCES billing_users (id),
  CONSTRAINT billing_subscriptions_tier_valid CHECK (tier IS NULL OR tier IN ('plus', 'pro')),
  CONSTRAINT billing_subscriptions_pending_tier_valid CHECK (pending_tier IS NULL OR pending_tier IN ('plus', 'pro')),
  CONSTRAINT billing_subscriptions_phase_valid CHECK (phase IN ('none', 'trial', 'active', 'canceled', 'grace', 'billingRetry', 'expired', 'revoked')),
  CONSTRAINT billing_subscriptions_environment_valid CHECK (environment IN ('production', 'sandbox')),
  CONSTRAINT billing_subscriptions_bools CHECK (will_renew IN (0, 1) AND in_trial_period IN (0, 1))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='The store projection: every subscription of every user as the deterministic fold of its events left it';
