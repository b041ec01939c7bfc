"""Outbound webhooks (SPEC §16, issue 34), end to end.

A billing-rpc of the test's own (the stack's binary and configuration, with
`webhooks.endpoints` pointing at local HTTPS receivers, fake_webhook_receiver.py) dispatches
the outbox the stack's workers and admin daemon write; each receiver verifies every delivery
with the Standard Webhooks library, as a team's service would.

Covered: a purchase reaches an endpoint as `event.applied` then `access.changed`, signed,
within seconds; 20 successive changes of one user arrive in revision order, each revision
once; a receiver failing its first attempts gets the delivery again within seconds while
another endpoint is served meanwhile; a 429 is retried and an answer's body (not JSON, over
64 KiB) is not read beyond its status; a hanging endpoint holds up neither ingestion nor the
others; `webhooks.replay` re-sends signed afresh (one delivery, or from an outbox id) and is
audited; `webhooks.list` and `webhooks.deliveries` tell the state without the secrets; the
secrets are in no log; an erased user's outbox rows go with him."""
import json
import os
import tempfile
import time
import unittest
import uuid

from harness.billing import request, rpc, sql, sql_string, wait_until
from harness.entitlements import DAY, access, known_user, now_ms, rc_deliver, rc_event, rc_subscription_id
from harness.fake_webhook_receiver import FakeWebhookReceiver, tls_files
from test_ops import sample
from test_reconcile import ReconcilingDaemon

ACTOR = "e2e-webhooks@ops"


class Settings:
    """What ReconcilingDaemon asks of a fake: the daemon's environment overrides."""

    def __init__(self, overrides):
        self._overrides = overrides

    def overrides(self):
        return self._overrides


