"""Google Play through the inbox and fold (SPEC §18): a billing-fcgi of the test's own with
`google.*` pointed at fake_google.py (a local HTTPS fake of Google's token endpoint, of
androidpublisher v3 and of the push's OIDC keys, answering their real shapes), taking
Pub/Sub pushes of Real-Time Developer Notifications and the app's post. What must hold:

- each notification makes the server read the token's state from Play and fold it: purchase,
  renewal, grace (access), on hold (none), cancel (access to the expiry), expiry, pause;
  the snapshot says `platform: google_play`;
- an upgrade through `linkedPurchaseToken` ends the old token's subscription whatever order
  the two arrive in: never two subscriptions granting, never counted twice;
- a voided purchase takes the access back, and a later read still showing the voided period
  does not give it back;
- a one-time product (purchases.productsv2) grants what the catalog says (lifetime, a week's
  pass), through a push or the app's post, is acknowledged once, and a voided one ends;
- a redelivered push (same messageId) is one event and is not read from Play again;
- a push without a valid OIDC token (none, another audience, another email, an unverified
  one, another key, an expired one) is refused and stores nothing; nor does one for another
  package;
- while Play cannot be read, the push is answered 503 and nothing is downgraded;
- an unacknowledged purchase is acknowledged at Google exactly once, even under concurrent
  pushes;
- the app's post binds the token to the caller and answers his snapshot; another account's
  purchase is refused, unless `binding.policy restore_moves` and an explicit restore move it
  (each decision audited);
- billing-rpc's sweeper acknowledges what a failed call left unacknowledged, pulls a Play
  subscription whose renewal is overdue, and `subscriptions.reconcile` pulls a user's Play
  purchases; the doctor says when a purchase nears Google's three-day limit;
- `events.reproject` finds every folded Play user consistent; no purchase token, access token
  or key is in the worker's log or in an inbox payload."""
import concurrent.futures
import os
import shutil
import tempfile
import time
import unittest
import uuid

from cryptography.hazmat.primitives.asymmetric import rsa

from harness.billing import VAR_DIR, rpc, sql, sql_string, wait_until
from harness.entitlements import DAY, HOUR, MINUTE, known_user, new_user, now_ms
from harness.fake_google import FakeGoogle, product_v2, subscription_v2
from harness.tokens import token as id_token
from harness.worker import OwnWorker
from test_doctor import doctor
from test_reconcile import ReconcilingDaemon

PUSH = "/api/v1/billing/webhooks/google"
POST = "/api/v1/billing/google/purchases"
ACCESS = "/api/v1/billing/access"
ACTOR = "e2e-google-push@ops"
PURCHASED, RENEWED, CANCELED, ON_HOLD, IN_GRACE, RESTARTED, PAUSED, REVOKED, EXPIRED = 4, 2, 3, 5, 6, 7, 10, 12, 13


def purchase_token():
    return "gpt." + uuid.uuid4().hex + "-" + uuid.uuid4().hex + ".AO-J1Oz_" + uuid.uuid4().hex


