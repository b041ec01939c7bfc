"""End-to-end tests of the admin JSON-RPC methods over the real billing-rpc socket, with
store state created through the real RevenueCat webhook and snapshots read through nginx."""
import json
import os
import subprocess
import threading
import time
import unittest
import uuid
from datetime import datetime, timedelta, timezone

from harness.billing import RPC_SOCKET, VAR_DIR, REPO, request, rpc
from harness.tokens import token as dev_token

ACTOR = "e2e@ops"


def iso(dt):
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def now():
    return datetime.now(timezone.utc)


def new_user():
    return str(uuid.uuid4())


def ok(method, params=None):
    reply = rpc(method, params)
    if "error" in reply:
        raise AssertionError(f"{method} failed: {reply['error']}")
    return reply["result"]


def error(method, params=None):
    reply = rpc(method, params)
    if "error" not in reply:
        raise AssertionError(f"{method} unexpectedly succeeded: {reply['result']}")
    return reply["error"]


def import_users(*ids, created_at="2024-06-01T00:00:00Z"):
    return ok("users.import", {"users": [{"id": i, "createdAt": created_at} for i in ids], "actor": ACTOR})


def snapshot(user):
    token = dev_token(user)
    response = request("GET", "/api/v1/billing/access", headers={"Authorization": f"Bearer {token}"})
    assert response.status == 200, response
    return response.json()


def revenuecat_secret():
    with open(os.path.join(VAR_DIR, "secrets", "revenuecat-webhook-secret")) as f:
        return f.read().strip()


def paying_pro(user, days=30):
    """A paid Pro subscription for `user`, delivered as a RevenueCat INITIAL_PURCHASE."""
    start = now() - timedelta(days=1)
    event = {"api_version": "1.0", "event": {
        "id": str(uuid.uuid4()), "type": "INITIAL_PURCHASE", "app_user_id": user,
        "product_id": "app.test.pro.monthly", "entitlement_ids": ["pro"], "period_type": "NORMAL",
        "purchased_at_ms": int(start.timestamp() * 1000),
        "expiration_at_ms": int((start + timedelta(days=days)).timestamp() * 1000),
        "event_timestamp_ms": int(start.timestamp() * 1000), "environment": "PRODUCTION", "store": "APP_STORE",
        "original_transaction_id": "otx-" + user, "price_in_purchased_currency": 9.99, "currency": "EUR"}}
    response = request("POST", "/api/v1/billing/webhooks/revenuecat", body=event,
                       headers={"Authorization": revenuecat_secret()})
    assert response.status == 200, response


