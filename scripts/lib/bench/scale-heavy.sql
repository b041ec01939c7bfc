-- scripts/bench --scale: one user with 1,000 events (a daily subscription: INITIAL_PURCHASE and
-- 999 RENEWALs, the last period running at @now), the user events.reproject is timed on; the
-- same rows ingestion writes, as scale.sql's. Set by the caller: @now, @tag, @heavy (his id).

SET SESSION unique_checks = 0, foreign_key_checks = 0;
SET @start = @now - INTERVAL 999 DAY - INTERVAL 1 HOUR;

INSERT INTO billing_users (id, created_at, first_seen_at, last_seen_at, source)
VALUES (@heavy, @start - INTERVAL 1 DAY, NULL, NULL, 'import');

INSERT INTO billing_events (provider, provider_event_id, user_id, event_type, kind, subscription_id, product_id, tier,
  period_type, is_trial, family_shared, price_milli, currency, store, reason, environment, purchased_at, expires_at,
  intrinsic_at, received_at, applied_at, status, payload)
SELECT 'revenuecat', CONCAT('scale-', @tag, '-heavy-', k.seq), @heavy, IF(k.seq = 0, 'INITIAL_PURCHASE', 'RENEWAL'),
  IF(k.seq = 0, 'purchase', 'renewal'), CONCAT('9', @tag, 'heavy'), 'app.plus.daily', 'plus', 'normal', 0, 0, 290, 'EUR',
  'app_store', NULL, 'production', @start + INTERVAL k.seq DAY, @start + INTERVAL (k.seq + 1) DAY, @start + INTERVAL k.seq DAY,
  @start + INTERVAL k.seq DAY + INTERVAL 2 SECOND, @start + INTERVAL k.seq DAY + INTERVAL 2 SECOND, 'applied',
  JSON_OBJECT('id', CONCAT('scale-', @tag, '-heavy-', k.seq), 'type', IF(k.seq = 0, 'INITIAL_PURCHASE', 'RENEWAL'),
    'app_user_id', @heavy, 'original_app_user_id', @heavy, 'aliases', JSON_ARRAY(@heavy), 'product_id', 'app.plus.daily',
    'entitlement_ids', JSON_ARRAY('plus'), 'period_type', 'NORMAL',
    'purchased_at_ms', ROUND(UNIX_TIMESTAMP(@start + INTERVAL k.seq DAY) * 1000),
    'expiration_at_ms', ROUND(UNIX_TIMESTAMP(@start + INTERVAL (k.seq + 1) DAY) * 1000),
    'event_timestamp_ms', ROUND(UNIX_TIMESTAMP(@start + INTERVAL k.seq DAY) * 1000), 'environment', 'PRODUCTION',
    'store', 'APP_STORE', 'currency', 'EUR', 'price', 0.29, 'price_in_purchased_currency', 0.29,
    'original_transaction_id', CONCAT('9', @tag, 'heavy'))
FROM seq_0_to_999 k ORDER BY k.seq;

INSERT INTO billing_event_parties (user_id, event_id, role)
SELECT user_id, id, 'subject' FROM billing_events WHERE user_id = @heavy;

INSERT INTO billing_subscriptions (user_id, subscription_id, provider, platform, environment, product_id, tier, phase,
  will_renew, in_trial_period, purchased_at, expires_at, last_event_at)
VALUES (@heavy, CONCAT('9', @tag, 'heavy'), 'revenuecat', 'app_store', 'production', 'app.plus.daily', 'plus', 'active',
  1, 0, @start + INTERVAL 999 DAY, @start + INTERVAL 1000 DAY, @start + INTERVAL 999 DAY);

INSERT INTO billing_access (user_id, revision, tier, phase, subscription_id, product_id, expires_at, will_renew,
  last_event_at, applied_events, folded_at, updated_at)
VALUES (@heavy, 1000, 'plus', 'active', CONCAT('9', @tag, 'heavy'), 'app.plus.daily', @start + INTERVAL 1000 DAY, 1,
  @start + INTERVAL 999 DAY, 1000, @now, @now);
