"""App Store direct, end to end through nginx: Apple's own verifier as the oracle of the
JWS verification, every notification type, dedup, binding, late binding, refunds and the
quarantine. The test CA lives in $BILLING_VAR_DIR/testca (scripts/test generates it)."""
import base64
import concurrent.futures
import json
import os
import subprocess
import time
import unittest
import uuid

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives import hmac as crypto_hmac

from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier

from harness import appstore as A
from harness.billing import VAR_DIR, request, rpc, sql_string
from harness.tokens import token

CA = os.path.join(VAR_DIR, "testca")
DAY = 86400_000
# The order n of the P-256 group: (r, n - s) verifies wherever (r, s) does.
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def new_user():
    return str(uuid.uuid4())


def post_transaction(user, jws, restore=None):
    body = {"signedTransaction": jws}
    if restore is not None:
        body["restore"] = restore
    return request("POST", "/api/v1/billing/apple/transactions", body=body, headers={"Authorization": "Bearer " + token(user)})


def post_notification(signed_payload):
    return request("POST", "/api/v1/billing/webhooks/apple", body={"signedPayload": signed_payload})


def access(user):
    r = request("GET", "/api/v1/billing/access", headers={"Authorization": "Bearer " + token(user)})
    assert r.status == 200, r
    return r.json()


def db(sql):
    out = subprocess.run(["mariadb", "--no-defaults", "--protocol=socket", "-S", os.path.join(VAR_DIR, "run", "mariadb.sock"),
                          "-uroot", "-N", "-B", "billing", "-e", sql], check=True, capture_output=True, text=True)
    return [line.split("\t") for line in out.stdout.splitlines()]


def root_der(label="a"):
    with open(os.path.join(CA, f"{label}-root.der"), "rb") as f:
        return f.read()


def apple_accepts_transaction(jws):
    """Apple's SignedDataVerifier, online checks off, for either configured environment."""
    for environment, app_id in ((Environment.PRODUCTION, A.APP_APPLE_ID), (Environment.SANDBOX, None)):
        verifier = SignedDataVerifier([root_der()], False, environment, A.BUNDLE_ID, app_id)
        try:
            verifier.verify_and_decode_signed_transaction(jws)
            return True
        except Exception:
            pass
    return False


def apple_accepts_notification(jws):
    for environment, app_id in ((Environment.PRODUCTION, A.APP_APPLE_ID), (Environment.SANDBOX, None)):
        verifier = SignedDataVerifier([root_der()], False, environment, A.BUNDLE_ID, app_id)
        try:
            verifier.verify_and_decode_notification(jws)
            return True
        except Exception:
            pass
    return False


