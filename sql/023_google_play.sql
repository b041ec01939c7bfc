-- 023_google_play (SPEC §18): Google Play as a third provider through the same inbox and fold.
-- A Play subscription's state is read from the Play Developer API (a push only names the
-- purchase token) and stored as a `google_play` event of kind subscriber_state; its
-- subscription id is `gp:` and the SHA-256 of the purchase token (the token itself is a
-- credential of the user at Google: it is kept once, in billing_google_purchases, never in
-- an event). An upgrade, downgrade or re-signup is a new token naming the one it replaces
-- (`linkedPurchaseToken`): linked_subscription_id says which subscription the event's
-- replaces, and the fold ends that one (never counted twice).
ALTER TABLE billing_events
  DROP CONSTRAINT billing_events_provider_valid,
  ADD CONSTRAINT billing_events_provider_valid
    CHECK (provider IN ('revenuecat', 'revenuecat_pull', 'apple_notification', 'apple_transaction', 'google_play')),
  ADD COLUMN linked_subscription_id VARCHAR(191) NULL
    COMMENT 'google_play: the subscription this one replaces (gp: + SHA-256 of linkedPurchaseToken); the fold ends it'
    AFTER expiration_intent,
  -- stats.subscriptions leaves a replaced subscription out from its replacement's start.
  ADD KEY billing_events_linked (linked_subscription_id, environment, purchased_at);

ALTER TABLE billing_quarantine
  DROP CONSTRAINT billing_quarantine_provider_valid,
  ADD CONSTRAINT billing_quarantine_provider_valid
    CHECK (provider IN ('revenuecat', 'revenuecat_pull', 'apple_notification', 'apple_transaction', 'google_play'));

-- The sweeper pulls Play tokens too (provider google, keyed by the gp: subscription id).
ALTER TABLE billing_reconcile_state
  MODIFY COLUMN provider VARCHAR(16) NOT NULL DEFAULT 'apple'
    COMMENT 'Whose API is pulled: apple (subscription_id is an originalTransactionId), revenuecat (the app user id) or google (the Play subscription''s gp: id)',
  MODIFY COLUMN subscription_id VARCHAR(191) NOT NULL
    COMMENT 'What is pulled: the App Store originalTransactionId (provider apple), the RevenueCat app user id (provider revenuecat) or the Play subscription gp: id (provider google)',
  DROP CONSTRAINT billing_reconcile_state_provider_valid,
  ADD CONSTRAINT billing_reconcile_state_provider_valid CHECK (provider IN ('apple', 'revenuecat', 'google'));

CREATE TABLE billing_google_purchases (
  subscription_id VARCHAR(80) NOT NULL
    COMMENT 'gp: + SHA-256 hex of the purchase token: the subscription_id of its events',
  purchase_token VARCHAR(4096) NOT NULL
    COMMENT 'The Play purchase token, to read its state again and acknowledge it; a credential: never logged, erased with its user',
  package_name VARCHAR(255) NOT NULL
    COMMENT 'The app (google.packageName) the token belongs to',
  product_type VARCHAR(16) NOT NULL
    COMMENT 'subscription (read by purchases.subscriptionsv2) or product (a one-time product: purchases.productsv2)',
  product_id VARCHAR(191) NULL
    COMMENT 'Play''s subscriptionId (lineItems[].productId) or one-time product id, needed to acknowledge',
  user_id VARCHAR(128) NULL
    COMMENT 'The one user owning it (obfuscatedExternalAccountId, else the app user who posted it, else the owner of the token it replaces); NULL while unknown',
  linked_subscription_id VARCHAR(80) NULL
    COMMENT 'The subscription this token replaces (gp: + SHA-256 of linkedPurchaseToken)',
  environment VARCHAR(16) NOT NULL
    COMMENT 'production, or sandbox for a license tester''s purchase (testPurchase)',
  state VARCHAR(48) NOT NULL
    COMMENT 'subscriptionState (SUBSCRIPTION_STATE_ACTIVE, ..._ON_HOLD, ...) or a one-time product''s purchaseState (PURCHASED, CANCELLED, PENDING) as last read',
  expires_at DATETIME(3) NULL
    COMMENT 'The latest lineItems[].expiryTime as last read (UTC)',
  started_at DATETIME(3) NULL
    COMMENT 'startTime: when the purchase was made (UTC); Google refunds it if unacknowledged three days later',
  acknowledged_at DATETIME(3) NULL
    COMMENT 'When it was seen acknowledged, or acknowledged by this server (UTC); NULL: still to acknowledge',
  ack_claimed_at DATETIME(3) NULL
    COMMENT 'When a process took the acknowledgement on (one call at Google at a time; taken again a minute later if it died)',
  ack_attempts INT UNSIGNED NOT NULL DEFAULT 0
    COMMENT 'Acknowledgement calls made',
  ack_error VARCHAR(64) NULL
    COMMENT 'Code of the last failed acknowledgement (HTTP status, timeout); never a payload',
  pulled_at DATETIME(3) NOT NULL
    COMMENT 'When its state was last read from the Play Developer API (UTC)',
  created_at DATETIME(3) NOT NULL
    COMMENT 'When the server first saw the token (UTC)',
  PRIMARY KEY (subscription_id),
  KEY billing_google_purchases_user (user_id),
  KEY billing_google_purchases_unacknowledged (acknowledged_at, started_at),
  CONSTRAINT billing_google_purchases_user_fk FOREIGN KEY (user_id) REFERENCES billing_users (id),
  CONSTRAINT billing_google_purchases_environment_valid CHECK (environment IN ('production', 'sandbox')),
  CONSTRAINT billing_google_purchases_type_valid CHECK (product_type IN ('subscription', 'product'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='Google Play purchase tokens the server knows: owner, last state read, acknowledgement (SPEC §18)';
