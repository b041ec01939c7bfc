-- 019_outbox (SPEC §16): every change of a user's effective access, and every applied inbox
-- event, is one row here, written in the transaction that made it (AccessOutbox); nothing
-- else announces a change. billing-rpc's webhook dispatcher fans each row out to the
-- endpoints subscribed to its type (one delivery row each) and sends them. Rows live
-- webhooks.retentionDays (default 7: beyond the three days a delivery is retried), then go
-- with their deliveries.
CREATE TABLE billing_outbox (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
    COMMENT 'The change: the webhook-id of each of its deliveries; for one user it grows with revision (written under his access row lock)',
  user_id VARCHAR(128) NOT NULL
    COMMENT 'Whose access changed (or whom the applied event concerns); erasure (users.delete) removes his rows',
  type VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL
    COMMENT 'access.changed (tier, phase, expiry, sources, pending change or revision moved) or event.applied (an inbox event applied to him)',
  revision BIGINT UNSIGNED NOT NULL
    COMMENT 'billing_access.revision as committed with this row',
  event_id BIGINT UNSIGNED NULL
    COMMENT 'event.applied: the billing_events row; NULL for access.changed',
  data LONGTEXT NOT NULL
    COMMENT 'The webhook body''s data object (JSON), rendered in the transaction that made the change: what was true at that revision',
  created_at DATETIME(3) NOT NULL
    COMMENT 'When the change was made (UTC): the webhook body''s timestamp',
  fanned_out_at DATETIME(3) NULL
    COMMENT 'When the dispatcher made its deliveries, one per endpoint subscribed to its type (UTC); NULL: not yet (the dispatcher''s queue)',
  PRIMARY KEY (id),
  KEY billing_outbox_queue (fanned_out_at, id),
  KEY billing_outbox_user (user_id, id),
  KEY billing_outbox_created (created_at),
  CONSTRAINT billing_outbox_type_valid CHECK (type IN ('access.changed', 'event.applied')),
  CONSTRAINT billing_outbox_data_json CHECK (JSON_VALID(data)),
  CONSTRAINT billing_outbox_event_for_applied CHECK ((type = 'event.applied') = (event_id IS NOT NULL))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='Transactional outbox: one row per change of a user''s access and per applied event, committed with it (SPEC §16)';

CREATE TABLE billing_webhook_deliveries (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
    COMMENT 'The delivery (webhooks.deliveries, webhooks.replay deliveryId)',
  endpoint_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL
    COMMENT 'webhooks.endpoints[].id of the configuration',
  outbox_id BIGINT UNSIGNED NOT NULL
    COMMENT 'The billing_outbox row delivered: its id is the webhook-id header',
  user_id VARCHAR(128) NOT NULL
    COMMENT 'The outbox row''s user: one endpoint gets one user''s deliveries one at a time, in outbox order',
  status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'pending'
    COMMENT 'pending (to send, or retrying), delivered (a 2xx acknowledged it) or failed (three days of retries; webhooks.replay sends it again)',
  attempts INT UNSIGNED NOT NULL DEFAULT 0
    COMMENT 'Attempts made, each signed afresh',
  next_attempt_at DATETIME(3) NOT NULL
    COMMENT 'When a pending delivery is due (UTC): creation, then exponential backoff from seconds to hours',
  last_attempt_at DATETIME(3) NULL
    COMMENT 'When it was last sent (UTC)',
  last_status SMALLINT UNSIGNED NULL
    COMMENT 'HTTP status the endpoint last answered; NULL: none yet, or no answer (see last_error)',
  last_error VARCHAR(255) NULL
    COMMENT 'Why the last attempt failed (the status, a timeout, a TLS or connection error); never the body',
  delivered_at DATETIME(3) NULL
    COMMENT 'When a 2xx acknowledged it (UTC)',
  created_at DATETIME(3) NOT NULL
    COMMENT 'When the dispatcher made it, or webhooks.replay made it again (UTC)',
  PRIMARY KEY (id),
  UNIQUE KEY billing_webhook_deliveries_once (endpoint_id, outbox_id),
  KEY billing_webhook_deliveries_due (endpoint_id, status, next_attempt_at),
  KEY billing_webhook_deliveries_user (endpoint_id, user_id, status, outbox_id),
  KEY billing_webhook_deliveries_outbox (outbox_id),
  CONSTRAINT billing_webhook_deliveries_outbox_fk FOREIGN KEY (outbox_id) REFERENCES billing_outbox (id) ON DELETE CASCADE,
  CONSTRAINT billing_webhook_deliveries_status_valid CHECK (status IN ('pending', 'delivered', 'failed')),
  CONSTRAINT billing_webhook_deliveries_delivered_when CHECK ((status = 'delivered') = (delivered_at IS NOT NULL))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='Outbound webhooks: one row per (endpoint, outbox row), its attempts and its fate (SPEC §16)';

-- For a DBA: "did the CRM get user X's downgrade?", one row per change and endpoint.
CREATE OR REPLACE SQL SECURITY INVOKER VIEW v_webhook_deliveries AS
SELECT
  o.id                                   AS outbox_id,
  o.user_id                              AS user_id,
  o.type                                 AS type,
  o.revision                             AS revision,
  o.created_at                           AS changed_at,
  d.endpoint_id                          AS endpoint_id,
  COALESCE(d.status, IF(o.fanned_out_at IS NULL, 'queued', 'not_subscribed')) AS status,
  d.attempts                             AS attempts,
  d.next_attempt_at                      AS next_attempt_at,
  d.last_status                          AS last_status,
  d.last_error                           AS last_error,
  d.delivered_at                         AS delivered_at
FROM billing_outbox o
LEFT JOIN billing_webhook_deliveries d ON d.outbox_id = o.id;
