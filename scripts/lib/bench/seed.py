"""Seeds the bench users (issue 17's shape): each becomes known (GET /billing/access with
its token), receives 10 to 30 RevenueCat events (purchase, renewals, a cancellation or a
change) through the real webhook, half of them get an operator grant (grants.create over
the admin socket) and each records a few usage rows (POST /billing/usage). Then DISTINCT
more users are imported (users.import) for the ingest row of distinct users.
Arguments: BASE_URL SECRET_FILE USERS_FILE TOKENS_FILE RPC_SOCKET DISTINCT_FILE DISTINCT."""
import http.client
import json
import random
import sys
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor

from rpc import RpcError
from rpc import call as rpc_call

base, secret_file, users_file, tokens_file, rpc_socket, distinct_file, distinct = sys.argv[1:8]
url = urllib.parse.urlsplit(base)
secret = open(secret_file).read().rstrip("\n")
users = open(users_file).read().split()
tokens = open(tokens_file).read().split()
day = 86_400_000
now = int(time.time() * 1000)
rng = random.Random(17)
per_user = {user: rng.randint(10, 30) for user in users}


def call(method, path, body=None, headers=None, ok=(200, 201)):
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        if r.status not in ok:
            raise SystemExit(f"seed: {method} {path} answered {r.status}: {data[:200]!r}")
    finally:
        conn.close()


def rpc(method, params):
    try:
        return rpc_call(rpc_socket, method, params, timeout=120)
    except RpcError as error:
        raise SystemExit(f"seed: {error}")


def history(user):
    count = per_user[user]
    start = now - count * 3 * day
    for k in range(count):
        at = start + k * 3 * day
        kind = "INITIAL_PURCHASE" if k == 0 else "RENEWAL"
        extra = {}
        if k == count - 1:
            kind, extra = ("CANCELLATION", {"cancel_reason": "UNSUBSCRIBE"}) if hash(user) % 2 else \
                ("PRODUCT_CHANGE", {"new_product_id": "app.pro.yearly"})
        event = {"id": f"seed-{user}-{k}", "type": kind, "app_user_id": user, "aliases": [user],
                 "product_id": "app.plus.monthly", "entitlement_ids": ["plus"], "period_type": "NORMAL",
                 "purchased_at_ms": at, "event_timestamp_ms": at, "expiration_at_ms": at + 30 * day,
                 "environment": "PRODUCTION", "store": "APP_STORE", "original_transaction_id": f"bench-sub-{user}",
                 "price_in_purchased_currency": 4.99, "currency": "EUR", **extra}
        yield json.dumps({"api_version": "1.0", "event": event}).encode()


def usage(token, k):
    body = json.dumps({"meter": "explorePlaybackMinutes", "amount": 1, "idempotencyKey": f"seed-{token[-16:]}-{k}"})
    call("POST", "/api/v1/billing/usage", body.encode(), {"Authorization": "Bearer " + token,
                                                           "Content-Type": "application/json"})


with ThreadPoolExecutor(16) as pool:
    list(pool.map(lambda t: call("GET", "/api/v1/billing/access", headers={"Authorization": "Bearer " + t}), tokens))
    bodies = [b for u in users for b in history(u)]
    list(pool.map(lambda b: call("POST", "/api/v1/billing/webhooks/revenuecat", b,
                                 {"Authorization": secret, "Content-Type": "application/json"}), bodies))
    list(pool.map(lambda i: rpc("grants.create", {"userId": users[i], "tier": "pro", "reason": "bench",
                                                  "idempotencyKey": f"bench-grant-{users[i]}", "actor": "bench"}),
                  range(0, len(users), 2)))
    list(pool.map(lambda tk: usage(*tk), [(t, k) for t in tokens for k in range(3)]))

# The distinct users, then 100 more for the ordered row (fresh: no earlier run's renewals).
fresh = [str(uuid.uuid4()) for _ in range(int(distinct) + 100)]
stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
for i in range(0, len(fresh), 5000):
    rpc("users.import", {"users": [{"id": u, "createdAt": stamp} for u in fresh[i:i + 5000]], "actor": "bench"})
with open(distinct_file, "w") as f:
    f.write("\n".join(fresh[:-100]) + "\n")
with open(distinct_file + "-ordered", "w") as f:
    f.write("\n".join(fresh[-100:]) + "\n")
print(f"seeded {len(users)} users with {len(bodies)} events ({min(per_user.values())}-{max(per_user.values())} each), "
      f"{(len(users) + 1) // 2} grants, {3 * len(tokens)} usage rows; imported {len(fresh)} more users (100 of them for the ordered row)")