class InvalidParams(unittest.TestCase):
    """Every method: a bad param is -32602 with data naming the field."""

    CASES = [
        ("access.get", {"userId": 5}, "userId"),
        ("access.get", {"userId": "not-a-uuid"}, "userId"),
        ("users.import", {"users": [{"id": "11111111-1111-4111-8111-111111111111"}], "actor": ACTOR}, "users[0].createdAt"),
        ("users.import", {"users": []}, "actor"),
        ("users.delete", {"userId": "11111111-1111-4111-8111-111111111111"}, "actor"),
        ("grants.create", {"userId": "11111111-1111-4111-8111-111111111111", "tier": "gold", "reason": "r",
                           "idempotencyKey": "k", "actor": ACTOR}, "tier"),
        ("grants.create", {"userId": "11111111-1111-4111-8111-111111111111", "tier": "plus", "reason": "r",
                           "idempotencyKey": "k", "actor": ACTOR, "expiresAt": "tomorrow"}, "expiresAt"),
        ("grants.create", {"userId": "11111111-1111-4111-8111-111111111111", "tier": "plus", "reason": "r",
                           "actor": ACTOR}, "idempotencyKey"),
        ("grants.revoke", {"grantId": "1", "actor": ACTOR, "reason": "r"}, "grantId"),
        ("grants.list", {"userID": "x"}, "userID"),
        ("grandfather.applyCohort", {"campaign": "c", "tier": "pro", "reason": "r", "actor": ACTOR}, "createdBefore"),
        ("grandfather.applyCohort", {"campaign": "c", "tier": "pro", "reason": "r", "actor": ACTOR,
                                     "createdBefore": "2020-01-01T00:00:00Z", "batchSize": 0}, "batchSize"),
        ("grandfather.applyCohort", {"campaign": "c", "tier": "pro", "reason": "r", "actor": ACTOR,
                                     "createdBefore": "2020-01-01T00:00:00Z", "cursor": "nonsense"}, "cursor"),
        ("grandfather.applyUsers", {"campaign": "c", "tier": "pro", "reason": "r", "actor": ACTOR,
                                    "userIds": ["x"]}, "userIds[0]"),
        ("grandfather.audit", {"limit": "10"}, "limit"),
        ("grandfather.revoke", {"campaign": "c"}, "actor"),
        ("events.list", {"provider": "stripe"}, "provider"),
        ("events.reproject", {"userId": "11111111-1111-4111-8111-111111111111"}, "actor"),
        ("events.retryQuarantined", {"actor": ACTOR}, "ids"),
        ("events.retryQuarantined", {"actor": ACTOR, "ids": [0]}, "ids[0]"),
        ("flags.get", {"x": 1}, "x"),
        ("flags.set", {"enforcement": "strict", "actor": ACTOR}, "enforcement"),
        ("flags.set", {"purchases.enabled": "no", "actor": ACTOR}, "purchases.enabled"),
        # Dates that do not exist are refused, not rolled over into the next month.
        ("grants.create", {"userId": "11111111-1111-4111-8111-111111111111", "tier": "plus", "reason": "r",
                           "idempotencyKey": "k-feb31", "actor": ACTOR, "expiresAt": "2026-02-31T00:00:00Z"}, "expiresAt"),
        ("grants.create", {"userId": "11111111-1111-4111-8111-111111111111", "tier": "plus", "reason": "r",
                           "idempotencyKey": "k-2460", "actor": ACTOR, "startsAt": "2026-01-01T24:00:00Z"}, "startsAt"),
        ("grandfather.applyCohort", {"campaign": "c", "tier": "pro", "reason": "r", "actor": ACTOR,
                                     "createdBefore": "2025-02-29T00:00:00Z"}, "createdBefore"),
        ("stats.subscriptions", {"from": "2026-04-31", "to": "2026-05-02", "environment": "production"}, "from"),
        ("offerings.publish", {"contract": {}, "actor": ACTOR, "effectiveAt": "2026-06-31T00:00:00Z"}, "effectiveAt"),
        # Limits count code points, as the database's VARCHAR(n) does (SPEC §19): one letter with
        # 300 combining accents is one character to Swift's `count` and 301 to MariaDB.
        ("grants.create", {"userId": "11111111-1111-4111-8111-111111111111", "tier": "plus", "reason": "e" + "\u0301" * 300,
                           "idempotencyKey": "k-combining", "actor": ACTOR}, "reason"),
        ("flags.set", {"enforcement": "observe", "actor": "a" + "\u0301" * 200}, "actor"),
    ]

    def test_every_method_names_the_bad_field(self):
        for method, params, field in self.CASES:
            with self.subTest(method=method, field=field):
                err = error(method, params)
                self.assertEqual(err["code"], -32602, err)
                self.assertEqual(err["data"]["field"], field, err)

    def test_list_methods_covers_every_admin_method_with_params_help(self):
        methods = {m["name"]: m for m in ok("system.listMethods")}
        for name in ["access.get", "users.import", "users.delete", "grants.create", "grants.revoke", "grants.list",
                     "grandfather.applyCohort", "grandfather.applyUsers", "grandfather.audit", "grandfather.revoke",
                     "events.list", "events.reproject", "events.retryQuarantined", "flags.get", "flags.set"]:
            self.assertIn(name, methods)
            self.assertTrue(methods[name]["summary"])
            self.assertNotEqual(methods[name]["params"], "")


