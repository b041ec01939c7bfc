"""End to end through nginx: RevenueCat webhooks → inbox → order-independent access
projection → the authenticated GET /billing/access snapshot, and the ID-token negatives.

Every test uses fresh random user ids and event ids, so the tests are independent of each
other and of whatever else the stack holds. No timing assertions."""
import base64
import hashlib
import hmac
import json
import os
import random
import subprocess
import threading
import time
import unittest
import uuid
from concurrent.futures import ThreadPoolExecutor

from harness.billing import VAR_DIR, request, script
from harness.tokens import DEV_AUDIENCE, DEV_ISSUER, DEV_KID, DevSigner, b64url, jwt, token

WEBHOOK = "/api/v1/billing/webhooks/revenuecat"
ACCESS = "/api/v1/billing/access"
SECRETS = os.path.join(VAR_DIR, "secrets")
DB_SOCKET = os.path.join(VAR_DIR, "run", "mariadb.sock")
HOUR = 3600 * 1000
DAY = 24 * HOUR


def webhook_secret():
    with open(os.path.join(SECRETS, "revenuecat-webhook-secret")) as f:
        return f.read().rstrip("\n")


def sql(query):
    """Rows of a query on the stack's billing database (root over the private socket)."""
    out = subprocess.run(["mariadb", "--no-defaults", "--protocol=socket", "-S", DB_SOCKET, "-uroot", "billing",
                          "--batch", "--skip-column-names", "-e", query],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    return [line.split("\t") for line in out.splitlines()]


def scalar(query):
    return int(sql(query)[0][0])


def quoted(value):
    assert all(c in "0123456789abcdefABCDEF-_.:" or c.isalnum() for c in value), value
    return "'" + value + "'"


def new_user():
    return str(uuid.uuid4())


def now_ms():
    return int(time.time() * 1000)


def access(user_id):
    r = request("GET", ACCESS, headers={"Authorization": "Bearer " + token(user_id)})
    assert r.status == 200, r
    return r.json()


def deliver(event, secret=None, raw=None):
    headers = {"Authorization": webhook_secret() if secret is None else secret, "Content-Type": "application/json"}
    body = raw if raw is not None else json.dumps({"api_version": "1.0", "event": event}).encode()
    return request("POST", WEBHOOK, body=body, headers=headers, timeout=30)


def rc_event(type_, user, at, expires=None, *, id=None, sub=None, product="app.plus.monthly",
             entitlement="plus", period="NORMAL", **extra):
    event = {
        "id": id or "e2e-" + uuid.uuid4().hex, "type": type_, "app_user_id": user, "original_app_user_id": user,
        "aliases": [user], "product_id": product, "entitlement_ids": [entitlement], "period_type": period,
        "purchased_at_ms": at, "event_timestamp_ms": at, "environment": "PRODUCTION", "store": "APP_STORE",
        "original_transaction_id": sub or "sub-" + user, "price_in_purchased_currency": 4.99, "currency": "EUR",
    }
    if expires is not None:
        event["expiration_at_ms"] = expires
    event.update(extra)
    return event


def snapshot_state(snapshot):
    """What must not depend on delivery order: everything but the identity, revision and
    clock, and the quota windows (anchored at each user's own sign-up instant)."""
    state = {k: v for k, v in snapshot.items() if k not in ("userId", "revision", "serverTime", "balances")}
    state["balances"] = {meter: {k: v for k, v in b.items() if k not in ("windowStart", "resetsAt")}
                         for meter, b in (snapshot.get("balances") or {}).items()}
    return state


def inbox_count(event_ids):
    return scalar("SELECT COUNT(*) FROM billing_events WHERE provider = 'revenuecat' AND provider_event_id IN ("
                  + ",".join(quoted(i) for i in event_ids) + ")")


rs256_with_dev_key = DevSigner().sign


def claims(user, **override):
    now = int(time.time())
    c = {"iss": DEV_ISSUER, "aud": DEV_AUDIENCE, "sub": user, "iat": now - 10, "exp": now + 600}
    c.update(override)
    return c


class Scenario:
    """One user's history as (intrinsic time, event) in intrinsic order; each variant ends
    in a different state so the comparison covers phase, willRenew, trial, grace and the
    pending plan change."""

    def __init__(self, user, variant, base, far, tag):
        self.user = user
        sub = f"sub-{tag}-{user}"
        pro = variant % 2 == 1
        product, entitlement = ("app.pro.monthly", "pro") if pro else ("app.plus.monthly", "plus")
        t = [base + k * HOUR for k in range(8)]

        def ev(type_, at, expires=None, **kw):
            return rc_event(type_, user, at, expires, id=f"{tag}-{user}-{len(self.events)}", sub=sub, product=product,
                            entitlement=entitlement, **kw)

        self.events = []
        kind = variant % 5
        if kind == 4:
            # A trial whose auto-renew flips back and forth: only intrinsic order says how it ends.
            self.events.append(ev("INITIAL_PURCHASE", t[0], far, period="TRIAL"))
            for k in range(1, 8):
                self.events.append(ev("CANCELLATION" if k % 2 else "UNCANCELLATION", t[k], far, period="TRIAL"))
            return
        # A purchase and renewals with growing expiries: the latest intrinsic one must win.
        self.events.append(ev("INITIAL_PURCHASE", t[0], far - 6 * DAY))
        for k in range(1, 7):
            self.events.append(ev("RENEWAL", t[k], far - (6 - k) * DAY))
        if kind == 0:
            self.events.append(ev("RENEWAL", t[7], far + DAY))
        elif kind == 1:
            self.events.append(ev("CANCELLATION", t[7], far, cancel_reason="UNSUBSCRIBE"))
        elif kind == 2:
            self.events.append(ev("PRODUCT_CHANGE", t[7], far, new_product_id="app.pro.yearly"))
        else:
            self.events.append(ev("BILLING_ISSUE", t[7], far, grace_period_expiration_at_ms=far + 3 * DAY))


class RevenueCatIngestion(unittest.TestCase):
    def test_twenty_concurrent_duplicates_make_exactly_one_inbox_row(self):
        user = new_user()
        access(user)
        event = rc_event("INITIAL_PURCHASE", user, now_ms() - HOUR, now_ms() + 30 * DAY)
        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(lambda _: deliver(event), range(20)))
        self.assertTrue(all(a.status == 200 for a in answers), answers)
        bodies = [a.json() for a in answers]
        self.assertEqual(sum(1 for b in bodies if b["duplicate"] is False), 1, bodies)
        self.assertEqual(sum(1 for b in bodies if b == {"duplicate": True}), 19, bodies)
        self.assertEqual(inbox_count([event["id"]]), 1)
        self.assertEqual(scalar(f"SELECT COUNT(*) FROM billing_event_parties WHERE user_id = {quoted(user)}"), 1)
        snapshot = access(user)
        self.assertEqual((snapshot["tier"], snapshot["phase"]), ("plus", "active"))
        # One more duplicate later changes nothing, not even the revision.
        self.assertEqual(deliver(event).json(), {"duplicate": True})
        self.assertEqual(access(user)["revision"], snapshot["revision"])

    def test_shuffled_concurrent_deliveries_equal_the_serial_replay(self):
        base = now_ms() - 2 * DAY
        run = uuid.uuid4().hex[:8]
        users = [new_user() for _ in range(20)]
        replay_users = [new_user() for _ in range(20)]
        for u in users + replay_users:
            access(u)  # known before the events arrive
        far = now_ms() + 20 * DAY
        scenarios = [Scenario(u, i, base, far, "c" + run) for i, u in enumerate(users)]
        replays = [Scenario(u, i, base, far, "s" + run) for i, u in enumerate(replay_users)]

        distinct = [e for s in scenarios for e in s.events]
        self.assertEqual(len(distinct), 160)
        rng = random.Random(run)
        deliveries = distinct + rng.sample(distinct, 40)  # 200 deliveries, 40 of them duplicates
        rng.shuffle(deliveries)
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(deliver, deliveries))
        self.assertEqual([a.status for a in answers], [200] * 200, [a for a in answers if a.status != 200][:3])
        self.assertEqual(sum(1 for a in answers if a.json()["duplicate"]), 40)

        # The truth: the same histories delivered one at a time in intrinsic order.
        for s in replays:
            for e in s.events:
                r = deliver(e)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json()["status"], "applied", r)

        states = []
        for s, replay in zip(scenarios, replays):
            got, want = access(s.user), access(replay.user)
            got_state, want_state = snapshot_state(got), snapshot_state(want)
            # Subscription ids differ between the two runs by construction; nothing else may.
            self.assertEqual(json.dumps(got_state, sort_keys=True), json.dumps(want_state, sort_keys=True), s.user)
            states.append(got_state)
        self.assertEqual(inbox_count([e["id"] for e in distinct]), 160)
        # The comparison is not vacuous: the histories end in every intended state.
        expected_phase = {0: "active", 1: "canceled", 2: "active", 3: "grace", 4: "canceled"}
        for i, st in enumerate(states):
            self.assertEqual((st["tier"], st["phase"]), ("pro" if i % 2 else "plus", expected_phase[i % 5]), st)
            self.assertEqual(st["pendingChange"] is not None, i % 5 == 2, st)
            self.assertEqual(st["graceExpiresAt"] is not None, i % 5 == 3, st)
            self.assertEqual(st["trial"] is not None, i % 5 == 4, st)
        for i, st in enumerate(states):
            last = scenarios[i].events[-1]
            if last["type"] == "RENEWAL":
                self.assertEqual(st["store"]["expiresAt"], iso(last["expiration_at_ms"]))
                self.assertTrue(st["store"]["willRenew"])
            if i % 5 == 4:
                # CANCELLATION, UNCANCELLATION, ... seven times: the last (intrinsic) is a CANCELLATION.
                self.assertEqual((st["phase"], st["store"]["willRenew"]), ("canceled", False), st)
                self.assertIsNotNone(st["trial"])

    def test_fifty_concurrent_events_for_one_user_lose_no_update(self):
        user = new_user()
        access(user)
        base = now_ms() - 60 * HOUR
        sub = "sub-" + user
        events = [rc_event("INITIAL_PURCHASE" if k == 0 else "RENEWAL", user, base + k * HOUR,
                           now_ms() + (k + 1) * DAY, sub=sub) for k in range(50)]
        shuffled = events[:]
        random.shuffle(shuffled)
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(deliver, shuffled))
        self.assertEqual([a.status for a in answers], [200] * 50, [a for a in answers if a.status != 200][:3])
        self.assertTrue(all(a.json()["status"] == "applied" for a in answers))
        snapshot = access(user)
        self.assertEqual(snapshot["store"]["expiresAt"], iso(events[-1]["expiration_at_ms"]))
        self.assertEqual((snapshot["tier"], snapshot["phase"]), ("plus", "active"))
        self.assertEqual(inbox_count([e["id"] for e in events]), 50)
        self.assertEqual(scalar(f"SELECT COUNT(*) FROM billing_event_parties WHERE user_id = {quoted(user)}"), 50)
        self.assertEqual(scalar(f"SELECT applied_events FROM billing_access WHERE user_id = {quoted(user)}"), 50)
        self.assertEqual(scalar(f"SELECT COUNT(*) FROM billing_subscriptions WHERE user_id = {quoted(user)}"), 1)

    def test_unmatched_event_folds_in_when_the_user_first_signs_in(self):
        user = new_user()
        event = rc_event("INITIAL_PURCHASE", user, now_ms() - HOUR, now_ms() + 7 * DAY, period="TRIAL",
                         app_user_id="$RCAnonymousID:" + uuid.uuid4().hex)
        r = deliver(event)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["status"], "unmatched")
        self.assertEqual(sql(f"SELECT status, user_id IS NULL FROM billing_events WHERE provider_event_id = {quoted(event['id'])}"),
                         [["unmatched", "1"]])
        snapshot = access(user)  # first authenticated request: the user becomes known
        self.assertEqual((snapshot["tier"], snapshot["phase"]), ("plus", "trial"), snapshot)
        self.assertEqual(snapshot["trial"]["endsAt"], iso(event["expiration_at_ms"]))
        self.assertEqual(sql(f"SELECT status, user_id FROM billing_events WHERE provider_event_id = {quoted(event['id'])}"),
                         [["applied", user]])
        self.assertEqual(scalar(f"SELECT COUNT(*) FROM billing_event_user_candidates c JOIN billing_events e ON e.id = c.event_id "
                                f"WHERE e.provider_event_id = {quoted(event['id'])}"), 0)
        self.assertEqual(access(user)["revision"], snapshot["revision"])

    def transfer(self, purchase_first):
        sender, receiver = new_user(), new_user()
        access(sender)
        access(receiver)
        t = now_ms() - 3 * HOUR
        purchase = rc_event("INITIAL_PURCHASE", sender, t, now_ms() + 30 * DAY, product="app.pro.monthly", entitlement="pro")
        transfer = rc_event("TRANSFER", receiver, t + HOUR, transferred_from=[sender], transferred_to=[receiver])
        for product_field in ("product_id", "entitlement_ids", "original_transaction_id", "expiration_at_ms"):
            transfer.pop(product_field, None)
        for e in ([purchase, transfer] if purchase_first else [transfer, purchase]):
            r = deliver(e)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["status"], "applied", r)
        got_sender, got_receiver = access(sender), access(receiver)
        self.assertEqual((got_sender["tier"], got_sender["store"]), ("free", None), got_sender)
        self.assertEqual((got_receiver["tier"], got_receiver["phase"]), ("pro", "active"), got_receiver)
        self.assertEqual(got_receiver["store"]["expiresAt"], iso(purchase["expiration_at_ms"]))

    def test_transfer_between_two_known_users(self):
        self.transfer(purchase_first=True)

    def test_transfer_delivered_before_the_purchase_it_moves(self):
        self.transfer(purchase_first=False)


