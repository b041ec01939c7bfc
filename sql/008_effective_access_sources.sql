-- 008: v_effective_access with every source of access (SPEC section 6), now that grants
-- and campaigns exist (migration 004): the store tier judged at read time (expiry and grace
-- against UTC now), the best active grant, the best active campaign; effective_tier is the
-- highest, decided_by says which source gives it (store first among equals). Described in
-- docs/schema.md.

CREATE OR REPLACE SQL SECURITY INVOKER VIEW v_effective_access AS
SELECT
  x.*,
  ELT(GREATEST(FIELD(x.store_tier_now, 'free', 'plus', 'pro'), FIELD(COALESCE(x.grant_tier, 'free'), 'free', 'plus', 'pro'),
               FIELD(COALESCE(x.campaign_tier, 'free'), 'free', 'plus', 'pro')), 'free', 'plus', 'pro') AS effective_tier,
  CASE
    WHEN x.store_tier_now <> 'free' AND FIELD(x.store_tier_now, 'free', 'plus', 'pro') >= FIELD(COALESCE(x.grant_tier, 'free'), 'free', 'plus', 'pro')
         AND FIELD(x.store_tier_now, 'free', 'plus', 'pro') >= FIELD(COALESCE(x.campaign_tier, 'free'), 'free', 'plus', 'pro') THEN 'store'
    WHEN x.grant_tier IS NOT NULL AND FIELD(x.grant_tier, 'free', 'plus', 'pro') >= FIELD(COALESCE(x.campaign_tier, 'free'), 'free', 'plus', 'pro') THEN 'grant'
    WHEN x.campaign_tier IS NOT NULL THEN 'campaign'
    ELSE 'none'
  END AS decided_by
FROM (
SELECT
  u.id                                   AS user_id,
  u.created_at                           AS user_created_at,
  u.source                               AS user_source,
  u.deleted_at                           AS user_deleted_at,
  COALESCE(a.tier, 'free')               AS store_tier_at_fold,
  CASE WHEN a.tier IN ('plus', 'pro') AND (
         (a.phase IN ('trial', 'active', 'canceled', 'billingRetry') AND (a.expires_at IS NULL OR a.expires_at > UTC_TIMESTAMP(3)))
         OR (a.phase = 'grace' AND COALESCE(s.grace_expires_at, a.expires_at) > UTC_TIMESTAMP(3)))
       THEN a.tier ELSE 'free' END       AS store_tier_now,
  COALESCE(a.phase, 'none')              AS store_phase,
  (SELECT g.tier FROM billing_grants g
    WHERE g.user_id = u.id AND g.revoked_at IS NULL AND g.starts_at <= UTC_TIMESTAMP(3)
      AND (g.expires_at IS NULL OR g.expires_at > UTC_TIMESTAMP(3))
    ORDER BY FIELD(g.tier, 'plus', 'pro') DESC LIMIT 1) AS grant_tier,
  (SELECT g.id FROM billing_grants g
    WHERE g.user_id = u.id AND g.revoked_at IS NULL AND g.starts_at <= UTC_TIMESTAMP(3)
      AND (g.expires_at IS NULL OR g.expires_at > UTC_TIMESTAMP(3))
    ORDER BY FIELD(g.tier, 'plus', 'pro') DESC, g.id LIMIT 1) AS grant_id,
  (SELECT c.tier FROM billing_campaign_members m JOIN billing_campaigns c ON c.name = m.campaign
    WHERE m.user_id = u.id AND c.revoked_at IS NULL AND (c.expires_at IS NULL OR c.expires_at > UTC_TIMESTAMP(3))
    ORDER BY FIELD(c.tier, 'plus', 'pro') DESC LIMIT 1) AS campaign_tier,
  (SELECT c.name FROM billing_campaign_members m JOIN billing_campaigns c ON c.name = m.campaign
    WHERE m.user_id = u.id AND c.revoked_at IS NULL AND (c.expires_at IS NULL OR c.expires_at > UTC_TIMESTAMP(3))
    ORDER BY FIELD(c.tier, 'plus', 'pro') DESC, c.name LIMIT 1) AS campaign,
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
LEFT JOIN billing_subscriptions s ON s.user_id = a.user_id AND s.subscription_id = a.subscription_id
) x;