class Grants(unittest.TestCase):
    def test_create_list_revoke_and_statuses(self):
        user = new_user()
        import_users(user)
        base = {"userId": user, "tier": "plus", "reason": "support", "actor": ACTOR}
        active = ok("grants.create", {**base, "idempotencyKey": "a", "expiresAt": iso(now() + timedelta(days=30))})
        self.assertTrue(active["created"])
        self.assertEqual(active["status"], "Active")
        scheduled = ok("grants.create", {**base, "idempotencyKey": "s", "startsAt": iso(now() + timedelta(days=3))})
        self.assertEqual(scheduled["status"], "Scheduled")
        expired = ok("grants.create", {**base, "idempotencyKey": "e", "startsAt": iso(now() - timedelta(days=3)),
                                       "expiresAt": iso(now() - timedelta(days=1))})
        self.assertEqual(expired["status"], "Expired")
        revoked = ok("grants.revoke", {"grantId": active["grantId"], "actor": ACTOR, "reason": "mistake"})
        self.assertEqual((revoked["status"], revoked["changed"]), ("Revoked", True))
        again = ok("grants.revoke", {"grantId": active["grantId"], "actor": ACTOR, "reason": "mistake"})
        self.assertFalse(again["changed"])
        listed = ok("grants.list", {"userId": user})["grants"]
        self.assertEqual(sorted(g["status"] for g in listed), ["Expired", "Revoked", "Scheduled"])
        self.assertEqual(snapshot(user)["tier"], "free")

    def test_unknown_user_and_grant_are_1001(self):
        err = error("grants.create", {"userId": new_user(), "tier": "pro", "reason": "r", "idempotencyKey": "k",
                                      "actor": ACTOR})
        self.assertEqual((err["code"], err["data"]["reason"]), (1001, "not_found"))
        err = error("grants.revoke", {"grantId": 99999999, "actor": ACTOR, "reason": "r"})
        self.assertEqual(err["code"], 1001)

    def test_ten_concurrent_identical_creates_make_one_grant(self):
        user = new_user()
        import_users(user)
        params = {"userId": user, "tier": "pro", "reason": "race", "idempotencyKey": "same", "actor": ACTOR,
                  "expiresAt": iso(now() + timedelta(days=7))}
        results, barrier = [], threading.Barrier(10)

        def create():
            barrier.wait()
            results.append(rpc("grants.create", params))

        threads = [threading.Thread(target=create) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(results), 10)
        self.assertTrue(all("result" in r for r in results), results)
        self.assertEqual(len({r["result"]["grantId"] for r in results}), 1)
        self.assertEqual(sum(r["result"]["created"] for r in results), 1)
        self.assertEqual(len(ok("grants.list", {"userId": user})["grants"]), 1)

    def test_same_key_other_params_is_1002_and_writes_nothing(self):
        user = new_user()
        import_users(user)
        first = ok("grants.create", {"userId": user, "tier": "plus", "reason": "r", "idempotencyKey": "k1", "actor": ACTOR})
        audit_before = len(ok("access.get", {"userId": user})["grants"])
        err = error("grants.create", {"userId": user, "tier": "pro", "reason": "r", "idempotencyKey": "k1", "actor": ACTOR})
        self.assertEqual(err["code"], 1002)
        self.assertEqual(err["data"]["grantId"], first["grantId"])
        self.assertEqual(err["data"]["reason"], "idempotency_mismatch")
        grants = ok("grants.list", {"userId": user})["grants"]
        self.assertEqual(len(grants), audit_before)
        self.assertEqual(grants[0]["tier"], "plus")
        same = ok("grants.create", {"userId": user, "tier": "plus", "reason": "r", "idempotencyKey": "k1", "actor": ACTOR})
        self.assertEqual((same["grantId"], same["created"]), (first["grantId"], False))