def transaction_corpus():
    """(name, jws) pairs: valid and adversarial signed transactions."""
    a = A.load_chain(CA, "a")
    b = A.load_chain(CA, "b")
    tx = A.transaction_payload
    now = A.now_ms()
    cases = []
    def add(name, jws):
        cases.append((name, jws))

    add("valid production", a.sign(tx()))
    add("valid sandbox", a.sign(tx(environment="Sandbox")))
    add("valid free trial", a.sign(tx(offerType=1, offerDiscountType="FREE_TRIAL", price=0)))
    add("valid renewal transaction", a.sign(tx(transaction_id="9" + str(uuid.uuid4().int)[:15])))
    add("valid product outside the catalog", a.sign(tx(product="com.example.unknown")))
    add("valid without signedDate (verified now)", a.sign(tx(signed=None) | {"signedDate": None}) if False else a.sign({k: v for k, v in tx().items() if k != "signedDate"}))
    add("valid with the header's third cert an untrusted root", A.sign_jws(tx(), a.leaf_key, [A.der_b64(a.leaf), A.der_b64(a.intermediate), A.der_b64(b.root)]))
    add("wrong root (untrusted chain B)", b.sign(tx()))
    add("chain B presenting root A as third cert", A.sign_jws(tx(), b.leaf_key, [A.der_b64(b.leaf), A.der_b64(b.intermediate), A.der_b64(a.root)]))
    # Missing OIDs: certificates issued by the trusted keys but without Apple's extensions.
    leaf_no_oid = A.make_cert("leaf without OID", a.leaf_key, a.intermediate.subject, a.int_key)
    add("leaf without receipt OID", A.sign_jws(tx(), a.leaf_key, [A.der_b64(leaf_no_oid), A.der_b64(a.intermediate), A.der_b64(a.root)]))
    int_no_oid_key = A.new_key()
    int_no_oid = A.make_cert("intermediate without OID", int_no_oid_key, a.root.subject, a.root_key, ca=True, path_length=0)
    leaf_under = A.make_cert("leaf", a.leaf_key, int_no_oid.subject, int_no_oid_key, oid=A.RECEIPT_OID)
    add("intermediate without WWDR OID", A.sign_jws(tx(), a.leaf_key, [A.der_b64(leaf_under), A.der_b64(int_no_oid), A.der_b64(a.root)]))
    leaf_under2 = A.make_cert("leaf", a.leaf_key, int_no_oid.subject, int_no_oid_key)
    add("neither OID", A.sign_jws(tx(), a.leaf_key, [A.der_b64(leaf_under2), A.der_b64(int_no_oid), A.der_b64(a.root)]))
    leaf_wrong_oid = A.make_cert("leaf", a.leaf_key, a.intermediate.subject, a.int_key, oid=A.WWDR_OID)
    add("leaf carrying the intermediate's OID", A.sign_jws(tx(), a.leaf_key, [A.der_b64(leaf_wrong_oid), A.der_b64(a.intermediate), A.der_b64(a.root)]))
    leaf_by_root = A.make_cert("leaf by root", a.leaf_key, a.root.subject, a.root_key, oid=A.RECEIPT_OID)
    add("leaf issued by the root directly", A.sign_jws(tx(), a.leaf_key, [A.der_b64(leaf_by_root), A.der_b64(a.root), A.der_b64(a.root)]))
    int_not_ca = A.make_cert("intermediate not CA", int_no_oid_key, a.root.subject, a.root_key, ca=False, oid=A.WWDR_OID)
    leaf_under3 = A.make_cert("leaf", a.leaf_key, int_not_ca.subject, int_no_oid_key, oid=A.RECEIPT_OID)
    add("intermediate that is not a CA", A.sign_jws(tx(), a.leaf_key, [A.der_b64(leaf_under3), A.der_b64(int_not_ca), A.der_b64(a.root)]))
    int_no_ids_key = A.new_key()
    int_no_ids = A.make_cert("intermediate without key ids", int_no_ids_key, a.root.subject, a.root_key, ca=True, path_length=0,
                             oid=A.WWDR_OID, skid=False, akid=False)
    leaf_under4 = A.make_cert("leaf", a.leaf_key, int_no_ids.subject, int_no_ids_key, oid=A.RECEIPT_OID)
    add("intermediate without key identifiers (strict mode)", A.sign_jws(tx(), a.leaf_key, [A.der_b64(leaf_under4), A.der_b64(int_no_ids), A.der_b64(a.root)]))
    # Chain lengths.
    add("two certificates", A.sign_jws(tx(), a.leaf_key, [A.der_b64(a.leaf), A.der_b64(a.intermediate)]))
    add("four certificates", A.sign_jws(tx(), a.leaf_key, a.x5c() + [A.der_b64(a.root)]))
    add("one certificate", A.sign_jws(tx(), a.leaf_key, [A.der_b64(a.leaf)]))
    add("x5c missing", A.sign_jws(tx(), a.leaf_key, None))
    add("x5c empty", A.sign_jws(tx(), a.leaf_key, []))
    add("x5c entry not base64", A.sign_jws(tx(), a.leaf_key, ["***", A.der_b64(a.intermediate), A.der_b64(a.root)]))
    add("x5c entry not a certificate", A.sign_jws(tx(), a.leaf_key, [base64.b64encode(b"hello world!").decode(), A.der_b64(a.intermediate), A.der_b64(a.root)]))
    add("x5c leaf and intermediate swapped", A.sign_jws(tx(), a.leaf_key, [A.der_b64(a.intermediate), A.der_b64(a.leaf), A.der_b64(a.root)]))
    # Algorithms.
    add("alg none", A.sign_jws(tx(), None, a.x5c(), alg="none", raw_signature=b"\x00"))
    hmac_input = None
    add("alg HS256", A.sign_jws(tx(), None, a.x5c(), alg="HS256", raw_signature=b"\x01" * 32))
    add("alg ES384", A.sign_jws(tx(), a.leaf_key, a.x5c(), alg="ES384"))
    add("alg RS256", A.sign_jws(tx(), rsa.generate_private_key(65537, 2048), a.x5c(), alg="RS256"))
    add("alg missing", A.sign_jws(tx(), a.leaf_key, a.x5c(), alg=None))
    add("alg lowercase es256", A.sign_jws(tx(), a.leaf_key, a.x5c(), alg="es256"))
    # Wrong signer.
    add("signed by the intermediate's key", A.sign_jws(tx(), a.int_key, a.x5c()))
    add("signed by the root's key", A.sign_jws(tx(), a.root_key, a.x5c()))
    add("signed by an unrelated key", A.sign_jws(tx(), A.new_key(), a.x5c()))
    add("signed by chain B's leaf with chain A's certificates", A.sign_jws(tx(), b.leaf_key, a.x5c()))
    # Validity at signedDate.
    expired_leaf = A.make_cert("expired leaf", a.leaf_key, a.intermediate.subject, a.int_key, oid=A.RECEIPT_OID,
                               not_before=A.dt(2021), not_after=A.dt(2022))
    expired_x5c = [A.der_b64(expired_leaf), A.der_b64(a.intermediate), A.der_b64(a.root)]
    add("expired leaf at signedDate", A.sign_jws(tx(), a.leaf_key, expired_x5c))
    add("leaf expired now but valid at signedDate", A.sign_jws(tx(signed=int(A.dt(2021, 6).timestamp() * 1000)), a.leaf_key, expired_x5c))
    add("leaf not yet valid at signedDate", A.sign_jws(tx(signed=int(A.dt(2020, 6).timestamp() * 1000)), a.leaf_key, expired_x5c))
    add("signedDate before the root's validity", a.sign(tx(signed=int(A.dt(2019).timestamp() * 1000))))
    # App identity and environment.
    add("wrong bundle id", a.sign(tx(bundle="com.example.other")))
    add("bundle id missing", a.sign({k: v for k, v in tx().items() if k != "bundleId"}))
    add("environment Xcode", a.sign(tx(environment="Xcode")))
    add("environment LocalTesting", a.sign(tx(environment="LocalTesting")))
    add("environment lowercase production", a.sign(tx(environment="production")))
    add("environment missing", a.sign({k: v for k, v in tx().items() if k != "environment"}))
    # Encoding.
    good = a.sign(tx())
    h, p, s = good.split(".")
    add("truncated signature", f"{h}.{p}.{s[:-4]}")
    add("signature segment not base64url", f"{h}.{p}.{s[:10]}*{s[11:]}")
    add("payload segment not base64url", f"{h}.{p[:5]}!{p[6:]}.{s}")
    add("two segments", f"{h}.{p}")
    add("four segments", f"{good}.{s}")
    add("empty signature", f"{h}.{p}.")
    other = json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
    other["productId"] = "com.example.pro.monthly"
    add("tampered payload", f"{h}.{A.b64url(json.dumps(other).encode())}.{s}")
    header = json.loads(base64.urlsafe_b64decode(h + "=" * (-len(h) % 4)))
    header["kid"] = "x"
    add("tampered header", f"{A.b64url(json.dumps(header).encode())}.{p}.{s}")
    add("payload not JSON", A.sign_jws(b"not json", a.leaf_key, a.x5c()))
    add("payload a JSON array", A.sign_jws(b"[1,2]", a.leaf_key, a.x5c()))
    der_sig = a.leaf_key.sign(f"{h}.{p}".encode(), ec.ECDSA(hashes.SHA256()))
    add("DER signature instead of raw r||s", f"{h}.{p}.{A.b64url(der_sig)}")
    add("raw signature one byte short", f"{h}.{p}.{A.b64url(base64.urlsafe_b64decode(s + '=' * (-len(s) % 4))[:-1])}")
    zero = A.b64url(b"\x00" * 64)
    add("all-zero signature", f"{h}.{p}.{zero}")
    return cases


