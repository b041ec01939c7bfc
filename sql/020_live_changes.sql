-- 020_live_changes (SPEC §16, live changes for the app): billing-rpc's live publisher sends
-- each committed access.changed row to the user's nchan channel in nginx, in outbox order,
-- and notes here when and under which nchan message id. GET /billing/access/changes reads
-- the user's latest row to wait for what comes after it, and finds the revision a
-- reconnecting stream last saw by its message id (the SSE `id:`).
ALTER TABLE billing_outbox
  ADD COLUMN published_at DATETIME(3) NULL
    COMMENT 'access.changed: when the live publisher sent it to the user''s nchan channel, or passed it over as older than the channel keeps messages (UTC); NULL: not yet (the publisher''s queue; never while live.publisherSocket is unset)',
  ADD COLUMN live_message_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL
    COMMENT 'access.changed: the nchan message id it was published under (the SSE event id, e.g. 1796307148:0); NULL: not published',
  ADD KEY billing_outbox_live (type, published_at, id);