class Overlay(unittest.TestCase):
    def test_plus_grant_never_demotes_a_paying_pro(self):
        user = new_user()
        import_users(user)
        paying_pro(user)
        ok("grants.create", {"userId": user, "tier": "plus", "reason": "goodwill", "idempotencyKey": "g", "actor": ACTOR})
        snap = snapshot(user)
        self.assertEqual((snap["tier"], snap["source"]), ("pro", "store"))
        self.assertEqual([(s["kind"], s["tier"]) for s in snap["sources"]], [("store", "pro"), ("grant", "plus")])
        detail = ok("access.get", {"userId": user})
        self.assertEqual(detail["snapshot"]["tier"], "pro")
        self.assertEqual(detail["store"][0]["tier"], "pro")
        self.assertEqual(detail["grants"][0]["status"], "Active")

    def test_grant_expiring_shows_the_store_tier_again(self):
        user = new_user()
        import_users(user)
        plus = {"api_version": "1.0", "event": {
            "id": str(uuid.uuid4()), "type": "INITIAL_PURCHASE", "app_user_id": user, "product_id": "app.test.plus.monthly",
            "entitlement_ids": ["plus"], "period_type": "NORMAL", "environment": "PRODUCTION",
            "purchased_at_ms": int(time.time() * 1000) - 1000, "event_timestamp_ms": int(time.time() * 1000) - 1000,
            "expiration_at_ms": int(time.time() * 1000) + 86400000, "original_transaction_id": "otx-" + user}}
        self.assertEqual(request("POST", "/api/v1/billing/webhooks/revenuecat", body=plus,
                                 headers={"Authorization": revenuecat_secret()}).status, 200)
        expires = now() + timedelta(seconds=2)
        ok("grants.create", {"userId": user, "tier": "pro", "reason": "trial of pro", "idempotencyKey": "t",
                             "actor": ACTOR, "expiresAt": iso(expires)})
        during = snapshot(user)
        self.assertEqual((during["tier"], during["source"], during["phase"]), ("pro", "grant", "active"))
        time.sleep(max(0.0, (expires - now()).total_seconds()) + 0.3)
        after = snapshot(user)
        self.assertEqual((after["tier"], after["source"]), ("plus", "store"))
        self.assertEqual([s["kind"] for s in after["sources"]], ["store"])

    def test_campaign_grant_and_store_at_once(self):
        user = new_user()
        import_users(user)
        paying_pro(user)
        ok("grants.create", {"userId": user, "tier": "pro", "reason": "vip", "idempotencyKey": "vip", "actor": ACTOR,
                             "campaign": "vip-2026"})
        campaign = "mix-" + user[:8]
        ok("grandfather.applyUsers", {"campaign": campaign, "tier": "plus", "userIds": [user], "reason": "legacy",
                                      "actor": ACTOR})
        snap = snapshot(user)
        self.assertEqual((snap["tier"], snap["source"]), ("pro", "store"))
        self.assertEqual([(s["kind"], s["tier"]) for s in snap["sources"]],
                         [("store", "pro"), ("grant", "pro"), ("campaign", "plus")])
        self.assertEqual(snap["sources"][2]["campaign"], campaign)
        # The campaign ends: the other two stay.
        ok("grandfather.revoke", {"campaign": campaign, "actor": ACTOR})
        self.assertEqual([s["kind"] for s in snapshot(user)["sources"]], ["store", "grant"])

    def test_campaign_alone_gives_its_tier_and_revoke_ends_it(self):
        user = new_user()
        import_users(user)
        campaign = "solo-" + user[:8]
        ok("grandfather.applyUsers", {"campaign": campaign, "tier": "pro", "userIds": [user], "reason": "r", "actor": ACTOR})
        again = ok("grandfather.applyUsers", {"campaign": campaign, "tier": "pro", "userIds": [user], "reason": "r",
                                              "actor": ACTOR})
        self.assertEqual((again["applied"], again["alreadyMembers"]), (0, 1))
        snap = snapshot(user)
        self.assertEqual((snap["tier"], snap["source"], snap["sources"][0]["campaign"]), ("pro", "campaign", campaign))
        err = error("grandfather.applyUsers", {"campaign": campaign, "tier": "plus", "userIds": [user], "reason": "r",
                                               "actor": ACTOR})
        self.assertEqual(err["code"], 1003)
        err = error("grandfather.applyUsers", {"campaign": campaign, "tier": "pro", "userIds": [new_user()],
                                               "reason": "r", "actor": ACTOR})
        self.assertEqual(err["code"], 1001)
        revoked = ok("grandfather.revoke", {"campaign": campaign, "actor": ACTOR, "reason": "ended"})
        self.assertEqual((revoked["members"], revoked["changed"], revoked["active"]), (1, True, False))
        self.assertEqual(snapshot(user)["tier"], "free")
        audit = ok("grandfather.audit", {"userId": user})["entries"]
        self.assertEqual([e["action"] for e in audit], ["grandfather.apply"])
        self.assertEqual(audit[0]["actor"], ACTOR)