class PlayPushes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        base = os.path.join(VAR_DIR, "tmp")
        cls.tmp = tempfile.mkdtemp(prefix="google-push-", dir=base if os.path.isdir(base) else None)
        cls.fake = FakeGoogle(cls.tmp)
        # Play's one-time products in the catalog: how long each grants its tier.
        catalog = {"lifetime_plus": {"tier": "plus", "cadence": "lifetime"},
                   "week_pass_pro": {"tier": "pro", "cadence": "non_renewing", "duration": "P1W"}}
        cls.worker = OwnWorker(cls.tmp, "google-worker", environment=cls.fake.push_overrides(),
                               configure=lambda c: c.setdefault("products", {}).update(catalog))
        cls.tokens = []

    @classmethod
    def tearDownClass(cls):
        try:
            cls.worker.stop()
            log = cls.worker.log()
            assert "ya29.fake-" not in log, "no access token is logged"
            assert cls.fake.private_key_marker not in log, "the service account's key is never logged"
            for token in cls.tokens:
                assert token not in log, "no purchase token is logged"
                stored = sql("SELECT COUNT(*) FROM billing_events WHERE LOCATE(" + sql_string(token) + ", payload) > 0")
                assert stored == [["0"]], "no purchase token is in an inbox payload"
        finally:
            cls.fake.stop()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.fake.down = False
        self.fake.hang_seconds = 0
        self.fake.canned.clear()

    # ------------------------------------------------------------------ helpers

    def purchase(self, user, state="SUBSCRIPTION_STATE_ACTIVE", expires=None, product="plus_monthly", base_plan="monthly-eur",
                 token=None, **extra):
        token = token or purchase_token()
        self.tokens.append(token)
        self.fake.purchases[token] = subscription_v2(product, base_plan, state, expires or now_ms() + 30 * DAY, user=user,
                                                     **extra)
        return token

    def set_state(self, token, state, expires=None, **extra):
        old = self.fake.purchases[token]
        item = old["lineItems"][0]
        self.fake.purchases[token] = subscription_v2(
            item["productId"], item["offerDetails"]["basePlanId"], state, expires or now_ms() + 30 * DAY,
            user=old.get("externalAccountIdentifiers", {}).get("obfuscatedExternalAccountId"),
            acknowledged=old["acknowledgementState"] == "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED", **extra)

    def push(self, token, notification_type, message_id=None, bearer=None, package=None):
        body = self.fake.push_body({"subscriptionNotification": {"version": "1.0", "notificationType": notification_type,
                                                                 "purchaseToken": token}},
                                   message_id=message_id, package=package)
        return self.worker.request("POST", PUSH, body=body,
                                   headers={"Authorization": "Bearer " + (bearer or self.fake.push_token())})

    def pushed(self, token, notification_type, **options):
        status, body = self.push(token, notification_type, **options)
        self.assertEqual(status, 200, body)
        return body

    def snapshot(self, user):
        status, body = self.worker.request("GET", ACCESS, headers={"Authorization": "Bearer " + id_token(user)})
        self.assertEqual(status, 200, body)
        return body

    def consistent(self, user):
        result = rpc("events.reproject", {"userId": user, "actor": ACTOR})["result"]
        self.assertTrue(result["consistent"], result)

    def reads_of(self, token):
        return sum(1 for method, path in self.fake.requests if method == "GET" and path.endswith(token))

    def inbox(self, message_id):
        return sql("SELECT status, kind, event_type, subscription_id FROM billing_events WHERE provider = 'google_play' "
                   "AND provider_event_id = " + sql_string("gpush:" + message_id))

    # ------------------------------------------------------------------ the lifecycle

    def test_a_purchase_folds_the_state_read_from_play_with_its_platform(self):
        user = known_user()
        token = self.purchase(user)
        message = str(uuid.uuid4().int % 10 ** 16)
        answer = self.pushed(token, PURCHASED, message_id=message)
        self.assertEqual(answer["status"], "applied", answer)
        got = self.snapshot(user)
        self.assertEqual((got["tier"], got["phase"], got["source"]), ("plus", "active", "store"), got)
        self.assertEqual(got["store"]["platform"], "google_play")
        self.assertEqual(got["store"]["productId"], "plus_monthly:monthly-eur")
        self.assertTrue(got["store"]["willRenew"])
        rows = self.inbox(message)
        self.assertEqual(rows[0][:3], ["applied", "subscriber_state", "SUBSCRIPTION_PURCHASED/ACTIVE"], rows)
        self.assertTrue(rows[0][3].startswith("gp:"), rows)
        self.consistent(user)

    def lifecycle(self, steps):
        """A purchase, then each (notification, state, expiry, extra) pushed after Play states it,
        the snapshot checked against (tier, phase) after each; the last snapshot."""
        user = known_user()
        token = self.purchase(user, expires=now_ms() + 2 * DAY)
        self.pushed(token, PURCHASED)
        got = None
        for notification, state, expires, extra, (tier, phase) in steps:
            self.set_state(token, state, expires, **extra)
            self.pushed(token, notification)
            got = self.snapshot(user)
            self.assertEqual((got["tier"], got["phase"]), (tier, phase), (state, got))
            if phase == "grace":
                self.assertIsNotNone(got["graceExpiresAt"], got)
            if phase == "canceled":
                self.assertFalse(got["store"]["willRenew"], got)
        self.consistent(user)
        return got

    RENEWAL = (RENEWED, "SUBSCRIPTION_STATE_ACTIVE", 32 * DAY, {}, ("plus", "active"))
    GRACE = (IN_GRACE, "SUBSCRIPTION_STATE_IN_GRACE_PERIOD", 3 * DAY, {}, ("plus", "grace"))
    HOLD = (ON_HOLD, "SUBSCRIPTION_STATE_ON_HOLD", -HOUR, {}, ("free", "billingRetry"))
    RECOVERED = (1, "SUBSCRIPTION_STATE_ACTIVE", 30 * DAY, {}, ("plus", "active"))
    CANCEL = (CANCELED, "SUBSCRIPTION_STATE_CANCELED", 30 * DAY, {"auto_renew": False, "canceled_by": "user"}, ("plus", "canceled"))
    RESTART = (RESTARTED, "SUBSCRIPTION_STATE_ACTIVE", 30 * DAY, {}, ("plus", "active"))
    PAUSE = (PAUSED, "SUBSCRIPTION_STATE_PAUSED", -MINUTE, {}, ("free", "expired"))
    EXPIRY = (EXPIRED, "SUBSCRIPTION_STATE_EXPIRED", -MINUTE, {"auto_renew": False}, ("free", "expired"))

    def steps(self, *steps):
        """The steps with their expiries made absolute (now + offset)."""
        return [(n, state, now_ms() + offset, extra, expected) for n, state, offset, extra, expected in steps]

    def test_a_renewal_extends_the_access_to_the_new_expiry(self):
        got = self.lifecycle(self.steps(self.RENEWAL))
        self.assertGreater(got["store"]["expiresAt"], time.strftime("%Y-%m-%dT", time.gmtime(time.time() + 31 * 86400)), got)

    def test_grace_keeps_the_access_until_the_grace_ends(self):
        self.lifecycle(self.steps(self.GRACE))

    def test_on_hold_takes_the_access_away_and_a_recovery_gives_it_back(self):
        self.lifecycle(self.steps(self.GRACE, self.HOLD, self.RECOVERED))

    def test_a_cancel_keeps_the_access_to_the_expiry_and_a_restart_renews_again(self):
        self.lifecycle(self.steps(self.CANCEL, self.RESTART))

    def test_an_expiry_ends_the_access(self):
        self.lifecycle(self.steps(self.CANCEL, self.EXPIRY))

    def test_a_pause_ends_the_access(self):
        self.lifecycle(self.steps(self.PAUSE))

    def test_the_whole_lifecycle_in_one_subscription(self):
        self.lifecycle(self.steps(self.RENEWAL, self.GRACE, self.HOLD, self.RECOVERED, self.CANCEL, self.RESTART, self.PAUSE,
                                  self.EXPIRY))

    def nok_gross_today(self):
        now = time.time()
        window = {"from": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 3600)),
                  "to": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 300)), "environment": "production"}
        counts = rpc("stats.subscriptions", window)["result"]["counts"]["current"]
        return counts["byCurrency"].get("NOK", {}).get("grossMilli", 0)

    def test_each_paid_period_is_one_sale_from_its_own_start_however_often_it_is_read(self):
        user = known_user()
        before = self.nok_gross_today()
        first, renewal = "GPA.7001-4242-0001-00001", "GPA.7001-4242-0001-00001..0"
        start, first_end, price = now_ms() - 40 * DAY, now_ms() - 10 * DAY, ("NOK", 49, 500_000_000)
        token = self.purchase(user, expires=first_end, start_ms=start, order=first, price=price)
        self.pushed(token, PURCHASED)
        self.pushed(token, RENEWED)   # the same period, read again
        # The renewal: a new order; then a failed charge of the next one (grace: still that order).
        self.set_state(token, "SUBSCRIPTION_STATE_ACTIVE", now_ms() + 20 * DAY, start_ms=start, order=renewal, price=price)
        self.pushed(token, RENEWED)
        self.set_state(token, "SUBSCRIPTION_STATE_IN_GRACE_PERIOD", now_ms() + 23 * DAY, start_ms=start, order=renewal, price=price)
        self.pushed(token, IN_GRACE)
        rows = sql("SELECT transaction_id, DATE_FORMAT(purchased_at, '%Y-%m-%d %H:%i:%s') FROM billing_events "
                   "WHERE subscription_id = " + sql_string(self.subscription_id(token)) + " ORDER BY id")
        day = lambda ms: time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms // 1000))
        self.assertEqual(rows, [[first, day(start)], [first, day(start)], [renewal, day(first_end)], [renewal, day(first_end)]],
                         "a period starts where the one before it ended, and every read of its order says so")
        self.assertEqual(self.nok_gross_today() - before, 2 * 49_500, "two paid periods, two sales")
        self.consistent(user)

    def test_a_free_trial_offer_phase_is_a_trial_and_its_conversion_a_paid_period(self):
        user = known_user()
        token = self.purchase(user, expires=now_ms() + 3 * DAY, offer_phase="freeTrial", offer_id="trial-3d")
        self.pushed(token, PURCHASED)
        got = self.snapshot(user)
        self.assertEqual((got["tier"], got["phase"]), ("plus", "trial"), got)
        self.assertIsNotNone(got["trial"], got)
        self.set_state(token, "SUBSCRIPTION_STATE_ACTIVE", now_ms() + 33 * DAY)
        self.pushed(token, RENEWED)
        got = self.snapshot(user)
        self.assertEqual((got["phase"], got["trial"]), ("active", None), got)
        self.consistent(user)

    def test_an_upgrade_through_linked_purchase_token_replaces_the_old_one_in_either_order(self):
        for order in ("old first", "new first"):
            with self.subTest(order=order):
                user = known_user()
                tag = uuid.uuid4().hex[:8]
                plus, pro = "plus_up_" + tag, "pro_up_" + tag
                old = self.purchase(user, product=plus, base_plan="monthly-eur")
                new = self.purchase(user, product=pro, base_plan="monthly-eur", linked_token=old)
                # Play still calls the old one active until its period ends (replacementCancellation).
                self.set_state(old, "SUBSCRIPTION_STATE_CANCELED", now_ms() + 20 * DAY, auto_renew=False,
                               canceled_by="replacement")
                pushes = [(old, CANCELED), (new, PURCHASED)] if order == "old first" else [(new, PURCHASED), (old, CANCELED)]
                for token, notification in pushes:
                    self.pushed(token, notification)
                got = self.snapshot(user)
                self.assertEqual((got["tier"], got["phase"]), ("pro", "active"), got)
                self.assertEqual(got["store"]["productId"], pro + ":monthly-eur")
                granting = [s for s in got["sources"] if s["kind"] == "store"]
                self.assertEqual(len(granting), 1, got)
                states = sql("SELECT s.phase FROM billing_subscriptions s WHERE s.user_id = " + sql_string(user)
                             + " ORDER BY s.phase")
                self.assertEqual([row[0] for row in states], ["active", "expired"], states)
                # Statistics count it once too: the replaced one is out from the new one's start.
                at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 1)) + ".000Z"
                time.sleep(1.1)
                snapshot = rpc("stats.snapshots", {"at": [at], "environment": "production"})["result"]["snapshots"][0]
                counted = {p["productId"]: p["active"] for p in snapshot["byProduct"]
                           if p["productId"] in (plus + ":monthly-eur", pro + ":monthly-eur")}
                self.assertEqual(counted, {pro + ":monthly-eur": 1}, snapshot)
                self.consistent(user)

    def test_a_voided_purchase_takes_the_access_back_and_a_stale_read_does_not_return_it(self):
        user = known_user()
        token = self.purchase(user)
        self.pushed(token, PURCHASED)
        self.assertEqual(self.snapshot(user)["tier"], "plus")
        body = self.fake.push_body({"voidedPurchaseNotification": {"purchaseToken": token, "orderId": "GPA.3312-4455-6677-88990",
                                                                   "productType": 1, "refundType": 1}})
        status, answer = self.worker.request("POST", PUSH, body=body,
                                             headers={"Authorization": "Bearer " + self.fake.push_token()})
        self.assertEqual((status, answer["status"]), (200, "applied"), answer)
        got = self.snapshot(user)
        self.assertEqual((got["tier"], got["phase"]), ("free", "revoked"), got)
        # Play has not expired it yet: a read still shows the same period, which stays voided.
        self.pushed(token, CANCELED)
        self.assertEqual(self.snapshot(user)["phase"], "revoked")
        self.consistent(user)

    def test_a_user_not_known_yet_gets_the_purchase_when_he_appears(self):
        user = new_user()
        token = self.purchase(user)
        self.assertEqual(self.pushed(token, PURCHASED)["status"], "unmatched")
        self.assertEqual(self.snapshot(user)["tier"], "plus", "his first request claimed the waiting state")
        self.consistent(user)

    def test_a_test_notification_is_stored_and_changes_nothing(self):
        message = str(uuid.uuid4().int % 10 ** 16)
        body = self.fake.push_body({"testNotification": {"version": "1.0"}}, message_id=message)
        status, answer = self.worker.request("POST", PUSH, body=body, headers={"Authorization": "Bearer " + self.fake.push_token()})
        self.assertEqual((status, answer["status"]), (200, "ignored"), answer)
        self.assertEqual(self.inbox(message)[0][:2], ["ignored", "test"])

    def one_time(self, user, product="lifetime_plus", **extra):
        token = purchase_token()
        self.tokens.append(token)
        self.fake.products[token] = product_v2(product, user=user, **extra)
        return token

    def push_one_time(self, token, notification_type=1):
        body = self.fake.push_body({"oneTimeProductNotification": {"version": "1.0", "notificationType": notification_type,
                                                                   "purchaseToken": token, "sku": "ignored"}})
        status, answer = self.worker.request("POST", PUSH, body=body, headers={"Authorization": "Bearer " + self.fake.push_token()})
        self.assertEqual(status, 200, answer)
        return answer

    def test_a_one_time_product_grants_what_the_catalog_says_and_is_acknowledged_once(self):
        user = known_user()
        token = self.one_time(user, acknowledged=False)
        self.assertEqual(self.push_one_time(token)["status"], "applied")
        got = self.snapshot(user)
        self.assertEqual((got["tier"], got["store"]["productId"], got["store"]["expiresAt"]), ("plus", "lifetime_plus", None), got)
        self.assertTrue(wait_until(lambda: self.fake.acknowledged.get(token) == 1, 10))
        self.push_one_time(token)   # read again, acknowledged now: not acknowledged twice
        self.assertEqual(self.fake.acknowledged.get(token), 1)
        # A week's pass, posted by the app: pro for seven days from its purchase.
        completed = now_ms() - DAY
        week = self.one_time(None, product="week_pass_pro", completed_ms=completed)
        status, got = self.worker.request("POST", POST, body={"productId": "week_pass_pro", "purchaseToken": week},
                                          headers={"Authorization": "Bearer " + id_token(user)})
        self.assertEqual((status, got["tier"], got["purchase"]["type"]), (200, "pro", "product"), got)
        self.assertEqual(got["store"]["expiresAt"], time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((completed + 7 * DAY) // 1000))
                         + ".%03dZ" % ((completed + 7 * DAY) % 1000), got)
        # Voided (refunded): the pass ends, the lifetime purchase stands.
        body = self.fake.push_body({"voidedPurchaseNotification": {"purchaseToken": week, "orderId": "GPA.3371-2203-9914-55021",
                                                                   "productType": 2, "refundType": 1}})
        status, answer = self.worker.request("POST", PUSH, body=body, headers={"Authorization": "Bearer " + self.fake.push_token()})
        self.assertEqual((status, answer["status"]), (200, "applied"), answer)
        got = self.snapshot(user)
        self.assertEqual((got["tier"], got["store"]["productId"]), ("plus", "lifetime_plus"), got)
        # Canceled at Play (a pending purchase canceled, or refunded): a read that says so ends it too.
        self.fake.products[token] = product_v2("lifetime_plus", "CANCELLED", user=user)
        self.push_one_time(token, 2)
        self.assertEqual(self.snapshot(user)["tier"], "free")
        self.consistent(user)

    def test_a_pending_one_time_purchase_grants_nothing_until_it_is_paid(self):
        user = known_user()
        token = self.one_time(user, acknowledged=False)
        self.fake.products[token] = product_v2("lifetime_plus", "PENDING", user=user, acknowledged=False)
        self.assertEqual(self.push_one_time(token)["status"], "ignored")
        self.assertEqual(self.snapshot(user)["tier"], "free")
        self.assertEqual(self.fake.acknowledged.get(token), None, "a pending purchase is not acknowledged")
        self.fake.products[token] = product_v2("lifetime_plus", user=user, acknowledged=False)
        self.assertEqual(self.push_one_time(token)["status"], "applied")
        self.assertEqual(self.snapshot(user)["tier"], "plus")
        self.assertTrue(wait_until(lambda: self.fake.acknowledged.get(token) == 1, 10))

    # ------------------------------------------------------------------ duplicates, refusals, outages

    def test_a_redelivered_push_is_one_event_and_play_is_not_read_again(self):
        user = known_user()
        token = self.purchase(user)
        message = str(uuid.uuid4().int % 10 ** 16)
        self.assertFalse(self.pushed(token, PURCHASED, message_id=message)["duplicate"])
        reads = self.reads_of(token)
        for _ in range(3):
            self.assertTrue(self.pushed(token, PURCHASED, message_id=message)["duplicate"])
        self.assertEqual(self.reads_of(token), reads)
        self.assertEqual(len(self.inbox(message)), 1)

    def test_a_push_without_a_valid_oidc_token_is_refused_and_stores_nothing(self):
        user = known_user()
        token = self.purchase(user)
        stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        cases = {
            "none": None,
            "wrong audience": self.fake.push_token(audience="https://elsewhere.example.com/push"),
            "wrong email": self.fake.push_token(email="someone@evil.iam.gserviceaccount.com"),
            "unverified email": self.fake.push_token(email_verified=False),
            "wrong key": self.fake.push_token(key=stranger),
            "unknown kid": self.fake.push_token(key=stranger, kid="not-a-google-kid"),
            "expired": self.fake.push_token(ttl=-600),
            "wrong issuer": self.fake.push_token(issuer="https://evil.example.com"),
            "HS256": self.fake.push_token(key="a shared secret of thirty-two bytes", algorithm="HS256"),
        }
        for name, bearer in cases.items():
            with self.subTest(name):
                message = str(uuid.uuid4().int % 10 ** 16)
                body = self.fake.push_body({"subscriptionNotification": {"version": "1.0", "notificationType": PURCHASED,
                                                                         "purchaseToken": token}}, message_id=message)
                headers = {"Authorization": "Bearer " + bearer} if bearer else {}
                status, answer = self.worker.request("POST", PUSH, body=body, headers=headers)
                self.assertEqual(status, 401, (name, answer))
                self.assertEqual(self.inbox(message), [])
        self.assertEqual(self.reads_of(token), 0, "nothing was read from Play for a refused push")
        self.assertEqual(self.snapshot(user)["tier"], "free")

    @staticmethod
    def subscription_id(token):
        return sql("SELECT CONCAT('gp:', SHA2(" + sql_string(token) + ", 256))")[0][0]

    def quarantined(self, message_id):
        return sql("SELECT id, reason, reason_detail, deliveries, resolved_at IS NULL, resolution, event_id FROM billing_quarantine "
                   "WHERE provider = 'google_play' AND provider_event_id = " + sql_string("gpush:" + message_id))

    def test_a_push_for_another_package_is_quarantined_and_one_not_a_push_stores_nothing(self):
        user = known_user()
        token = self.purchase(user)
        message = str(uuid.uuid4().int % 10 ** 16)
        for _ in range(2):   # Pub/Sub redelivers what it was not acknowledged
            status, answer = self.push(token, PURCHASED, message_id=message, package="com.example.other")
            self.assertEqual((status, answer["error"]["code"]), (422, "package_mismatch"), answer)
        rows = self.quarantined(message)
        self.assertEqual([row[1:6] for row in rows], [["package_mismatch", "packageName com.example.other", "2", "1", "NULL"]],
                         "one row per messageId, its redelivery counted")
        self.assertEqual(self.inbox(message), [])
        self.assertEqual(self.reads_of(token), 0, "Play is not read for another app's push")
        counted = lambda: sum(value for key, value in self.worker.samples().items()
                              if key.startswith("billing_webhook_events_total{") and "provider=google" in key
                              and "outcome=quarantined" in key)
        self.assertTrue(wait_until(lambda: counted() >= 2, 10), self.worker.samples())
        # The stack's billing-rpc has no google.* settings: the row stays open, with why.
        result = rpc("events.retryQuarantined", {"ids": [int(rows[0][0])], "actor": ACTOR})["result"]["results"]
        self.assertEqual(result, [{"id": int(rows[0][0]), "provider": "google_play", "outcome": "still_failing",
                                   "reason": "not_configured"}])
        self.assertEqual(self.quarantined(message)[0][4], "1")
        before = int(sql("SELECT COUNT(*) FROM billing_quarantine")[0][0])
        headers = {"Authorization": "Bearer " + self.fake.push_token()}
        for body in ({}, {"message": {"messageId": "1", "data": "not base64!"}}, {"message": {"data": "e30=", "messageId": 7}},
                     b"{not json"):
            status, answer = self.worker.request("POST", PUSH, body=body, headers=headers)
            self.assertEqual(status, 400, (body, answer))
        self.assertEqual(int(sql("SELECT COUNT(*) FROM billing_quarantine")[0][0]), before, "what is not a push is not kept")

    def test_a_push_quarantined_by_a_wrong_package_setting_is_applied_once_the_setting_is_fixed(self):
        user = known_user()
        token = self.purchase(user, acknowledged=False)
        void_token = self.purchase(known_user())
        self.pushed(void_token, PURCHASED)
        # A worker whose google.packageName is still the old app's.
        stale = OwnWorker(self.tmp, "google-stale-worker",
                          environment=dict(self.fake.push_overrides(), BILLING__google__packageName="com.example.old"))
        try:
            message, void_message = str(uuid.uuid4().int % 10 ** 16), str(uuid.uuid4().int % 10 ** 16)
            status, answer = stale.request("POST", PUSH, body=self.fake.push_body(
                {"subscriptionNotification": {"version": "1.0", "notificationType": PURCHASED, "purchaseToken": token}},
                message_id=message), headers={"Authorization": "Bearer " + self.fake.push_token()})
            self.assertEqual((status, answer["error"]["code"]), (422, "package_mismatch"), answer)
            void = {"purchaseToken": void_token, "orderId": "GPA.3312-7777-8888-99990", "productType": 1, "refundType": 1}
            status, answer = stale.request("POST", PUSH, body=self.fake.push_body({"voidedPurchaseNotification": void},
                                                                                  message_id=void_message),
                                           headers={"Authorization": "Bearer " + self.fake.push_token()})
            self.assertEqual(status, 422, answer)
        finally:
            stale.stop()
            log = stale.log()
        self.assertNotIn(token, log)
        self.assertEqual(self.snapshot(user)["tier"], "free")
        self.assertEqual(self.fake.acknowledged.get(token), None)
        ids = [int(self.quarantined(m)[0][0]) for m in (message, void_message)]
        daemon = ReconcilingDaemon(self.fake, self.tmp, "google-quarantine-rpc")
        try:
            # While Play cannot be read the purchase's push stays open, nothing stored or acknowledged.
            self.fake.down = True
            down = daemon.call("events.retryQuarantined", {"ids": ids[:1], "actor": ACTOR})["result"]["results"]
            self.fake.down = False
            self.assertEqual([(r["outcome"], r.get("reason")) for r in down], [("still_failing", "provider_unavailable")], down)
            self.assertEqual((self.inbox(message), self.quarantined(message)[0][4]), ([], "1"))
            self.assertEqual(self.fake.acknowledged.get(token), None)
            results = daemon.call("events.retryQuarantined", {"ids": ids, "actor": ACTOR})["result"]["results"]
            self.assertEqual([r["outcome"] for r in results], ["applied", "applied"], results)
            self.assertTrue(wait_until(lambda: self.fake.acknowledged.get(token) == 1, 10), "acknowledged after the commit")
            again = daemon.call("events.retryQuarantined", {"ids": ids, "actor": ACTOR})["result"]["results"]
            self.assertEqual([r["outcome"] for r in again], ["already_resolved"] * 2, again)
        finally:
            log = daemon.stopped_log()
        self.assertNotIn(token, log)
        self.assertEqual(self.fake.acknowledged.get(token), 1)
        self.assertEqual(self.inbox(message), [["applied", "subscriber_state", "SUBSCRIPTION_PURCHASED/ACTIVE",
                                                self.subscription_id(token)]])
        row = self.quarantined(message)[0]
        self.assertEqual(row[4:], ["0", "applied", str(results[0]["eventId"])])
        self.assertEqual(self.snapshot(user)["tier"], "plus")
        self.assertEqual(sql("SELECT event_type FROM billing_events WHERE provider = 'google_play' AND kind = 'refund' "
                             "AND subscription_id = " + sql_string(self.subscription_id(void_token))),
                         [["VOIDED_PURCHASE/FULL_REFUND"]])
        # Pub/Sub's redelivery to a fixed worker is now a duplicate of the replayed push.
        status, answer = self.push(token, PURCHASED, message_id=message)
        self.assertEqual((status, answer["duplicate"]), (200, True), answer)
        self.consistent(user)

    def test_while_play_cannot_be_read_the_push_is_503_and_nothing_is_downgraded(self):
        user = known_user()
        token = self.purchase(user)
        self.pushed(token, PURCHASED)
        self.set_state(token, "SUBSCRIPTION_STATE_EXPIRED", now_ms() - MINUTE)
        self.fake.down = True
        message = str(uuid.uuid4().int % 10 ** 16)
        status, answer = self.push(token, EXPIRED, message_id=message)
        self.assertEqual((status, answer["error"]["code"]), (503, "provider_unavailable"), answer)
        self.assertEqual(self.inbox(message), [])
        self.assertEqual(self.snapshot(user)["tier"], "plus", "nothing downgraded while Play is down")
        self.fake.down = False
        self.pushed(token, EXPIRED, message_id=message)   # Pub/Sub's redelivery
        self.assertEqual(self.snapshot(user)["tier"], "free")

    def test_an_unacknowledged_purchase_is_acknowledged_exactly_once_under_concurrent_pushes(self):
        user = known_user()
        token = self.purchase(user, acknowledged=False)
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda _: self.push(token, PURCHASED), range(6)))
        self.assertEqual([status for status, _ in answers], [200] * 6, answers)
        self.assertTrue(wait_until(lambda: self.fake.acknowledged.get(token) == 1, 10), self.fake.acknowledged.get(token))
        time.sleep(0.5)
        self.assertEqual(self.fake.acknowledged.get(token), 1)
        row = sql("SELECT acknowledged_at IS NOT NULL, ack_attempts FROM billing_google_purchases WHERE subscription_id = "
                  "CONCAT('gp:', SHA2(" + sql_string(token) + ", 256))")
        self.assertEqual(row, [["1", "1"]])
        self.pushed(token, RENEWED)
        self.assertEqual(self.fake.acknowledged.get(token), 1, "an acknowledged purchase is not acknowledged again")

    # ------------------------------------------------------------------ the app's post

    def post(self, user, token, product="plus_monthly"):
        return self.worker.request("POST", POST, body={"productId": product, "purchaseToken": token},
                                   headers={"Authorization": "Bearer " + id_token(user)})

    def test_the_apps_post_binds_the_token_and_answers_the_snapshot(self):
        user = new_user()
        token = self.purchase(None, acknowledged=False)   # no obfuscatedExternalAccountId: the poster owns it
        status, got = self.post(user, token)
        self.assertEqual(status, 200, got)
        self.assertEqual((got["tier"], got["store"]["platform"], got["purchase"]["duplicate"]), ("plus", "google_play", False), got)
        self.assertTrue(wait_until(lambda: self.fake.acknowledged.get(token) == 1, 10))
        status, again = self.post(user, token)
        self.assertEqual((status, again["purchase"]["duplicate"]), (200, True), again)
        # A push after it folds for the owner the post bound, though Play names nobody.
        self.set_state(token, "SUBSCRIPTION_STATE_CANCELED", now_ms() + 10 * DAY, auto_renew=False)
        self.pushed(token, CANCELED)
        self.assertEqual(self.snapshot(user)["phase"], "canceled")
        # Another account cannot take it.
        status, refused = self.post(known_user(), token)
        self.assertEqual((status, refused["error"]["code"]), (409, "purchase_bound_elsewhere"), refused)
        self.consistent(user)

    def test_the_apps_post_refuses_another_accounts_purchase_a_wrong_product_and_an_unknown_token(self):
        owner, caller = known_user(), known_user()
        token = self.purchase(owner)
        status, answer = self.post(caller, token)
        self.assertEqual((status, answer["error"]["code"]), (403, "account_mismatch"), answer)
        status, answer = self.post(owner, token, product="pro_yearly")
        self.assertEqual((status, answer["error"]["code"]), (422, "product_mismatch"), answer)
        status, answer = self.post(owner, purchase_token())
        self.assertEqual((status, answer["error"]["code"]), (422, "unknown_purchase_token"), answer)
        status, answer = self.worker.request("POST", POST, body={"productId": "plus_monthly"},
                                             headers={"Authorization": "Bearer " + id_token(owner)})
        self.assertEqual(status, 400, answer)
        status, answer = self.worker.request("POST", POST, body={"productId": "plus_monthly", "purchaseToken": token})
        self.assertEqual(status, 401, answer)
        self.fake.down = True
        status, answer = self.post(owner, token)
        self.assertEqual((status, answer["error"]["code"]), (503, "provider_unavailable"), answer)
        self.assertEqual(self.snapshot(owner)["tier"], "free", "nothing was recorded for the refused posts")

    def audit(self, token):
        return sql("SELECT action, user_id, COALESCE(previous_user_id, '-'), policy, restore FROM billing_binding_audit "
                   "WHERE original_transaction_id = " + sql_string(self.subscription_id(token)) + " ORDER BY id")

    def test_binding_policy_restore_moves_moves_a_token_on_an_explicit_restore_only(self):
        owner, caller = new_user(), new_user()
        token = self.purchase(None)   # no obfuscatedExternalAccountId: whoever posts first owns it
        status, got = self.post(owner, token)
        self.assertEqual((status, got["purchase"]["binding"]), (200, "bound"), got)
        self.pushed(token, RENEWED)
        # binding.policy deny (the stack's): a restore from another account is refused and audited.
        status, refused = self.worker.request("POST", POST, body={"productId": "plus_monthly", "purchaseToken": token,
                                                                  "restore": True},
                                              headers={"Authorization": "Bearer " + id_token(caller)})
        self.assertEqual((status, refused["error"]["code"]), (409, "purchase_bound_elsewhere"), refused)
        mover = OwnWorker(self.tmp, "google-restore-worker",
                          environment=dict(self.fake.push_overrides(), BILLING__binding__policy="restore_moves"))
        try:
            post = lambda user, **extra: mover.request(
                "POST", POST, body=dict({"productId": "plus_monthly", "purchaseToken": token}, **extra),
                headers={"Authorization": "Bearer " + id_token(user)})
            status, refused = post(caller)
            self.assertEqual((status, refused["error"]["code"]), (409, "purchase_bound_elsewhere"), "no restore, no move")
            status, moved = post(caller, restore=True)
            self.assertEqual((status, moved["purchase"]["binding"], moved["tier"]), (200, "moved", "plus"), moved)
            status, again = post(caller, restore=True)
            self.assertEqual((status, again["purchase"]["binding"]), (200, "already_owned"), again)
            # A purchase the app stamped with an account is that account's, restore or not.
            stamped = self.purchase(owner)
            self.pushed(stamped, PURCHASED)
            status, refused = mover.request("POST", POST, body={"productId": "plus_monthly", "purchaseToken": stamped, "restore": True},
                                            headers={"Authorization": "Bearer " + id_token(caller)})
            self.assertEqual((status, refused["error"]["code"]), (403, "account_mismatch"), refused)
        finally:
            mover.stop()
            self.assertNotIn(token, mover.log())
        self.assertEqual(self.audit(token), [["bound", owner, "-", "deny", "0"], ["denied", caller, owner, "deny", "1"],
                                             ["denied", caller, owner, "restore_moves", "0"],
                                             ["moved", caller, owner, "restore_moves", "1"]])
        # Every Play event of the token is the caller's now; the owner keeps only his stamped purchase.
        self.assertEqual(sql("SELECT DISTINCT user_id FROM billing_events WHERE subscription_id = "
                             + sql_string(self.subscription_id(token))), [[caller]])
        self.assertEqual((self.snapshot(caller)["tier"], self.snapshot(caller)["store"]["platform"]), ("plus", "google_play"))
        # A later push of the token folds for its new owner.
        self.set_state(token, "SUBSCRIPTION_STATE_CANCELED", now_ms() + 10 * DAY, auto_renew=False)
        self.pushed(token, CANCELED)
        self.assertEqual(self.snapshot(caller)["phase"], "canceled")
        for user in (owner, caller):
            self.consistent(user)

    def test_an_erased_user_takes_his_purchase_tokens_with_him(self):
        user = known_user()
        token = self.purchase(user)
        self.pushed(token, PURCHASED)
        answer = rpc("users.delete", {"userId": user, "actor": ACTOR, "reason": "GDPR Art. 17 request"})["result"]
        self.assertEqual(answer["removed"].get("billing_google_purchases"), 1, answer)
        self.assertEqual(sql("SELECT COUNT(*) FROM billing_google_purchases WHERE purchase_token = " + sql_string(token)), [["0"]])
        audit = self.audit(token)
        self.assertEqual([row[0] for row in audit], ["bound", "unbound"], audit)
        self.assertTrue(all(row[1].startswith("erased:") for row in audit), "the audit names a tombstone, not him")
        # A later push of the token names the erased id: stored linked to nobody, folded for no one.
        self.assertEqual(self.pushed(token, RENEWED)["status"], "unmatched")
        self.assertEqual(sql("SELECT COUNT(*) FROM billing_events WHERE user_id = " + sql_string(user)), [["0"]])

    # ------------------------------------------------------------------ billing-rpc: sweeper, reconcile, doctor

    def row(self, token):
        return sql("SELECT acknowledged_at IS NOT NULL, ack_attempts, ack_error FROM billing_google_purchases "
                   "WHERE subscription_id = CONCAT('gp:', SHA2(" + sql_string(token) + ", 256))")

    def test_the_sweeper_acknowledges_what_a_failed_call_left_and_the_doctor_warns_before_the_limit(self):
        user = known_user()
        token = self.purchase(user, acknowledged=False, start_ms=now_ms() - 60 * HOUR, expires=now_ms() + 20 * DAY)
        for _ in range(2):   # the client's two attempts
            self.fake.fail_next(500, {"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}}, method="POST")
        self.pushed(token, PURCHASED)
        self.assertEqual(self.row(token), [["0", "1", "500"]])
        self.assertEqual(self.fake.acknowledged.get(token), None)
        self.assertTrue(wait_until(lambda: self.worker.samples().get("billing_google_acknowledgements_total{outcome=failed}", 0) >= 1, 10),
                        self.worker.samples())
        status, checks, _ = doctor(env=self.fake.push_overrides())
        check = checks["play acknowledgements"]
        self.assertFalse(check["ok"], check)
        self.assertIn("three-day limit in 11 h", check["detail"])
        sweeper = ReconcilingDaemon(self.fake, self.tmp, "google-sweeper-rpc", sweep_every=1)
        try:
            self.assertTrue(wait_until(lambda: self.fake.acknowledged.get(token) == 1, 30), self.row(token))
            self.assertTrue(wait_until(lambda: self.row(token)[0][0] == "1", 10), self.row(token))
        finally:
            log = sweeper.stopped_log()
        self.assertNotIn(token, log)
        self.assertEqual(self.fake.acknowledged.get(token), 1)
        status, checks, _ = doctor(env=self.fake.push_overrides())
        self.assertTrue(checks["play acknowledgements"]["ok"], checks["play acknowledgements"])

    def test_the_sweeper_finds_a_void_whose_notification_was_lost_and_the_late_push_is_the_same_event(self):
        user, early = known_user(), known_user()
        token, early_token = self.purchase(user), self.purchase(early)
        self.pushed(token, PURCHASED)
        self.pushed(early_token, PURCHASED)
        self.assertEqual(self.snapshot(user)["tier"], "plus")
        time.sleep(0.01)
        # The other order: a void pushed first, then listed.
        early_void = {"purchaseToken": early_token, "orderId": "GPA.3312-1111-2222-33334", "productType": 1, "refundType": 1}
        status, answer = self.worker.request("POST", PUSH, body=self.fake.push_body({"voidedPurchaseNotification": early_void}),
                                             headers={"Authorization": "Bearer " + self.fake.push_token()})
        self.assertEqual((status, answer["duplicate"]), (200, False), answer)
        self.assertEqual(self.snapshot(early)["phase"], "revoked")
        voided_at = now_ms()                        # after the state the push read: Google voided it since
        strangers = [{"kind": "androidpublisher#voidedPurchase", "purchaseToken": purchase_token(), "orderId": "GPA.9-%d" % i,
                      "purchaseTimeMillis": str(voided_at - DAY), "voidedTimeMillis": str(voided_at - i),
                      "voidedSource": 0, "voidedReason": 1} for i in range(3)]
        ours = {"kind": "androidpublisher#voidedPurchase", "purchaseToken": token, "orderId": "GPA.3312-4455-6677-88990",
                "purchaseTimeMillis": str(voided_at - DAY), "voidedTimeMillis": str(voided_at), "voidedSource": 2,
                "voidedReason": 7}
        listed_early = {"kind": "androidpublisher#voidedPurchase", "purchaseToken": early_token, "orderId": early_void["orderId"],
                        "purchaseTimeMillis": str(voided_at - DAY), "voidedTimeMillis": str(voided_at - 5), "voidedSource": 1,
                        "voidedReason": 1}
        self.fake.voided[:] = strangers + [listed_early, ours]    # five entries: three pages
        sweeper = ReconcilingDaemon(self.fake, self.tmp, "google-voided-rpc", sweep_every=1)
        try:
            self.assertTrue(wait_until(lambda: self.snapshot(user)["phase"] == "revoked", 30), "the listing voided it")
            listings = lambda: sum(1 for m, p in self.fake.requests if m == "GET" and "/voidedpurchases?" in p)
            first = listings()
            self.assertTrue(wait_until(lambda: listings() >= first + 2, 30), "listed again")
        finally:
            sweeper.stopped_log()
        rows = sql("SELECT event_type, reason FROM billing_events WHERE provider = 'google_play' AND kind = 'refund' "
                   "AND subscription_id = CONCAT('gp:', SHA2(" + sql_string(token) + ", 256))")
        self.assertEqual(rows, [["VOIDED_PURCHASES_API", "chargeback"]], "one event, however often it was listed")
        rows = sql("SELECT event_type FROM billing_events WHERE provider = 'google_play' AND kind = 'refund' "
                   "AND subscription_id = CONCAT('gp:', SHA2(" + sql_string(early_token) + ", 256))")
        self.assertEqual(rows, [["VOIDED_PURCHASE/FULL_REFUND"]], "pushed first, then listed: one event, the push's")
        self.consistent(early)
        body = self.fake.push_body({"voidedPurchaseNotification": {"purchaseToken": token, "orderId": ours["orderId"],
                                                                   "productType": 1, "refundType": 1}})
        status, answer = self.worker.request("POST", PUSH, body=body, headers={"Authorization": "Bearer " + self.fake.push_token()})
        self.assertEqual((status, answer["duplicate"]), (200, True), "the late push of the same void is the same event")
        for stranger in strangers:
            self.assertEqual(sql("SELECT COUNT(*) FROM billing_events WHERE subscription_id = CONCAT('gp:', SHA2("
                                 + sql_string(stranger["purchaseToken"]) + ", 256))"), [["0"]], "a token never seen records nothing")
        self.consistent(user)

    def test_the_sweeper_pulls_an_overdue_renewal_and_reconcile_pulls_a_users_play_purchases(self):
        user = known_user()
        token = self.purchase(user, expires=now_ms() - 2 * HOUR, start_ms=now_ms() - 30 * DAY)
        self.pushed(token, RENEWED)
        self.assertEqual(self.snapshot(user)["tier"], "free", "its period ended and no renewal came")
        # Play renewed it; the notification was lost.
        self.set_state(token, "SUBSCRIPTION_STATE_ACTIVE", now_ms() + 28 * DAY)
        sweeper = ReconcilingDaemon(self.fake, self.tmp, "google-renewal-rpc", sweep_every=1)
        try:
            self.assertTrue(wait_until(lambda: self.snapshot(user)["tier"] == "plus", 30), "the sweeper pulled the overdue renewal")
            # Canceled at Play, nothing pushed: an operator's reconcile finds it.
            self.set_state(token, "SUBSCRIPTION_STATE_CANCELED", now_ms() + 28 * DAY, auto_renew=False)
            answer = sweeper.call("subscriptions.reconcile", {"userId": user, "actor": ACTOR})["result"]
            play = answer["providers"]["google"]["subscriptions"]
            self.assertEqual([(p["outcome"], p["state"]) for p in play], [("corrected", "SUBSCRIPTION_STATE_CANCELED")], answer)
            self.assertTrue(answer["changed"])
            again = sweeper.call("subscriptions.reconcile", {"userId": user, "actor": ACTOR})["result"]
            self.assertEqual(again["providers"]["google"]["subscriptions"][0]["outcome"], "unchanged", again)
            self.assertEqual(again["providers"]["google"]["subscriptions"][0]["eventsAdded"], 0, "the same state read twice is one event")
            status = sweeper.call("subscriptions.reconcileStatus")["result"]
            self.assertTrue(status["providers"]["google"], status)
        finally:
            sweeper.stopped_log()
        self.assertEqual(self.snapshot(user)["phase"], "canceled")
        self.consistent(user)


if __name__ == "__main__":
    unittest.main()
