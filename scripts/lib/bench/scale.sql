-- scripts/bench --scale: one chunk of generated users [@lo, @hi) with everything ingestion
-- and the admin calls would have written for them, by bulk INSERT ... SELECT from MariaDB's
-- sequence engine (development only: it writes straight into the stack's database).
-- Set by the caller: @lo, @hi (user numbers), @now (DATETIME(3), the instant the projections
-- are folded at), @tag (3 hex digits: this generation, in every id).
--
-- Each user i is imported (created_at spread over the two years before @now) and holds one
-- RevenueCat subscription of 10 applied events, by shape i MOD 20:
--   0-9   active: INITIAL_PURCHASE and 9 monthly RENEWALs, the last period running at @now
--         (8, 9: the pro product)
--   10-15 ended: INITIAL_PURCHASE, 7 RENEWALs, CANCELLATION, EXPIRATION, anywhere in the two
--         years
--   16-17 a 7-day free trial, then 9 monthly RENEWALs, the last running at @now
--   18    canceled but running: INITIAL_PURCHASE, 8 RENEWALs, a CANCELLATION a day into the
--         last period
--   19    weekly: INITIAL_PURCHASE and 9 weekly RENEWALs, the last running at @now
-- and the rows the fold derives from them: the event's party (subject), the subscription
-- (billing_subscriptions) and the access summary (billing_access), folded at @now. Every
-- tenth user has an operator grant (a third expired, a tenth revoked), every user one usage
-- row in a day window that has ended. 20 % USD, 2 % sandbox, a third through Play.
-- The rows must be what the fold writes: scripts/bench --scale checks a sample with
-- events.reproject (no difference, revision unchanged).

SET SESSION unique_checks = 0, foreign_key_checks = 0, max_heap_table_size = 1073741824;

-- The users' shapes, one row per user of the chunk.
CREATE TEMPORARY TABLE IF NOT EXISTS scale_users (
  i BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  id VARCHAR(128) NOT NULL,
  shape TINYINT UNSIGNED NOT NULL,
  period_s BIGINT NOT NULL,          -- a paid period, in seconds
  trial_s BIGINT NOT NULL,           -- the first period when it is a free trial, else 0
  start_at DATETIME(3) NOT NULL,     -- the first purchase
  product VARCHAR(64) NOT NULL,
  tier VARCHAR(8) NOT NULL,
  price_milli BIGINT NOT NULL,
  currency CHAR(3) NOT NULL,
  environment VARCHAR(16) NOT NULL,
  store VARCHAR(32) NOT NULL,
  created_at DATETIME(3) NOT NULL,
  -- The joins on the user's id (parties, access) look a user up by it whichever table the
  -- optimizer reads first: without it, a plan made before InnoDB's statistics counted the
  -- chunk's events compared every event with every user (a chunk ran for over 15 minutes).
  UNIQUE KEY scale_users_id (id)
) ENGINE=MEMORY;
TRUNCATE scale_users;

INSERT INTO scale_users
SELECT u.i, u.id, u.shape, u.period_s, u.trial_s,
  CASE
    -- ended subscriptions start anywhere from two years ago to 8 periods and a day before @now
    WHEN u.shape BETWEEN 10 AND 15 THEN
      @now - INTERVAL 730 DAY + INTERVAL ((u.i * 7919) MOD ((730 - 1) * 86400 - 8 * u.period_s)) SECOND
    -- running ones: the last period started 1 h to one period less 1 h (a day more for the
    -- canceled one, whose cancellation comes a day into it) before @now
    WHEN u.shape = 18 THEN
      @now - INTERVAL (8 * u.period_s + 90000 + (u.i * 7919) MOD (u.period_s - 93600)) SECOND
    ELSE
      @now - INTERVAL (u.trial_s + (9 - (u.trial_s > 0)) * u.period_s + 3600 + (u.i * 7919) MOD (u.period_s - 7200)) SECOND
  END,
  u.product, u.tier, u.price_milli, u.currency, u.environment, u.store,
  @now - INTERVAL 730 DAY + INTERVAL ((u.i * 104729) MOD (729 * 86400)) SECOND
FROM (
  SELECT s.seq AS i,
    LOWER(CONCAT('5ca1e', @tag, '-0000-4000-8000-', LPAD(HEX(s.seq), 12, '0'))) AS id,
    s.seq MOD 20 AS shape,
    IF(s.seq MOD 20 = 19, 7, 30) * 86400 AS period_s,
    IF(s.seq MOD 20 IN (16, 17), 7 * 86400, 0) AS trial_s,
    CASE WHEN s.seq MOD 20 IN (8, 9) THEN 'app.pro.monthly' WHEN s.seq MOD 20 = 19 THEN 'app.plus.weekly' ELSE 'app.plus.monthly' END AS product,
    IF(s.seq MOD 20 IN (8, 9), 'pro', 'plus') AS tier,
    CASE WHEN s.seq MOD 20 IN (8, 9) THEN 9990 WHEN s.seq MOD 20 = 19 THEN 1990 ELSE 4990 END AS price_milli,
    IF(s.seq MOD 5 = 0, 'USD', 'EUR') AS currency,
    IF(s.seq MOD 50 = 49, 'sandbox', 'production') AS environment,
    IF(s.seq MOD 3 = 2, 'play_store', 'app_store') AS store
  FROM seq_0_to_99999999 s WHERE s.seq >= @lo AND s.seq < @hi
) u;

INSERT INTO billing_users (id, created_at, first_seen_at, last_seen_at, source)
SELECT id, created_at, NULL, NULL, 'import' FROM scale_users;

-- Event k (0-9) of each user: its kind, the period it is about, its own time.
CREATE TEMPORARY TABLE IF NOT EXISTS scale_events (
  i BIGINT UNSIGNED NOT NULL, k TINYINT UNSIGNED NOT NULL,
  kind VARCHAR(16) NOT NULL, event_type VARCHAR(32) NOT NULL, trial TINYINT NOT NULL,
  period_start DATETIME(3) NOT NULL, period_end DATETIME(3) NOT NULL, at DATETIME(3) NOT NULL,
  PRIMARY KEY (i, k)
) ENGINE=MEMORY;
TRUNCATE scale_events;

INSERT INTO scale_events
SELECT p.i, p.k, p.kind, IF(p.kind = 'purchase', 'INITIAL_PURCHASE', UPPER(p.kind)), p.trial, p.period_start, p.period_end,
  CASE p.kind
    WHEN 'cancellation' THEN p.period_start + INTERVAL IF(p.shape = 18, 86400, 2 * 86400) SECOND
    WHEN 'expiration' THEN p.period_end
    ELSE p.period_start
  END
FROM (
  SELECT q.*,
    q.start_at + INTERVAL IF(q.n = 0, 0, q.trial_s + (q.n - (q.trial_s > 0)) * q.period_s) SECOND AS period_start,
    q.start_at + INTERVAL (q.trial_s + (q.n + 1 - (q.trial_s > 0)) * q.period_s) SECOND AS period_end
  FROM (
    SELECT u.i, u.shape, u.start_at, u.period_s, u.trial_s, k.seq AS k,
      -- the period the event is about: its own for purchases and renewals, the last one
      -- for the cancellation and the expiration that end the subscription
      CASE
        WHEN u.shape BETWEEN 10 AND 15 AND k.seq >= 8 THEN 7
        WHEN u.shape = 18 AND k.seq = 9 THEN 8
        ELSE k.seq
      END AS n,
      CASE
        WHEN k.seq = 0 THEN 'purchase'
        WHEN u.shape BETWEEN 10 AND 15 AND k.seq = 8 THEN 'cancellation'
        WHEN u.shape BETWEEN 10 AND 15 AND k.seq = 9 THEN 'expiration'
        WHEN u.shape = 18 AND k.seq = 9 THEN 'cancellation'
        ELSE 'renewal'
      END AS kind,
      (k.seq = 0 AND u.trial_s > 0) AS trial
    FROM scale_users u JOIN seq_0_to_9 k
  ) q
) p;

INSERT INTO billing_events (provider, provider_event_id, user_id, event_type, kind, subscription_id, product_id, tier,
  period_type, is_trial, family_shared, price_milli, currency, store, reason, environment, purchased_at, expires_at,
  intrinsic_at, received_at, applied_at, status, payload)
SELECT 'revenuecat', CONCAT('scale-', @tag, '-', e.i, '-', e.k), u.id, e.event_type, e.kind,
  CONCAT('2', @tag, LPAD(e.i, 12, '0')), u.product, u.tier,
  IF(e.trial, 'trial', 'normal'), e.trial, 0, IF(e.trial, 0, u.price_milli), u.currency, u.store,
  IF(e.kind IN ('cancellation', 'expiration'), 'UNSUBSCRIBE', NULL), u.environment,
  e.period_start, e.period_end, e.at, e.at + INTERVAL 2 SECOND, e.at + INTERVAL 2 SECOND, 'applied',
  -- the RevenueCat event object as the webhook stores it
  JSON_OBJECT(
    'id', CONCAT('scale-', @tag, '-', e.i, '-', e.k), 'type', e.event_type, 'app_id', 'app1234567',
    'app_user_id', u.id, 'original_app_user_id', u.id, 'aliases', JSON_ARRAY(u.id),
    'product_id', u.product, 'entitlement_ids', JSON_ARRAY(u.tier), 'period_type', IF(e.trial, 'TRIAL', 'NORMAL'),
    'purchased_at_ms', ROUND(UNIX_TIMESTAMP(e.period_start) * 1000), 'expiration_at_ms', ROUND(UNIX_TIMESTAMP(e.period_end) * 1000),
    'event_timestamp_ms', ROUND(UNIX_TIMESTAMP(e.at) * 1000), 'environment', UPPER(u.environment),
    'store', UPPER(u.store), 'is_family_share', FALSE, 'country_code', IF(u.currency = 'USD', 'US', 'FR'),
    'currency', u.currency, 'price', IF(e.trial, 0, u.price_milli / 1000), 'price_in_purchased_currency', IF(e.trial, 0, u.price_milli / 1000),
    'takehome_percentage', 0.85, 'offer_code', NULL, 'tax_percentage', 0.2, 'commission_percentage', 0.15,
    'transaction_id', CONCAT('3', @tag, LPAD(e.i, 11, '0'), e.k), 'original_transaction_id', CONCAT('2', @tag, LPAD(e.i, 12, '0')),
    'subscriber_attributes', JSON_OBJECT('$email', JSON_OBJECT('value', CONCAT('user', e.i, '@example.com'), 'updated_at_ms', 1700000000000)),
    'cancel_reason', IF(e.kind = 'cancellation', 'UNSUBSCRIBE', NULL), 'expiration_reason', IF(e.kind = 'expiration', 'UNSUBSCRIBE', NULL))
FROM scale_events e JOIN scale_users u ON u.i = e.i
ORDER BY e.i, e.k;

INSERT INTO billing_event_parties (user_id, event_id, role)
SELECT e.user_id, e.id, 'subject' FROM scale_users u JOIN billing_events e ON e.user_id = u.id;

-- The projection the fold leaves: the last period, the phase its events give.
INSERT INTO billing_subscriptions (user_id, subscription_id, provider, platform, environment, product_id, tier, phase,
  will_renew, in_trial_period, purchased_at, expires_at, grace_expires_at, trial_starts_at, trial_ends_at,
  pending_product_id, pending_tier, pending_effective_at, expires_before_revocation, last_event_at)
SELECT u.id, CONCAT('2', @tag, LPAD(u.i, 12, '0')), 'revenuecat', u.store, u.environment, u.product, u.tier,
  CASE WHEN u.shape BETWEEN 10 AND 15 THEN 'expired' WHEN u.shape = 18 THEN 'canceled' ELSE 'active' END,
  u.shape NOT BETWEEN 10 AND 15 AND u.shape <> 18, 0,
  l.period_start, l.period_end, NULL,
  IF(u.trial_s > 0, u.start_at, NULL), IF(u.trial_s > 0, u.start_at + INTERVAL u.trial_s SECOND, NULL),
  NULL, NULL, NULL, NULL, l.at
FROM scale_users u JOIN scale_events l ON l.i = u.i AND l.k = 9;

INSERT INTO billing_grants (user_id, tier, starts_at, expires_at, reason, campaign, idempotency_key, params_sha256,
  granted_by, created_at, revoked_at, revoked_by, revoke_reason)
SELECT g.id, IF(g.i MOD 20 = 0, 'pro', 'plus'), g.starts_at,
  CASE g.i MOD 3 WHEN 0 THEN g.starts_at + INTERVAL 30 DAY WHEN 1 THEN NULL ELSE g.starts_at + INTERVAL 365 DAY END,
  'support goodwill', IF(g.i MOD 4 = 0, 'scale-campaign', NULL), CONCAT('scale-grant-', g.i),
  SHA2(CONCAT('scale-grant-', g.i), 256), 'scale', g.starts_at,
  IF(g.i MOD 100 = 50, g.starts_at + INTERVAL 1 DAY, NULL), IF(g.i MOD 100 = 50, 'scale', NULL),
  IF(g.i MOD 100 = 50, 'mistake', NULL)
FROM (SELECT i, id, created_at + INTERVAL 1 DAY AS starts_at FROM scale_users WHERE i MOD 10 = 0) g
WHERE g.starts_at < @now;

INSERT INTO usage_ledger (user_id, meter, amount, idempotency_key, created_at, plan_version, plan_tier, window_start,
  window_end, limit_at_consumption, over_limit, response)
SELECT w.id, 'explorePlaybackMinutes', w.amount, CONCAT('scale-usage-', w.i), w.at, 1, 'free', w.at, w.at + INTERVAL 1 DAY,
  120, 0,
  JSON_OBJECT('recorded', TRUE, 'meter', 'explorePlaybackMinutes', 'amount', w.amount,
    'idempotencyKey', CONCAT('scale-usage-', w.i), 'overLimit', FALSE, 'enforcement', 'observe', 'planVersion', 1,
    'balance', JSON_OBJECT('limit', 120, 'used', w.amount, 'remaining', 120 - w.amount,
      'windowStart', CONCAT(DATE_FORMAT(w.at, '%Y-%m-%dT%H:%i:%s.'), LEFT(DATE_FORMAT(w.at, '%f'), 3), 'Z'),
      'resetsAt', CONCAT(DATE_FORMAT(w.at + INTERVAL 1 DAY, '%Y-%m-%dT%H:%i:%s.'), LEFT(DATE_FORMAT(w.at, '%f'), 3), 'Z')))
FROM (SELECT i, id, 1 + i MOD 7 AS amount,
        GREATEST(created_at, @now - INTERVAL 700 DAY) + INTERVAL ((i * 31) MOD (20 * 86400)) SECOND AS at
      FROM scale_users) w;

-- Last, so that the triggers above found no access row to touch.
INSERT INTO billing_access (user_id, revision, tier, phase, subscription_id, product_id, expires_at, will_renew,
  last_event_at, applied_events, folded_at, updated_at)
SELECT s.user_id, 10, IF(s.expires_at > @now, s.tier, 'free'), s.phase, s.subscription_id, s.product_id, s.expires_at,
  s.will_renew, s.last_event_at, 10, @now, @now
FROM billing_subscriptions s JOIN scale_users u ON u.id = s.user_id;
