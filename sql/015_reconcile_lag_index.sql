-- 015_reconcile_lag_index: the most overdue pull of each provider in one index probe.
-- Every /metrics scrape reads `MIN(next_attempt_at) ... GROUP BY provider`
-- (billing_reconcile_lag_seconds); without this key that read every row of the table.
ALTER TABLE billing_reconcile_state
  ADD KEY billing_reconcile_state_provider_next (provider, next_attempt_at);
