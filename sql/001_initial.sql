-- 001_initial: users, the event inbox (with late user matching) and the quarantine.
-- Conventions (SPEC section 9): snake_case, a COMMENT on every table and column, utf8mb4
-- with binary collation (ids and states compare exactly), InnoDB, DATETIME(3) in UTC,
-- states as readable strings with CHECK constraints, idempotency by UNIQUE keys,
-- money as integer milli-units plus an ISO 4217 currency.

CREATE TABLE billing_users (
  id VARCHAR(128) NOT NULL
    COMMENT 'Opaque user id: the sub of the app ID token (compared byte for byte)',
  created_at DATETIME(3) NOT NULL
    COMMENT 'Original sign-up time (UTC): first token sighting or the imported createdAt; grandfather cohorts use it',
  first_seen_at DATETIME(3) NULL
    COMMENT 'First request with a valid ID token (UTC); NULL for an imported user not seen yet',
  last_seen_at DATETIME(3) NULL
    COMMENT 'Latest request with a valid ID token (UTC), updated coarsely',
  source VARCHAR(16) NOT NULL
    COMMENT 'How the user became known: token (first valid ID token) or import (admin import)',
  deleted_at DATETIME(3) NULL
    COMMENT 'When the user was deleted (UTC); the row stays so events and audits keep their owner',
  PRIMARY KEY (id),
  KEY billing_users_created_at (created_at),
  CONSTRAINT billing_users_source_valid CHECK (source IN ('token', 'import')),
  CONSTRAINT billing_users_seen_order CHECK (last_seen_at IS NULL OR first_seen_at IS NULL OR last_seen_at >= first_seen_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Known users of the app (opaque ids from ID tokens or admin import)';

CREATE TABLE billing_events (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
    COMMENT 'Inbox sequence; breaks ties between events with the same intrinsic_at',
  provider VARCHAR(32) NOT NULL
    COMMENT 'Who sent it: revenuecat (webhook), apple_notification (App Store Server Notification V2), apple_transaction (StoreKit 2 transaction posted by the app)',
  provider_event_id VARCHAR(191) NOT NULL
    COMMENT 'Provider idempotency key: RevenueCat event.id, Apple notificationUUID, or the transactionId of a posted transaction',
  user_id VARCHAR(128) NULL
    COMMENT 'The user the event applies to; NULL while unmatched (see billing_event_user_candidates)',
  event_type VARCHAR(64) NOT NULL
    COMMENT 'Raw provider type, e.g. INITIAL_PURCHASE or DID_RENEW/BILLING_RECOVERY (subtype after a slash)',
  kind VARCHAR(32) NOT NULL
    COMMENT 'Normalized kind shared by both providers; unknown when the provider type is not understood',
  subscription_id VARCHAR(191) NULL
    COMMENT 'Subscription identity: the App Store originalTransactionId (RevenueCat original_transaction_id)',
  transaction_id VARCHAR(191) NULL
    COMMENT 'The store transaction this event is about, when it names one',
  product_id VARCHAR(191) NULL
    COMMENT 'Store product id of the subscription at this event',
  new_product_id VARCHAR(191) NULL
    COMMENT 'Target product of a pending plan change (PRODUCT_CHANGE, DID_CHANGE_RENEWAL_PREF, autoRenewProductId)',
  tier VARCHAR(8) NULL
    COMMENT 'Tier the product grants per the catalog/entitlements: plus or pro; NULL when not a catalog product',
  period_type VARCHAR(16) NULL
    COMMENT 'Offer period: normal, trial, intro, promotional or prepaid',
  is_trial TINYINT(1) NOT NULL DEFAULT 0
    COMMENT '1 when the period is a free trial (RevenueCat TRIAL, Apple free-trial introductory offer)',
  price_milli BIGINT NULL
    COMMENT 'Price paid in milli-units of currency (1.99 -> 1990); NULL when unknown',
  currency CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NULL
    COMMENT 'ISO 4217 currency of price_milli',
  store VARCHAR(32) NULL
    COMMENT 'Store as reported by the provider (app_store, play_store, stripe, promotional)',
  reason VARCHAR(64) NULL
    COMMENT 'Provider reason code: cancel/expiration reason, revocation reason, notification subtype',
  environment VARCHAR(16) NOT NULL
    COMMENT 'production or sandbox; analytics count production only',
  purchased_at DATETIME(3) NULL
    COMMENT 'Start of the period this event is about (UTC)',
  expires_at DATETIME(3) NULL
    COMMENT 'End of access for this period (UTC): min(expiresDate, revocationDate) for Apple',
  grace_expires_at DATETIME(3) NULL
    COMMENT 'End of the billing grace period (UTC), when in grace',
  intrinsic_at DATETIME(3) NULL
    COMMENT 'Event time used for ordering the fold (Apple signedDate, RevenueCat event_timestamp_ms); NULL when the provider gave none',
  received_at DATETIME(3) NOT NULL
    COMMENT 'When this server first received the delivery (UTC)',
  applied_at DATETIME(3) NULL
    COMMENT 'When the event was (last) folded into the user projection (UTC)',
  status VARCHAR(16) NOT NULL
    COMMENT 'applied (folded into a user), unmatched (no known user yet), ignored (recorded, never applied: test, no timestamp, foreign product) or failed',
  status_reason VARCHAR(64) NULL
    COMMENT 'Code saying why the event is ignored or failed (never free text from the provider)',
  payload LONGTEXT NOT NULL
    COMMENT 'Full provider payload as JSON (decoded JWS payloads for Apple); never logged',
  PRIMARY KEY (id),
  UNIQUE KEY billing_events_provider_event (provider, provider_event_id),
  KEY billing_events_user_fold (user_id, intrinsic_at, id),
  KEY billing_events_subscription (subscription_id),
  KEY billing_events_environment_time (environment, intrinsic_at),
  KEY billing_events_status_received (status, received_at),
  CONSTRAINT billing_events_provider_valid CHECK (provider IN ('revenuecat', 'apple_notification', 'apple_transaction')),
  CONSTRAINT billing_events_kind_valid CHECK (kind IN (
    'purchase', 'renewal', 'cancellation', 'uncancellation', 'expiration', 'billing_issue',
    'product_change', 'refund', 'refund_reversed', 'refund_declined', 'revoke', 'extension',
    'pause', 'transfer', 'grant', 'non_renewing_purchase', 'price_increase', 'offer_redeemed',
    'transaction', 'consumption_request', 'test', 'unknown')),
  CONSTRAINT billing_events_tier_valid CHECK (tier IS NULL OR tier IN ('plus', 'pro')),
  CONSTRAINT billing_events_period_type_valid CHECK (period_type IS NULL OR period_type IN ('normal', 'trial', 'intro', 'promotional', 'prepaid')),
  CONSTRAINT billing_events_is_trial_bool CHECK (is_trial IN (0, 1)),
  CONSTRAINT billing_events_price_with_currency CHECK (price_milli IS NULL OR currency IS NOT NULL),
  CONSTRAINT billing_events_currency_format CHECK (currency IS NULL OR currency REGEXP '^[A-Z]{3}$'),
  CONSTRAINT billing_events_environment_valid CHECK (environment IN ('production', 'sandbox')),
  CONSTRAINT billing_events_status_valid CHECK (status IN ('applied', 'unmatched', 'ignored', 'failed')),
  CONSTRAINT billing_events_applied_has_user CHECK (status <> 'applied' OR user_id IS NOT NULL),
  CONSTRAINT billing_events_unmatched_has_no_user CHECK (status <> 'unmatched' OR user_id IS NULL),
  CONSTRAINT billing_events_payload_json CHECK (JSON_VALID(payload))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Inbox: every provider delivery exactly once (unique provider event id), normalized, with its full payload';

CREATE TABLE billing_event_user_candidates (
  candidate_id VARCHAR(128) NOT NULL
    COMMENT 'A user id the event could belong to (RevenueCat app_user_id, original_app_user_id, aliases; Apple appAccountToken), only ids matching users.idPattern',
  event_id BIGINT UNSIGNED NOT NULL
    COMMENT 'The unmatched inbox event (billing_events.id)',
  PRIMARY KEY (candidate_id, event_id),
  KEY billing_event_user_candidates_event (event_id),
  CONSTRAINT billing_event_user_candidates_event_fk FOREIGN KEY (event_id) REFERENCES billing_events (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Candidate owners of unmatched events: when a user becomes known, his unmatched events are one indexed lookup by candidate_id';

CREATE TABLE billing_quarantine (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
    COMMENT 'Quarantine sequence',
  provider VARCHAR(32) NOT NULL
    COMMENT 'Route the delivery came in on: revenuecat, apple_notification or apple_transaction',
  provider_event_id VARCHAR(191) NULL
    COMMENT 'Provider event id when it could be read without trusting the payload; informational only',
  reason VARCHAR(64) NOT NULL
    COMMENT 'Why verification failed, as a code (e.g. bad_signature, untrusted_chain, bad_secret, bundle_mismatch, malformed)',
  reason_detail VARCHAR(255) NULL
    COMMENT 'Short explanation written by the server (never provider text), e.g. which certificate failed',
  payload_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL
    COMMENT 'SHA-256 (hex) of payload: a re-delivery of the same body counts as another attempt, not another row',
  payload LONGBLOB NOT NULL
    COMMENT 'The request body exactly as received (bytes, possibly not valid JSON); never logged',
  received_at DATETIME(3) NOT NULL
    COMMENT 'First delivery of this body (UTC)',
  last_received_at DATETIME(3) NOT NULL
    COMMENT 'Latest delivery of this body (UTC)',
  deliveries INT UNSIGNED NOT NULL DEFAULT 1
    COMMENT 'How many times the provider delivered this body',
  retried_at DATETIME(3) NULL
    COMMENT 'Last operator re-run through events.retryQuarantined (UTC)',
  retry_count INT UNSIGNED NOT NULL DEFAULT 0
    COMMENT 'How many times an operator re-ran it',
  resolved_at DATETIME(3) NULL
    COMMENT 'When it left quarantine (UTC); NULL while still quarantined',
  resolution VARCHAR(16) NULL
    COMMENT 'How it left quarantine: applied (now in the inbox), duplicate (inbox already had it) or discarded (operator)',
  event_id BIGINT UNSIGNED NULL
    COMMENT 'The inbox row (billing_events.id) it became, when resolved as applied or duplicate',
  PRIMARY KEY (id),
  UNIQUE KEY billing_quarantine_body (provider, payload_sha256),
  KEY billing_quarantine_open (resolved_at, received_at),
  KEY billing_quarantine_received (received_at),
  CONSTRAINT billing_quarantine_provider_valid CHECK (provider IN ('revenuecat', 'apple_notification', 'apple_transaction')),
  CONSTRAINT billing_quarantine_resolution_valid CHECK (resolution IS NULL OR resolution IN ('applied', 'duplicate', 'discarded')),
  CONSTRAINT billing_quarantine_resolved_consistent CHECK ((resolved_at IS NULL) = (resolution IS NULL)),
  CONSTRAINT billing_quarantine_sha256_format CHECK (payload_sha256 REGEXP '^[0-9a-f]{64}$')
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Deliveries that failed verification, kept (bounded, deduplicated by body hash) so an operator can re-run them after fixing trust or secrets';