def iso(ms):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + ".%03dZ" % (ms % 1000)


class RevenueCatBadInput(unittest.TestCase):
    def assert_refused(self, response, status, code=None):
        self.assertEqual(response.status, status, response)
        body = response.json()
        if code:
            self.assertEqual(body["error"]["code"], code, body)
        self.assertIsInstance(body["error"]["message"], str)

    def test_bad_deliveries_get_a_precise_4xx_store_nothing_and_the_worker_keeps_serving(self):
        user = new_user()
        good = rc_event("INITIAL_PURCHASE", user, now_ms() - HOUR, now_ms() + DAY)
        before = scalar("SELECT COUNT(*) FROM billing_events")
        quarantined = scalar("SELECT COUNT(*) FROM billing_quarantine")

        self.assert_refused(deliver(None, raw=b"this is not json"), 400, "invalid_json")
        self.assert_refused(deliver(None, raw=b""), 400, "invalid_json")
        self.assert_refused(deliver(None, raw=b'{"api_version": "1.0", "event": {"id": "x", "type": "RENEWAL"'), 400, "invalid_json")
        self.assert_refused(deliver(None, raw=b'{"api_version": "1.0", "event": {"id": "\xff\xfe", "type": "TEST"}}'), 400, "invalid_json")
        self.assert_refused(deliver(None, raw=b'{"api_version": "1.0"}'), 400, "invalid_payload")
        self.assert_refused(deliver(None, raw=b'[1, 2, 3]'), 400, "invalid_payload")
        self.assert_refused(deliver(None, raw=b'{"event": "INITIAL_PURCHASE"}'), 400, "invalid_payload")
        for field, value in [("id", 17), ("id", ""), ("type", None), ("event_timestamp_ms", "yesterday"),
                             ("expiration_at_ms", -5), ("price_in_purchased_currency", "4.99"), ("environment", "STAGING"),
                             ("aliases", "not-a-list"), ("entitlement_ids", [1, 2])]:
            bad = dict(good)
            bad[field] = value
            r = deliver(bad)
            self.assert_refused(r, 400, "invalid_payload")
            if field != "type" or value is not None:
                self.assertIn(field, r.json()["error"]["message"])
        big = dict(good, padding="x" * (1024 * 1024))
        self.assert_refused(deliver(big), 413, "payload_too_large")

        for secret in ("", "Bearer wrong", webhook_secret() + "x", webhook_secret().removeprefix("Bearer ")):
            self.assert_refused(deliver(good, secret=secret), 401, "bad_secret")
        self.assertEqual(scalar("SELECT COUNT(*) FROM billing_events"), before, "nothing stored")
        self.assertEqual(inbox_count([good["id"]]), 0)
        self.assertEqual(scalar("SELECT COUNT(*) FROM billing_quarantine"), quarantined)

        # The workers still serve, and the same event with the right secret goes through.
        self.assertEqual(request("GET", "/api/v1/health").status, 200)
        r = deliver(good)
        self.assertEqual((r.status, r.json()["status"]), (200, "unmatched"), r)
        self.assertEqual(inbox_count([good["id"]]), 1)

    def test_unknown_types_and_test_events_are_stored_and_answered_200_without_effect(self):
        user = new_user()
        access(user)
        for type_ in ("TEST", "SOMETHING_RC_ADDS_TOMORROW"):
            e = rc_event(type_, user, now_ms() - HOUR, now_ms() + DAY)
            r = deliver(e)
            self.assertEqual((r.status, r.json()["status"]), (200, "ignored"), r)
            self.assertEqual(inbox_count([e["id"]]), 1)
        self.assertEqual(access(user)["tier"], "free")


