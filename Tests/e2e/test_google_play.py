"""Google Play's Developer API as billing reads it (SPEC §18, first step): a billing-rpc of the
test's own (the stack's binary and configuration, `google.*` pointed at fake_google.py, a
local HTTPS fake of Google's token endpoint and of androidpublisher v3 answering their real
shapes) asked `google.purchases.get`. What must hold:

- each SubscriptionPurchaseV2 state reads as Play states it, with access only where Play
  gives it (ACTIVE, CANCELED and IN_GRACE_PERIOD until the expiry; never ON_HOLD, PAUSED,
  EXPIRED, PENDING, PENDING_PURCHASE_CANCELED), the catalog id `subscriptionId:basePlanId`,
  the user from obfuscatedExternalAccountId, a test purchase as sandbox;
- the service account's JWT-bearer grant is made once and its access token reused; a token
  Google stopped honouring (401) is replaced once, transparently;
- `google.purchases.acknowledge` acknowledges at Google exactly once, audited without the
  token;
- an unknown token is 1001 not_found; Play down is -32002 provider_unavailable (after the
  client's retries), never a crash or a made-up answer;
- neither the service account's key nor an access token nor a purchase token is logged."""
import hashlib
import os
import tempfile
import unittest
import uuid

from harness.billing import rpc, sql, sql_string
from harness.entitlements import DAY, HOUR, now_ms
from harness.fake_google import FakeGoogle, subscription_v2
from test_reconcile import ReconcilingDaemon

ACTOR = "e2e-google@ops"
ACCESS = {"SUBSCRIPTION_STATE_ACTIVE": True, "SUBSCRIPTION_STATE_CANCELED": True, "SUBSCRIPTION_STATE_IN_GRACE_PERIOD": True,
          "SUBSCRIPTION_STATE_ON_HOLD": False, "SUBSCRIPTION_STATE_PAUSED": False, "SUBSCRIPTION_STATE_EXPIRED": False,
          "SUBSCRIPTION_STATE_PENDING": False, "SUBSCRIPTION_STATE_PENDING_PURCHASE_CANCELED": False}


def purchase_token():
    """Play's tokens are long opaque strings of letters, digits, dots, dashes and underscores."""
    return "gpt." + uuid.uuid4().hex + "-" + uuid.uuid4().hex + ".AO-J1Oz_" + uuid.uuid4().hex