# The one deliberate difference from Apple's library: the third x5c entry must be a
# certificate too (Apple's verifier ignores it). Asserted below, not skipped.
STRICTER_THAN_APPLE = {"garbage third certificate"}


class AppleOracle(unittest.TestCase):
    def test_accepts_exactly_what_apples_verifier_accepts(self):
        cases = transaction_corpus()
        a = A.load_chain(CA, "a")
        cases.append(("garbage third certificate", A.sign_jws(A.transaction_payload(), a.leaf_key,
                                                               [A.der_b64(a.leaf), A.der_b64(a.intermediate), "AAAA"])))
        self.assertGreaterEqual(len(cases), 40)
        accepted = rejected = 0
        for name, jws in cases:
            with self.subTest(case=name):
                expected = apple_accepts_transaction(jws)
                if name in STRICTER_THAN_APPLE:
                    self.assertTrue(expected, "Apple's library accepts a garbage third certificate")
                    expected = False
                r = post_transaction(new_user(), jws)
                if expected:
                    self.assertEqual(r.status, 200, (name, r))
                    accepted += 1
                else:
                    self.assertEqual(r.status, 422, (name, r))
                    self.assertRegex(r.json()["error"]["code"], r"^[a-z_]+$")
                    rejected += 1
        self.assertGreaterEqual(accepted, 6)
        self.assertGreaterEqual(rejected, 30)

    def test_notification_identity_matches_apple(self):
        a = A.load_chain(CA, "a")
        cases = [
            ("production, right appAppleId", A.notification_payload(a, "TEST")),
            ("production, wrong appAppleId", A.notification_payload(a, "TEST", app_apple_id=7)),
            ("production, appAppleId missing", A.notification_payload(a, "TEST", app_apple_id=None)),
            ("sandbox, any appAppleId", A.notification_payload(a, "TEST", environment="Sandbox", app_apple_id=7)),
            ("wrong bundle", A.notification_payload(a, "TEST", bundle="com.example.other")),
            ("environment Xcode", A.notification_payload(a, "TEST", environment="Xcode")),
        ]
        nodata = A.notification_payload(a, "TEST")
        del nodata["data"]
        cases.append(("no data section", nodata))
        # The sections Apple sends in place of data (SPEC §15), right and wrong.
        section = A.section_notification_payload
        cases += [
            ("summary", section("RENEWAL_EXTENSION", "summary", A.summary_section(), "SUMMARY")),
            ("summary, wrong bundle", section("RENEWAL_EXTENSION", "summary", A.summary_section(bundle="com.other"), "SUMMARY")),
            ("summary, sandbox", section("RENEWAL_EXTENSION", "summary", A.summary_section(environment="Sandbox", app_apple_id=7),
                                         "FAILURE")),
            ("summary, wrong appAppleId", section("RENEWAL_EXTENSION", "summary", A.summary_section(app_apple_id=7), "SUMMARY")),
            ("external purchase token", section("EXTERNAL_PURCHASE_TOKEN", "externalPurchaseToken",
                                                A.external_purchase_token_section(), "UNREPORTED")),
            ("external purchase token, sandbox", section("EXTERNAL_PURCHASE_TOKEN", "externalPurchaseToken",
                                                         A.external_purchase_token_section(sandbox=True, app_apple_id=7), "UNREPORTED")),
            ("external purchase token, wrong bundle", section("EXTERNAL_PURCHASE_TOKEN", "externalPurchaseToken",
                                                              A.external_purchase_token_section(bundle="com.other"))),
            ("external purchase token, wrong appAppleId", section("EXTERNAL_PURCHASE_TOKEN", "externalPurchaseToken",
                                                                  A.external_purchase_token_section(app_apple_id=7))),
            ("app data", section("RESCIND_CONSENT", "appData", A.app_data_section())),
            ("app data, sandbox", section("RESCIND_CONSENT", "appData", A.app_data_section(environment="Sandbox"))),
            ("app data, wrong bundle", section("RESCIND_CONSENT", "appData", A.app_data_section(bundle="com.other"))),
        ]
        for name, payload in cases:
            with self.subTest(case=name):
                jws = a.sign(payload)
                r = post_notification(jws)
                self.assertEqual(r.status == 200, apple_accepts_notification(jws), (name, r))
                if r.status != 200:
                    self.assertEqual(r.status, 422, (name, r))


