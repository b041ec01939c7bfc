-- replaces sha256 e9a598e0b6930c2e84ce9bd8a70e49e62ceb2ece2f4f786349d36a14aa4e4e4f
-- 028_cohort_sums (SPEC §20, docs/stats.md "Cohorts"): stats.cohorts' subscribers and revenue
-- summed ahead, per cohort month, UTC day, currency and purchase day. The report joined every
-- member's classified events (2.3M rows for a year of a 3M-event inbox: 7-8 s; 10M events did
-- not answer, docs/performance.md); from a month's first instant it now reads these sums, and
-- the rows of the last, partial day only.
--
-- Derived like billing_counted_buckets (sql/026): the refresh of the stored states takes a
-- chunk's sums out before it replaces or adds its classified rows and puts them back after, in
-- the same transaction (SubscriptionStates.addToCohortSums). A row's cohort is its
-- subscription's: the month of its classified event flagged first_paid.
CREATE TABLE IF NOT EXISTS billing_cohort_sums (
  environment VARCHAR(16) NOT NULL
    COMMENT 'production or sandbox',
  cohort_month DATE NOT NULL
    COMMENT 'First day of the UTC month of the subscription''s first paid period (its first_paid event): the cohort',
  day DATE NOT NULL
    COMMENT 'UTC day of the classified events summed here (intrinsic_at)',
  money_currency CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL
    COMMENT 'Currency of their prices (XXX: none named)',
  money_day DATE NOT NULL
    COMMENT 'UTC day of their period key: the day their amounts convert at',
  members BIGINT NOT NULL DEFAULT 0 COMMENT 'First paid periods (first_paid events): the cohort''s subscribers',
  sales BIGINT NOT NULL DEFAULT 0 COMMENT 'Sales, as billing_counted_buckets.sales',
  gross_milli DECIMAL(38, 0) NOT NULL DEFAULT 0 COMMENT 'Their prices, milli-units of money_currency',
  refunded_milli DECIMAL(38, 0) NOT NULL DEFAULT 0 COMMENT 'Refunded amounts, as billing_counted_buckets.refunded_milli',
  PRIMARY KEY (environment, cohort_month, day, money_currency, money_day)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='The classified events of each cohort''s subscriptions summed per UTC day, currency and purchase day, kept equal to their rows by the refresh';

-- The sums of the rows already classified (a refresh running meanwhile waits for this
-- statement's locks, then adds its own changes on top).
INSERT INTO billing_cohort_sums (environment, cohort_month, day, money_currency, money_day, members, sales, gross_milli, refunded_milli)
SELECT k.environment, DATE_FORMAT(f.intrinsic_at, '%Y-%m-01') AS cohort, DATE(k.intrinsic_at) AS day,
  COALESCE(k.currency, 'XXX') AS money_currency, DATE(k.period_at) AS money_day,
  SUM(k.first_paid),
  SUM(k.period_first AND NOT k.family_shared AND COALESCE(k.price_milli, 0) > 0
      AND (k.kind = 'non_renewing_purchase' OR (k.kind IN ('purchase', 'renewal') AND NOT k.is_trial))),
  SUM(IF(k.period_first AND NOT k.family_shared AND COALESCE(k.price_milli, 0) > 0
         AND (k.kind = 'non_renewing_purchase' OR (k.kind IN ('purchase', 'renewal') AND NOT k.is_trial)), k.price_milli, 0)),
  SUM(IF(k.kind = 'refund' AND k.period_first AND NOT k.family_shared, ABS(CAST(COALESCE(k.price_milli, 0) AS DECIMAL(20, 0))), 0))
FROM billing_counted_events f
-- Each member's rows through its subscription's index, whatever the statistics say: with
-- many events per subscription MariaDB chose the primary key's environment prefix and read
-- every row of the environment per member (over 20 minutes on a 1M-event inbox).
JOIN billing_counted_events k FORCE INDEX (billing_counted_events_subscription)
  ON k.environment = f.environment AND k.subscription_id = f.subscription_id
WHERE f.first_paid = 1
GROUP BY k.environment, cohort, day, money_currency, money_day;
