-- 013: reconciliation with the App Store Server API (SPEC §11). One row per App Store
-- subscription the server has pulled: when it may be pulled next (the interval after a
-- pull, a backoff after failures) and what the last pulls gave. What a pull learns goes
-- into the inbox (billing_events) like any delivery; this table only schedules.
--
-- A new table: nothing existing is altered or copied.

CREATE TABLE billing_reconcile_state (
  subscription_id VARCHAR(191) NOT NULL
    COMMENT 'originalTransactionId of the App Store subscription (billing_apple_bindings)',
  environment VARCHAR(16) NULL
    COMMENT 'Environment whose API last knew the subscription: production or sandbox',
  next_attempt_at DATETIME(3) NOT NULL
    COMMENT 'The sweeper does not pull it before this (UTC): intervalSeconds after a pull, a backoff after failures, at least Retry-After after a 429',
  last_attempt_at DATETIME(3) NULL COMMENT 'Last pull started (UTC)',
  last_success_at DATETIME(3) NULL COMMENT 'Last pull that completed and was committed (UTC)',
  last_outcome VARCHAR(16) NULL
    COMMENT 'unchanged, corrected (the pull changed the projection), failed, rate_limited',
  last_error VARCHAR(64) NULL
    COMMENT 'Code of the last failure (HTTP status and Apple errorCode, timeout, verification reason); never a payload',
  failures INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Consecutive failed pulls (0 after a success)',
  pulls INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Pulls attempted',
  corrections INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Pulls that changed the projection',
  PRIMARY KEY (subscription_id),
  KEY billing_reconcile_state_next (next_attempt_at),
  CONSTRAINT billing_reconcile_state_environment_valid CHECK (environment IS NULL OR environment IN ('production', 'sandbox')),
  CONSTRAINT billing_reconcile_state_outcome_valid CHECK (last_outcome IS NULL OR last_outcome IN ('unchanged', 'corrected', 'failed', 'rate_limited'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='When each App Store subscription is next pulled from the App Store Server API, and how its last pulls went';
