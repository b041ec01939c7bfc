-- 026_counted_events (SPEC §8 and §20, docs/stats.md "Counts"): what each counted inbox event
-- is to stats.subscriptions' counts, classified once by the refresh of the stored states
-- (SubscriptionStates.refresh, sql/025) when it folds the event's subscription, so that the
-- counts of any period are one range of this table summed by MariaDB: no look at each
-- subscription's history before the period, no sort by subscription (a year's report of a
-- 1M-event inbox did not finish within its 10 s limit before, docs/performance.md).
--
-- Derived from billing_events like the states, rebuilt with them: a subscription derived
-- again whole has its rows replaced. billing_counted_buckets keeps their sums per 15-minute
-- bucket, so that a report reads one row per bucket, currency and day for the buckets wholly
-- inside its periods, and the rows only at its edges.
CREATE TABLE billing_counted_events (
  environment VARCHAR(16) NOT NULL
    COMMENT 'production or sandbox, as the event''s',
  intrinsic_at DATETIME(3) NOT NULL
    COMMENT 'The event''s intrinsic_at (UTC): the period and the local day it counts in',
  event_id BIGINT UNSIGNED NOT NULL
    COMMENT 'The event (billing_events.id)',
  subscription_id VARCHAR(191) NOT NULL
    COMMENT 'Its subscription (billing_events.subscription_id)',
  kind VARCHAR(32) NOT NULL
    COMMENT 'The kind as the counts read it: purchase, renewal, non_renewing_purchase, cancellation, expiration, refund, revoke, billing_issue (a Google Play state is its order''s purchase or renewal); subscriber_state for a pulled state that is only a first paid period',
  is_trial TINYINT(1) NOT NULL
    COMMENT '1 when the event is a free trial''s',
  family_shared TINYINT(1) NOT NULL
    COMMENT '1 when family-shared: access, no money',
  price_milli BIGINT NULL
    COMMENT 'The event''s price, milli-units of currency (a refund''s may be negative)',
  currency CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NULL
    COMMENT 'ISO 4217 currency of price_milli',
  period_at DATETIME(3) NOT NULL
    COMMENT 'The period key: purchased_at, else intrinsic_at; its UTC day is the day the price converts at',
  first_ever TINYINT(1) NOT NULL
    COMMENT '1 when this is the subscription''s first counted event ever (new when a purchase)',
  period_first TINYINT(1) NOT NULL
    COMMENT '1 when this is the first event of its group naming its period key, ever: period start or one-time purchase (a renewal, a sale), refund (the refunded amount), billing issue',
  converted TINYINT(1) NOT NULL
    COMMENT '1 for a paid period''s first report whose previous period start (purchase/renewal) was a trial',
  first_paid TINYINT(1) NOT NULL
    COMMENT '1 for the subscription''s first paid period (a purchase, renewal or pulled state, not a trial, not family-shared, priced): its cohort''s month',
  signup_days INT NULL
    COMMENT 'Whole days from its user''s sign-up (billing_users.created_at) to the event, at least 0; NULL: no known user (the subscriber profile''s median, for new subscriptions)',
  previous_class_at DATETIME(3) NULL
    COMMENT 'The previous event of its class (a cancellation''s cancellation; an expiration''s, refund''s or revocation''s loss): the first of its class within a window from w when NULL or before w',
  previous_kind_at DATETIME(3) NULL
    COMMENT 'A refund''s previous refund, a revocation''s previous revocation (the same rule)',
  PRIMARY KEY (environment, intrinsic_at, event_id),
  -- A subscription derived again whole replaces its rows.
  KEY billing_counted_events_subscription (environment, subscription_id),
  -- The window's rule: the events whose previous one of their class is in the report's periods.
  KEY billing_counted_events_previous (environment, previous_class_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='Each counted event''s classification for the counts, derived from billing_events by the refresh of billing_subscription_states';

CREATE TABLE billing_counted_buckets (
  environment VARCHAR(16) NOT NULL
    COMMENT 'production or sandbox',
  bucket_at DATETIME(3) NOT NULL
    COMMENT 'Start of the 15-minute bucket (UTC) of the events summed here (intrinsic_at)',
  money_currency CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL
    COMMENT 'Currency of the events'' prices (XXX: none named)',
  money_day DATE NOT NULL
    COMMENT 'UTC day of their period key: the day their amounts convert at',
  new_count BIGINT NOT NULL DEFAULT 0 COMMENT 'Purchases that are their subscription''s first counted event',
  trials BIGINT NOT NULL DEFAULT 0 COMMENT 'Of those, trials',
  family_shared BIGINT NOT NULL DEFAULT 0 COMMENT 'First events that are family-shared purchases or one-time purchases',
  converted BIGINT NOT NULL DEFAULT 0 COMMENT 'Paid periods'' first reports after a trial',
  renewals BIGINT NOT NULL DEFAULT 0 COMMENT 'Renewals, first reports of their period',
  one_time BIGINT NOT NULL DEFAULT 0 COMMENT 'One-time purchases, first reports of their period',
  billing_issues BIGINT NOT NULL DEFAULT 0 COMMENT 'Billing issues, first of their period',
  cancellations BIGINT NOT NULL DEFAULT 0 COMMENT 'Cancellation events (the report takes out those whose previous cancellation is in its period)',
  lost BIGINT NOT NULL DEFAULT 0 COMMENT 'Expiration, refund and revocation events (likewise)',
  refunds BIGINT NOT NULL DEFAULT 0 COMMENT 'Refund events (likewise)',
  revocations BIGINT NOT NULL DEFAULT 0 COMMENT 'Revocation events (likewise)',
  sales BIGINT NOT NULL DEFAULT 0 COMMENT 'Sales: period starts and one-time purchases first of their period, not trials, not family-shared, priced',
  gross_milli DECIMAL(38, 0) NOT NULL DEFAULT 0 COMMENT 'Their prices, milli-units of money_currency',
  refunded_milli DECIMAL(38, 0) NOT NULL DEFAULT 0 COMMENT 'Refunded amounts (first refund of a period, not family-shared), milli-units',
  PRIMARY KEY (environment, bucket_at, money_currency, money_day)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='billing_counted_events summed per 15-minute bucket, currency and purchase day (SubscriptionStats.eventSums), kept equal to its rows by the refresh';

-- The cohort's first paid period beside the states: the retention of a cohort at a month
-- boundary is then the paying states at that instant grouped by it, without a join.
ALTER TABLE billing_subscription_states
  ADD COLUMN cohort_paid_at DATETIME(3) NULL
    COMMENT 'intrinsic_at of the subscription''s first paid period as cohorts count it (a purchase, renewal or pulled state, not a trial, not family-shared, priced; one-time purchases are in no cohort): its cohort''s month';

-- Every subscription is derived again whole by the first refresh (its stored fold has no
-- classification yet either).
INSERT INTO billing_subscription_changes (environment, subscription_id)
SELECT DISTINCT environment, subscription_id FROM billing_events WHERE subscription_id IS NOT NULL;
