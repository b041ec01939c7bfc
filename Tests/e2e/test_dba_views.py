"""A DBA answers "why does user X have Pro?" with one SELECT on the views of sql/007."""
import os
import subprocess
import time
import unittest
import uuid

from harness.billing import VAR_DIR, request, rpc
from harness.tokens import token as dev_token


def sql(query):
    out = subprocess.run(["mariadb", "--no-defaults", "--protocol=socket", "-S", os.path.join(VAR_DIR, "run", "mariadb.sock"),
                          "-uroot", "-B", "billing", "-e", query], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    if not lines:
        return []
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:]]


class DBAViews(unittest.TestCase):
    def test_why_does_this_user_have_pro(self):
        user = str(uuid.uuid4())
        token = dev_token(user)
        self.assertEqual(request("GET", "/api/v1/billing/access", headers={"Authorization": f"Bearer {token}"}).status, 200)
        with open(os.path.join(VAR_DIR, "secrets", "revenuecat-webhook-secret")) as f:
            secret = f.read().strip()
        now = int(time.time() * 1000)
        event = {"event": {"id": f"dba-{user}", "type": "INITIAL_PURCHASE", "app_user_id": user,
                           "product_id": "app.pro.yearly", "entitlement_ids": ["pro"], "period_type": "NORMAL",
                           "purchased_at_ms": now - 1000, "expiration_at_ms": now + 365 * 86_400_000,
                           "event_timestamp_ms": now, "environment": "PRODUCTION", "store": "APP_STORE",
                           "original_transaction_id": f"otx-{user}", "price_in_purchased_currency": 59.99, "currency": "EUR"}}
        r = request("POST", "/api/v1/billing/webhooks/revenuecat", event, {"Authorization": secret})
        self.assertEqual(r.status, 200, r)

        [row] = sql(f"SELECT effective_tier, decided_by, store_phase, product_id, subscription_id, last_event_id "
                    f"FROM v_effective_access WHERE user_id = '{user}'")
        self.assertEqual(row["effective_tier"], "pro")
        self.assertEqual(row["decided_by"], "store")
        self.assertEqual(row["store_phase"], "active")
        self.assertEqual(row["product_id"], "app.pro.yearly")
        self.assertEqual(row["subscription_id"], f"otx-{user}")
        [story] = sql(f"SELECT event_id, kind, status, party_role, price_milli, price, currency, provider_event_id "
                      f"FROM v_subscription_events WHERE user_id = '{user}'")
        self.assertEqual(story["event_id"], row["last_event_id"])
        self.assertEqual((story["kind"], story["status"], story["party_role"]), ("purchase", "applied", "subject"))
        self.assertEqual((story["price_milli"], story["currency"]), ("59990", "EUR"))
        self.assertEqual(story["provider_event_id"], f"dba-{user}")

    def test_a_grant_over_a_lower_store_tier_decides_and_the_store_shows_again_without_it(self):
        user = str(uuid.uuid4())
        token = dev_token(user)
        self.assertEqual(request("GET", "/api/v1/billing/access", headers={"Authorization": f"Bearer {token}"}).status, 200)
        with open(os.path.join(VAR_DIR, "secrets", "revenuecat-webhook-secret")) as f:
            secret = f.read().strip()
        now = int(time.time() * 1000)
        event = {"event": {"id": f"dba-plus-{user}", "type": "INITIAL_PURCHASE", "app_user_id": user,
                           "product_id": "app.plus.monthly", "entitlement_ids": ["plus"], "period_type": "NORMAL",
                           "purchased_at_ms": now - 1000, "expiration_at_ms": now + 30 * 86_400_000,
                           "event_timestamp_ms": now, "environment": "PRODUCTION", "original_transaction_id": f"otx-{user}"}}
        self.assertEqual(request("POST", "/api/v1/billing/webhooks/revenuecat", event, {"Authorization": secret}).status, 200)
        grant = rpc("grants.create", {"userId": user, "tier": "pro", "reason": "support", "idempotencyKey": "dba",
                                      "actor": "dba-test"})
        self.assertNotIn("error", grant, grant)
        [row] = sql(f"SELECT effective_tier, decided_by, store_tier_now, grant_tier FROM v_effective_access WHERE user_id = '{user}'")
        self.assertEqual((row["effective_tier"], row["decided_by"], row["store_tier_now"], row["grant_tier"]),
                         ("pro", "grant", "plus", "pro"))
        grant_id = grant["result"]["grantId"]
        self.assertNotIn("error", rpc("grants.revoke", {"grantId": grant_id, "actor": "dba-test", "reason": "test"}))
        [row] = sql(f"SELECT effective_tier, decided_by FROM v_effective_access WHERE user_id = '{user}'")
        self.assertEqual((row["effective_tier"], row["decided_by"]), ("plus", "store"))

    def test_a_user_without_a_store_subscription_is_free(self):
        user = str(uuid.uuid4())
        token = dev_token(user)
        self.assertEqual(request("GET", "/api/v1/billing/access", headers={"Authorization": f"Bearer {token}"}).status, 200)
        [row] = sql(f"SELECT effective_tier, decided_by FROM v_effective_access WHERE user_id = '{user}'")
        self.assertEqual((row["effective_tier"], row["decided_by"]), ("free", "none"))


if __name__ == "__main__":
    unittest.main()
