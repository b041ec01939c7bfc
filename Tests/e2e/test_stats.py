"""stats.subscriptions over JSON-RPC and billing-admin, paywall events through nginx, and the
last-seen record of GET /billing/access (docs/stats.md). The numbers themselves are asserted
by the Swift integration fixture; here: the wiring, validation, auth and idempotency."""
import datetime
import json
import os
import unittest
import uuid

from billing import request, rpc, script, VAR_DIR


def token(user):
    return script("dev-token", user).stdout.strip()


def paywall(body, user=None, auth=None):
    headers = {}
    if auth is not None:
        headers["Authorization"] = auth
    elif user is not None:
        headers["Authorization"] = "Bearer " + token(user)
    return request("POST", "/api/v1/billing/paywall-events", body, headers)


def today_window():
    now = datetime.datetime.now(datetime.timezone.utc)
    start = (now - datetime.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    end = (now + datetime.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return start, end


class PaywallEvents(unittest.TestCase):
    def test_needs_a_valid_token(self):
        self.assertEqual(paywall({"type": "view", "placement": "p", "eventId": "x"}).status, 401)
        r = paywall({"type": "view", "placement": "p", "eventId": "x"}, auth="Bearer not.a.token")
        self.assertEqual(r.status, 401)
        self.assertIn("error", r.json())

    def test_validation(self):
        user = str(uuid.uuid4())
        bad = [
            [1, 2],
            {"placement": "p", "eventId": "e1"},
            {"type": "click", "placement": "p", "eventId": "e1"},
            {"type": "view", "eventId": "e1"},
            {"type": "view", "placement": "has space", "eventId": "e1"},
            {"type": "view", "placement": "p" * 65, "eventId": "e1"},
            {"type": "view", "placement": "p"},
            {"type": "view", "placement": "p", "eventId": "e" * 129},
            {"type": "view", "placement": "p", "eventId": "e1", "result": "done"},
            {"type": "purchase", "placement": "p", "eventId": "e1", "result": "maybe"},
            {"type": "view", "placement": "p", "eventId": "e1", "environment": "staging"},
            {"type": "view", "placement": "p", "eventId": "e1", "extra": 1},
            {"type": "view", "placement": 3, "eventId": "e1"},
        ]
        for body in bad:
            r = paywall(body, user)
            self.assertEqual(r.status, 400, f"{body!r}: {r!r}")
            self.assertEqual(r.json()["error"]["code"], "bad_request")
        r = request("POST", "/api/v1/billing/paywall-events", b"{not json",
                    {"Authorization": "Bearer " + token(user), "Content-Type": "application/json"})
        self.assertEqual(r.status, 400)

    def test_idempotent_by_user_and_event_id_and_counted_in_the_funnel(self):
        user, other = str(uuid.uuid4()), str(uuid.uuid4())
        placement = "e2e_" + uuid.uuid4().hex[:12]
        event = {"type": "view", "placement": placement, "eventId": "v-1"}
        first = paywall(event, user)
        self.assertEqual(first.status, 201, first)
        self.assertEqual(first.json(), {"recorded": True, "duplicate": False})
        again = paywall(event, user)
        self.assertEqual(again.status, 200)
        self.assertEqual(again.json(), {"recorded": True, "duplicate": True})
        # The same client id from another user is another event.
        self.assertEqual(paywall(event, other).status, 201)
        self.assertEqual(paywall({"type": "purchase", "placement": placement, "eventId": "p-1", "result": "done"}, user).status, 201)
        self.assertEqual(paywall({"type": "purchase", "placement": placement, "eventId": "p-2"}, user).status, 201)
        self.assertEqual(paywall({"type": "view", "placement": placement, "eventId": "s-1", "environment": "sandbox"}, user).status, 201)

        start, end = today_window()
        reply = rpc("stats.subscriptions", {"from": start, "to": end, "environment": "production"})
        self.assertIn("result", reply, reply)
        rows = [p for p in reply["result"]["funnel"]["placements"] if p["placement"] == placement]
        self.assertEqual(rows, [{"placement": placement, "views": 2, "attempts": 2, "purchases": 1, "conversionPct": 50.0}])
        sandbox = rpc("stats.subscriptions", {"from": start, "to": end, "environment": "sandbox"})["result"]
        rows = [p for p in sandbox["funnel"]["placements"] if p["placement"] == placement]
        self.assertEqual(rows, [{"placement": placement, "views": 1, "attempts": 0, "purchases": 0, "conversionPct": 0.0}])


class StatsMethod(unittest.TestCase):
    def test_result_shape(self):
        start, end = today_window()
        r = rpc("stats.subscriptions", {"from": start, "to": end, "environment": "production", "currency": "EUR"})
        self.assertIn("result", r, r)
        result = r["result"]
        for key in ("environment", "currency", "timeZone", "period", "previousPeriod", "snapshots", "counts",
                    "derived", "subscriberProfile", "funnel", "series", "recent"):
            self.assertIn(key, result)
        for key in ("active", "trial", "paying", "cancelling", "mrrMilli", "byProduct"):
            self.assertIn(key, result["snapshots"]["end"])
        for key in ("new", "trials", "converted", "renewals", "cancellations", "lost", "refunds", "revenueMilli"):
            self.assertIn(key, result["counts"]["current"])
            self.assertIn(key, result["counts"]["previous"])
        self.assertEqual(result["timeZone"], "UTC")

    def test_invalid_params(self):
        start, end = today_window()
        cases = [
            {"from": start, "to": end},
            {"from": start, "to": end, "environment": "staging"},
            {"from": end, "to": start, "environment": "production"},
            {"from": "2020-01-01", "to": "2024-01-01", "environment": "production"},
            {"from": start, "to": end, "environment": "production", "currency": "euro"},
            {"from": start, "to": end, "environment": "production", "timeZone": "Mars/Olympus"},
            {"from": "yesterday", "to": end, "environment": "production"},
            {"from": start, "to": end, "environment": "production", "bogus": 1},
        ]
        for params in cases:
            r = rpc("stats.subscriptions", params)
            self.assertEqual(r.get("error", {}).get("code"), -32602, f"{params}: {r}")

    def test_named_time_zone_works_on_the_stack(self):
        start, end = today_window()
        r = rpc("stats.subscriptions", {"from": start, "to": end, "environment": "production", "timeZone": "Europe/Paris"})
        self.assertIn("result", r, r)
        self.assertEqual(r["result"]["timeZone"], "Europe/Paris")

    def test_access_request_records_the_user_as_active(self):
        user = str(uuid.uuid4())
        start, end = today_window()
        before = rpc("stats.subscriptions", {"from": start, "to": end, "environment": "production"})["result"]
        for _ in range(3):
            r = request("GET", "/api/v1/billing/access", headers={"Authorization": "Bearer " + token(user)})
            self.assertEqual(r.status, 200, r)
        after = rpc("stats.subscriptions", {"from": start, "to": end, "environment": "production"})["result"]
        self.assertEqual(after["derived"]["activeUsers"], before["derived"]["activeUsers"] + 1)

    def test_billing_admin_report_and_json(self):
        start, end = today_window()
        params = json.dumps({"from": start, "to": end, "environment": "production"})
        env_sock = os.path.join(VAR_DIR, "run", "billing-rpc.sock")
        report = script("billing-admin", "--socket", env_sock, "stats.subscriptions", params)
        self.assertIn("Subscriptions, production", report.stdout)
        self.assertIn("paywall funnel", report.stdout)
        self.assertIn("trial conversion", report.stdout)
        as_json = script("billing-admin", "--socket", env_sock, "--json", "stats.subscriptions", params)
        self.assertEqual(json.loads(as_json.stdout)["environment"], "production")

    def test_purge_method(self):
        r = rpc("stats.purgePaywallEvents", {"limit": 10})
        self.assertIn("result", r, r)
        self.assertGreaterEqual(r["result"]["deleted"], 0)
        self.assertEqual(rpc("stats.purgePaywallEvents", {"limit": 0}).get("error", {}).get("code"), -32602)


if __name__ == "__main__":
    unittest.main()
