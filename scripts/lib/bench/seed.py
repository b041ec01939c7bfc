"""Seeds the bench users: each becomes known (GET /billing/access with its token), then
receives a realistic history of RevenueCat events (purchase, renewals, a change) through
the real webhook. Arguments: BASE_URL SECRET_FILE USERS_FILE TOKENS_FILE EVENTS_PER_USER."""
import http.client
import json
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

base, secret_file, users_file, tokens_file, per_user = sys.argv[1:6]
per_user = int(per_user)
url = urllib.parse.urlsplit(base)
secret = open(secret_file).read().rstrip("\n")
users = open(users_file).read().split()
tokens = open(tokens_file).read().split()
day = 86_400_000
now = int(time.time() * 1000)


def call(method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise SystemExit(f"seed: {method} {path} answered {r.status}: {data[:200]!r}")
    finally:
        conn.close()


def history(user):
    start = now - per_user * 3 * day
    for k in range(per_user):
        at = start + k * 3 * day
        kind = "INITIAL_PURCHASE" if k == 0 else "RENEWAL"
        extra = {}
        if k == per_user - 1 and k > 0:
            kind, extra = ("CANCELLATION", {"cancel_reason": "UNSUBSCRIBE"}) if hash(user) % 2 else \
                ("PRODUCT_CHANGE", {"new_product_id": "app.pro.yearly"})
        event = {"id": f"seed-{user}-{k}", "type": kind, "app_user_id": user, "aliases": [user],
                 "product_id": "app.plus.monthly", "entitlement_ids": ["plus"], "period_type": "NORMAL",
                 "purchased_at_ms": at, "event_timestamp_ms": at, "expiration_at_ms": at + 30 * day,
                 "environment": "PRODUCTION", "store": "APP_STORE", "original_transaction_id": f"bench-sub-{user}",
                 "price_in_purchased_currency": 4.99, "currency": "EUR", **extra}
        yield json.dumps({"api_version": "1.0", "event": event}).encode()


with ThreadPoolExecutor(16) as pool:
    list(pool.map(lambda t: call("GET", "/api/v1/billing/access", headers={"Authorization": "Bearer " + t}), tokens))
    bodies = [b for u in users for b in history(u)]
    list(pool.map(lambda b: call("POST", "/api/v1/billing/webhooks/revenuecat", b,
                                 {"Authorization": secret, "Content-Type": "application/json"}), bodies))
print(f"seeded {len(users)} users with {len(bodies)} events")