class Notifications(unittest.TestCase):
    def setUp(self):
        self.a = A.load_chain(CA, "a")

    def bound_user(self, product="com.example.plus.monthly", **extra):
        """A user whose App Store subscription is bound by posting its first transaction."""
        user = new_user()
        original = str(uuid.uuid4().int)[:16]
        r = post_transaction(user, self.a.sign(A.transaction_payload(original_id=original, product=product, **extra)))
        self.assertEqual(r.status, 200, r)
        return user, original

    def notify(self, original, notification_type, subtype=None, renewal=None, signed=None, **tx):
        tx.setdefault("transaction_id", str(uuid.uuid4().int)[:16])
        payload = A.notification_payload(self.a, notification_type, subtype,
                                         transaction=A.transaction_payload(original_id=original, signed=signed, **tx),
                                         renewal=renewal, signed=signed)
        r = post_notification(self.a.sign(payload))
        self.assertEqual(r.status, 200, r)
        return r.json()

    def test_subscribed_grants_the_catalog_tier(self):
        user, original = self.bound_user()
        self.notify(original, "SUBSCRIBED", "INITIAL_BUY")
        body = access(user)
        self.assertEqual((body["tier"], body["phase"]), ("plus", "active"))
        self.assertEqual(body["store"]["productId"], "com.example.plus.monthly")

    def test_product_outside_the_catalog_grants_nothing(self):
        user, _ = self.bound_user(product="com.example.unknown")
        self.assertEqual(access(user)["tier"], "free")

    def test_free_trial(self):
        user, _ = self.bound_user(offerType=1, offerDiscountType="FREE_TRIAL", price=0)
        body = access(user)
        self.assertEqual((body["tier"], body["phase"]), ("plus", "trial"))
        self.assertIsNotNone(body["trial"])

    def test_did_renew_extends(self):
        user, original = self.bound_user()
        later = A.now_ms() + 60 * DAY
        self.notify(original, "DID_RENEW", purchase=A.now_ms(), expires=later, signed=A.now_ms() + 1000)
        body = access(user)
        self.assertEqual(body["tier"], "plus")
        self.assertTrue(body["store"]["expiresAt"].startswith(time.strftime("%Y-%m-%d", time.gmtime(later / 1000))))

    def test_auto_renew_disabled_then_enabled(self):
        user, original = self.bound_user()
        t = A.now_ms()
        self.notify(original, "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed=t + 1000,
                    renewal=A.renewal_payload(original, autoRenewStatus=0))
        body = access(user)
        self.assertEqual((body["tier"], body["phase"], body["store"]["willRenew"]), ("plus", "canceled", False))
        self.notify(original, "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", signed=t + 2000,
                    renewal=A.renewal_payload(original, autoRenewStatus=1))
        body = access(user)
        self.assertEqual((body["phase"], body["store"]["willRenew"]), ("active", True))

    def test_downgrade_is_pending_and_no_subtype_cancels_it(self):
        user, original = self.bound_user(product="com.example.pro.monthly")
        t = A.now_ms()
        self.notify(original, "DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", signed=t + 1000, product="com.example.pro.monthly",
                    renewal=A.renewal_payload(original, product="com.example.plus.monthly"))
        body = access(user)
        self.assertEqual(body["tier"], "pro")
        self.assertEqual(body["pendingChange"]["productId"], "com.example.plus.monthly")
        self.assertEqual(body["pendingChange"]["tier"], "plus")
        self.notify(original, "DID_CHANGE_RENEWAL_PREF", None, signed=t + 2000, product="com.example.pro.monthly",
                    renewal=A.renewal_payload(original, product="com.example.pro.monthly"))
        self.assertIsNone(access(user)["pendingChange"])

    def test_upgrade_is_immediate_with_its_transaction(self):
        user, original = self.bound_user()
        self.notify(original, "DID_CHANGE_RENEWAL_PREF", "UPGRADE", signed=A.now_ms() + 1000, product="com.example.pro.monthly",
                    purchase=A.now_ms(), renewal=A.renewal_payload(original, product="com.example.pro.monthly"))
        self.assertEqual(access(user)["tier"], "pro")

    def test_grace_period_then_billing_retry(self):
        user, original = self.bound_user()
        t = A.now_ms()
        self.notify(original, "DID_FAIL_TO_RENEW", "GRACE_PERIOD", signed=t + 1000, expires=t - 1000,
                    renewal=A.renewal_payload(original, gracePeriodExpiresDate=t + 6 * DAY, isInBillingRetryPeriod=True))
        body = access(user)
        self.assertEqual((body["tier"], body["phase"]), ("plus", "grace"))
        self.assertIsNotNone(body["graceExpiresAt"])
        self.notify(original, "GRACE_PERIOD_EXPIRED", None, signed=t + 2000, expires=t - 1000,
                    renewal=A.renewal_payload(original, isInBillingRetryPeriod=True))
        body = access(user)
        self.assertEqual((body["tier"], body["phase"]), ("free", "billingRetry"))

    def test_fail_to_renew_without_grace_is_billing_retry(self):
        user, original = self.bound_user()
        t = A.now_ms()
        self.notify(original, "DID_FAIL_TO_RENEW", None, signed=t + 1000, expires=t - 1000,
                    renewal=A.renewal_payload(original, isInBillingRetryPeriod=True))
        self.assertEqual(access(user)["phase"], "billingRetry")

    def test_expired(self):
        user, original = self.bound_user()
        t = A.now_ms()
        self.notify(original, "EXPIRED", "VOLUNTARY", signed=t + 1000, expires=t - 1000)
        body = access(user)
        self.assertEqual((body["tier"], body["phase"]), ("free", "expired"))

    def test_refund_revoke_and_reversal(self):
        for kind in ("REFUND", "REVOKE"):
            with self.subTest(kind=kind):
                user, original = self.bound_user()
                t = A.now_ms()
                self.notify(original, kind, None, signed=t + 1000, revocationDate=t, revocationReason=0, transaction_id=original)
                body = access(user)
                self.assertEqual((body["tier"], body["phase"]), ("free", "revoked"))
                if kind == "REFUND":
                    self.notify(original, "REFUND_REVERSED", None, signed=t + 2000, transaction_id=original)
                    self.assertEqual(access(user)["tier"], "plus")

    def test_renewal_extended_and_offer_redeemed_and_price_increase(self):
        user, original = self.bound_user()
        t = A.now_ms()
        self.notify(original, "RENEWAL_EXTENDED", None, signed=t + 1000, expires=t + 90 * DAY)
        self.notify(original, "OFFER_REDEEMED", None, signed=t + 2000, expires=t + 90 * DAY, offerType=2)
        self.notify(original, "PRICE_INCREASE", "PENDING", signed=t + 3000, expires=t + 90 * DAY)
        body = access(user)
        self.assertEqual((body["tier"], body["phase"]), ("plus", "active"))
        self.assertTrue(body["store"]["expiresAt"].startswith(time.strftime("%Y-%m-%d", time.gmtime((t + 90 * DAY) / 1000))))

    def test_test_and_unknown_types_are_stored_and_answered_200(self):
        r = post_notification(self.a.sign(A.notification_payload(self.a, "TEST")))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["status"], "ignored")
        user, original = self.bound_user()
        # A type the server does not act on, carrying a verified transaction: its period and
        # expiry still count (SPEC §5), so it is applied, with its own raw type.
        body = self.notify(original, "CONSUMPTION_REQUEST", None)
        self.assertEqual(body["status"], "applied")
        r = post_notification(self.a.sign(A.notification_payload(self.a, "SOME_SUMMARY_TYPE")))
        self.assertEqual((r.status, r.json()["status"]), (200, "ignored"), "without a transaction it is only stored")

    def test_duplicate_twenty_concurrent(self):
        user, original = self.bound_user()
        payload = A.notification_payload(self.a, "DID_RENEW", transaction=A.transaction_payload(original_id=original, transaction_id="7" + original[1:]))
        jws = self.a.sign(payload)
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            results = list(pool.map(lambda _: post_notification(jws), range(20)))
        self.assertTrue(all(r.status == 200 for r in results), results)
        self.assertEqual(sum(1 for r in results if not r.json()["duplicate"]), 1)
        rows = db(f"SELECT COUNT(*) FROM billing_events WHERE provider_event_id = '{payload['notificationUUID']}'")
        self.assertEqual(rows, [["1"]])

    def test_unbound_notification_folds_in_when_the_binding_appears(self):
        original = str(uuid.uuid4().int)[:16]
        t = A.now_ms()
        far = t + 200 * DAY
        r = post_notification(self.a.sign(A.notification_payload(self.a, "DID_RENEW", transaction=A.transaction_payload(
            original_id=original, transaction_id="5" + original[1:], purchase=t, expires=far, signed=t + 5000), signed=t + 5000)))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["status"], "unmatched")
        user = new_user()
        r = post_transaction(user, self.a.sign(A.transaction_payload(original_id=original, purchase=t - DAY, signed=t)))
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.json()["store"]["expiresAt"].startswith(time.strftime("%Y-%m-%d", time.gmtime(far / 1000))))

    def test_notification_with_app_account_token_binds_its_user(self):
        user = new_user()
        access(user)  # known
        original = str(uuid.uuid4().int)[:16]
        body = self.notify(original, "SUBSCRIBED", "INITIAL_BUY", appAccountToken=user)
        self.assertEqual(body["status"], "applied")
        self.assertEqual(access(user)["tier"], "plus")
        self.assertEqual(db(f"SELECT user_id, source FROM billing_apple_bindings WHERE original_transaction_id = '{original}'"),
                         [[user, "app_account_token"]])

    def test_refund_after_renewal_in_both_arrival_orders(self):
        for order in ("renewal first", "refund first"):
            with self.subTest(order=order):
                user, original = self.bound_user()
                t = A.now_ms()
                renewal_tx = "3" + original[1:]
                renew = A.notification_payload(self.a, "DID_RENEW", transaction=A.transaction_payload(
                    original_id=original, transaction_id=renewal_tx, purchase=t, expires=t + 30 * DAY, signed=t + 1000), signed=t + 1000)
                refund = A.notification_payload(self.a, "REFUND", transaction=A.transaction_payload(
                    original_id=original, transaction_id=renewal_tx, purchase=t, expires=t + 30 * DAY, signed=t + 2000,
                    revocationDate=t + 1500, revocationReason=0), signed=t + 2000)
                first, second = (renew, refund) if order == "renewal first" else (refund, renew)
                for n in (first, second):
                    self.assertEqual(post_notification(self.a.sign(n)).status, 200)
                body = access(user)
                self.assertEqual((body["tier"], body["phase"]), ("free", "revoked"), order)