def grant(user, key):
    reply = rpc("grants.create", {"userId": user, "tier": "pro", "reason": "e2e webhooks", "idempotencyKey": key, "actor": ACTOR,
                                  "expiresAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 86_400))})
    assert "result" in reply, reply
    return reply["result"]


class Webhooks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        tls = tls_files(cls.tmp.name)
        cls.main = FakeWebhookReceiver(cls.tmp.name, "main", tls)
        cls.flaky = FakeWebhookReceiver(cls.tmp.name, "flaky", tls)
        cls.slow = FakeWebhookReceiver(cls.tmp.name, "slow", tls)
        cls.slow.hang_seconds = 30
        endpoints = [cls.main.endpoint(), cls.flaky.endpoint(["access.changed"]), cls.slow.endpoint(["access.changed"])]
        # What earlier tests left queued is not this test's: only changes from now on are sent.
        sql("UPDATE billing_outbox SET fanned_out_at = UTC_TIMESTAMP(3) WHERE fanned_out_at IS NULL")
        cls.daemon = ReconcilingDaemon(Settings({
            "BILLING__webhooks__endpoints": json.dumps(endpoints), "BILLING__webhooks__caFile": tls[0],
            "BILLING__webhooks__timeoutSeconds": "2", "BILLING__webhooks__connectTimeoutSeconds": "2"}),
            cls.tmp.name, "webhooks-rpc")

    @classmethod
    def tearDownClass(cls):
        try:
            assert cls.daemon.stop() == 0
            with open(cls.daemon.log) as f:
                log = f.read()
            for receiver in (cls.main, cls.flaky, cls.slow):
                assert receiver.secret not in log, "a secret is never logged"
                assert receiver.secret[len("whsec_"):] not in log
        finally:
            for receiver in (cls.main, cls.flaky, cls.slow):
                receiver.stop()
            cls.tmp.cleanup()

    def tearDown(self):
        for receiver in (self.main, self.flaky, self.slow):
            self.assertEqual(receiver.unverified, [], f"every delivery to {receiver.name} verified")

    def call(self, method, params=None):
        reply = self.daemon.call(method, params)
        self.assertIn("result", reply, reply)
        return reply["result"]

    def purchase(self, user, at=None):
        at = at or now_ms()
        rc_deliver(rc_event("INITIAL_PURCHASE", user, at=at, sub=rc_subscription_id(), expires=at + 30 * DAY))

    def test_a_purchase_reaches_the_endpoint_signed_as_the_event_then_the_access(self):
        user = known_user()
        self.purchase(user)
        answered = time.time()
        self.assertTrue(wait_until(lambda: self.main.of(user), 10), "access.changed within seconds")
        self.assertTrue(wait_until(lambda: self.main.of(user, "event.applied"), 10))
        [changed], [applied] = self.main.of(user), self.main.of(user, "event.applied")
        snapshot = access(user)
        data = changed["data"]
        self.assertEqual((data["userId"], data["tier"], data["phase"], data["source"], data["revision"]),
                         (user, "plus", "active", "store", snapshot["revision"]), data)
        self.assertEqual(data["sources"], snapshot["sources"])
        self.assertEqual(data["store"]["productId"], "app.plus.monthly")
        self.assertEqual(data["expiresAt"], snapshot["store"]["expiresAt"])
        self.assertIn("pendingChange", data)
        self.assertEqual((applied["data"]["kind"], applied["data"]["type"], applied["data"]["provider"]),
                         ("purchase", "INITIAL_PURCHASE", "revenuecat"), applied)
        self.assertLess(int(applied["id"]), int(changed["id"]), "the event is told before the change it made")
        self.assertLessEqual(abs(changed["timestamp"] - time.time()), 60, "webhook-timestamp is the attempt's, in seconds")
        outbox = sql("SELECT id, revision FROM billing_outbox WHERE type = 'access.changed' AND user_id = " + sql_string(user))
        self.assertEqual(outbox, [[changed["id"], str(snapshot["revision"])]], "webhook-id is the outbox row's id")
        print(f"\n    access.changed reached the endpoint {changed['at'] - answered:.3f} s after the webhook's 2xx", end=" ")
        self.assertEqual(self.flaky.of(user, "event.applied"), [], "an endpoint gets only the types it subscribed to")

    def test_twenty_changes_of_one_user_arrive_in_revision_order(self):
        user = known_user()
        self.purchase(user)
        for i in range(19):
            grant(user, f"order-{i}")
        final = access(user)["revision"]
        self.assertTrue(wait_until(lambda: len(self.main.of(user)) >= 20, 20), len(self.main.of(user)))
        revisions = [r["data"]["revision"] for r in self.main.of(user)]
        self.assertEqual(revisions, sorted(set(revisions)), "in revision order, each once")
        self.assertEqual(len(revisions), 20)
        self.assertEqual(revisions[-1], final)
        self.assertEqual(self.main.of(user)[-1]["data"]["tier"], "pro")

    def test_a_failing_receiver_gets_it_again_within_seconds_while_another_is_served(self):
        user = known_user()
        self.flaky.fail_next(3, 503)
        self.purchase(user)
        self.assertTrue(wait_until(lambda: self.main.of(user), 10))
        served = self.main.of(user)[0]["at"]
        self.assertTrue(wait_until(lambda: self.flaky.of(user), 30), "the failing endpoint gets it once it answers")
        [delivered] = self.flaky.of(user)
        attempts = self.flaky.attempts_of(user)
        self.assertEqual(len(attempts), 4, "three refusals, then the delivery")
        self.assertLess(served, attempts[-1]["at"], "the healthy endpoint was not kept waiting")
        self.assertLessEqual(attempts[-1]["at"] - attempts[0]["at"], 20, "retried within seconds at first")
        self.assertEqual({a["headers"]["webhook-id"] for a in attempts}, {delivered["id"]}, "one webhook-id for every attempt")
        self.assertEqual(len({a["headers"]["webhook-signature"] for a in attempts}) >= 1, True)
        def delivered_row():
            page = self.call("webhooks.deliveries", {"endpointId": "flaky", "status": "delivered", "limit": 500})
            return [d for d in page["deliveries"] if d["userId"] == user]
        self.assertTrue(wait_until(delivered_row, 10), "marked once answered")
        [row] = delivered_row()
        self.assertEqual((row["attempts"], row["lastStatus"], row["status"], str(row["outboxId"])), (4, 200, "delivered", delivered["id"]))

    def test_a_429_is_retried_and_an_answers_body_is_not_read_beyond_its_status(self):
        user = known_user()
        self.flaky.fail_next(1, 429)
        # Not JSON, and far beyond the 64 KiB read of an answer: a 2xx is a delivery all the same.
        self.flaky.answer_body = b"<html>" + b"x" * (1 << 20)
        self.addCleanup(setattr, self.flaky, "answer_body", b'{"ok": true}')
        self.purchase(user)

        def row(status):
            page = self.call("webhooks.deliveries", {"endpointId": "flaky", "status": status, "limit": 500})
            return [d for d in page["deliveries"] if d["userId"] == user]
        self.assertTrue(wait_until(lambda: self.flaky.of(user), 30), "delivered after the 429")
        self.assertTrue(wait_until(lambda: row("delivered"), 10))
        [delivered] = row("delivered")
        self.assertEqual((delivered["attempts"], delivered["lastStatus"]), (2, 200))
        self.assertEqual([a["headers"]["webhook-id"] for a in self.flaky.attempts_of(user)], [str(delivered["outboxId"])] * 2)

    def test_a_hanging_endpoint_holds_up_neither_ingestion_nor_the_others(self):
        users = [known_user() for _ in range(20)]
        started = time.time()
        for user in users:
            self.purchase(user)
        ingested = time.time() - started
        self.assertTrue(wait_until(lambda: all(self.main.of(u) for u in users), 20), "the healthy endpoint got every change")
        reached = time.time() - started
        self.assertLessEqual(len([a for u in users for a in self.slow.attempts_of(u)]), 10,
                             "the hanging endpoint is still on its first few attempts")
        print(f"\n    20 purchases ingested in {ingested:.2f} s and delivered to the healthy endpoint in {reached:.2f} s "
              f"with one endpoint hanging every attempt", end=" ")
        status = {e["id"]: e for e in self.call("webhooks.list")["endpoints"]}
        self.assertGreater(status["slow"]["deliveries"]["pending"], 0)

    def test_replay_sends_again_signed_afresh_and_is_audited(self):
        user = known_user()
        self.purchase(user)
        self.assertTrue(wait_until(lambda: self.main.of(user), 10))
        [first] = self.main.of(user)
        def delivered():
            page = self.call("webhooks.deliveries", {"endpointId": "main", "status": "delivered", "limit": 500})
            return [d for d in page["deliveries"] if d["userId"] == user and d["type"] == "access.changed"]
        self.assertTrue(wait_until(delivered, 10))
        [delivery] = delivered()
        time.sleep(1.1)
        result = self.call("webhooks.replay", {"endpointId": "main", "deliveryId": delivery["id"], "actor": ACTOR})
        self.assertEqual(result["replayed"], 1)
        self.assertTrue(wait_until(lambda: len(self.main.of(user)) == 2, 10))
        again = self.main.of(user)[1]
        self.assertEqual((again["id"], again["data"]), (first["id"], first["data"]), "the same change, the same webhook-id")
        self.assertGreater(again["timestamp"], first["timestamp"], "signed afresh, for now")
        self.assertNotEqual(again["headers"]["webhook-signature"], first["headers"]["webhook-signature"])

        result = self.call("webhooks.replay", {"endpointId": "main", "fromId": int(first["id"]), "actor": ACTOR})
        self.assertGreaterEqual(result["replayed"], 1)
        self.assertTrue(wait_until(lambda: len(self.main.of(user)) == 3, 10))
        audited = sql("SELECT COUNT(*) FROM audit_log WHERE action = 'webhooks.replay' AND actor = " + sql_string(ACTOR))
        self.assertGreaterEqual(int(audited[0][0]), 2)

    def test_the_calls_tell_the_state_and_refuse_what_is_wrong(self):
        listed = self.call("webhooks.list")
        self.assertEqual([e["id"] for e in listed["endpoints"]], ["main", "flaky", "slow"])
        self.assertEqual(listed["endpoints"][1]["events"], ["access.changed"])
        text = json.dumps(listed)
        for receiver in (self.main, self.flaky, self.slow):
            self.assertNotIn(receiver.secret, text)
        self.assertIn("queued", listed["outbox"])
        for method, params, code in [
            ("webhooks.deliveries", {"endpointId": "nope"}, 1001),
            ("webhooks.deliveries", {"endpointId": "main", "status": "lost"}, -32602),
            ("webhooks.replay", {"endpointId": "main", "actor": ACTOR}, -32602),
            ("webhooks.replay", {"endpointId": "main", "fromId": 1, "deliveryId": 1, "actor": ACTOR}, -32602),
            ("webhooks.replay", {"endpointId": "main", "deliveryId": 1, "actor": ""}, -32602),
            ("webhooks.replay", {"endpointId": "main", "deliveryId": 2**53, "actor": ACTOR}, 1001),
        ]:
            with self.subTest(method=method, params=params):
                reply = self.daemon.call(method, params)
                self.assertIn("error", reply, reply)
                self.assertEqual(reply["error"]["code"], code, reply)

    def test_the_metrics_tell_each_endpoints_lag_retries_attempts_and_failures(self):
        user = known_user()
        self.purchase(user)
        queued = "SELECT COUNT(*) FROM billing_webhook_deliveries WHERE endpoint_id = 'slow' AND user_id = " + sql_string(user)
        self.assertTrue(wait_until(lambda: sql(queued) == [["1"]], 10), "the change is queued for the hanging endpoint")
        time.sleep(1.5)
        attempts = ("SELECT COALESCE(SUM(attempts), 0) FROM billing_webhook_deliveries WHERE endpoint_id = 'slow' "
                    "AND status IN ('pending', 'failed')")
        before = int(sql(attempts)[0][0])
        text = request("GET", "/metrics").body.decode()
        after = int(sql(attempts)[0][0])
        self.assertTrue(before <= sample(text, "billing_webhook_attempts", endpoint="slow") <= after,
                        (before, sample(text, "billing_webhook_attempts", endpoint="slow"), after))
        self.assertGreaterEqual(sample(text, "billing_webhook_lag_seconds", endpoint="slow"), 1, "its oldest pending delivery waits")
        self.assertIsNotNone(sample(text, "billing_webhook_retrying", endpoint="slow"))
        self.assertIsNotNone(sample(text, "billing_webhook_failed", endpoint="slow"))
        self.assertIsNotNone(sample(text, "billing_outbox_queued_seconds"))

    def test_an_erased_user_leaves_no_outbox_row(self):
        user = known_user()
        self.purchase(user)
        self.assertTrue(wait_until(lambda: self.main.of(user), 10))
        reply = rpc("users.delete", {"userId": user, "actor": ACTOR, "reason": "e2e erasure"})
        self.assertIn("result", reply, reply)
        self.assertEqual(sql("SELECT COUNT(*) FROM billing_outbox WHERE user_id = " + sql_string(user)), [["0"]])
        self.assertEqual(sql("SELECT COUNT(*) FROM billing_webhook_deliveries WHERE user_id = " + sql_string(user)), [["0"]])


class Outbox(unittest.TestCase):
    """The outbox itself, read by SQL: every change is one row, committed with it."""

    def test_each_change_is_one_row_and_an_unchanged_delivery_none(self):
        user = known_user()
        at = now_ms()
        sub = rc_subscription_id()
        event = rc_event("INITIAL_PURCHASE", user, at=at, sub=sub, expires=at + 30 * DAY)
        rc_deliver(event)
        rc_deliver(event)  # a duplicate: nothing changes, nothing is told
        grant(user, "one")
        rows = sql("SELECT type, revision FROM billing_outbox WHERE user_id = " + sql_string(user) + " ORDER BY id")
        self.assertEqual(rows, [["event.applied", "1"], ["access.changed", "1"], ["access.changed", "2"]], rows)
        [data] = sql("SELECT data FROM billing_outbox WHERE type = 'access.changed' AND revision = 2 AND user_id = " + sql_string(user))
        self.assertEqual(json.loads(data[0])["tier"], "pro")
        view = sql("SELECT type, status FROM v_webhook_deliveries WHERE user_id = " + sql_string(user) + " ORDER BY outbox_id")
        self.assertEqual(len(view), 3, view)


if __name__ == "__main__":
    unittest.main()
