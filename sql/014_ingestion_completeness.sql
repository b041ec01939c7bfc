-- 014: nothing the stores sold is lost or misread (SPEC §15).
--
-- billing_events: the kinds of the newer App Store notification types and of RevenueCat's
-- informational events get their own names (they were `unknown`), pulled RevenueCat state
-- has its provider (`revenuecat_pull`), and family-shared purchases are marked so that
-- statistics count them apart (access, but no payer and no revenue).
--
-- Changing a CHECK constraint makes MariaDB copy the table once (ALGORITHM=COPY): on a large
-- inbox, run the upgrade in a quiet hour (docs/operations.md, "Upgrades").

ALTER TABLE billing_events
  ADD COLUMN family_shared TINYINT(1) NOT NULL DEFAULT 0
    COMMENT '1 when the purchase is shared through Family Sharing (App Store inAppOwnershipType FAMILY_SHARED, RevenueCat is_family_share or ownership_type FAMILY_SHARED): it grants access but is neither a payer nor revenue in statistics'
    AFTER is_trial,
  DROP CONSTRAINT billing_events_provider_valid,
  ADD CONSTRAINT billing_events_provider_valid CHECK (provider IN ('revenuecat', 'revenuecat_pull', 'apple_notification', 'apple_transaction')),
  DROP CONSTRAINT billing_events_kind_valid,
  ADD CONSTRAINT billing_events_kind_valid CHECK (kind IN (
    'purchase', 'renewal', 'cancellation', 'uncancellation', 'expiration', 'billing_issue',
    'product_change', 'non_renewing_purchase', 'extension', 'pause', 'temporary_grant', 'refund',
    'refund_reversed', 'refund_declined', 'revoke', 'promotional', 'transfer', 'grant', 'price_increase',
    'offer_redeemed', 'transaction', 'consumption_request', 'renewal_extension', 'external_purchase_token',
    'consent_rescinded', 'metadata_update', 'migration', 'price_change', 'invoice_issuance',
    'virtual_currency_transaction', 'experiment_enrollment', 'subscriber_alias', 'subscriber_state',
    'test', 'unknown')),
  ADD CONSTRAINT billing_events_family_shared_bool CHECK (family_shared IN (0, 1));

ALTER TABLE billing_quarantine
  DROP CONSTRAINT billing_quarantine_provider_valid,
  ADD CONSTRAINT billing_quarantine_provider_valid CHECK (provider IN ('revenuecat', 'revenuecat_pull', 'apple_notification', 'apple_transaction'));

-- The reconcile schedule covers RevenueCat subscribers too: one row per App Store
-- subscription (provider apple, keyed by originalTransactionId) or per RevenueCat app user
-- (provider revenuecat, keyed by the app user id).
ALTER TABLE billing_reconcile_state
  ADD COLUMN provider VARCHAR(16) NOT NULL DEFAULT 'apple'
    COMMENT 'Whose API is pulled: apple (subscription_id is an originalTransactionId) or revenuecat (subscription_id is the app user id)'
    AFTER subscription_id,
  MODIFY subscription_id VARCHAR(191) NOT NULL
    COMMENT 'What is pulled: the App Store originalTransactionId (provider apple) or the RevenueCat app user id (provider revenuecat)',
  DROP PRIMARY KEY,
  ADD PRIMARY KEY (provider, subscription_id),
  ADD CONSTRAINT billing_reconcile_state_provider_valid CHECK (provider IN ('apple', 'revenuecat'));