class IDTokens(unittest.TestCase):
    def get(self, bearer):
        return request("GET", ACCESS, headers={"Authorization": "Bearer " + bearer})

    def assert_401(self, bearer, code):
        r = self.get(bearer)
        self.assertEqual(r.status, 401, r)
        self.assertEqual(r.json()["error"]["code"], code, r)

    def test_python_signed_control_token_is_accepted(self):
        # Proves the negatives below fail for their one defect, not for how they are built.
        user = new_user()
        r = self.get(jwt({"alg": "RS256", "kid": DEV_KID, "typ": "JWT"}, claims(user), rs256_with_dev_key))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["userId"], user)

    def test_scripts_dev_token_signs_what_the_harness_signs(self):
        # scripts/dev-token (billing-rpc dev-token) itself: the stack accepts its token, which
        # names the key, issuer and audience the harness's tokens (harness.tokens) name.
        user = new_user()
        printed = script("dev-token", user).stdout.strip()
        r = self.get(printed)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["userId"], user)

        def decoded(t):
            return [json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))) for part in t.split(".")[:2]]
        (header, body), (harness_header, harness_body) = decoded(printed), decoded(token(user))
        self.assertEqual((header["alg"], header["kid"]), (harness_header["alg"], harness_header["kid"]))
        self.assertEqual({k: body[k] for k in ("iss", "aud", "sub")}, {k: harness_body[k] for k in ("iss", "aud", "sub")})
        self.assertEqual(body["exp"] - body["iat"], 3600)

    def test_token_negatives_are_401_and_make_no_user(self):
        user = new_user()
        rs = {"alg": "RS256", "kid": DEV_KID, "typ": "JWT"}
        with open(os.path.join(SECRETS, "dev-token-cert.pem"), "rb") as f:
            public = f.read()
        none_header = b64url(json.dumps({"alg": "none", "kid": DEV_KID}).encode())
        none_claims = b64url(json.dumps(claims(user)).encode())
        self.assert_401(none_header + "." + none_claims + ".", "malformed_token")
        self.assert_401(none_header + "." + none_claims + "." + b64url(b"x"), "unsupported_algorithm")
        self.assert_401(jwt({"alg": "HS256", "kid": DEV_KID, "typ": "JWT"}, claims(user),
                            lambda d: hmac.new(public, d, hashlib.sha256).digest()), "unsupported_algorithm")
        self.assert_401(jwt(dict(rs, kid="unknown-kid"), claims(user), rs256_with_dev_key), "unknown_key")
        good = jwt(rs, claims(user), rs256_with_dev_key)
        other = jwt(rs, claims(new_user()), rs256_with_dev_key)
        self.assert_401(good.rsplit(".", 1)[0] + "." + other.rsplit(".", 1)[1], "bad_signature")
        now = int(time.time())
        self.assert_401(jwt(rs, claims(user, iat=now - 7200, exp=now - 3600), rs256_with_dev_key), "token_expired")
        self.assert_401(jwt(rs, claims(user, aud="someone-else"), rs256_with_dev_key), "wrong_audience")
        self.assert_401(jwt(rs, claims(user, iss="https://evil.invalid"), rs256_with_dev_key), "wrong_issuer")
        self.assert_401("not-a-token", "malformed_token")
        r = request("GET", ACCESS)
        self.assertEqual(r.status, 401, r)
        self.assertEqual(scalar(f"SELECT COUNT(*) FROM billing_users WHERE id = {quoted(user)}"), 0)


if __name__ == "__main__":
    unittest.main()
