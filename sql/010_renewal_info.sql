-- 010: App Store renewal info kept on the inbox wherever it arrives (SPEC §5), so that a
-- re-fold from the inbox (events.reproject) applies it exactly as ingestion did. The
-- other renewal fields already have columns: will_renew (autoRenewStatus),
-- grace_expires_at (gracePeriodExpiresDate), new_product_id/new_tier/effective_at
-- (autoRenewProductId and the period end it takes effect at).
--
-- Nullable columns without a CHECK: MariaDB adds them in place (ALGORITHM=INSTANT), without
-- copying an inbox that may be large; the code writes only NULL, 0 or 1 and 1-99.

ALTER TABLE billing_events
  ADD COLUMN in_billing_retry TINYINT(1) NULL
    COMMENT 'App Store renewal info isInBillingRetryPeriod (1 the store retries a failed charge; with grace_expires_at ahead, with access); NULL when the event carries no renewal info'
    AFTER will_renew,
  ADD COLUMN expiration_intent TINYINT UNSIGNED NULL
    COMMENT 'App Store renewal info expirationIntent: 1 voluntary, 2 billing error, 3 price increase declined, 4 product unavailable, 5 other; NULL while not expired or not stated'
    AFTER in_billing_retry,
  ALGORITHM=INSTANT;