class Binding(unittest.TestCase):
    def setUp(self):
        self.a = A.load_chain(CA, "a")

    def test_same_user_again_is_idempotent(self):
        user = new_user()
        jws = self.a.sign(A.transaction_payload())
        r1, r2 = post_transaction(user, jws), post_transaction(user, jws)
        self.assertEqual((r1.status, r2.status), (200, 200))
        self.assertEqual(r2.json()["transaction"], {"duplicate": True, "binding": "already_owned"})
        self.assertEqual(r1.json()["tier"], r2.json()["tier"])

    def test_deny_policy_refuses_another_user_and_audits(self):
        original = str(uuid.uuid4().int)[:16]
        owner, other = new_user(), new_user()
        self.assertEqual(post_transaction(owner, self.a.sign(A.transaction_payload(original_id=original))).status, 200)
        renewal = self.a.sign(A.transaction_payload(original_id=original, transaction_id="8" + original[1:]))
        for restore in (False, True):
            r = post_transaction(other, renewal, restore=restore)
            self.assertEqual(r.status, 409, r)
            self.assertEqual(r.json()["error"]["code"], "subscription_bound_elsewhere")
        self.assertEqual(access(other)["tier"], "free")
        self.assertEqual(access(owner)["tier"], "plus")
        audit = db(f"SELECT action, user_id, previous_user_id FROM billing_binding_audit WHERE original_transaction_id = '{original}' ORDER BY id")
        self.assertEqual(audit, [["bound", owner, "NULL"], ["denied", other, owner], ["denied", other, owner]])

    def test_two_users_posting_the_same_transaction_concurrently(self):
        for _ in range(5):
            jws = self.a.sign(A.transaction_payload())
            users = [new_user(), new_user()]
            for u in users:
                access(u)
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                results = list(pool.map(lambda u: post_transaction(u, jws), users))
            self.assertEqual(sorted(r.status for r in results), [200, 409], results)
            tiers = sorted(access(u)["tier"] for u in users)
            self.assertEqual(tiers, ["free", "plus"])

    def test_app_account_token_must_name_the_caller(self):
        r = post_transaction(new_user(), self.a.sign(A.transaction_payload(appAccountToken=new_user())))
        self.assertEqual(r.status, 403, r)
        self.assertEqual(r.json()["error"]["code"], "app_account_token_mismatch")


