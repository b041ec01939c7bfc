-- 012: offerings from the server (SPEC §14). What the paywall offers, to whom, at which stage
-- of the offer ladder: immutable numbered contracts (offerings, placements, ladders), the
-- ladder stage per user and ladder, and the paywall funnel per offering and stage.

CREATE TABLE offering_versions (
  version INT UNSIGNED NOT NULL
    COMMENT 'Contract number, 1, 2, ...; the newest published at or before now is in force',
  contract LONGTEXT NOT NULL
    COMMENT 'The contract JSON: offerings (id -> products with intro/promotional offers), ladders (ordered offering ids), placements (id -> ladder or fixed offering, eligible), subscriptionGroups',
  published_at DATETIME(3) NOT NULL
    COMMENT 'When it took effect (UTC)',
  published_by VARCHAR(128) NOT NULL
    COMMENT 'Operator (actor) who published it',
  PRIMARY KEY (version),
  KEY offering_versions_published (published_at),
  CONSTRAINT offering_versions_contract_json CHECK (JSON_VALID(contract))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Immutable offerings contracts: rows are only ever inserted (offerings.publish); triggers refuse UPDATE and DELETE';

CREATE TRIGGER offering_versions_no_update BEFORE UPDATE ON offering_versions FOR EACH ROW
  SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'offering_versions rows are immutable: publish a new version';

CREATE TRIGGER offering_versions_no_delete BEFORE DELETE ON offering_versions FOR EACH ROW
  SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'offering_versions rows are immutable: publish a new version';

INSERT INTO offering_versions (version, contract, published_at, published_by)
VALUES (1, '{"description":"Version 1 (seeds/000, seeds/003): the acquisition ladder default -> save50 -> save65 (standard, 50% off, 65% off) on the acquisition placements; a voluntary settings visit shows default and is not ladder-eligible. Intro offer: a one-week free trial on every product of the default offering.","subscriptionGroups":{"lissin":["app.lissin.audio.plus.weekly","app.lissin.audio.plus.monthly","app.lissin.audio.plus.yearly","app.lissin.audio.pro.weekly","app.lissin.audio.pro.monthly","app.lissin.audio.pro.yearly"]},"offerings":{"default":{"description":"Standard prices, with the free-trial intro offer","products":[{"productId":"app.lissin.audio.plus.weekly","introOffer":{"type":"freeTrial","period":"P1W"}},{"productId":"app.lissin.audio.plus.monthly","introOffer":{"type":"freeTrial","period":"P1W"}},{"productId":"app.lissin.audio.plus.yearly","introOffer":{"type":"freeTrial","period":"P1W"}},{"productId":"app.lissin.audio.pro.weekly","introOffer":{"type":"freeTrial","period":"P1W"}},{"productId":"app.lissin.audio.pro.monthly","introOffer":{"type":"freeTrial","period":"P1W"}},{"productId":"app.lissin.audio.pro.yearly","introOffer":{"type":"freeTrial","period":"P1W"}}]},"save50":{"description":"50% off (App Store promotional offer save50)","products":[{"productId":"app.lissin.audio.plus.weekly","promotionalOffer":"save50"},{"productId":"app.lissin.audio.plus.monthly","promotionalOffer":"save50"},{"productId":"app.lissin.audio.plus.yearly","promotionalOffer":"save50"},{"productId":"app.lissin.audio.pro.weekly","promotionalOffer":"save50"},{"productId":"app.lissin.audio.pro.monthly","promotionalOffer":"save50"},{"productId":"app.lissin.audio.pro.yearly","promotionalOffer":"save50"}]},"save65":{"description":"65% off (App Store promotional offer save65)","products":[{"productId":"app.lissin.audio.plus.weekly","promotionalOffer":"save65"},{"productId":"app.lissin.audio.plus.monthly","promotionalOffer":"save65"},{"productId":"app.lissin.audio.plus.yearly","promotionalOffer":"save65"},{"productId":"app.lissin.audio.pro.weekly","promotionalOffer":"save65"},{"productId":"app.lissin.audio.pro.monthly","promotionalOffer":"save65"},{"productId":"app.lissin.audio.pro.yearly","promotionalOffer":"save65"}]}},"ladders":{"acquisition":["default","save50","save65"]},"placements":{"onboarding":{"ladder":"acquisition","eligible":true},"generation_limit":{"ladder":"acquisition","eligible":true},"trial_generation_limit":{"ladder":"acquisition","eligible":true},"explore_limit":{"ladder":"acquisition","eligible":true},"upload_limit":{"ladder":"acquisition","eligible":true},"settings":{"offering":"default","eligible":false}}}', '2000-01-01 00:00:00.000', 'migration 012');

CREATE TABLE offering_ladder_stages (
  user_id VARCHAR(128) NOT NULL
    COMMENT 'The user (billing_users.id)',
  ladder VARCHAR(64) NOT NULL
    COMMENT 'Ladder id of the offerings contract, e.g. acquisition',
  stage SMALLINT UNSIGNED NOT NULL DEFAULT 0
    COMMENT 'Index of the offering shown next in the ladder (0 = first); a dismissal of the offering at this stage advances it once, capped at the last',
  updated_at DATETIME(3) NOT NULL
    COMMENT 'When the stage last moved (UTC); a confirmed purchase after it resets the row',
  PRIMARY KEY (user_id, ladder)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Offer ladder stage per user and ladder (no row = stage 0): advanced by paywall dismiss events, reset by a confirmed purchase';

ALTER TABLE billing_paywall_events
  ADD COLUMN offering VARCHAR(64) NULL
    COMMENT 'Offering shown (offerings contract id), when the app says; NULL for events without one'
    AFTER placement,
  ADD COLUMN stage SMALLINT UNSIGNED NULL
    COMMENT 'Ladder stage of that offering on that placement (its index in the ladder), when the placement runs one'
    AFTER offering,
  ADD COLUMN offering_version INT UNSIGNED NULL
    COMMENT 'Offerings contract version in force when recorded'
    AFTER stage,
  DROP CONSTRAINT billing_paywall_events_type_valid,
  ADD CONSTRAINT billing_paywall_events_type_valid CHECK (type IN ('view', 'purchase', 'dismiss'));

ALTER TABLE billing_flags
  ADD CONSTRAINT billing_flags_purchases_valid CHECK (name <> 'purchases.enabled' OR value IN ('true', 'false'));
