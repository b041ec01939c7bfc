-- 007: read-only views for DBAs and support, so "why does user X have Pro?" is one SELECT.
-- MariaDB views cannot carry a COMMENT clause: each view and column is described in
-- docs/schema.md, and the column names say what they hold. Views only read; dropping and
-- recreating them changes no data (a later migration may CREATE OR REPLACE them, e.g. to add
-- the operator grants and campaigns of migration 004 as sources).

-- One row per known user: the projected access (billing_access) and, when the store decides
-- it, the subscription behind it (billing_subscriptions) and the latest applied event.
CREATE OR REPLACE SQL SECURITY INVOKER VIEW v_effective_access AS
SELECT
  u.id                                   AS user_id,
  u.created_at                           AS user_created_at,
  u.source                               AS user_source,
  u.deleted_at                           AS user_deleted_at,
  COALESCE(a.tier, 'free')               AS effective_tier,
  COALESCE(a.phase, 'none')              AS store_phase,
  CASE WHEN a.tier IS NULL OR a.tier = 'free' THEN 'none' ELSE 'store' END AS decided_by,
  a.expires_at                           AS access_expires_at,
  a.will_renew                           AS will_renew,
  a.subscription_id                      AS subscription_id,
  a.product_id                           AS product_id,
  s.provider                             AS subscription_provider,
  s.platform                             AS subscription_platform,
  s.environment                          AS subscription_environment,
  s.phase                                AS subscription_phase,
  s.in_trial_period                      AS in_trial_period,
  s.grace_expires_at                     AS grace_expires_at,
  s.pending_product_id                   AS pending_product_id,
  s.pending_effective_at                 AS pending_effective_at,
  a.applied_events                       AS applied_events,
  a.last_event_at                        AS last_event_at,
  (SELECT e.id FROM billing_event_parties p JOIN billing_events e ON e.id = p.event_id
    WHERE p.user_id = u.id AND e.status = 'applied'
    ORDER BY e.intrinsic_at DESC, e.id DESC LIMIT 1) AS last_event_id,
  a.revision                             AS access_revision,
  a.folded_at                            AS folded_at
FROM billing_users u
LEFT JOIN billing_access a ON a.user_id = u.id
LEFT JOIN billing_subscriptions s ON s.user_id = a.user_id AND s.subscription_id = a.subscription_id;

-- One row per (inbox event, user it concerns): what the stores said, in the fold's order.
-- Unmatched events (no known user yet) appear once with user_id NULL and party_role NULL.
CREATE OR REPLACE SQL SECURITY INVOKER VIEW v_subscription_events AS
SELECT
  e.id                                   AS event_id,
  COALESCE(p.user_id, e.user_id)         AS user_id,
  p.role                                 AS party_role,
  e.provider                             AS provider,
  e.provider_event_id                    AS provider_event_id,
  e.event_type                           AS provider_event_type,
  e.kind                                 AS kind,
  e.status                               AS status,
  e.status_reason                        AS status_reason,
  e.environment                          AS environment,
  e.subscription_id                      AS subscription_id,
  e.product_id                           AS product_id,
  e.tier                                 AS tier,
  e.is_trial                             AS is_trial,
  e.period_type                          AS period_type,
  e.price_milli                          AS price_milli,
  e.currency                             AS currency,
  e.price_milli / 1000                   AS price,
  e.purchased_at                         AS period_starts_at,
  e.expires_at                           AS period_expires_at,
  e.intrinsic_at                         AS event_at,
  e.received_at                          AS received_at,
  e.applied_at                           AS applied_at
FROM billing_events e
LEFT JOIN billing_event_parties p ON p.event_id = e.id;

-- Current-window usage per user and meter (from the immutable ledger).
CREATE OR REPLACE SQL SECURITY INVOKER VIEW v_usage_windows AS
SELECT
  l.user_id                              AS user_id,
  l.meter                                AS meter,
  l.window_start                         AS window_start,
  l.window_end                           AS window_end,
  SUM(l.amount)                          AS used,
  MAX(l.limit_at_consumption)            AS limit_at_last_consumption,
  SUM(l.over_limit)                      AS consumptions_over_limit,
  COUNT(*)                               AS consumptions,
  MAX(l.created_at)                      AS last_consumed_at,
  MAX(l.plan_version)                    AS plan_version
FROM usage_ledger l
GROUP BY l.user_id, l.meter, l.window_start, l.window_end;
