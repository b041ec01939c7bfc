"""Pulling RevenueCat (SPEC §15, issue 30), end to end.

A billing-rpc of the test's own (the stack's binary and configuration, with `revenuecat.apiUrl`,
`caFile` and `apiKeyFile` pointing at fake_revenuecat_api.py, a local HTTPS fake serving
RevenueCat's documented CustomerInfo shape) pulls subscribers the stack learned through
RevenueCat webhooks, into the same database the workers serve.

Covered: a subscriber whose RENEWAL webhook never came is healed by `subscriptions.reconcile`
and, with the sweeper on, without asking; pulling twice adds nothing; an API that answers 500,
times out or rate-limits changes nothing (429 honours Retry-After); a refund seen by pulling
ends access; a later webhook applies over a pulled state and an older one cannot undo it;
`events.reproject` finds the pulled state consistent; the secret key is in no log."""
import os
import tempfile
import time
import unittest

from harness.billing import sql, sql_string, wait_until
from harness.entitlements import DAY, HOUR, MINUTE, access, known_user, now_ms, rc_deliver, rc_event, rc_subscription_id
from harness.fake_revenuecat_api import FakeRevenueCatAPI, entitlement, subscription
from test_reconcile import ReconcilingDaemon

ACTOR = "e2e-revenuecat-pull@ops"
PRODUCT = "app.plus.monthly"


def inbox_count(user, provider="revenuecat_pull"):
    return int(sql("SELECT COUNT(*) FROM billing_events e JOIN billing_event_parties p ON p.event_id = e.id "
                   "WHERE p.user_id = " + sql_string(user) + " AND e.provider = " + sql_string(provider))[0][0])