class Cohort(unittest.TestCase):
    def test_25000_users_in_batches_resumed_from_a_cursor(self):
        tag = uuid.uuid4().hex[:8]
        base = datetime(2001, 1, 1, tzinfo=timezone.utc)
        users = [{"id": new_user(), "createdAt": iso(base + timedelta(seconds=i * 60))} for i in range(25000)]
        started = time.monotonic()
        for start in range(0, 25000, 10000):
            result = ok("users.import", {"users": users[start:start + 10000], "actor": ACTOR})
            self.assertEqual(result["inserted"], len(users[start:start + 10000]))
        again = ok("users.import", {"users": users[:10000], "actor": ACTOR})
        self.assertEqual((again["inserted"], again["existing"]), (0, 10000))
        campaign = "cohort-" + tag
        params = {"campaign": campaign, "tier": "plus", "createdFrom": "2001-01-01T00:00:00Z",
                  "createdBefore": "2002-01-01T00:00:00Z", "reason": "grandfathered 2001", "actor": ACTOR}
        dry = ok("grandfather.applyCohort", {**params, "dryRun": True})
        self.assertEqual((dry["count"], dry["alreadyMembers"]), (25000, 0))
        self.assertEqual(dry["sample"][0], users[0]["id"])
        # A first run that stops after two batches (an interrupted operator session) ...
        applied, cursor = 0, None
        for _ in range(2):
            batch = ok("grandfather.applyCohort", {**params, "batchSize": 5000, **({"cursor": cursor} if cursor else {})})
            applied += batch["applied"]
            cursor = batch["nextCursor"]
        self.assertEqual(applied, 10000)
        # ... resumed from its cursor until done.
        while cursor:
            batch = ok("grandfather.applyCohort", {**params, "batchSize": 5000, "cursor": cursor})
            applied += batch["applied"]
            cursor = batch["nextCursor"]
        self.assertEqual(applied, 25000)
        # Re-running from the start changes nothing.
        rerun = ok("grandfather.applyCohort", {**params, "batchSize": 5000})
        self.assertEqual((rerun["applied"], rerun["alreadyMembers"]), (0, 5000))
        summary = ok("grandfather.audit", {"campaign": campaign, "limit": 1})["campaign"]
        self.assertEqual((summary["members"], summary["auditEntries"], summary["auditedMembers"]), (25000, 25000, 25000))
        # Paging the audit accounts for each member exactly once.
        seen, cursor = set(), None
        while True:
            page = ok("grandfather.audit", {"campaign": campaign, "limit": 5000, **({"cursor": cursor} if cursor else {})})
            seen.update(e["userId"] for e in page["entries"] if e["action"] == "grandfather.apply")
            cursor = page["nextCursor"]
            if cursor is None:
                break
        self.assertEqual(seen, {u["id"] for u in users})
        self.assertEqual(snapshot(users[12345]["id"])["tier"], "plus")
        self.assertLess(time.monotonic() - started, 120)


