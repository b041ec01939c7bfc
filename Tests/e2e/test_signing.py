"""What the server signs (SPEC §17), end to end through nginx and the real processes, each
signature checked by somebody else's code: PyJWT (a standard JOSE library) for the
entitlement tokens against GET /billing/keys, and Apple's app-store-server-library for the
App Store offer signatures (its signature creators make the same header and claims from the
same inputs; only the nonce and iat differ).

Entitlement tokens: the claims equal the snapshot; validUntil is the earlier of the access's
end and now + entitlements.offlineSeconds for every kind of source (none, a store period
longer and shorter than the bound, a permanent and an ending grant); a tampered token, a
token of a key not published, and an expired one fail. Rotation, on a worker of its own
with a configuration of its own (asked over FastCGI by libfcgi's cgi-fcgi): the new key is
published, then signs after SIGHUP while the old one's tokens still verify, and they stop
verifying once it is no longer published.

Offer signatures: only for the promotional offer the user's paywall shows at his ladder
stage; a deeper stage, a disabled purchase switch, an unknown product and a missing token
are refused; introductory-offer eligibility follows trialEligible across both providers'
trials; version 1 (the original API) verifies over Apple's joined fields."""
import base64
import copy
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import uuid

import jwt
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from appstoreserverlibrary.jws_signature_creator import (IntroductoryOfferEligibilitySignatureCreator,
                                                         PromotionalOfferV2SignatureCreator)

from harness import appstore as A
from harness import entitlements as E
from harness.billing import REPO, VAR_DIR, request, rpc, wait_until

KEYS = "/api/v1/billing/keys"
OFFERS = "/api/v1/billing/apple/offer-signatures"
OFFERINGS = "/api/v1/billing/offerings"
PAYWALL = "/api/v1/billing/paywall-events"
BIN_DIR = os.path.dirname(os.environ.get("BILLING_RPC_BINARY", os.path.join(REPO, ".build/release/billing-rpc")))
STACK_CONFIG = os.path.join(VAR_DIR, "billing.json")
EXAMPLE = ["com.example.plus.monthly", "com.example.pro.monthly", "com.example.plus.yearly"]


def auth(user):
    return {"Authorization": "Bearer " + E.token(user)}


def jwks():
    r = request("GET", KEYS)
    assert r.status == 200, r
    return r.json()


def verify(token, keys=None):
    """The token's claims, verified by PyJWT with the published key its kid names."""
    keys = jwt.PyJWKSet.from_dict(keys or jwks())
    kid = jwt.get_unverified_header(token)["kid"]
    matching = [k for k in keys.keys if k.key_id == kid]
    if not matching:
        raise jwt.InvalidKeyError("kid %s is not published" % kid)
    return jwt.decode(token, key=matching[0].key, algorithms=["ES256"], issuer=A.ENTITLEMENT_ISSUER,
                      options={"require": ["exp", "iat", "iss", "sub"]})


def signed_access(user):
    r = request("GET", E.ACCESS + "?signed=true", headers=auth(user))
    assert r.status == 200, r
    return r.json()