class OneSnapshot(unittest.TestCase):
    """Every answer that carries an access snapshot carries the same one (issue 33): the posted
    transaction's answer and access.get's snapshot have exactly GET /billing/access's fields."""

    def test_each_snapshot_answer_has_the_fields_of_get_access(self):
        a = A.load_chain(CA, "a")
        user = new_user()
        original = "4" + str(uuid.uuid4().int)[:15]
        posted = post_transaction(user, a.sign(A.transaction_payload(original_id=original, appAccountToken=user)))
        self.assertEqual(posted.status, 200, posted)
        got = access(user)
        answer = posted.json()
        self.assertEqual(set(answer) - {"transaction"}, set(got))
        for key in ["planVersion", "capabilities", "balances", "enforcement"]:
            self.assertIn(key, answer)
        self.assertEqual({k: answer[k] for k in ["tier", "phase", "planVersion", "capabilities", "enforcement"]},
                         {k: got[k] for k in ["tier", "phase", "planVersion", "capabilities", "enforcement"]})
        self.assertEqual(set(answer["balances"]), set(got["balances"]))
        snapshot = rpc("access.get", {"userId": user})["result"]["snapshot"]
        self.assertEqual(set(snapshot), set(got))
        # One reader: the same values too, balances included (nothing was consumed between).
        same = ["tier", "phase", "planVersion", "capabilities", "enforcement", "balances", "sources"]
        self.assertEqual({k: snapshot[k] for k in same if k in got}, {k: got[k] for k in same if k in got})


