"""Reconciliation with the App Store Server API (SPEC §11, issue 16), end to end.

A billing-rpc of the test's own (the stack's binary and configuration, with the
`apple.serverApi` settings pointing at a local HTTPS fake of Apple's API,
fake_appstore_api.py, through BILLING__… overrides) pulls subscriptions the stack learned
through signed notifications, and folds what Apple says into the same database the workers
serve. The fake checks every token (ES256 with the generated In-App Purchase key, Apple's
claims) and signs its answers with the App Store test CA the stack trusts.

Covered: a renewal whose notification never came is in the snapshot after one
`subscriptions.reconcile` and after one sweep; pulling twice changes nothing; Apple down
changes nothing and the next attempt succeeds; 429 honours Retry-After (within a call, and
beyond the wait a call may hold: the subscription backs off at least that long); the
history is paged by revision; a sandbox subscription is found after Production's "not
found"; a refund learned by pull ends access; `events.reproject` finds the pulled state
consistent."""
import json
import os
import signal
import subprocess
import tempfile
import unittest

from harness import appstore as A
from harness.billing import REPO, VAR_DIR, rpc_raw, sql, sql_string, wait_until
from harness.entitlements import (CA, DAY, HOUR, MINUTE, access, apple_notify, apple_renewal, apple_transaction,
                          apple_transaction_id, known_user, now_ms, iso)
from harness.fake_appstore_api import FakeAppStoreAPI

BIN_DIR = os.path.dirname(os.environ.get("BILLING_RPC_BINARY", os.path.join(REPO, ".build/release/billing-rpc")))
ACTOR = "e2e-reconcile@ops"