class UsersAndEvents(unittest.TestCase):
    def test_import_claims_unmatched_events_and_reproject_is_consistent(self):
        user = new_user()
        paying_pro(user)  # not known yet: kept unmatched
        unmatched = ok("events.list", {"userId": user})["events"]
        self.assertEqual([e["status"] for e in unmatched], ["unmatched"])
        result = import_users(user)
        self.assertEqual(result["claimedEvents"], [user])
        self.assertEqual(ok("events.list", {"userId": user, "provider": "revenuecat"})["events"][0]["status"], "applied")
        self.assertEqual(snapshot(user)["tier"], "pro")
        reproject = ok("events.reproject", {"userId": user, "actor": ACTOR})
        self.assertTrue(reproject["consistent"], reproject)
        self.assertEqual(reproject["subscriptions"], 1)

    def test_reproject_reports_and_repairs_a_tampered_row(self):
        user = new_user()
        import_users(user)
        paying_pro(user)
        mariadb("UPDATE billing_subscriptions SET tier = 'plus' WHERE user_id = '%s'" % user)
        reproject = ok("events.reproject", {"userId": user, "actor": ACTOR})
        self.assertFalse(reproject["consistent"])
        self.assertEqual(reproject["differences"][0]["fields"], ["tier"])
        self.assertTrue(ok("events.reproject", {"userId": user, "actor": ACTOR})["consistent"])

    def test_events_list_pages(self):
        user = new_user()
        import_users(user)
        paying_pro(user)
        paying_pro(user)
        first = ok("events.list", {"userId": user, "limit": 1})
        self.assertEqual(len(first["events"]), 1)
        second = ok("events.list", {"userId": user, "limit": 1, "cursor": first["nextCursor"]})
        self.assertEqual(len(second["events"]), 1)
        self.assertNotEqual(first["events"][0]["id"], second["events"][0]["id"])

    def test_delete_erases_the_store_rows_and_the_grants(self):
        user = new_user()
        import_users(user)
        paying_pro(user)
        ok("grants.create", {"userId": user, "tier": "plus", "reason": "r", "idempotencyKey": "d", "actor": ACTOR})
        result = ok("users.delete", {"userId": user, "actor": ACTOR, "reason": "GDPR request"})
        self.assertEqual(result["unboundSubscriptions"], ["otx-" + user])
        self.assertEqual(result["removed"]["billing_grants"], 1)
        self.assertTrue(ok("users.delete", {"userId": user, "actor": ACTOR})["alreadyDeleted"])
        self.assertEqual(ok("access.get", {"userId": user})["store"], [])
        self.assertTrue(ok("access.get", {"userId": user})["user"]["deleted"])
        self.assertEqual(error("users.delete", {"userId": new_user(), "actor": ACTOR})["code"], 1001)

    def test_retry_quarantined_reports_each_row(self):
        # A provider without a replayer (client posts are never quarantined) and an App Store
        # notification whose body still does not verify.
        mariadb("INSERT INTO billing_quarantine (provider, reason, payload_sha256, payload, received_at, last_received_at) "
                "VALUES ('apple_transaction', 'untrusted_chain', SHA2(UUID(), 256), '{}', NOW(3), NOW(3))")
        no_replayer = int(mariadb("SELECT MAX(id) FROM billing_quarantine").strip())
        mariadb("INSERT INTO billing_quarantine (provider, reason, payload_sha256, payload, received_at, last_received_at) "
                "VALUES ('apple_notification', 'untrusted_chain', SHA2(UUID(), 256), '{\"signedPayload\": \"x.y.z\"}', NOW(3), NOW(3))")
        still_failing = int(mariadb("SELECT MAX(id) FROM billing_quarantine").strip())
        result = ok("events.retryQuarantined", {"ids": [no_replayer, still_failing, 987654321], "actor": ACTOR})
        outcomes = {r["id"]: r["outcome"] for r in result["results"]}
        self.assertEqual(outcomes, {no_replayer: "no_replayer", still_failing: "still_failing", 987654321: "not_found"})
        self.assertIn("results", ok("events.retryQuarantined", {"all": True, "actor": ACTOR}))


