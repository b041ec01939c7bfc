-- 029_cohort_paying (SPEC §20, docs/stats.md "Cohorts"): stats.cohorts' retention counted ahead,
-- per cohort month and month boundary. The report read the paying set of every boundary (12
-- of them for a year: 4.4M states examined for a 3M-event inbox, 4-5 s); from a month's first
-- instant it now reads these counts, and the few states longer than 2^11 days.
--
-- Derived like billing_cohort_sums (sql/028): the refresh counts out the paying states it
-- deletes (or gives a cohort) and counts in those it writes, in the same transaction
-- (SubscriptionStates.PayingChanges).
CREATE TABLE IF NOT EXISTS billing_cohort_paying (
  environment VARCHAR(16) NOT NULL
    COMMENT 'production or sandbox',
  cohort_month DATE NOT NULL
    COMMENT 'First day of the UTC month of the subscriptions'' first paid period (billing_subscription_states.cohort_paid_at): the cohort',
  boundary DATE NOT NULL
    COMMENT 'A first day of a UTC month: the instant (00:00 UTC) the subscriptions are counted at',
  paying BIGINT NOT NULL
    COMMENT 'States of the cohort active at that instant that pay (not trial, not family-shared, priced), of span_class 11 or less: one per subscription',
  PRIMARY KEY (environment, cohort_month, boundary)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='Each cohort''s paying subscriptions at each month boundary, kept equal to billing_subscription_states by the refresh';

-- The counts of the states already derived: each paying state of span_class 11 or less at
-- every first instant of a month strictly inside its [valid_from, active_until].
INSERT INTO billing_cohort_paying (environment, cohort_month, boundary, paying)
SELECT s.environment, CAST(DATE_FORMAT(s.cohort_paid_at, '%Y-%m-01') AS DATE) AS cohort, b.boundary, COUNT(*)
FROM billing_subscription_states s
JOIN (
  WITH RECURSIVE months (boundary) AS (
    SELECT CAST(DATE_FORMAT(MIN(valid_from), '%Y-%m-01') AS DATE) + INTERVAL 1 MONTH FROM billing_subscription_states
    UNION ALL
    SELECT boundary + INTERVAL 1 MONTH FROM months
    WHERE boundary < (SELECT MAX(active_until) FROM billing_subscription_states WHERE span_class <= 11)
  )
  SELECT boundary FROM months
) b ON s.valid_from < b.boundary AND s.active_until > b.boundary
WHERE s.span_class <= 11 AND s.is_trial = 0 AND s.family_shared = 0 AND s.price_milli > 0 AND s.cohort_paid_at IS NOT NULL
GROUP BY s.environment, cohort, b.boundary;