class ReconcilingDaemon:
    """The stack's billing-rpc binary and configuration on a private socket, pointed at the fake."""

    def __init__(self, fake, tmp, name, sweep_every=0, extra=None):
        self.socket = os.path.join(tmp, name + ".sock")
        self.log = os.path.join(tmp, name + ".log")
        env = dict(os.environ, BILLING__admin__socket=self.socket, BILLING__reconcile__sweepEverySeconds=str(sweep_every),
                   BILLING__reconcile__intervalSeconds="1", BILLING__reconcile__afterSeconds="3600",
                   BILLING__apple__serverApi__maxRetryAfterSeconds="2", BILLING__apple__serverApi__timeoutSeconds="5",
                   **fake.overrides(), **(extra or {}))
        self.proc = subprocess.Popen([os.path.join(BIN_DIR, "billing-rpc"), "--config", os.path.join(VAR_DIR, "billing.json"),
                                      "--log-file", self.log], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if not wait_until(lambda: os.path.exists(self.socket) or self.proc.poll() is not None, 15) or self.proc.poll() is not None:
            raise RuntimeError("billing-rpc did not start: " + self.proc.stdout.read().decode(errors="replace"))

    def call(self, method, params=None):
        message = {"jsonrpc": "2.0", "method": method, "id": 1}
        if params is not None:
            message["params"] = params
        return json.loads(rpc_raw(json.dumps(message).encode(), sock_path=self.socket, timeout=60))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            self.proc.stdout.close()

    def stopped_log(self):
        """Stops the daemon (it must exit 0) and returns its whole log, for what must never be in it."""
        assert self.stop() == 0
        with open(self.log) as f:
            return f.read()


def inbox_count(original):
    return int(sql("SELECT COUNT(*) FROM billing_events WHERE subscription_id = " + sql_string(original))[0][0])


class Reconcile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.fake = FakeAppStoreAPI(cls.tmp.name, A.load_chain(CA, "a"))
        cls.daemon = ReconcilingDaemon(cls.fake, cls.tmp.name, "reconcile-rpc")

    @classmethod
    def tearDownClass(cls):
        try:
            assert cls.daemon.stop() == 0
        finally:
            cls.fake.stop()
            cls.tmp.cleanup()

    def setUp(self):
        self.fake.down = False
        self.fake.rate_limit(0, 0)
        self.fake.page_size = 20

    def tearDown(self):
        self.assertEqual(self.fake.auth_failures, [], "every token the client sent passed Apple's checks")

    def reconcile(self, **params):
        reply = self.daemon.call("subscriptions.reconcile", dict(params, actor=ACTOR))
        self.assertIn("result", reply, reply)
        return reply["result"]

    # ------------------------------------------------------------------ fixtures

    def lapsed_subscription(self, environment="Production", product="com.example.plus.monthly"):
        """A subscription set to renew whose period ended two hours ago; Apple renewed it
        but the DID_RENEW never came. Returns (user, original, renewed transaction)."""
        user = known_user()
        now = now_ms()
        original = apple_transaction_id()
        first = apple_transaction(user, original, original, purchase=now - 30 * DAY - 2 * HOUR, expires=now - 2 * HOUR,
                                  signed=now - 30 * DAY - 2 * HOUR, product=product, environment=environment)
        body, _ = apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=first, signed=now - 30 * DAY - 2 * HOUR,
                               renewal=apple_renewal(original, signed=now - 30 * DAY - 2 * HOUR, product=product,
                                                     environment=environment))
        self.assertEqual(body["status"], "applied", body)
        self.assertEqual(access(user)["tier"], "free", "the period is over and nothing said it renewed")
        renewed = apple_transaction(user, original, apple_transaction_id(), purchase=now - 2 * HOUR, expires=now + 30 * DAY - 2 * HOUR,
                                    signed=now - 2 * HOUR, product=product, environment=environment,
                                    originalPurchaseDate=now - 30 * DAY - 2 * HOUR)
        news = self.fake.subscription(original, environment)
        news.transactions = [first, renewed]
        news.renewal = apple_renewal(original, signed=now - 2 * HOUR, product=product, environment=environment)
        news.status = 1
        return user, original, renewed

    # ------------------------------------------------------------------ tests

    def test_a_lost_renewal_is_in_the_snapshot_after_one_reconcile_and_pulling_twice_changes_nothing(self):
        user, original, renewed = self.lapsed_subscription()
        result = self.reconcile(originalTransactionId=original)
        self.assertTrue(result["changed"], result)
        [one] = result["subscriptions"]
        self.assertEqual((one["outcome"], one["userId"], one["environment"]), ("corrected", user, "production"))
        self.assertEqual(one["after"]["expiresAt"], iso(renewed["expiresDate"]))
        got = access(user)
        self.assertEqual((got["tier"], got["phase"], got["store"]["expiresAt"]), ("plus", "active", iso(renewed["expiresDate"])))
        rows = inbox_count(original)

        again = self.reconcile(originalTransactionId=original)
        self.assertFalse(again["changed"], again)
        self.assertEqual(again["subscriptions"][0]["eventsAdded"], 0)
        self.assertEqual(inbox_count(original), rows, "the same state pulled twice is no new event")
        self.assertEqual(access(user)["revision"], got["revision"])
        audited = sql("SELECT COUNT(*) FROM audit_log WHERE action = 'subscriptions.reconcile' AND actor = "
                      + sql_string(ACTOR) + " AND target_user_id = " + sql_string(user))
        self.assertEqual(int(audited[0][0]), 2)
        consistent = self.daemon.call("events.reproject", {"userId": user, "actor": ACTOR})["result"]
        self.assertTrue(consistent["consistent"], consistent)
        claims = self.fake.claims[-1]
        self.assertEqual((claims["aud"], claims["bid"]), ("appstoreconnect-v1", A.BUNDLE_ID))
        self.assertLessEqual(claims["exp"] - claims["iat"], 3600)

    def test_by_user_pulls_every_subscription_bound_to_him(self):
        user, original, _ = self.lapsed_subscription()
        result = self.reconcile(userId=user)
        self.assertEqual([s["originalTransactionId"] for s in result["subscriptions"]], [original])
        self.assertEqual(access(user)["tier"], "plus")

    def test_apple_down_changes_nothing_and_the_next_attempt_succeeds(self):
        user, original, _ = self.lapsed_subscription()
        before = access(user)
        rows = inbox_count(original)
        self.fake.down = True
        calls = self.fake.count()
        result = self.reconcile(originalTransactionId=original)
        self.assertFalse(result["changed"])
        [one] = result["subscriptions"]
        self.assertEqual((one["outcome"], one["error"]["status"]), ("failed", 503), one)
        self.assertEqual(self.fake.count() - calls, 3, "apple.serverApi.maxAttempts attempts, backing off between them")
        self.assertEqual(inbox_count(original), rows)
        self.assertEqual(access(user)["revision"], before["revision"], "a failed pull never changes anyone")
        failures = sql("SELECT failures, last_outcome, last_error FROM billing_reconcile_state WHERE subscription_id = "
                       + sql_string(original))
        self.assertEqual(failures, [["1", "failed", "503/5000000"]])

        self.fake.down = False
        result = self.reconcile(originalTransactionId=original)
        self.assertTrue(result["changed"], result)
        self.assertEqual(access(user)["tier"], "plus")
        self.assertEqual(sql("SELECT failures, last_outcome FROM billing_reconcile_state WHERE subscription_id = "
                             + sql_string(original)), [["0", "corrected"]])

    def test_429_retry_after_is_honoured(self):
        user, original, _ = self.lapsed_subscription()
        self.fake.rate_limit(1, 1)
        early = self.fake.early
        result = self.reconcile(originalTransactionId=original)
        self.assertTrue(result["changed"], result)
        self.assertEqual(self.fake.early, early, "no request came back before Retry-After was over")
        self.assertEqual(access(user)["tier"], "plus")

    def test_429_longer_than_a_call_may_wait_backs_the_subscription_off(self):
        user, original, _ = self.lapsed_subscription()
        self.fake.rate_limit(1, 120)
        result = self.reconcile(originalTransactionId=original)
        [one] = result["subscriptions"]
        self.assertEqual((one["outcome"], one["error"]["retryAfterSeconds"]), ("rate_limited", 120), one)
        self.assertEqual(access(user)["tier"], "free")
        waits = sql("SELECT TIMESTAMPDIFF(SECOND, last_attempt_at, next_attempt_at) FROM billing_reconcile_state WHERE subscription_id = "
                    + sql_string(original))
        self.assertGreaterEqual(int(waits[0][0]), 119, "the sweeper leaves it alone at least Retry-After")
        self.fake.rate_limit(0, 0)

    def test_history_is_paged_by_revision(self):
        user, original, renewed = self.lapsed_subscription()
        news = self.fake.subscription(original)
        now = now_ms()
        # Two earlier periods before the lapsed one: four transactions, one per page.
        news.transactions = [dict(news.transactions[0], transactionId=apple_transaction_id(), purchaseDate=now - (90 - 30 * i) * DAY,
                                  expiresDate=now - (60 - 30 * i) * DAY) for i in range(2)] + news.transactions
        self.fake.page_size = 1
        result = self.reconcile(originalTransactionId=original)
        self.assertTrue(result["changed"], result)
        revisions = [q.get("revision") for e, p, q in self.fake.requests if p == "history" and e == "production"][-4:]
        self.assertEqual(revisions, [None, "1", "2", "3"])
        self.assertEqual(access(user)["store"]["expiresAt"], iso(renewed["expiresDate"]))

    def test_a_sandbox_subscription_is_asked_in_sandbox_after_production_says_not_found(self):
        user, original, _ = self.lapsed_subscription(environment="Sandbox")
        production, sandbox = self.fake.count("production"), self.fake.count("sandbox")
        result = self.reconcile(originalTransactionId=original)
        self.assertEqual(result["subscriptions"][0]["environment"], "sandbox", result)
        self.assertEqual(self.fake.count("production") - production, 1, "Production first, then Sandbox")
        self.assertEqual(self.fake.count("sandbox") - sandbox, 2)
        got = access(user)
        self.assertEqual((got["tier"], got["store"]["environment"]), ("plus", "sandbox"))

    def test_a_refund_learned_by_pull_ends_access(self):
        user = known_user()
        now = now_ms()
        original = apple_transaction_id()
        tx = apple_transaction(user, original, original, purchase=now - 3 * DAY, expires=now + 27 * DAY, signed=now - 3 * DAY)
        apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=tx, signed=now - 3 * DAY,
                     renewal=apple_renewal(original, signed=now - 3 * DAY))
        self.assertEqual(access(user)["tier"], "plus")
        news = self.fake.subscription(original)
        refunded_at = now - 10 * MINUTE
        news.transactions = [dict(tx, revocationDate=refunded_at, revocationReason=0)]
        news.renewal = apple_renewal(original, signed=refunded_at, autoRenewStatus=0)
        news.status = 5
        result = self.reconcile(originalTransactionId=original)
        self.assertTrue(result["changed"], result)
        got = access(user)
        self.assertEqual((got["tier"], got["phase"]), ("free", "revoked"))
        self.assertEqual(int(sql("SELECT COUNT(*) FROM billing_events WHERE subscription_id = " + sql_string(original)
                                 + " AND kind = 'refund' AND provider_event_id = " + sql_string(f"{original}:revoked:{refunded_at}"))[0][0]), 1)
        again = self.reconcile(originalTransactionId=original)
        self.assertFalse(again["changed"], again)
        consistent = self.daemon.call("events.reproject", {"userId": user, "actor": ACTOR})["result"]
        self.assertTrue(consistent["consistent"], consistent)

    def test_billing_admin_calls_it_and_prints_what_changed(self):
        user, original, renewed = self.lapsed_subscription()
        run = subprocess.run([os.path.join(REPO, "scripts", "billing-admin"), "--socket", self.daemon.socket, "subscriptions.reconcile",
                              "--originalTransactionId", original, "--actor", ACTOR], capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("changed: yes", run.stdout)
        self.assertIn(original, run.stdout)
        self.assertIn("corrected", run.stdout)
        self.assertIn("-> active", run.stdout)
        status = subprocess.run([os.path.join(REPO, "scripts", "billing-admin"), "--socket", self.daemon.socket,
                                 "subscriptions.reconcileStatus"], capture_output=True, text=True, timeout=60)
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertIn("billing_reconcile_pulls_total", status.stdout)
        self.assertEqual(access(user)["tier"], "plus")

    def test_an_answer_not_signed_by_a_trusted_root_is_refused_whole(self):
        user, original, _ = self.lapsed_subscription()
        before, rows = access(user), inbox_count(original)
        trusted = self.fake.chain
        self.fake.chain = A.load_chain(CA, "b")  # well formed, Apple-shaped, but no configured root anchors it
        try:
            result = self.reconcile(originalTransactionId=original)
        finally:
            self.fake.chain = trusted
        [one] = result["subscriptions"]
        self.assertEqual((one["outcome"], one["error"]["kind"]), ("failed", "verification"), one)
        self.assertEqual((inbox_count(original), access(user)["revision"]), (rows, before["revision"]))
        self.assertEqual(sql("SELECT last_error FROM billing_reconcile_state WHERE subscription_id = " + sql_string(original)),
                         [["verification:untrusted_chain"]])

    def test_unknown_subscription_and_bad_params(self):
        reply = self.daemon.call("subscriptions.reconcile", {"originalTransactionId": "1", "actor": ACTOR})
        self.assertEqual(reply["error"]["code"], 1001, reply)
        reply = self.daemon.call("subscriptions.reconcile", {"actor": ACTOR})
        self.assertEqual(reply["error"]["code"], -32602, reply)

    def test_apple_down_during_a_sweep_changes_nothing_and_a_later_sweep_succeeds(self):
        user, original, renewed = self.lapsed_subscription()
        before = access(user)
        self.fake.down = True
        sweeper = ReconcilingDaemon(self.fake, self.tmp.name, "down-sweeper-rpc", sweep_every=1,
                                    extra={"BILLING__apple__serverApi__maxAttempts": "1"})
        try:
            failed = lambda: sql("SELECT failures FROM billing_reconcile_state WHERE subscription_id = " + sql_string(original))
            self.assertTrue(wait_until(lambda: failed() and int(failed()[0][0]) >= 1, 30), "a sweep tried and failed")
            self.assertEqual(access(user)["revision"], before["revision"], "a failed pull never changes anyone")
            self.fake.down = False
            self.assertTrue(wait_until(lambda: access(user)["tier"] == "plus", 30), "a later sweep, after the backoff, succeeds")
            self.assertEqual(access(user)["store"]["expiresAt"], iso(renewed["expiresDate"]))
        finally:
            self.fake.down = False
            self.assertEqual(sweeper.stop(), 0)

    def test_one_sweep_heals_a_lost_renewal(self):
        """The sweeper of a billing-rpc started with reconcile.sweepEverySeconds finds the
        lapsed subscription by itself."""
        user, original, renewed = self.lapsed_subscription()
        sweeper = ReconcilingDaemon(self.fake, self.tmp.name, "sweeper-rpc", sweep_every=1)
        try:
            self.assertTrue(wait_until(lambda: access(user)["tier"] == "plus", 30), "the sweep pulled it")
            self.assertEqual(access(user)["store"]["expiresAt"], iso(renewed["expiresDate"]))
            status = sweeper.call("subscriptions.reconcileStatus")["result"]
            self.assertTrue(status["configured"])
            names = {m["name"] for m in status["metrics"]}
            self.assertLessEqual({"billing_reconcile_pulls_total", "billing_reconcile_corrected_total",
                                  "billing_reconcile_sweep_lag_seconds"}, names)
            self.assertIn("# TYPE billing_reconcile_pulls_total counter", status["prometheus"])
            self.assertRegex(status["prometheus"], r'billing_reconcile_pulls_total\{outcome="corrected"\} [1-9]')
        finally:
            self.assertEqual(sweeper.stop(), 0)
        state = sql("SELECT last_outcome FROM billing_reconcile_state WHERE subscription_id = " + sql_string(original))
        self.assertEqual(state, [["corrected"]])


if __name__ == "__main__":
    unittest.main()
