-- 016_quarantine_notification (SPEC §19): one quarantine row per App Store notification.

-- One quarantine row per App Store notification, whatever the spelling of its JWS: the
-- verified notificationUUID is a unique key beside the body hash (NULL for rows kept
-- before this migration and for deliveries that name none).
ALTER TABLE billing_quarantine
  MODIFY provider_event_id VARCHAR(191) NULL
    COMMENT 'The verified notificationUUID of a quarantined App Store notification: one row per notification (SPEC §19)',
  ADD UNIQUE KEY billing_quarantine_notification (provider, provider_event_id);
