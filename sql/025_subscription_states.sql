-- 025_subscription_states (SPEC §20, docs/stats.md "Stored state"): what every subscription
-- was after each of its counted events, kept so that stats.subscriptions, stats.snapshots and
-- stats.cohorts read the subscriptions active at an instant from one range per length class
-- instead of re-deriving each one from the inbox (five lookups per candidate: minutes at 10M
-- events, docs/performance.md).
--
-- billing_events is the truth; these rows are derived from it and can be rebuilt from it at
-- any time. Triggers note each inbox row written or changed (its subscription, and the one a
-- Google Play replacement ends) in billing_subscription_changes, in the writer's own
-- transaction; billing-rpc folds the noted subscriptions again (SubscriptionStates.refresh:
-- in the background every few seconds, and before each statistic), one transaction at a
-- time under the row lock of billing_subscription_refresh, and removes exactly the notes it
-- read, in the snapshot it read their events in.
CREATE TABLE billing_subscription_states (
  environment VARCHAR(16) NOT NULL
    COMMENT 'production or sandbox, as the event''s',
  span_class TINYINT UNSIGNED NOT NULL
    COMMENT 'c: the state is active for at most 2^c days (16: longer), so the states active at t are those of class c that began in the 2^c days before t',
  valid_from DATETIME(3) NOT NULL
    COMMENT 'intrinsic_at of the event after which this is the subscription''s state (UTC)',
  event_id BIGINT UNSIGNED NOT NULL
    COMMENT 'That event (billing_events.id): the latest counted event before any instant the state covers',
  active_until DATETIME(3) NOT NULL
    COMMENT 'Active at t when valid_from < t < active_until: the first of the next event''s intrinsic_at + 1 ms, the end of access (expiry or grace) and a Play replacement''s start',
  subscription_id VARCHAR(191) NOT NULL
    COMMENT 'The subscription (billing_events.subscription_id)',
  user_id VARCHAR(128) NULL
    COMMENT 'The latest event''s user; NULL while unmatched (paying users count the known ones)',
  product_id VARCHAR(191) NULL
    COMMENT 'The product in force: the latest period start''s, else the latest event''s',
  is_trial TINYINT(1) NOT NULL
    COMMENT '1 when the period in force is a free trial',
  family_shared TINYINT(1) NOT NULL
    COMMENT '1 when the period in force is family-shared (access, no payer)',
  cancelling TINYINT(1) NOT NULL
    COMMENT '1 when the latest renewal intent before the instant says it will not renew',
  price_milli BIGINT NULL
    COMMENT 'Price of the period in force (its start event''s), milli-units of currency; NULL: no period start yet',
  currency CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NULL
    COMMENT 'ISO 4217 currency of price_milli',
  paid_at DATETIME(3) NULL
    COMMENT 'When the period in force was bought (purchased_at, else its intrinsic_at): the day its price converts at',
  period_seconds BIGINT NULL
    COMMENT 'Length of the period in force when not a trial and its expiry is after its purchase: the cadence of a product the catalog does not name',
  first_paid_at DATETIME(3) NULL
    COMMENT 'intrinsic_at of the subscription''s first paid purchase or renewal (any instant): MRR reactivation vs new',
  PRIMARY KEY (environment, span_class, valid_from, event_id),
  KEY billing_subscription_states_subscription (environment, subscription_id),
  -- users.delete writes the erased user's tombstone here too, in its own transaction.
  KEY billing_subscription_states_user (user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='Each subscription''s state after each counted event while it is active, derived from billing_events (SubscriptionStates): the statistics'' active sets';

CREATE TABLE billing_subscription_changes (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
    COMMENT 'Sequence of the note',
  environment VARCHAR(16) NOT NULL
    COMMENT 'The event''s environment',
  subscription_id VARCHAR(191) NOT NULL
    COMMENT 'A subscription whose states must be derived again',
  event_at DATETIME(3) NULL
    COMMENT 'An inserted event''s intrinsic_at: after the subscription''s latest folded event, its fold goes on from there; NULL (an update, a replacement): derived again from its first event',
  event_id BIGINT UNSIGNED NULL
    COMMENT 'That event (billing_events.id), the tie-break of event_at',
  PRIMARY KEY (id),
  -- A refresh takes every note of the subscriptions it derives.
  KEY billing_subscription_changes_subscription (environment, subscription_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='Subscriptions whose inbox rows changed since their states were derived (written by triggers on billing_events, removed by the refresh that read them)';

CREATE TABLE billing_subscription_folds (
  environment VARCHAR(16) NOT NULL
    COMMENT 'The subscription''s environment',
  subscription_id VARCHAR(191) NOT NULL
    COMMENT 'The subscription',
  last_at DATETIME(3) NULL
    COMMENT 'intrinsic_at of the latest counted event folded; NULL: none',
  last_id BIGINT UNSIGNED NULL
    COMMENT 'That event (billing_events.id)',
  fold LONGTEXT NOT NULL
    COMMENT 'What the fold keeps after that event (SubscriptionStates.Fold as JSON: the period in force, renewal intent, latest expiry and grace, first paid instant, the latest event and its open state)',
  PRIMARY KEY (environment, subscription_id),
  CONSTRAINT billing_subscription_folds_json CHECK (JSON_VALID(fold))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='Where each subscription''s derivation stopped, so that an event after it is folded on instead of the whole subscription again';

CREATE TABLE billing_subscription_refresh (
  id TINYINT UNSIGNED NOT NULL
    COMMENT 'Always 1: the row every refresh locks first, so refreshes run one at a time',
  refreshed_at DATETIME(3) NULL
    COMMENT 'When a refresh last committed a batch (UTC)',
  subscriptions BIGINT UNSIGNED NOT NULL DEFAULT 0
    COMMENT 'Subscriptions derived again since the table was created',
  PRIMARY KEY (id),
  CONSTRAINT billing_subscription_refresh_one_row CHECK (id = 1)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='The refresh of billing_subscription_states: its lock row and progress';

INSERT INTO billing_subscription_refresh (id) VALUES (1);

CREATE TRIGGER billing_events_note_insert AFTER INSERT ON billing_events FOR EACH ROW
BEGIN
  IF NEW.subscription_id IS NOT NULL AND NEW.intrinsic_at IS NOT NULL THEN
    INSERT INTO billing_subscription_changes (environment, subscription_id, event_at, event_id)
    VALUES (NEW.environment, NEW.subscription_id, NEW.intrinsic_at, NEW.id);
  END IF;
  IF NEW.linked_subscription_id IS NOT NULL THEN
    INSERT INTO billing_subscription_changes (environment, subscription_id) VALUES (NEW.environment, NEW.linked_subscription_id);
  END IF;
END;

-- An inbox row changes when its user is found (status unmatched -> applied) or erased (a
-- tombstone user); any change of a column the states read notes both sides.
CREATE TRIGGER billing_events_note_update AFTER UPDATE ON billing_events FOR EACH ROW
BEGIN
  IF NOT (NEW.environment <=> OLD.environment AND NEW.subscription_id <=> OLD.subscription_id
          AND NEW.linked_subscription_id <=> OLD.linked_subscription_id AND NEW.status <=> OLD.status
          AND NEW.user_id <=> OLD.user_id AND NEW.kind <=> OLD.kind AND NEW.provider <=> OLD.provider
          AND NEW.intrinsic_at <=> OLD.intrinsic_at AND NEW.product_id <=> OLD.product_id
          AND NEW.is_trial <=> OLD.is_trial AND NEW.family_shared <=> OLD.family_shared
          AND NEW.price_milli <=> OLD.price_milli AND NEW.currency <=> OLD.currency
          AND NEW.purchased_at <=> OLD.purchased_at AND NEW.expires_at <=> OLD.expires_at
          AND NEW.grace_expires_at <=> OLD.grace_expires_at AND NEW.will_renew <=> OLD.will_renew) THEN
    IF OLD.subscription_id IS NOT NULL THEN
      INSERT INTO billing_subscription_changes (environment, subscription_id) VALUES (OLD.environment, OLD.subscription_id);
    END IF;
    IF OLD.linked_subscription_id IS NOT NULL THEN
      INSERT INTO billing_subscription_changes (environment, subscription_id) VALUES (OLD.environment, OLD.linked_subscription_id);
    END IF;
    IF NEW.subscription_id IS NOT NULL AND NOT (NEW.subscription_id <=> OLD.subscription_id AND NEW.environment <=> OLD.environment) THEN
      INSERT INTO billing_subscription_changes (environment, subscription_id) VALUES (NEW.environment, NEW.subscription_id);
    END IF;
    IF NEW.linked_subscription_id IS NOT NULL
       AND NOT (NEW.linked_subscription_id <=> OLD.linked_subscription_id AND NEW.environment <=> OLD.environment) THEN
      INSERT INTO billing_subscription_changes (environment, subscription_id) VALUES (NEW.environment, NEW.linked_subscription_id);
    END IF;
  END IF;
END;

-- Every subscription already in the inbox is derived by the first refresh.
INSERT INTO billing_subscription_changes (environment, subscription_id)
SELECT DISTINCT environment, subscription_id FROM billing_events WHERE subscription_id IS NOT NULL
UNION
SELECT DISTINCT environment, linked_subscription_id FROM billing_events WHERE linked_subscription_id IS NOT NULL;
