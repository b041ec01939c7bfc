-- 027_stats_profile_index (docs/stats.md "Cost", docs/performance.md "At 10M events"): the
-- subscriber profile of stats.subscriptions (new subscriptions' median days from sign-up)
-- reads the first-ever purchases of the report's period. Through the primary key it examined
-- every classified event of the period (2.7M for a year of a 3M-event inbox, 0.8-2.0 s); this
-- index holds just those rows in period order with the one column the median reads, so the
-- read is one range of it (0.2 s).
ALTER TABLE billing_counted_events
  ADD KEY billing_counted_events_profile (environment, first_ever, kind, intrinsic_at, signup_days);
