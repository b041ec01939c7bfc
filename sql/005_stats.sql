-- 005_stats: what stats.subscriptions needs (docs/stats.md): a covering index for the
-- per-subscription lookups (first event, previous period, latest event/period/renewal
-- intent before an instant), a covering index for the snapshot candidates (events whose
-- access runs past an instant) and one for grace periods, the paywall
-- funnel events (kept 30 days) and one row per user per day seen with a valid token.

ALTER TABLE billing_events
  ADD KEY billing_events_stats_subscription (environment, subscription_id, intrinsic_at, id, status, kind, is_trial, will_renew),
  ADD KEY billing_events_stats_expiry (environment, expires_at, intrinsic_at, status, kind, subscription_id),
  ADD KEY billing_events_stats_grace (environment, grace_expires_at);

CREATE TABLE billing_paywall_events (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
    COMMENT 'Sequence',
  user_id VARCHAR(128) NOT NULL
    COMMENT 'Who saw the paywall: the sub of the ID token (billing_users.id, not enforced: rows are purged after 30 days)',
  event_id VARCHAR(128) NOT NULL
    COMMENT 'Client event id: a retry of the same event (same user, same id) is recorded once',
  type VARCHAR(16) NOT NULL
    COMMENT 'view (the paywall was shown) or purchase (a purchase attempt, with its result)',
  placement VARCHAR(64) NOT NULL
    COMMENT 'Where in the app the paywall was shown (app-defined name, e.g. onboarding, quota_exhausted)',
  result VARCHAR(16) NULL
    COMMENT 'Outcome of a purchase attempt: done, cancelled, failed or pending; NULL for views and unknown outcomes',
  environment VARCHAR(16) NOT NULL
    COMMENT 'production or sandbox, as the app says (default production); stats never mix them',
  received_at DATETIME(3) NOT NULL
    COMMENT 'When the server recorded it (UTC); the funnel counts by this time, the purge removes rows older than 30 days',
  PRIMARY KEY (id),
  UNIQUE KEY billing_paywall_events_client_id (user_id, event_id),
  KEY billing_paywall_events_environment_received (environment, received_at, placement),
  KEY billing_paywall_events_received (received_at),
  CONSTRAINT billing_paywall_events_type_valid CHECK (type IN ('view', 'purchase')),
  CONSTRAINT billing_paywall_events_result_valid CHECK (result IS NULL OR (type = 'purchase' AND result IN ('done', 'cancelled', 'failed', 'pending'))),
  CONSTRAINT billing_paywall_events_environment_valid CHECK (environment IN ('production', 'sandbox'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Paywall funnel reported by the app (POST /billing/paywall-events), idempotent by (user, client event id), purged after 30 days';

CREATE TABLE billing_user_days (
  day DATE NOT NULL
    COMMENT 'UTC calendar day on which the user was seen with a valid ID token',
  user_id VARCHAR(128) NOT NULL
    COMMENT 'The user (billing_users.id)',
  PRIMARY KEY (day, user_id),
  KEY billing_user_days_user (user_id, day)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Users seen per UTC day (GET /billing/access, written at most once per user, day and worker process): active users of a period for paying %';
