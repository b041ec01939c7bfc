"""Helpers of the entitlement-rule tests (test_billing_errors, test_quota_sources,
test_refunds, test_renewal_info, test_transfer_race): provider-shaped deliveries through
nginx — RevenueCat webhook events with the fields RevenueCat sends, App Store Server
Notifications V2 signed by the generated test CA ($BILLING_VAR_DIR/testca, see
appstore.py) — snapshots read with development ID tokens, and stats.subscriptions counts
over a private window. Standard library, plus `cryptography` (already needed by appstore.py).

Times are milliseconds since the epoch, relative to now wherever the snapshot judges them,
so "current period", "grace in the future" and "expired" are real at read time."""
import datetime
import os
import random
import time
import uuid

from . import appstore as A
from .billing import VAR_DIR, request, rpc, sql, sql_string
from .tokens import token

MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
CA = os.path.join(VAR_DIR, "testca")
ACCESS = "/api/v1/billing/access"
RC_WEBHOOK = "/api/v1/billing/webhooks/revenuecat"
APPLE_WEBHOOK = "/api/v1/billing/webhooks/apple"
ACTOR = "e2e-rules@ops"

_secret = None
_chain = None


def now_ms():
    return int(time.time() * 1000)


def new_user():
    return str(uuid.uuid4())


def iso(ms):
    """The snapshot's timestamp format (UTC, milliseconds, Z)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + ".%03dZ" % (ms % 1000)


def access(user):
    """GET /billing/access for user (which also makes him known)."""
    r = request("GET", ACCESS, headers={"Authorization": "Bearer " + token(user)}, timeout=30)
    assert r.status == 200, r
    return r.json()


def known_user():
    user = new_user()
    access(user)
    return user


def assert_none_wrong(test, wrong, total, what):
    """One short failure for a list of failed cases: how many, and the first."""
    if wrong:
        test.fail(f"{len(wrong)} of {total} cases {what}; first: {wrong[0]}")


def limits(snapshot):
    """meter -> limit (None = unlimited) of a snapshot's balances."""
    return {meter: b["limit"] for meter, b in (snapshot.get("balances") or {}).items()}


# ------------------------------------------------------------------------------ RevenueCat

def rc_secret():
    global _secret
    if _secret is None:
        with open(os.path.join(VAR_DIR, "secrets", "revenuecat-webhook-secret")) as f:
            _secret = f.read().rstrip("\n")
    return _secret


def rc_subscription_id():
    """A store original_transaction_id as RevenueCat relays it (App Store: 15-16 digits)."""
    return "2000000" + str(random.SystemRandom().randrange(10 ** 8, 10 ** 9))


def rc_event(type_, user, *, at, sub, purchased=None, expires=None, product="app.plus.monthly", entitlement="plus",
             period="NORMAL", transaction=None, price=4.99, id=None, **extra):
    """One RevenueCat webhook event with the fields RevenueCat sends for an App Store
    subscription. `at` is event_timestamp_ms; `purchased` the period's purchased_at_ms."""
    event = {
        "id": id or str(uuid.uuid4()).upper(), "type": type_, "app_id": "app-e2e", "app_user_id": user,
        "original_app_user_id": user, "aliases": [user], "original_transaction_id": sub,
        "transaction_id": transaction or sub, "product_id": product, "entitlement_ids": [entitlement],
        "period_type": period, "purchased_at_ms": at if purchased is None else purchased,
        "event_timestamp_ms": at, "environment": "PRODUCTION", "store": "APP_STORE", "is_family_share": False,
        "country_code": "FR", "price_in_purchased_currency": price, "currency": "EUR",
        "price": price, "takehome_percentage": 0.85, "offer_code": None, "presented_offering_id": None,
        "subscriber_attributes": {},
    }
    if expires is not None:
        event["expiration_at_ms"] = expires
    event.update(extra)
    return event


def rc_transfer(sender, receiver, *, at, id=None):
    """A RevenueCat TRANSFER: sender's purchases move to receiver (no product fields)."""
    return {"id": id or str(uuid.uuid4()).upper(), "type": "TRANSFER", "app_id": "app-e2e", "app_user_id": receiver,
            "original_app_user_id": receiver, "aliases": [receiver], "transferred_from": [sender],
            "transferred_to": [receiver], "event_timestamp_ms": at, "environment": "PRODUCTION", "store": "APP_STORE"}


def rc_deliver(event, expect_status=200):
    r = request("POST", RC_WEBHOOK, body={"api_version": "1.0", "event": event},
                headers={"Authorization": rc_secret()}, timeout=60)
    if expect_status is not None:
        assert r.status == expect_status, (event["type"], event["id"], r)
    return r


# ------------------------------------------------------------------------------ App Store

def chain():
    global _chain
    if _chain is None:
        _chain = A.load_chain(CA, "a")
    return _chain


def apple_transaction_id():
    return "3000000" + str(random.SystemRandom().randrange(10 ** 8, 10 ** 9))


def apple_transaction(user, original, transaction_id, *, purchase, expires, signed, product="com.example.plus.monthly",
                      **extra):
    """A StoreKit 2 JWSTransaction payload of the subscription `original`, with the app's
    appAccountToken naming user."""
    payload = A.transaction_payload(original_id=original, transaction_id=transaction_id, product=product, purchase=purchase,
                                    expires=expires, signed=signed, appAccountToken=user, webOrderLineItemId=transaction_id,
                                    subscriptionGroupIdentifier="21000001", **extra)
    if transaction_id != original:
        payload["transactionReason"] = "RENEWAL"
    return payload


def apple_renewal(original, *, signed, product="com.example.plus.monthly", auto_renew_product=None, **extra):
    """A JWSRenewalInfo payload."""
    return A.renewal_payload(original, product=product, signed=signed, autoRenewProductId=auto_renew_product or product,
                             **extra)


def apple_notify(notification_type, subtype=None, *, transaction=None, renewal=None, signed=None, uuid_=None):
    """Posts one signed notification; asserts 200 and returns (answer body, notificationUUID)."""
    payload = A.notification_payload(chain(), notification_type, subtype, transaction=transaction, renewal=renewal,
                                     signed=signed or now_ms(), uuid_=uuid_)
    r = request("POST", APPLE_WEBHOOK, body={"signedPayload": chain().sign(payload)}, timeout=60)
    assert r.status == 200, (notification_type, subtype, r)
    return r.json(), payload["notificationUUID"]


# ------------------------------------------------------------------------------ statistics

def private_window():
    """[from, to) of one hour in the past that no other test uses (a random hour of
    2022-2024), as milliseconds: counts over it are this test's alone."""
    rng = random.SystemRandom()
    start = datetime.datetime(2022, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(hours=rng.randrange(3 * 365 * 24))
    start_ms = int(start.timestamp() * 1000)
    return start_ms, start_ms + HOUR


def stats_counts(window, environment="production"):
    """counts {current, previous} of stats.subscriptions over window."""
    def day(ms):
        return iso(ms)
    reply = rpc("stats.subscriptions", {"from": day(window[0]), "to": day(window[1]), "environment": environment,
                                        "currency": "EUR"})
    assert "result" in reply, reply
    return reply["result"]["counts"]


def inbox_row(provider, event_id):
    """(event_type, kind, status) of one inbox row."""
    rows = sql("SELECT event_type, kind, status FROM billing_events WHERE provider = " + sql_string(provider)
               + " AND provider_event_id = " + sql_string(event_id))
    return tuple(rows[0]) if rows else None