class PlayDeveloperAPI(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.fake = FakeGoogle(cls.tmp.name)
        cls.daemon = ReconcilingDaemon(cls.fake, cls.tmp.name, "google-rpc")
        cls.tokens = []

    @classmethod
    def tearDownClass(cls):
        try:
            log = cls.daemon.stopped_log()
            assert cls.fake.private_key_marker not in log, "the service account's key is never logged"
            assert "ya29.fake-" not in log, "no access token is logged"
            for token in cls.tokens:
                assert token not in log, "no purchase token is logged"
        finally:
            cls.fake.stop()
            cls.tmp.cleanup()

    def setUp(self):
        self.fake.down = False
        self.fake.hang_seconds = 0
        self.fake.canned.clear()

    def active(self, **extra):
        token = purchase_token()
        self.fake.purchases[token] = subscription_v2("plus_monthly", "monthly-eur", "SUBSCRIPTION_STATE_ACTIVE",
                                                     now_ms() + DAY, user=str(uuid.uuid4()), **extra)
        return token

    def unavailable(self, reply, provider_error):
        self.assertEqual(reply["error"]["code"], -32002, reply)
        self.assertEqual(reply["error"]["data"]["reason"], "provider_unavailable")
        self.assertIn(provider_error, reply["error"]["data"]["providerError"])

    def audit_rows(self):
        return sql("SELECT detail FROM audit_log WHERE action = 'google.purchases.acknowledge' AND actor = " + sql_string(ACTOR))

    def get(self, token):
        self.tokens.append(token)
        return self.daemon.call("google.purchases.get", {"purchaseToken": token})

    def test_every_state_reads_as_play_states_it_with_access_only_where_play_gives_it(self):
        user = str(uuid.uuid4())
        for state, grants in ACCESS.items():
            with self.subTest(state=state):
                token = purchase_token()
                expiry = now_ms() + 3 * DAY
                self.fake.purchases[token] = subscription_v2(
                    "plus_monthly", "monthly-eur", state, expiry, user=user, auto_renew=state == "SUBSCRIPTION_STATE_ACTIVE",
                    canceled_by="user" if state == "SUBSCRIPTION_STATE_CANCELED" else None)
                reply = self.get(token)
                self.assertIn("result", reply, reply)
                r = reply["result"]
                self.assertEqual(r["state"], state)
                self.assertIs(r["grantsAccess"], grants)
                self.assertEqual(r["userId"], user)
                self.assertEqual(r["environment"], "production")
                self.assertEqual(r["packageName"], self.fake.package)
                self.assertEqual(r["lineItems"][0]["catalogProductId"], "plus_monthly:monthly-eur")
                self.assertEqual(r["expiresAt"][:19], self.fake.purchases[token]["lineItems"][0]["expiryTime"][:19])
                self.assertIs(r["willRenew"], state == "SUBSCRIPTION_STATE_ACTIVE")
                if state == "SUBSCRIPTION_STATE_CANCELED":
                    self.assertEqual(r["canceledBy"], "user")

    def test_a_lapsed_period_gives_no_access_whatever_the_state_says(self):
        token = purchase_token()
        self.fake.purchases[token] = subscription_v2("plus_monthly", "monthly-eur", "SUBSCRIPTION_STATE_CANCELED",
                                                     now_ms() - HOUR, user=str(uuid.uuid4()), auto_renew=False)
        self.assertIs(self.get(token)["result"]["grantsAccess"], False)

    def test_a_trial_a_test_purchase_an_upgrade_and_acknowledgement_are_read(self):
        token, old = purchase_token(), purchase_token()
        self.fake.purchases[token] = subscription_v2(
            "pro_yearly", "yearly", "SUBSCRIPTION_STATE_ACTIVE", now_ms() + 7 * DAY, user=str(uuid.uuid4()),
            offer_id="trial-7d", offer_phase="freeTrial", test=True, acknowledged=False, linked_token=old)
        r = self.get(token)["result"]
        self.assertEqual(r["environment"], "sandbox")
        self.assertEqual(r["lineItems"][0]["offerPhase"], "freeTrial")
        self.assertEqual(r["lineItems"][0]["offerId"], "trial-7d")
        self.assertIs(r["acknowledged"], False)
        self.assertIs(r["replacesAnotherToken"], True)

    def test_the_access_token_is_granted_once_and_renewed_after_a_401(self):
        token = purchase_token()
        self.fake.purchases[token] = subscription_v2("plus_monthly", "monthly-eur", "SUBSCRIPTION_STATE_ACTIVE",
                                                     now_ms() + DAY, user=str(uuid.uuid4()))
        self.assertIn("result", self.get(token))
        before = self.fake.grants
        for _ in range(3):
            self.assertIn("result", self.get(token))
        self.assertEqual(self.fake.grants, before, "the cached access token serves")
        self.assertGreaterEqual(before, 1)
        self.assertEqual(self.fake.refused_grants, [], "every grant the server asked for was valid")
        self.fake.revoke_tokens()
        self.assertIn("result", self.get(token), "a revoked access token is replaced once")
        self.assertEqual(self.fake.grants, before + 1)

    def test_an_unknown_token_is_not_found(self):
        reply = self.get(purchase_token())
        self.assertEqual(reply["error"]["code"], 1001, reply)
        self.assertEqual(reply["error"]["data"]["reason"], "not_found")

    def test_play_down_is_unavailable_and_nothing_is_made_up(self):
        token = purchase_token()
        self.fake.purchases[token] = subscription_v2("plus_monthly", "monthly-eur", "SUBSCRIPTION_STATE_ACTIVE",
                                                     now_ms() + DAY, user=str(uuid.uuid4()))
        self.fake.down = True
        reply = self.get(token)
        self.assertEqual(reply["error"]["code"], -32002, reply)
        self.assertEqual(reply["error"]["data"]["reason"], "provider_unavailable")
        self.assertIn("503", reply["error"]["data"]["providerError"])
        self.fake.down = False
        self.assertIn("result", self.get(token))

    def test_acknowledging_is_made_once_and_audited_without_the_token(self):
        token = purchase_token()
        self.tokens.append(token)
        self.fake.purchases[token] = subscription_v2("plus_monthly", "monthly-eur", "SUBSCRIPTION_STATE_ACTIVE",
                                                     now_ms() + DAY, user=str(uuid.uuid4()), acknowledged=False)
        self.assertIs(self.get(token)["result"]["acknowledged"], False)
        first = self.daemon.call("google.purchases.acknowledge", {"purchaseToken": token, "actor": ACTOR})
        self.assertEqual(first.get("result"), {"acknowledged": True, "alreadyAcknowledged": False, "productId": "plus_monthly"},
                         first)
        again = self.daemon.call("google.purchases.acknowledge", {"purchaseToken": token, "actor": ACTOR})
        self.assertIs(again["result"]["alreadyAcknowledged"], True)
        self.assertEqual(self.fake.acknowledged.get(token), 1, "acknowledged at Google exactly once")
        self.assertIs(self.get(token)["result"]["acknowledged"], True)
        digest = hashlib.sha256(token.encode()).hexdigest()[:16]
        rows = [r for r in self.audit_rows() if digest in r[0]]
        self.assertEqual(len(rows), 1, rows)
        self.assertNotIn(token, rows[0][0])
        self.assertIn('"productId": "plus_monthly"', rows[0][0].replace('":"', '": "'))
        missing = self.daemon.call("google.purchases.acknowledge", {"purchaseToken": purchase_token(), "actor": ACTOR})
        self.assertEqual(missing["error"]["code"], 1001, missing)
        no_actor = self.daemon.call("google.purchases.acknowledge", {"purchaseToken": token})
        self.assertEqual(no_actor["error"]["code"], -32602, no_actor)

    def test_a_429_is_waited_out_and_answered(self):
        token = self.active()
        self.fake.fail_next(429, {"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED"}},
                            {"Retry-After": "1"})
        reply = self.get(token)
        self.assertEqual(reply.get("result", {}).get("state"), "SUBSCRIPTION_STATE_ACTIVE", reply)
        self.assertEqual(self.fake.canned, [], "the 429 was answered, then the call came back")

    def test_a_long_429_ends_the_call_as_unavailable(self):
        token = self.active()
        self.fake.fail_next(429, {"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED"}},
                            {"Retry-After": "120"})
        self.unavailable(self.get(token), "429")

    def test_a_malformed_answer_is_unavailable_not_made_up(self):
        token = self.active()
        for body in (b"<html>not json</html>", {"kind": "androidpublisher#subscriptionPurchaseV2"},
                     {"subscriptionState": "SUBSCRIPTION_STATE_ACTIVE", "lineItems": [{"productId": 5}]}):
            with self.subTest(body=body):
                self.fake.fail_next(200, body)
                self.unavailable(self.get(token), "malformed")
        self.assertIn("result", self.get(token), "the next real answer is read")

    def test_a_timeout_is_unavailable(self):
        token = self.active()
        self.fake.hang_seconds = 3      # over google.timeoutSeconds (2), on both attempts
        self.unavailable(self.get(token), "timeout")

    def test_an_acknowledgement_that_fails_writes_nothing_and_is_made_once_later(self):
        token = self.active(acknowledged=False)
        self.tokens.append(token)
        before = len(self.audit_rows())
        self.fake.down = True
        self.unavailable(self.daemon.call("google.purchases.acknowledge", {"purchaseToken": token, "actor": ACTOR}), "503")
        self.fake.down = False
        # The read succeeds, the acknowledge POST answers 503 on both of the client's attempts.
        unavailable = {"error": {"code": 503, "message": "The service is currently unavailable.", "status": "UNAVAILABLE"}}
        for _ in range(2):
            self.fake.fail_next(503, unavailable, method="POST")
        self.unavailable(self.daemon.call("google.purchases.acknowledge", {"purchaseToken": token, "actor": ACTOR}), "503")
        self.assertIs(self.get(token)["result"]["acknowledged"], False)
        self.assertEqual(len(self.audit_rows()), before, "no audit row for what Google did not take")
        self.assertEqual(self.fake.acknowledged.get(token), None)
        done = self.daemon.call("google.purchases.acknowledge", {"purchaseToken": token, "actor": ACTOR})
        self.assertIs(done["result"]["alreadyAcknowledged"], False, done)
        self.assertEqual(self.fake.acknowledged.get(token), 1)
        self.assertEqual(len(self.audit_rows()), before + 1)

    def test_bad_params(self):
        for params in ({}, {"purchaseToken": ""}, {"purchaseToken": 5}, {"purchaseToken": "t", "extra": 1}):
            with self.subTest(params=params):
                reply = self.daemon.call("google.purchases.get", params)
                self.assertEqual(reply["error"]["code"], -32602, reply)


class NotConfigured(unittest.TestCase):
    def test_the_stack_without_google_says_so(self):
        reply = rpc("google.purchases.get", {"purchaseToken": purchase_token()})
        self.assertEqual(reply["error"]["data"]["reason"], "not_configured", reply)
        self.assertIn("google.packageName", reply["error"]["message"])


if __name__ == "__main__":
    unittest.main()
