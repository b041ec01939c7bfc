"""stats.subscriptions over JSON-RPC and billing-admin, paywall events through nginx, and the
last-seen record of GET /billing/access (docs/stats.md). The numbers themselves are asserted
by the Swift integration fixture; here: the wiring, validation, auth and idempotency."""
import datetime
import json
import os
import unittest
import uuid

from harness.billing import request, rpc, script, sql, sql_string, VAR_DIR
from harness.tokens import token


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
        self.assertEqual(rows, [{"placement": placement, "views": 2, "dismissals": 0, "attempts": 2, "purchases": 1,
                                 "conversionPct": 50.0}])
        sandbox = rpc("stats.subscriptions", {"from": start, "to": end, "environment": "sandbox"})["result"]
        rows = [p for p in sandbox["funnel"]["placements"] if p["placement"] == placement]
        self.assertEqual(rows, [{"placement": placement, "views": 1, "dismissals": 0, "attempts": 0, "purchases": 0,
                                 "conversionPct": 0.0}])


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

    def test_refresh_method_and_the_stored_states(self):
        """An inbox row written behind the service's back (a restore, a fix by hand) is noted by
        the trigger; stats.refresh derives its subscription, and the snapshots count it."""
        import random
        start = datetime.datetime(2018, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(
            hours=random.SystemRandom().randrange(300 * 24))
        at = (start + datetime.timedelta(minutes=5)).strftime("%Y-%m-%d %H:%M:%S.000")
        until = (start + datetime.timedelta(days=30)).strftime("%Y-%m-%d %H:%M:%S.000")
        instant = (start + datetime.timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%SZ")

        def active():
            r = rpc("stats.snapshots", {"at": [instant], "environment": "sandbox"})
            self.assertIn("result", r, r)
            return r["result"]["snapshots"][0]["active"]

        before = active()
        sub = "refresh-" + uuid.uuid4().hex
        sql("INSERT INTO billing_events (provider, provider_event_id, event_type, kind, subscription_id, product_id, "
            "price_milli, currency, environment, purchased_at, expires_at, intrinsic_at, received_at, status, payload) VALUES "
            f"('revenuecat', {sql_string(uuid.uuid4().hex)}, 'INITIAL_PURCHASE', 'purchase', {sql_string(sub)}, 'app.pro.monthly', "
            f"4990, 'EUR', 'sandbox', '{at}', '{until}', '{at}', NOW(3), 'unmatched', '{{}}')")
        r = rpc("stats.refresh", {})
        self.assertIn("result", r, r)
        for key in ("subscriptions", "late", "foldedOn", "states", "pending"):
            self.assertIsInstance(r["result"][key], int, r)
        self.assertEqual(sql(f"SELECT COUNT(*) FROM billing_subscription_states WHERE subscription_id = {sql_string(sub)}"), [["1"]])
        self.assertEqual(active(), before + 1)
        self.assertEqual(rpc("stats.refresh", {"now": True}).get("error", {}).get("code"), -32602)

    def test_purge_method(self):
        r = rpc("stats.purgePaywallEvents", {"limit": 10, "actor": "stats-e2e@ops"})
        self.assertIn("result", r, r)
        self.assertGreaterEqual(r["result"]["deleted"], 0)
        self.assertEqual(rpc("stats.purgePaywallEvents", {"limit": 0, "actor": "stats-e2e@ops"}).get("error", {}).get("code"), -32602)


class HostileAmounts(unittest.TestCase):
    """SPEC §19: amounts anywhere near Int64's bounds — refused at ingestion now, but rows may
    predate that, or come from a restore — never crash the statistics: the totals saturate."""

    def test_prices_at_int64s_bounds_saturate_and_the_report_answers(self):
        import random
        start = datetime.datetime(2019, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(
            hours=random.SystemRandom().randrange(300 * 24))
        at = (start + datetime.timedelta(minutes=5)).strftime("%Y-%m-%d %H:%M:%S.000")
        until = (start + datetime.timedelta(days=30)).strftime("%Y-%m-%d %H:%M:%S.000")
        subscriptions = ["hostile-" + uuid.uuid4().hex for _ in range(3)]
        rows = [(sub, "purchase", "INITIAL_PURCHASE", 9223372036854775807) for sub in subscriptions]
        rows.append((subscriptions[0], "refund", "CANCELLATION", -9223372036854775808))
        for sub, kind, type_, price in rows:
            sql("INSERT INTO billing_events (provider, provider_event_id, event_type, kind, subscription_id, product_id, "
                "price_milli, currency, environment, purchased_at, expires_at, intrinsic_at, received_at, status, payload) VALUES "
                f"('revenuecat', {sql_string(uuid.uuid4().hex)}, '{type_}', '{kind}', {sql_string(sub)}, 'app.pro.monthly', "
                f"{price}, 'EUR', 'sandbox', '{at}', '{until}', '{at}', NOW(3), 'unmatched', '{{}}')")
        reply = rpc("stats.subscriptions", {"from": start.strftime("%Y-%m-%dT%H:00:00Z"),
                                            "to": (start + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:00:00Z"),
                                            "environment": "sandbox", "currency": "EUR"})
        self.assertIn("result", reply, reply)
        current = reply["result"]["counts"]["current"]
        self.assertEqual(current["grossMilli"], 9223372036854775807)
        self.assertEqual(current["refundedMilli"], 9223372036854775807)
        self.assertEqual(current["revenueMilli"], 0)
        self.assertEqual(rpc("system.health")["result"]["status"], "ok", "billing-rpc is still up")
        # A posted App Store price beyond any real one is refused at ingestion (400), not stored.
        from harness import entitlements as E
        user = E.known_user()
        original = E.apple_transaction_id()
        tx = E.apple_transaction(user, original, original, purchase=E.now_ms() - E.HOUR, expires=E.now_ms() + E.DAY,
                                 signed=E.now_ms(), price=9223372036854775807)
        r = request("POST", "/api/v1/billing/apple/transactions", body={"signedTransaction": E.chain().sign(tx)},
                    headers={"Authorization": "Bearer " + E.token(user)})
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["error"]["code"], "invalid_payload", r)


class PaywallPurge(unittest.TestCase):
    """stats.purgePaywallEvents is a mutation like any other (SPEC §8): it names an actor and
    writes one audit_log row, with the cutoff and the number of rows deleted, in the
    transaction of the delete."""

    def expired_rows(self, n):
        """n paywall events received 40 days ago for a fresh user; returns the user."""
        user = str(uuid.uuid4())
        values = ", ".join(f"({sql_string(user)}, 'purge-{i}', 'view', 'purge_test', NULL, 'production', "
                           "NOW(3) - INTERVAL 40 DAY)" for i in range(n))
        sql("INSERT INTO billing_paywall_events (user_id, event_id, type, placement, result, environment, received_at) "
            f"VALUES {values}")
        return user

    def left(self, user):
        return int(sql(f"SELECT COUNT(*) FROM billing_paywall_events WHERE user_id = {sql_string(user)}")[0][0])

    def audit(self, actor):
        rows = sql(f"SELECT action, detail FROM audit_log WHERE actor = {sql_string(actor)} ORDER BY id")
        return [(action, json.loads(detail)) for action, detail in rows]

    def test_actor_is_required(self):
        user = self.expired_rows(1)
        for params, field in (({"limit": 10}, "actor"), ({"limit": 10, "actor": " "}, "actor"), ({"limit": 10, "actor": 7}, "actor")):
            with self.subTest(params=params):
                error = rpc("stats.purgePaywallEvents", params).get("error", {})
                self.assertEqual(error.get("code"), -32602, error)
                self.assertEqual(error.get("data", {}).get("field"), field, error)
        self.assertEqual(self.left(user), 1, "a refused call deletes nothing")

    def test_one_audit_row_with_the_cutoff_and_the_count(self):
        user, actor = self.expired_rows(3), f"purge-{uuid.uuid4().hex[:8]}@ops"
        before = datetime.datetime.now(datetime.timezone.utc)
        r = rpc("stats.purgePaywallEvents", {"limit": 1000000, "actor": actor})
        self.assertIn("result", r, r)
        deleted = r["result"]["deleted"]
        self.assertGreaterEqual(deleted, 3)
        self.assertEqual(self.left(user), 0)
        [(action, detail)] = self.audit(actor)
        self.assertEqual(action, "stats.purgePaywallEvents")
        self.assertEqual(detail["deleted"], deleted)
        self.assertEqual(detail["limit"], 1000000)
        cutoff = datetime.datetime.fromisoformat(detail["cutoff"].replace("Z", "+00:00"))
        self.assertLess(abs((before - datetime.timedelta(days=30) - cutoff).total_seconds()), 120, detail)
        # Nothing left to delete is still an audited call, with its zero.
        r = rpc("stats.purgePaywallEvents", {"limit": 1000000, "actor": actor})
        self.assertEqual(r["result"]["deleted"], 0, r)
        self.assertEqual([d["deleted"] for _, d in self.audit(actor)], [deleted, 0])

    def test_nothing_is_deleted_when_the_audit_write_fails(self):
        from test_rpc_atomicity import DOOMED, Trigger
        trigger = Trigger(self, "audit_log", "INSERT", f"NEW.actor = {sql_string(DOOMED)}")
        user = self.expired_rows(2)
        reply = rpc("stats.purgePaywallEvents", {"limit": 1000000, "actor": DOOMED})
        trigger.assert_internal_error(self, reply)
        self.assertEqual(self.left(user), 2, "the delete is rolled back with its audit row")
        self.assertEqual(self.audit(DOOMED), [])
        actor = f"purge-{uuid.uuid4().hex[:8]}@ops"
        self.assertGreaterEqual(rpc("stats.purgePaywallEvents", {"limit": 1000000, "actor": actor})["result"]["deleted"], 2)
        self.assertEqual(self.left(user), 0)


if __name__ == "__main__":
    unittest.main()