def iso_ms(text):
    """ISO-8601 with milliseconds and Z → milliseconds since the epoch."""
    return int(time.mktime(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone) * 1000 + int(text[20:23])


class EntitlementTokens(unittest.TestCase):
    def assert_token_says_snapshot(self, snapshot, expires_at):
        """The claims equal the snapshot; validUntil is the earlier bound."""
        claims = verify(snapshot["signedSnapshot"])
        self.assertEqual(claims["sub"], snapshot["userId"])
        for key in ("tier", "phase", "revision"):
            self.assertEqual(claims[key], snapshot[key], key)
        self.assertEqual(claims["capabilities"], snapshot.get("capabilities", []))
        self.assertEqual(claims["expiresAt"], expires_at)
        server = iso_ms(snapshot["serverTime"])
        bound = server + A.OFFLINE_SECONDS * 1000
        expected = bound if expires_at is None else min(iso_ms(expires_at), bound)
        self.assertEqual(iso_ms(claims["validUntil"]), expected)
        self.assertEqual(claims["exp"], expected // 1000)
        self.assertEqual(claims["iat"], server // 1000)
        return claims

    def test_keys_are_a_public_jwks_of_p256_keys(self):
        r = request("GET", KEYS)
        self.assertEqual(r.status, 200, r)
        self.assertIn("max-age", r.headers.get("cache-control", ""))
        keys = r.json()["keys"]
        self.assertEqual(len(keys), 1)
        for key in keys:
            self.assertEqual((key["kty"], key["crv"], key["alg"], key["use"]), ("EC", "P-256", "ES256", "sig"))
            self.assertNotIn("d", key, "never the private half")

    def test_a_free_user_s_token_is_valid_for_the_offline_bound(self):
        user = E.known_user()
        snapshot = signed_access(user)
        claims = self.assert_token_says_snapshot(snapshot, None)
        self.assertEqual(claims["tier"], "free")
        # Without ?signed=true the answer is as before, without a token.
        self.assertNotIn("signedSnapshot", E.access(user))

    def test_each_kind_of_source_bounds_valid_until(self):
        cases = []
        long_sub = E.known_user()     # a store period longer than the bound: the bound decides
        E.rc_deliver(E.rc_event("INITIAL_PURCHASE", long_sub, at=E.now_ms(), sub=E.rc_subscription_id(),
                                product="com.example.plus.monthly", expires=E.now_ms() + 30 * E.DAY))
        cases.append((long_sub, "store"))
        short_sub = E.known_user()    # a period ending within the bound: its end decides
        E.rc_deliver(E.rc_event("INITIAL_PURCHASE", short_sub, at=E.now_ms(), sub=E.rc_subscription_id(),
                                product="com.example.plus.monthly", expires=E.now_ms() + 5 * E.HOUR))
        cases.append((short_sub, "store"))
        for expires in (None, E.iso(E.now_ms() + 2 * E.HOUR)):
            user = E.known_user()
            params = {"userId": user, "tier": "pro", "reason": "e2e signing", "idempotencyKey": "sign-" + user,
                      "actor": E.ACTOR}
            if expires:
                params["expiresAt"] = expires
            reply = rpc("grants.create", params)
            self.assertIn("result", reply, reply)
            cases.append((user, "grant"))
        for user, kind in cases:
            with self.subTest(user=user, kind=kind):
                snapshot = signed_access(user)
                self.assertEqual(snapshot["source"], kind)
                top = [s for s in snapshot["sources"] if s["tier"] == snapshot["tier"]]
                ends = [s["expiresAt"] for s in top]
                expected = None if None in ends else max(ends, key=iso_ms)
                self.assert_token_says_snapshot(snapshot, expected)

    def test_a_tampered_or_foreign_token_fails(self):
        token = signed_access(E.known_user())["signedSnapshot"]
        header, payload, signature = token.split(".")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        claims["tier"] = "pro"
        forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        with self.assertRaises(jwt.InvalidSignatureError):
            verify(".".join([header, forged, signature]))
        flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
        with self.assertRaises(jwt.InvalidSignatureError):
            verify(".".join([header, payload, flipped]))
        # Signed by a key that is not published, under the published kid.
        other = ec.generate_private_key(ec.SECP256R1())
        kid = jwt.get_unverified_header(token)["kid"]
        with self.assertRaises(jwt.InvalidSignatureError):
            verify(jwt.encode(claims, other, algorithm="ES256", headers={"kid": kid}))
        # Lapsed: a standard library refuses it by exp alone.
        key = serialization.load_pem_private_key(open(os.path.join(VAR_DIR, "testca", A.ENTITLEMENT_KEY_FILES[0]), "rb").read(), None)
        claims.update(tier="free", exp=int(time.time()) - 10)
        with self.assertRaises(jwt.ExpiredSignatureError):
            verify(jwt.encode(claims, key, algorithm="ES256", headers={"kid": kid}))

    def test_bad_requests(self):
        user = E.known_user()
        r = request("GET", E.ACCESS + "?signed=yes", headers=auth(user))
        self.assertEqual(r.status, 400, r)
        r = request("GET", E.ACCESS + "?signed=true")
        self.assertEqual(r.status, 401, r)
        r = request("POST", KEYS, body={})
        self.assertEqual(r.status, 405, r)


class Worker:
    """One billing-fcgi with a configuration of its own, on a socket of its own."""

    def __init__(self, tmp, key_files):
        with open(STACK_CONFIG) as f:
            self.config = json.load(f)
        self.path = os.path.join(tmp, "billing.json")
        self.configure(key_files)
        self.socket = os.path.join(tmp, "signing-worker.sock")
        self.out = open(os.path.join(tmp, "worker.out"), "ab")
        self.process = subprocess.Popen([os.path.join(BIN_DIR, "billing-fcgi"), "--config", self.path, "--socket", self.socket,
                                         "--threads", "2", "--log-file", os.path.join(tmp, "worker.log"),
                                         "--metrics-dir", os.path.join(tmp, "metrics")], stdout=self.out, stderr=self.out)
        assert wait_until(lambda: os.path.exists(self.socket) or self.process.poll() is not None, 20), "no socket"
        assert self.process.poll() is None, open(os.path.join(tmp, "worker.out")).read()

    def configure(self, key_files):
        self.config["entitlements"]["signingKeyFiles"] = key_files
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.config, f)
        os.rename(self.path + ".tmp", self.path)

    def reload(self, key_files):
        """The operator's rotation step: the list changed in the configuration, then SIGHUP."""
        self.configure(key_files)
        self.process.send_signal(signal.SIGHUP)

    def get(self, uri, token=None):
        path, _, query = uri.partition("?")
        env = dict(os.environ, REQUEST_METHOD="GET", REQUEST_URI=uri, DOCUMENT_URI=path, SERVER_PROTOCOL="HTTP/1.1",
                   REMOTE_ADDR="127.0.0.1", QUERY_STRING=query)
        if token:
            env["HTTP_AUTHORIZATION"] = "Bearer " + token
        r = subprocess.run(["cgi-fcgi", "-bind", "-connect", self.socket], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr
        head, _, body = r.stdout.partition(b"\r\n\r\n")
        return json.loads(body)

    def token(self, user):
        return self.get(E.ACCESS + "?signed=true", E.token(user))["signedSnapshot"]

    def keys(self):
        return self.get(KEYS)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)
        self.out.close()


class Rotation(unittest.TestCase):
    def setUp(self):
        base = os.path.join(VAR_DIR, "tmp")
        self.tmp = tempfile.mkdtemp(prefix="signing-", dir=base if os.path.isdir(base) else None)
        self.old, self.new = (os.path.join(VAR_DIR, "testca", name) for name in A.ENTITLEMENT_KEY_FILES)
        self.worker = Worker(self.tmp, [self.old])

    def tearDown(self):
        self.worker.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def kids(self):
        return [k["kid"] for k in self.worker.keys()["keys"]]

    def test_a_key_is_published_then_signs_and_old_tokens_verify_while_it_is_published(self):
        user = E.known_user()
        old_token = self.worker.token(user)
        old_kid = jwt.get_unverified_header(old_token)["kid"]
        self.assertEqual(self.kids(), [old_kid])
        # Step 1: the new key published beside the old one, which still signs.
        self.worker.reload([self.old, self.new])
        self.assertTrue(wait_until(lambda: len(self.kids()) == 2, 10), self.kids())
        new_kid = self.kids()[1]
        self.assertEqual(jwt.get_unverified_header(self.worker.token(user))["kid"], old_kid)
        # Step 2: the new key first: it signs; the old tokens still verify against the set.
        self.worker.reload([self.new, self.old])
        self.assertTrue(wait_until(lambda: self.kids() == [new_kid, old_kid], 10), self.kids())
        new_token = self.worker.token(user)
        self.assertEqual(jwt.get_unverified_header(new_token)["kid"], new_kid)
        keys = self.worker.keys()
        self.assertEqual(verify(old_token, keys)["sub"], user)
        self.assertEqual(verify(new_token, keys)["sub"], user)
        # Step 3: the old key withdrawn: its tokens no longer verify, the new ones do.
        self.worker.reload([self.new])
        self.assertTrue(wait_until(lambda: self.kids() == [new_kid], 10), self.kids())
        keys = self.worker.keys()
        with self.assertRaises(jwt.InvalidKeyError):
            verify(old_token, keys)
        self.assertEqual(verify(new_token, keys)["sub"], user)

    def test_a_broken_list_keeps_the_keys_in_force(self):
        before = self.kids()
        broken = os.path.join(self.tmp, "half-written.pem")
        with open(broken, "w") as f:
            f.write("-----BEGIN PRIVATE KEY-----\nMIGH")
        self.worker.reload([broken])
        time.sleep(1.5)
        self.assertEqual(self.kids(), before)
        self.assertEqual(jwt.get_unverified_header(self.worker.token(E.known_user()))["kid"], before[0])
        with open(os.path.join(self.tmp, "worker.log")) as f:
            log = f.read()
        self.assertIn("entitlement signing keys not reloaded", log)
        self.assertNotIn("MIGH", log, "a key file's content is never logged")


def offering_products(user, placement="onboarding"):
    r = request("GET", OFFERINGS + "?placement=" + placement, headers=auth(user))
    assert r.status == 200, r
    return r.json()


def dismiss(user, offering, placement="onboarding"):
    r = request("POST", PAYWALL, body={"type": "dismiss", "placement": placement, "offering": offering,
                                        "eventId": uuid.uuid4().hex}, headers=auth(user))
    assert r.status in (200, 201), r


def offer(user, body):
    return request("POST", OFFERS, body=body, headers=auth(user))


def in_app_key():
    with open(os.path.join(VAR_DIR, "testca", A.IN_APP_KEY_FILE), "rb") as f:
        return f.read()


def apples(creator, *args):
    """What Apple's library signs for the same inputs: (header, claims)."""
    token = creator(in_app_key(), A.IN_APP_KEY_ID, A.IN_APP_ISSUER_ID, A.BUNDLE_ID).create_signature(*args)
    return jwt.get_unverified_header(token), jwt.decode(token, options={"verify_signature": False})


def ours(signature, audience):
    """The server's signature, verified with the In-App Purchase key's public half."""
    public = serialization.load_pem_private_key(in_app_key(), None).public_key()
    return jwt.get_unverified_header(signature), jwt.decode(signature, key=public, algorithms=["ES256"], audience=audience)


def without_nonce_and_iat(claims):
    return {k: v for k, v in claims.items() if k not in ("nonce", "iat")}


LADDER_PRODUCT = None
LADDER_PLACEMENTS = ()


def setUpModule():
    """The test stack's catalog products in the ladder's offerings (as test_offerings adds them),
    published again only if the contract in force lacks them."""
    global LADDER_PRODUCT, LADDER_PLACEMENTS
    listed = rpc("offerings.list")["result"]
    contract = copy.deepcopy(listed["versions"][0]["contract"])
    changed = False
    group = contract["subscriptionGroups"].setdefault("example", [])
    for p in EXAMPLE:
        if p not in group and not any(p in g for g in contract["subscriptionGroups"].values()):
            group.append(p)
            changed = True
    for offering, extra in (("default", {"introOffer": {"type": "freeTrial", "period": "P1W"}}),
                            ("save50", {"promotionalOffer": "save50"}), ("save65", {"promotionalOffer": "save65"})):
        products = contract["offerings"][offering]["products"]
        for p in EXAMPLE:
            if not any(entry["productId"] == p for entry in products):
                products.append(dict(productId=p, **extra))
                changed = True
    if changed:
        contract["description"] = "e2e test_signing"
        reply = rpc("offerings.publish", {"contract": contract, "actor": E.ACTOR})
        assert "result" in reply, reply
    LADDER_PLACEMENTS = tuple(p for p, entry in contract["placements"].items()
                              if entry.get("ladder") == "acquisition" and entry.get("eligible"))
    LADDER_PRODUCT = next(e["productId"] for e in contract["offerings"]["save50"]["products"]
                          if e.get("promotionalOffer") == "save50" and e["productId"] in EXAMPLE)


class PromotionalOffers(unittest.TestCase):
    def test_only_the_offer_of_the_user_s_stage_is_signed_and_as_apple_signs_it(self):
        user = E.known_user()
        # Stage 0 shows the default offering: neither save50 nor save65 is signed.
        for offer_id in ("save50", "save65"):
            r = offer(user, {"productId": LADDER_PRODUCT, "offerId": offer_id})
            self.assertEqual((r.status, r.json()["error"]["code"]), (403, "offer_not_eligible"), r)
        dismiss(user, "default")
        self.assertEqual(offering_products(user)["offering"]["id"], "save50")
        r = offer(user, {"productId": LADDER_PRODUCT, "offerId": "save50"})
        self.assertEqual(r.status, 200, r)
        answer = r.json()
        self.assertEqual(answer["stage"], 1)
        self.assertIn(answer["placement"], LADDER_PLACEMENTS, "a placement running his ladder")
        r = offer(user, {"productId": LADDER_PRODUCT, "offerId": "save50", "placement": "onboarding"})
        self.assertEqual((r.status, r.json()["placement"], r.json()["stage"]), (200, "onboarding", 1), r)
        header, claims = ours(answer["signature"], "promotional-offer")
        apple_header, apple_claims = apples(PromotionalOfferV2SignatureCreator, LADDER_PRODUCT, "save50", None)
        self.assertEqual(header, apple_header)
        self.assertEqual(without_nonce_and_iat(claims), without_nonce_and_iat(apple_claims))
        self.assertNotIn("transactionId", claims, "no App Store transaction of his is known")
        uuid.UUID(claims["nonce"])
        self.assertLessEqual(abs(claims["iat"] - time.time()), 60)
        # A deeper stage than his is refused.
        r = offer(user, {"productId": LADDER_PRODUCT, "offerId": "save65"})
        self.assertEqual((r.status, r.json()["error"]["code"]), (403, "offer_not_eligible"), r)
        # Version 1 of the same offer: ECDSA over Apple's joined fields.
        r = offer(user, {"productId": LADDER_PRODUCT, "offerId": "save50", "signatureVersion": 1,
                         "applicationUsername": user.upper()})
        self.assertEqual(r.status, 200, r)
        v1 = r.json()
        self.assertEqual(v1["keyIdentifier"], A.IN_APP_KEY_ID)
        payload = "\u2063".join([A.BUNDLE_ID, A.IN_APP_KEY_ID, LADDER_PRODUCT, "save50", user.lower(),
                                 v1["nonce"].lower(), str(v1["timestamp"])])
        public = serialization.load_pem_private_key(in_app_key(), None).public_key()
        public.verify(base64.b64decode(v1["signature"]), payload.encode(), ec.ECDSA(hashes.SHA256()))
        with self.assertRaises(InvalidSignature):
            public.verify(base64.b64decode(v1["signature"]), payload.replace("save50", "save65").encode(),
                          ec.ECDSA(hashes.SHA256()))

    def test_the_user_s_latest_app_store_transaction_is_named(self):
        user = E.known_user()
        original = E.apple_transaction_id()
        t = E.apple_transaction(user, original, original, purchase=E.now_ms() - E.DAY, expires=E.now_ms() - E.HOUR,
                                signed=E.now_ms() - E.HOUR, product=LADDER_PRODUCT)
        E.apple_notify("EXPIRED", "VOLUNTARY", transaction=t)
        dismiss(user, "default")
        r = offer(user, {"productId": LADDER_PRODUCT, "offerId": "save50"})
        self.assertEqual(r.status, 200, r)
        _, claims = ours(r.json()["signature"], "promotional-offer")
        _, apple_claims = apples(PromotionalOfferV2SignatureCreator, LADDER_PRODUCT, "save50", original)
        self.assertEqual(without_nonce_and_iat(claims), without_nonce_and_iat(apple_claims))

    def test_refusals(self):
        user = E.known_user()
        dismiss(user, "default")
        cases = [({"productId": "com.example.unknown", "offerId": "save50"}, 403, "offer_not_eligible"),
                 ({"productId": LADDER_PRODUCT, "offerId": "not-an-offer"}, 403, "offer_not_eligible"),
                 ({"productId": LADDER_PRODUCT, "offerId": "save50", "placement": "settings"}, 403, "offer_not_eligible"),
                 ({"productId": LADDER_PRODUCT, "offerId": "save50", "placement": "nowhere"}, 404, "unknown_placement"),
                 ({"productId": LADDER_PRODUCT}, 400, None),
                 ({"productId": LADDER_PRODUCT, "offerId": "save50", "introductoryOffer": True}, 400, None),
                 ({"productId": 5, "offerId": "save50"}, 400, None),
                 ({"productId": LADDER_PRODUCT, "offerId": "save50", "signatureVersion": 3}, 400, None)]
        for body, status, code in cases:
            with self.subTest(body=body):
                r = offer(user, body)
                self.assertEqual(r.status, status, r)
                if code:
                    self.assertEqual(r.json()["error"]["code"], code)
        r = request("POST", OFFERS, body={"productId": LADDER_PRODUCT, "offerId": "save50"})
        self.assertEqual(r.status, 401, r)
        r = request("POST", OFFERS, body=b"{not json", headers=dict(auth(user), **{"Content-Type": "application/json"}))
        self.assertEqual(r.status, 400, r)
        self.assertEqual(offer(user, {"productId": LADDER_PRODUCT, "offerId": "save50"}).status, 200, "the stage's offer")

    def test_the_purchase_switch_refuses_every_signature(self):
        user = E.known_user()
        dismiss(user, "default")
        reply = rpc("flags.set", {"purchases.enabled": False, "actor": E.ACTOR})
        self.assertIn("result", reply, reply)
        try:
            time.sleep(1.2)     # the workers' flag cache
            for body in ({"productId": LADDER_PRODUCT, "offerId": "save50"},
                         {"productId": LADDER_PRODUCT, "introductoryOffer": True, "appTransactionId": "1"}):
                r = offer(user, body)
                self.assertEqual((r.status, r.json()["error"]["code"]), (403, "offer_not_eligible"), r)
        finally:
            rpc("flags.set", {"purchases.enabled": True, "actor": E.ACTOR})
        time.sleep(1.2)
        self.assertEqual(offer(user, {"productId": LADDER_PRODUCT, "offerId": "save50"}).status, 200)


class OfferFunnel(unittest.TestCase):
    """Which stage's offer was signed, and who redeemed it: stats.subscriptions' funnel.stages."""

    def stage_row(self):
        now = E.now_ms()
        reply = rpc("stats.subscriptions", {"from": E.iso(now - E.HOUR), "to": E.iso(now + E.HOUR),
                                            "environment": "sandbox"})
        rows = [r for r in reply["result"]["funnel"]["stages"]
                if (r["placement"], r["offering"], r["stage"]) == ("onboarding", "save50", 1)]
        return rows[0] if rows else {"offersSigned": 0, "offersRedeemed": 0}

    def test_signed_offers_and_their_redemptions_are_counted_at_their_stage(self):
        before = self.stage_row()
        users = [E.known_user() for _ in range(2)]
        for user in users:
            dismiss(user, "default")
            for _ in range(2):      # asked twice: two signatures, one user
                r = offer(user, {"productId": LADDER_PRODUCT, "offerId": "save50", "placement": "onboarding",
                                 "environment": "sandbox"})
                self.assertEqual(r.status, 200, r)
        refused = offer(users[0], {"productId": LADDER_PRODUCT, "offerId": "save65", "environment": "sandbox"})
        self.assertEqual(refused.status, 403, "a refusal is not a signature")
        # The first user redeems it: the App Store's transaction in the promotional offer's period.
        original = E.apple_transaction_id()
        t = E.apple_transaction(users[0], original, original, purchase=E.now_ms(), expires=E.now_ms() + 30 * E.DAY,
                                signed=E.now_ms(), product=LADDER_PRODUCT, offerType=2, offerIdentifier="save50")
        E.apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=t)
        after = self.stage_row()
        self.assertEqual(after["offersSigned"] - before["offersSigned"], 4)
        self.assertEqual(after["offersRedeemed"] - before["offersRedeemed"], 1)
        now = E.now_ms()
        text = subprocess.run([os.path.join(REPO, "scripts", "billing-admin"), "stats.subscriptions",
                               "--from", E.iso(now - E.HOUR), "--to", E.iso(now + E.HOUR), "--environment", "sandbox"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertRegex(text.stdout, r"onboarding +save50 \(1\).*\d+ offers signed, \d+ redeemed")


class IntroductoryOfferEligibility(unittest.TestCase):
    def eligibility(self, user, product, app_transaction="2000000000000001"):
        r = offer(user, {"productId": product, "introductoryOffer": True, "appTransactionId": app_transaction})
        self.assertEqual(r.status, 200, r)
        answer = r.json()
        header, claims = ours(answer["signature"], "introductory-offer-eligibility")
        transaction = claims["transactionId"]
        apple_header, apple_claims = apples(IntroductoryOfferEligibilitySignatureCreator, product,
                                            answer["allowIntroductoryOffer"], transaction)
        self.assertEqual(header, apple_header)
        self.assertEqual(without_nonce_and_iat(claims), without_nonce_and_iat(apple_claims))
        trial_eligible = {p["productId"]: p["trialEligible"] for p in offering_products(user)["offering"]["products"]}
        self.assertEqual(claims["allowIntroductoryOffer"], trial_eligible[product], "follows trialEligible")
        return claims

    def test_a_new_user_needs_his_app_transaction_and_is_eligible(self):
        user = E.known_user()
        r = offer(user, {"productId": "com.example.plus.monthly", "introductoryOffer": True})
        self.assertEqual((r.status, r.json()["error"]["code"]), (400, "transaction_required"), r)
        claims = self.eligibility(user, "com.example.plus.monthly", "2000000000000777")
        self.assertTrue(claims["allowIntroductoryOffer"])
        self.assertEqual(claims["transactionId"], "2000000000000777")
        r = offer(user, {"productId": "com.example.plus.monthly", "introductoryOffer": True, "appTransactionId": "12ab"})
        self.assertEqual(r.status, 400, r)

    def test_a_trial_from_either_provider_spends_the_group(self):
        rc_user = E.known_user()
        E.rc_deliver(E.rc_event("INITIAL_PURCHASE", rc_user, at=E.now_ms(), sub=E.rc_subscription_id(),
                                product="com.example.plus.monthly", period="TRIAL", expires=E.now_ms() + 7 * E.DAY))
        apple_user = E.known_user()
        original = E.apple_transaction_id()
        t = E.apple_transaction(apple_user, original, original, purchase=E.now_ms(), expires=E.now_ms() + 7 * E.DAY,
                                signed=E.now_ms(), product="com.example.pro.monthly", offerType=1,
                                offerDiscountType="FREE_TRIAL")
        E.apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=t)
        paid_user = E.known_user()
        E.rc_deliver(E.rc_event("INITIAL_PURCHASE", paid_user, at=E.now_ms(), sub=E.rc_subscription_id(),
                                product="com.example.plus.monthly", expires=E.now_ms() + 30 * E.DAY))
        for user, allowed in ((rc_user, False), (apple_user, False), (paid_user, True)):
            for product in ("com.example.plus.yearly", "com.example.pro.monthly"):
                with self.subTest(user=user, product=product):
                    claims = self.eligibility(user, product)
                    self.assertEqual(claims["allowIntroductoryOffer"], allowed)
        # The App Store user's own transaction is named, not the app's.
        self.assertEqual(self.eligibility(apple_user, "com.example.plus.yearly")["transactionId"], original)


if __name__ == "__main__":
    unittest.main()