class RevenueCatPull(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.fake = FakeRevenueCatAPI(cls.tmp.name)
        cls.daemon = ReconcilingDaemon(cls.fake, cls.tmp.name, "revenuecat-pull-rpc",
                                       extra={"BILLING__revenuecat__maxRetryAfterSeconds": "2",
                                              "BILLING__revenuecat__timeoutSeconds": "2",
                                              "BILLING__revenuecat__maxAttempts": "2"})

    @classmethod
    def tearDownClass(cls):
        try:
            log = cls.daemon.stopped_log()
            assert cls.fake.api_key not in log, "the secret key is never logged"
        finally:
            cls.fake.stop()
            cls.tmp.cleanup()

    def setUp(self):
        self.fake.down = False
        self.fake.hang_seconds = 0
        self.fake.request_date_ms = None
        self.fake.rate_limit(0, 0)

    def tearDown(self):
        self.assertEqual(self.fake.auth_failures, [], "every request carried the secret key as a bearer token")

    def reconcile(self, user):
        reply = self.daemon.call("subscriptions.reconcile", {"userId": user, "actor": ACTOR})
        self.assertIn("result", reply, reply)
        return reply["result"]

    def lapsed_subscriber(self):
        """A RevenueCat subscriber set to renew whose period ended two hours ago; RevenueCat
        renewed it but the RENEWAL webhook never came. Returns (user, subscription id, new expiry)."""
        user, sub, now = known_user(), rc_subscription_id(), now_ms()
        rc_deliver(rc_event("INITIAL_PURCHASE", user, at=now - 30 * DAY - 2 * HOUR, sub=sub, expires=now - 2 * HOUR))
        self.assertEqual(access(user)["tier"], "free", "the period is over and nothing said it renewed")
        expires = (now + 30 * DAY - 2 * HOUR) // 1000 * 1000
        self.fake.set_subscriber(user, subscription(PRODUCT, now - 2 * HOUR, expires, original_purchase_ms=now - 30 * DAY - 2 * HOUR,
                                                    price=(4.99, "EUR")),
                                 entitlement("plus", PRODUCT, now - 2 * HOUR, expires))
        return user, sub, expires

    def test_a_lost_renewal_is_healed_by_reconcile_and_pulling_twice_adds_nothing(self):
        user, sub, expires = self.lapsed_subscriber()
        result = self.reconcile(user)
        self.assertTrue(result["changed"], result)
        rc = result["revenuecat"]
        self.assertEqual((rc["outcome"], rc["eventsAdded"]), ("corrected", 1), rc)
        self.assertEqual(result["providers"]["revenuecat"], rc)
        got = access(user)
        self.assertEqual((got["tier"], got["phase"], got["store"]["willRenew"]), ("plus", "active", True), got)
        self.assertEqual(got["store"]["expiresAt"][:19], time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(expires / 1000)))
        rows = sql("SELECT DISTINCT s.subscription_id FROM billing_subscriptions s WHERE s.user_id = " + sql_string(user))
        self.assertEqual(rows, [[sub]], "the pulled state speaks for the webhooks' subscription (same product and store)")
        before = inbox_count(user)

        again = self.reconcile(user)
        self.assertFalse(again["changed"], again)
        self.assertEqual(again["revenuecat"]["eventsAdded"], 0)
        self.assertEqual(inbox_count(user), before, "the same state pulled twice adds nothing")
        self.assertEqual(access(user)["revision"], got["revision"])
        consistent = self.daemon.call("events.reproject", {"userId": user, "actor": ACTOR})["result"]
        self.assertEqual(consistent["differences"], [], consistent)
        audited = sql("SELECT COUNT(*) FROM audit_log WHERE action = 'subscriptions.reconcile' AND target_user_id = " + sql_string(user))
        self.assertEqual(int(audited[0][0]), 2)

    def test_an_api_that_fails_times_out_or_rate_limits_changes_nothing(self):
        user, _, _ = self.lapsed_subscriber()
        before = access(user)
        for name, arrange in (("500", lambda: setattr(self.fake, "down", True)),
                              ("timeout", lambda: setattr(self.fake, "hang_seconds", 4)),
                              ("429 beyond the wait a call holds", lambda: self.fake.rate_limit(5, 30))):
            with self.subTest(case=name):
                self.setUp()
                arrange()
                result = self.reconcile(user)
                rc = result["revenuecat"]
                self.assertFalse(result["changed"], result)
                self.assertIn(rc["outcome"], ("failed", "rate_limited"), rc)
                self.assertEqual(inbox_count(user), 0, "an API error adds no row")
                got = access(user)
                self.assertEqual((got["tier"], got["revision"]), (before["tier"], before["revision"]), "and downgrades no one")
        self.setUp()
        state = sql("SELECT last_outcome, failures, TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(3), next_attempt_at) FROM billing_reconcile_state "
                    "WHERE provider = 'revenuecat' AND subscription_id = " + sql_string(user))
        self.assertEqual(state[0][:2], ["rate_limited", "3"], state)
        self.assertGreaterEqual(int(state[0][2]), 25, "the subscriber waits at least Retry-After")
        self.assertEqual(self.reconcile(user)["revenuecat"]["outcome"], "corrected", "the next attempt heals")

    def test_a_short_rate_limit_is_waited_out_within_the_call(self):
        user, _, _ = self.lapsed_subscriber()
        self.fake.rate_limit(1, 1)
        result = self.reconcile(user)
        self.assertEqual(result["revenuecat"]["outcome"], "corrected", result)
        self.assertEqual(self.fake.early, 0, "no request came back before Retry-After")

    def test_a_refund_seen_by_pulling_ends_access(self):
        user, sub, now = known_user(), rc_subscription_id(), now_ms()
        rc_deliver(rc_event("INITIAL_PURCHASE", user, at=now - 2 * DAY, sub=sub, expires=now + 28 * DAY))
        self.assertEqual(access(user)["tier"], "plus")
        self.fake.set_subscriber(user, subscription(PRODUCT, now - 2 * DAY, now + 28 * DAY, refunded_ms=now - HOUR),
                                 entitlement("plus", PRODUCT, now - 2 * DAY, now + 28 * DAY))
        self.assertTrue(self.reconcile(user)["changed"])
        got = access(user)
        self.assertEqual((got["tier"], got["phase"]), ("free", "revoked"), got)
        self.assertEqual(self.reconcile(user)["revenuecat"]["eventsAdded"], 0, "a refund pulled twice is one event")

    def test_an_older_webhook_cannot_undo_a_pulled_state_and_a_later_one_applies(self):
        user, sub, expires = self.lapsed_subscriber()
        now = now_ms()
        self.fake.request_date_ms = now - 10 * MINUTE
        self.reconcile(user)
        rc_deliver(rc_event("EXPIRATION", user, at=now - 3 * HOUR, sub=sub, expires=now - 2 * HOUR))
        self.assertEqual(access(user)["phase"], "active", "an EXPIRATION older than the pull arrives late: the pull stands")
        rc_deliver(rc_event("CANCELLATION", user, at=now - MINUTE, sub=sub, purchased=now - 2 * HOUR, expires=expires,
                            cancel_reason="UNSUBSCRIBE"))
        got = access(user)
        self.assertEqual((got["tier"], got["phase"], got["store"]["willRenew"]), ("plus", "canceled", False), got)
        consistent = self.daemon.call("events.reproject", {"userId": user, "actor": ACTOR})["result"]
        self.assertEqual(consistent["differences"], [], consistent)

    def test_the_sweeper_heals_a_lapsed_subscriber_without_asking(self):
        user, _, _ = self.lapsed_subscriber()
        # Its period ended two hours ago while set to renew: past reconcile.afterSeconds (3600).
        sweeper = ReconcilingDaemon(self.fake, self.tmp.name, "revenuecat-sweeper-rpc", sweep_every=1)
        try:
            self.assertTrue(wait_until(lambda: access(user)["tier"] == "plus", 30), "the sweeper pulled the lapsed subscriber")
            status = sweeper.call("subscriptions.reconcileStatus")["result"]
            self.assertTrue(status["providers"]["revenuecat"], status)
            self.assertGreaterEqual(status["scheduleByProvider"]["revenuecat"]["tracked"], 1, status)
            self.assertRegex(status["prometheus"], r'billing_reconcile_provider_pulls_total\{provider="revenuecat",outcome="corrected"\} [1-9]')
        finally:
            self.assertEqual(sweeper.stop(), 0)


if __name__ == "__main__":
    unittest.main()