class Quarantine(unittest.TestCase):
    def test_untrusted_delivery_is_refused_and_never_stored(self):
        """Signed by a chain no configured root anchors: nothing can make it verify, so it is
        refused every time and never stored (SPEC §13: the route is public)."""
        import hashlib
        b = A.load_chain(CA, "b")
        jws = b.sign(A.notification_payload(b, "TEST"))
        rows = db("SELECT COUNT(*) FROM billing_quarantine")
        for _ in range(3):
            r = post_notification(jws)
            self.assertEqual(r.status, 422, r)
            self.assertEqual(r.json()["error"]["code"], "untrusted_chain")
        self.assertEqual(db(f"SELECT COUNT(*) FROM billing_quarantine WHERE payload_sha256 = '{hashlib.sha256(jws.encode()).hexdigest()}'"), [["0"]])
        self.assertEqual(db("SELECT COUNT(*) FROM billing_quarantine"), rows)

    def test_a_verified_delivery_failing_a_setting_is_quarantined_once_per_signed_payload(self):
        """Apple's signature verifies but the data names another bundle (the operator's
        `apple.bundleId` may be the wrong one): kept, its signedPayload only, for
        `events.retryQuarantined` after the fix; a re-delivery counts, it adds no row."""
        import hashlib
        a = A.load_chain(CA, "a")
        jws = a.sign(A.notification_payload(a, "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", bundle="com.example.another-app"))
        for _ in range(3):
            r = post_notification(jws)
            self.assertEqual(r.status, 422, r)
            self.assertEqual(r.json()["error"]["code"], "bundle_mismatch")
        rows = db(f"SELECT reason, deliveries, resolved_at, LENGTH(payload) FROM billing_quarantine "
                  f"WHERE payload_sha256 = '{hashlib.sha256(jws.encode()).hexdigest()}'")
        self.assertEqual(rows, [["bundle_mismatch", "3", "NULL", str(len(jws))]])

    def test_encoding_variants_of_one_notification_are_one_quarantine_row(self):
        """SPEC §19: one genuine mis-configured notification, then 60 other spellings of it —
        padding, non-zero spare bits, the standard alphabet, and the high-S twin of its
        ECDSA signature (which verifies) in every spelling — leave exactly one row: base64url
        is canonical only, and the quarantine keeps one row per notificationUUID."""
        a = A.load_chain(CA, "a")
        payload = A.notification_payload(a, "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", bundle="com.example.variants")
        jws = a.sign(payload)
        header, body, signature = jws.split(".")
        raw = base64.urlsafe_b64decode(signature + "==")
        r_, s_ = int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")
        high_s = A.b64url(r_.to_bytes(32, "big") + (P256_ORDER - s_).to_bytes(32, "big"))
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

        def spellings(segment):
            out = [segment + "=" * (-len(segment) % 4), segment + "=", segment + "==", segment + "===",
                   segment.replace("-", "+").replace("_", "/")]
            if len(segment) % 4:
                spare = 0x0F if len(segment) % 4 == 2 else 0x03
                value = alphabet.index(segment[-1])
                spare_bits = [segment[:-1] + alphabet[value | bits] for bits in range(1, spare + 1)]
                out += spare_bits + [x + "=" * (-len(x) % 4) for x in spare_bits]
            return [x for x in out if x != segment]

        variants = [f"{header}.{body}.{high_s}"]
        variants += [f"{header}.{body}.{sig}" for sig in spellings(signature) + spellings(high_s)]
        variants += [f"{h}.{body}.{signature}" for h in spellings(header)]
        variants += [f"{header}.{b}.{signature}" for b in spellings(body)]
        variants = list(dict.fromkeys(v for v in variants if v != jws))[:60]
        self.assertEqual(len(variants), 60)
        before = int(db("SELECT COUNT(*) FROM billing_quarantine")[0][0])
        first = post_notification(jws)
        self.assertEqual((first.status, first.json()["error"]["code"]), (422, "bundle_mismatch"), first)
        codes = {}
        for variant in variants:
            r = post_notification(variant)
            self.assertEqual(r.status, 422, r)
            codes[r.json()["error"]["code"]] = codes.get(r.json()["error"]["code"], 0) + 1
        self.assertLessEqual(set(codes), {"bundle_mismatch", "malformed_jws", "bad_signature"}, codes)
        self.assertEqual(codes["bundle_mismatch"], 1, "only the high-S twin verifies")
        uuid_ = sql_string(payload["notificationUUID"])
        self.assertEqual(db(f"SELECT COUNT(*), MAX(deliveries) FROM billing_quarantine WHERE provider_event_id = {uuid_}"),
                         [["1", "2"]])
        self.assertEqual(int(db("SELECT COUNT(*) FROM billing_quarantine")[0][0]), before + 1)

    def test_apple_signed_data_that_is_no_notification_is_400_and_not_stored(self):
        """A transaction or renewal-info JWS posted to the webhook verifies, but is no
        notification: 400 not_a_notification, never quarantined (SPEC §19)."""
        a = A.load_chain(CA, "a")
        before = int(db("SELECT COUNT(*) FROM billing_quarantine")[0][0])
        for signed in [a.sign(A.transaction_payload(bundle="com.example.another-app")),
                       a.sign(A.renewal_payload("2000000000000001")), a.sign(A.transaction_payload())]:
            r = post_notification(signed)
            self.assertEqual(r.status, 400, r)
            self.assertEqual(r.json()["error"]["code"], "not_a_notification", r)
        self.assertEqual(int(db("SELECT COUNT(*) FROM billing_quarantine")[0][0]), before)

    def test_a_test_notification_failing_a_setting_is_refused_and_not_stored(self):
        """Anyone with an app of his own can have Apple sign TEST notifications at will:
        one failing a setting has nothing to re-run and is not kept."""
        a = A.load_chain(CA, "a")
        before = int(db("SELECT COUNT(*) FROM billing_quarantine")[0][0])
        r = post_notification(a.sign(A.notification_payload(a, "TEST", bundle="com.example.someone-else")))
        self.assertEqual((r.status, r.json()["error"]["code"]), (422, "bundle_mismatch"), r)
        self.assertEqual(int(db("SELECT COUNT(*) FROM billing_quarantine")[0][0]), before)

    def test_bodies_that_are_not_a_compact_jws_are_refused_and_not_quarantined(self):
        """Anyone can post to the webhook: what is not even `{"signedPayload": "<compact JWS>"}`
        is answered with its precise 4xx and writes nothing, so it cannot fill the bounded
        quarantine (docs/appstore.md)."""
        def seg(value):
            return A.b64url(value if isinstance(value, bytes) else json.dumps(value).encode())
        tag = uuid.uuid4().hex  # each body is new: no earlier row can absorb it as a re-delivery
        payload = seg({"notificationUUID": tag})
        cases = [
            ("not JSON", b"not json " + tag.encode(), 400, "invalid_json"),
            ("JSON, not an object", json.dumps([tag]).encode(), 400, "invalid_payload"),
            ("no signedPayload", json.dumps({"nope": tag}).encode(), 400, "invalid_payload"),
            ("empty signedPayload", json.dumps({"signedPayload": "", "t": tag}).encode(), 400, "invalid_payload"),
            ("signedPayload not a string", json.dumps({"signedPayload": 5, "t": tag}).encode(), 400, "invalid_payload"),
            ("one segment", json.dumps({"signedPayload": tag}).encode(), 422, "malformed_jws"),
            ("two segments", json.dumps({"signedPayload": f"{payload}.{payload}"}).encode(), 422, "malformed_jws"),
            ("four segments", json.dumps({"signedPayload": f"{payload}.{payload}.{payload}.AAAA"}).encode(), 422, "malformed_jws"),
            ("empty signature", json.dumps({"signedPayload": f"{seg({'alg': 'ES256'})}.{payload}."}).encode(), 422, "malformed_jws"),
            ("not base64url", json.dumps({"signedPayload": f"a.b.c{tag}"}).encode(), 422, "malformed_jws"),
            ("header not JSON", json.dumps({"signedPayload": f"{seg(b'garbage')}.{payload}.AAAA"}).encode(), 422, "malformed_jws"),
            ("header not an object", json.dumps({"signedPayload": f"{seg(['ES256'])}.{payload}.AAAA"}).encode(), 422, "malformed_jws"),
            ("payload not an object", json.dumps({"signedPayload": f"{seg({'alg': 'ES256'})}.{seg(tag)}.AAAA"}).encode(), 422, "malformed_jws"),
            ("JWS over 256 KiB", json.dumps({"signedPayload": f"{seg({'alg': 'ES256'})}.{seg({'p': 'x' * 300_000})}.AAAA"}).encode(),
             413, "payload_too_large"),
        ]
        rows = int(db("SELECT COUNT(*) FROM billing_quarantine")[0][0])
        import hashlib
        for name, body, status, code in cases:
            with self.subTest(case=name):
                r = request("POST", "/api/v1/billing/webhooks/apple", body=body, headers={"Content-Type": "application/json"})
                self.assertEqual(r.status, status, r)
                self.assertEqual(r.json()["error"]["code"], code, r)
                self.assertEqual(db(f"SELECT COUNT(*) FROM billing_quarantine WHERE payload_sha256 = '{hashlib.sha256(body).hexdigest()}'"),
                                 [["0"]])
        self.assertEqual(int(db("SELECT COUNT(*) FROM billing_quarantine")[0][0]), rows, "no quarantine row for any of them")

    def test_a_bad_signature_is_refused_and_never_stored(self):
        """A compact JWS whose signature does not verify (here: chain A's signature over another
        payload) is refused and not stored."""
        a = A.load_chain(CA, "a")
        payload = A.notification_payload(a, "TEST")
        header, body_segment, _ = a.sign(payload).split(".")
        _, _, other_signature = a.sign(dict(payload, signedDate=payload["signedDate"] + 1)).split(".")
        jws = f"{header}.{body_segment}.{other_signature}"
        r = post_notification(jws)
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.json()["error"]["code"], "bad_signature")
        import hashlib
        self.assertEqual(db(f"SELECT COUNT(*) FROM billing_quarantine WHERE payload_sha256 = '{hashlib.sha256(jws.encode()).hexdigest()}'"),
                         [["0"]])


if __name__ == "__main__":
    unittest.main()
