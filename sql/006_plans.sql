-- 006_plans: versioned plan contracts and the immutable usage ledger (SPEC section 7).

CREATE TABLE plan_versions (
  version INT UNSIGNED NOT NULL
    COMMENT 'Contract number, 1, 2, ...; a window uses the version in effect at its start',
  contract LONGTEXT NOT NULL
    COMMENT 'The contract JSON: per tier (free, trial, plus, pro) capabilities and meters {limit, window, placement}',
  published_at DATETIME(3) NOT NULL
    COMMENT 'When it took effect (UTC): windows starting at or after this use it',
  published_by VARCHAR(128) NOT NULL
    COMMENT 'Operator (actor) who published it',
  PRIMARY KEY (version),
  KEY plan_versions_published (published_at),
  CONSTRAINT plan_versions_contract_json CHECK (JSON_VALID(contract))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Immutable plan contracts: rows are only ever inserted (plans.publish); triggers refuse UPDATE and DELETE';

CREATE TRIGGER plan_versions_no_update BEFORE UPDATE ON plan_versions FOR EACH ROW
  SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'plan_versions rows are immutable: publish a new version';

CREATE TRIGGER plan_versions_no_delete BEFORE DELETE ON plan_versions FOR EACH ROW
  SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'plan_versions rows are immutable: publish a new version';

INSERT INTO plan_versions (version, contract, published_at, published_by)
VALUES (1, '{"description":"Version 1 (seeds/003): recurring generation per 7 days Free 1, Plus 2, Pro 5, 1 in total during a trial; one-time generation 3 per 3 days; explore playback minutes per day; file uploads per 30 days.","tiers":{"free":{"capabilities":["explorePlayback","starterPersonalShow","personalGeneration","personalEpisodePlayback"],"meters":{"explorePlaybackMinutes":{"limit":120,"placement":"explore_limit","window":{"days":1}},"fileUploads":{"limit":0,"placement":"upload_limit","window":{"days":30}},"oneTimeGeneration":{"limit":3,"placement":"generation_limit","window":{"days":3}},"recurringGeneration":{"limit":1,"placement":"generation_limit","window":{"days":7}}}},"plus":{"capabilities":["explorePlayback","starterPersonalShow","personalGeneration","personalEpisodePlayback","additionalPersonalShows","dailyCadence","documentUpload","remix","advancedTranscript"],"meters":{"explorePlaybackMinutes":{"limit":600,"placement":"explore_limit","window":{"days":1}},"fileUploads":{"limit":20,"placement":"upload_limit","window":{"days":30}},"oneTimeGeneration":{"limit":3,"placement":"generation_limit","window":{"days":3}},"recurringGeneration":{"limit":2,"placement":"generation_limit","window":{"days":7}}}},"pro":{"capabilities":["explorePlayback","starterPersonalShow","personalGeneration","personalEpisodePlayback","additionalPersonalShows","dailyCadence","documentUpload","remix","advancedTranscript","sourceMonitoring","creatorExport","longFormGeneration"],"meters":{"explorePlaybackMinutes":{"limit":null,"window":{"days":1}},"fileUploads":{"limit":100,"placement":"upload_limit","window":{"days":30}},"oneTimeGeneration":{"limit":3,"placement":"generation_limit","window":{"days":3}},"recurringGeneration":{"limit":5,"placement":"generation_limit","window":{"days":7}}}},"trial":{"capabilities":["explorePlayback","starterPersonalShow","personalGeneration","personalEpisodePlayback","additionalPersonalShows","dailyCadence","documentUpload","remix","advancedTranscript"],"meters":{"explorePlaybackMinutes":{"limit":600,"placement":"explore_limit","window":{"days":1}},"fileUploads":{"limit":5,"placement":"upload_limit","window":"trial"},"oneTimeGeneration":{"limit":3,"placement":"generation_limit","window":{"days":3}},"recurringGeneration":{"limit":1,"placement":"trial_generation_limit","window":"trial"}}}}}', '2000-01-01 00:00:00.000', 'migration 006');

CREATE TABLE usage_ledger (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
    COMMENT 'Ledger sequence',
  user_id VARCHAR(128) NOT NULL
    COMMENT 'Who consumed (billing_users.id)',
  meter VARCHAR(64) NOT NULL
    COMMENT 'Meter name from the plan contract, e.g. recurringGeneration',
  amount INT UNSIGNED NOT NULL
    COMMENT 'Units consumed (> 0)',
  idempotency_key VARCHAR(128) NOT NULL
    COMMENT 'Client key: the same (user, meter, key) is recorded once and answered the same',
  created_at DATETIME(3) NOT NULL
    COMMENT 'When it was recorded (UTC); windows count entries by this time',
  plan_version INT UNSIGNED NOT NULL
    COMMENT 'Contract version that decided it (plan_versions.version)',
  plan_tier VARCHAR(8) NOT NULL
    COMMENT 'Plan tier that decided it: free, trial, plus or pro',
  window_start DATETIME(3) NOT NULL
    COMMENT 'Start of the window it counted in (UTC)',
  window_end DATETIME(3) NOT NULL
    COMMENT 'End of that window (UTC)',
  limit_at_consumption BIGINT NULL
    COMMENT 'The limit then in force; NULL = unlimited',
  over_limit TINYINT(1) NOT NULL
    COMMENT '1 when recorded beyond the limit (observe mode)',
  response LONGTEXT NOT NULL
    COMMENT 'The JSON answer given the first time, repeated for the same key',
  PRIMARY KEY (id),
  UNIQUE KEY usage_ledger_idempotency (user_id, meter, idempotency_key),
  KEY usage_ledger_window (user_id, meter, created_at),
  CONSTRAINT usage_ledger_user_fk FOREIGN KEY (user_id) REFERENCES billing_users (id),
  CONSTRAINT usage_ledger_amount_positive CHECK (amount > 0),
  CONSTRAINT usage_ledger_tier_valid CHECK (plan_tier IN ('free', 'trial', 'plus', 'pro')),
  CONSTRAINT usage_ledger_over_limit_bool CHECK (over_limit IN (0, 1)),
  CONSTRAINT usage_ledger_window_order CHECK (window_end > window_start),
  CONSTRAINT usage_ledger_response_json CHECK (JSON_VALID(response))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='Immutable usage ledger: one row per consumption, unique per idempotency key; balances are sums over a window';

CREATE TRIGGER usage_ledger_no_update BEFORE UPDATE ON usage_ledger FOR EACH ROW
  SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'usage_ledger rows are immutable';

CREATE TRIGGER usage_ledger_no_delete BEFORE DELETE ON usage_ledger FOR EACH ROW
  SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'usage_ledger rows are immutable';