class Flags(unittest.TestCase):
    def test_set_reaches_the_workers_within_a_second(self):
        user = new_user()
        import_users(user)
        try:
            result = ok("flags.set", {"enforcement": "enforce", "actor": ACTOR})
            self.assertEqual(result["enforcement"], "enforce")
            self.assertEqual(ok("flags.get")["enforcement"], "enforce")
            time.sleep(1.1)
            # Several requests, so every worker process answers at least once in all likelihood.
            self.assertEqual({snapshot(user)["enforcement"] for _ in range(6)}, {"enforce"})
        finally:
            ok("flags.set", {"enforcement": "observe", "actor": ACTOR})
        time.sleep(1.1)
        self.assertEqual({snapshot(user)["enforcement"] for _ in range(6)}, {"observe"})


class SocketPermission(unittest.TestCase):
    def test_a_user_without_permission_on_the_socket_is_refused(self):
        mode = os.stat(RPC_SOCKET).st_mode & 0o777
        self.assertEqual(mode, 0o660)
        probe = ("import socket,sys\n"
                 "s=socket.socket(socket.AF_UNIX)\n"
                 "try:\n s.connect(sys.argv[1])\nexcept PermissionError:\n sys.exit(13)\n"
                 "sys.exit(0)\n")
        result = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                 "python3", "-c", probe, os.path.abspath(RPC_SOCKET)], capture_output=True, text=True)
        self.assertEqual(result.returncode, 13, result.stderr)
        # The same client as root gets through.
        self.assertEqual(ok("system.health")["status"], "ok")


class CommandLine(unittest.TestCase):
    def run_cli(self, *args):
        return subprocess.run([os.path.join(REPO, "scripts", "billing-admin"), "--socket", RPC_SOCKET, *args],
                              capture_output=True, text=True, timeout=60)

    def test_readable_output_json_output_and_one_line_errors(self):
        user = new_user()
        import_users(user)
        ok("grants.create", {"userId": user, "tier": "pro", "reason": "cli", "idempotencyKey": "c", "actor": ACTOR})
        table = self.run_cli("grants.list", "--userId", user)
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertIn("Active", table.stdout)
        self.assertIn("STATUS", table.stdout)
        snap = self.run_cli("access.get", "--userId", user)
        self.assertEqual(snap.returncode, 0, snap.stderr)
        self.assertIn("tier pro", snap.stdout)
        as_json = self.run_cli("--json", "access.get", json.dumps({"userId": user}))
        self.assertEqual(json.loads(as_json.stdout)["snapshot"]["tier"], "pro")
        bad = self.run_cli("grants.create", "--userId", user, "--tier", "gold")
        self.assertEqual(bad.returncode, 1)
        self.assertEqual(len(bad.stderr.strip().splitlines()), 1, bad.stderr)
        self.assertIn("-32602", bad.stderr)
        helped = self.run_cli("grants.create", "--help")
        self.assertEqual(helped.returncode, 0)
        self.assertIn("idempotencyKey", helped.stdout)


def mariadb(sql):
    sock = os.path.join(VAR_DIR, "run", "mariadb.sock")
    return subprocess.run(["mariadb", "--no-defaults", "--protocol=socket", "-S", sock, "-uroot", "-N", "-B", "billing",
                           "-e", sql], check=True, capture_output=True, text=True).stdout


if __name__ == "__main__":
    unittest.main()
