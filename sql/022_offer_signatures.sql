-- 022_offer_signatures (SPEC §17): the App Store promotional offers the server signed, in the
-- paywall funnel beside what the app reports: POST /billing/apple/offer-signatures records one
-- offer_signed row per signature (the placement and ladder stage it was signed for), and
-- stats.subscriptions' funnel.stages counts them and the users who then redeemed the offer
-- (docs/stats.md, "Funnel"). Purged with the other paywall events after 30 days.
ALTER TABLE billing_paywall_events
  MODIFY COLUMN type VARCHAR(16) NOT NULL
    COMMENT 'view, dismiss or purchase (reported by the app), or offer_signed (recorded by the server: an App Store promotional offer signed for the user)',
  ADD COLUMN product_id VARCHAR(191) NULL
    COMMENT 'offer_signed: the App Store product the offer was signed for; NULL for the app''s events'
    AFTER offering_version,
  ADD COLUMN offer_id VARCHAR(191) NULL
    COMMENT 'offer_signed: the promotional offer id signed (the offering''s promotionalOffer); NULL for the app''s events'
    AFTER product_id,
  DROP CONSTRAINT billing_paywall_events_type_valid,
  ADD CONSTRAINT billing_paywall_events_type_valid CHECK (type IN ('view', 'purchase', 'dismiss', 'offer_signed')),
  ADD CONSTRAINT billing_paywall_events_offer_valid CHECK ((type = 'offer_signed') = (offer_id IS NOT NULL AND product_id IS NOT NULL));
