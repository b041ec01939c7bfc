-- 024_binding_audit_play (SPEC §5, §18, §20): the binding audit records Google Play purchase
-- tokens' owners too (the app's post under binding.policy, bound by a push, unbound by an
-- erasure), and a Google Play state names the order of its paid period in transaction_id
-- (each renewal has its own), the statistics' period of that sale. Comments only.
ALTER TABLE billing_binding_audit
  COMMENT = 'Every binding decision on a store subscription (bound, moved, denied, unbound), append-only: App Store originalTransactionIds and Google Play purchase tokens',
  MODIFY COLUMN original_transaction_id VARCHAR(191) NOT NULL
    COMMENT 'The subscription concerned: an App Store originalTransactionId, or a Google Play token''s subscription id (gp: + SHA-256 of the token)';

ALTER TABLE billing_events
  MODIFY COLUMN transaction_id VARCHAR(191) NULL
    COMMENT 'The store transaction the event is about, when it names one: a google_play state''s order of its paid period (latestSuccessfulOrderId; a renewal''s ends in ..N)';
