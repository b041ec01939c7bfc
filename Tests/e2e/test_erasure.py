"""Deletion means deletion (SPEC §19), through nginx, the workers, billing-rpc and MariaDB.

A user with data from every source — RevenueCat (with subscriber attributes and an anonymous
alias), the App Store (a transaction posted by the app, with his appAccountToken, and a
notification), a grant, usage, paywall events and an offer-ladder stage — is erased with
users.delete. Then a scan of every text column of every table finds none of his personal
data; his token gets 410 user_deleted on every user route; his transaction does not bind
again; every admin method naming him but access.get is 1005; stats.subscriptions over his
period is unchanged; a later store event for his subscription is recorded unmatched, waits
for nobody and keeps nothing of him. And ids compare byte for byte: a sub with trailing or
leading whitespace or control characters is refused, and SQL does not pad."""
import json
import socket
import threading
import unittest
import uuid

from harness import entitlements as E
from harness.billing import RPC_SOCKET, request, rpc, sql, sql_string, wait_until

USER_ROUTES = [
    ("GET", "/api/v1/billing/access", None),
    ("POST", "/api/v1/billing/usage", {"meter": "recurringGeneration", "amount": 1, "idempotencyKey": "after-erasure"}),
    ("GET", "/api/v1/billing/offerings?placement=onboarding", None),
    ("POST", "/api/v1/billing/paywall-events", {"type": "view", "placement": "onboarding", "eventId": "after-erasure"}),
]


def ok(method, params):
    reply = rpc(method, params)
    assert "result" in reply, (method, reply)
    return reply["result"]


def rpc_error(method, params):
    reply = rpc(method, params)
    assert "error" in reply, (method, reply)
    return reply["error"]


def text_columns():
    """(table, column) of every character or binary column of every base table."""
    rows = sql("""SELECT c.TABLE_NAME, c.COLUMN_NAME FROM information_schema.COLUMNS c
                  JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
                  WHERE c.TABLE_SCHEMA = DATABASE() AND t.TABLE_TYPE = 'BASE TABLE'
                    AND c.DATA_TYPE IN ('char', 'varchar', 'tinytext', 'text', 'mediumtext', 'longtext',
                                        'binary', 'varbinary', 'tinyblob', 'blob', 'mediumblob', 'longblob', 'json')""")
    return [(t, c) for t, c in rows]


def occurrences(needles):
    """{needle: ["table.column", ...]} for every needle found anywhere as a byte substring
    (one query per table)."""
    tables = {}
    for table, column in text_columns():
        tables.setdefault(table, []).append(column)
    assert sum(len(c) for c in tables.values()) > 50, tables  # the scan really covers the schema
    patterns = [sql_string("%" + n.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%") for n in needles]
    found = {}
    for table, columns in sorted(tables.items()):
        terms = [(needle, column, f"COALESCE(SUM(CAST(`{column}` AS BINARY) LIKE CAST({pattern} AS BINARY)), 0)")
                 for needle, pattern in zip(needles, patterns) for column in columns]
        counts = sql(f"SELECT {', '.join(t[2] for t in terms)} FROM `{table}`")[0]
        for (needle, column, _), n in zip(terms, counts):
            if n != "0":
                found.setdefault(needle, []).append(f"{table}.{column}")
    return found


def a_user_with_everything():
    """A known user with data from every source; returns what identifies him."""
    user = E.known_user()
    tag = uuid.uuid4().hex[:12]
    personal = {"email": f"victim-{tag}@example.org", "name": f"Victim {tag} Person",
                "anonymous": f"$RCAnonymousID:{uuid.uuid4().hex}", "phone": f"+3361{tag[:7]}"}
    window = E.private_window()
    at = window[0] + 10 * E.MINUTE
    # RevenueCat: a paid period in the private window, with his attributes and anonymous alias.
    rc_sub = E.rc_subscription_id()
    event = E.rc_event("INITIAL_PURCHASE", user, at=at, sub=rc_sub, expires=at + 30 * E.DAY)
    event["aliases"] = [user, personal["anonymous"]]
    event["original_app_user_id"] = personal["anonymous"]
    event["subscriber_attributes"] = {
        "$email": {"value": personal["email"], "updated_at_ms": at},
        "$displayName": {"value": personal["name"], "updated_at_ms": at},
        "$phoneNumber": {"value": personal["phone"], "updated_at_ms": at}}
    E.rc_deliver(event)
    # App Store: a transaction the app posts (his appAccountToken) in the window, bound to him,
    # and a renewal notification of it.
    original = E.apple_transaction_id()
    transaction = E.apple_transaction(user, original, original, purchase=at, expires=at + 30 * E.DAY, signed=at)
    r = request("POST", "/api/v1/billing/apple/transactions", body={"signedTransaction": E.chain().sign(transaction)},
                headers={"Authorization": "Bearer " + E.token(user)})
    assert r.status == 200, r
    renewed = E.apple_transaction(user, original, E.apple_transaction_id(), purchase=E.now_ms() - E.HOUR,
                                  expires=E.now_ms() + 30 * E.DAY, signed=E.now_ms())
    E.apple_notify("DID_RENEW", transaction=renewed)
    # Operator and app data.
    ok("grants.create", {"userId": user, "tier": "pro", "reason": "support case " + tag, "idempotencyKey": "erasure-" + tag,
                         "actor": E.ACTOR})
    r = request("POST", "/api/v1/billing/usage", body={"meter": "recurringGeneration", "amount": 1, "idempotencyKey": "u-" + tag},
                headers={"Authorization": "Bearer " + E.token(user)})
    assert r.status == 200, r
    for type_ in ("view", "dismiss"):
        r = request("POST", "/api/v1/billing/paywall-events",
                    body={"type": type_, "placement": "onboarding", "offering": "default", "eventId": f"{type_}-{tag}"},
                    headers={"Authorization": "Bearer " + E.token(user)})
        assert r.status in (200, 201), r
    return user, personal, window, original, transaction


class Erasure(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.user, cls.personal, cls.window, cls.original, cls.transaction = a_user_with_everything()
        cls.before = E.stats_counts(cls.window)
        # His data is really there before (so the scan below can fail).
        found = occurrences([cls.user, cls.personal["email"], cls.personal["anonymous"]])
        assert cls.user in found and cls.personal["email"] in found and cls.personal["anonymous"] in found, found
        cls.answer = ok("users.delete", {"userId": cls.user, "actor": E.ACTOR, "reason": "GDPR Art. 17 request"})

    def test_the_answer_says_what_went(self):
        a = self.answer
        self.assertTrue(a["deleted"])
        self.assertFalse(a["alreadyDeleted"])
        self.assertIn(self.original, a["unboundSubscriptions"])
        for table in ["billing_apple_bindings", "billing_grants", "usage_ledger", "billing_paywall_events", "billing_subscriptions"]:
            self.assertGreaterEqual(a["removed"].get(table, 0), 1, (table, a))
        self.assertGreaterEqual(a["scrubbedEvents"], 2)
        again = ok("users.delete", {"userId": self.user, "actor": E.ACTOR})
        self.assertTrue(again["alreadyDeleted"])
        self.assertEqual(again["deletedAt"], a["deletedAt"])

    def test_no_text_column_of_any_table_holds_his_personal_data(self):
        needles = [self.user, self.personal["email"], self.personal["name"], self.personal["anonymous"], self.personal["phone"]]
        self.assertEqual(occurrences(needles), {})

    def test_his_events_are_kept_under_a_tombstone(self):
        rows = sql("SELECT DISTINCT e.user_id FROM billing_events e WHERE e.status = 'applied' AND e.subscription_id = "
                   + sql_string(self.original))
        owners = {r[0] for r in rows}
        self.assertEqual(len(owners), 1, owners)
        tombstone = owners.pop()
        self.assertRegex(tombstone, r"^erased:[0-9a-f]{32}$")
        self.assertEqual(sql("SELECT deleted_at IS NOT NULL, first_seen_at IS NULL FROM billing_users WHERE id = "
                             + sql_string(tombstone)), [["1", "1"]])

    def test_his_token_gets_410_on_every_user_route(self):
        for method, path, body in USER_ROUTES:
            with self.subTest(route=path):
                r = request(method, path, body=body, headers={"Authorization": "Bearer " + E.token(self.user)})
                self.assertEqual(r.status, 410, r)
                self.assertEqual(r.json()["error"]["code"], "user_deleted", r)
        # Nothing was written for him by those calls.
        self.assertEqual(occurrences([self.user]), {})

    def test_his_transaction_does_not_bind_again(self):
        r = request("POST", "/api/v1/billing/apple/transactions", body={"signedTransaction": E.chain().sign(self.transaction)},
                    headers={"Authorization": "Bearer " + E.token(self.user)})
        self.assertEqual(r.status, 410, r)
        self.assertEqual(r.json()["error"]["code"], "user_deleted")
        self.assertEqual(sql("SELECT COUNT(*) FROM billing_apple_bindings WHERE original_transaction_id = "
                             + sql_string(self.original)), [["0"]])

    def test_admin_methods_refuse_him_but_access_get_says_deleted(self):
        got = ok("access.get", {"userId": self.user})
        self.assertTrue(got["user"]["deleted"])
        self.assertEqual(got["user"]["deletedAt"], self.answer["deletedAt"])
        calls = [("grants.list", {"userId": self.user}),
                 ("grants.create", {"userId": self.user, "tier": "plus", "reason": "r", "idempotencyKey": "again",
                                    "actor": E.ACTOR}),
                 ("events.list", {"userId": self.user}),
                 ("events.reproject", {"userId": self.user, "actor": E.ACTOR}),
                 ("users.import", {"users": [{"id": self.user, "createdAt": "2024-01-01T00:00:00Z"}], "actor": E.ACTOR}),
                 ("grandfather.applyUsers", {"campaign": "erased-" + uuid.uuid4().hex[:8], "tier": "plus",
                                             "userIds": [E.new_user(), self.user], "reason": "r", "actor": E.ACTOR}),
                 ("subscriptions.reconcile", {"userId": self.user, "actor": E.ACTOR})]
        for method, params in calls:
            with self.subTest(method=method):
                err = rpc_error(method, params)
                self.assertEqual(err["code"], 1005, err)
                self.assertEqual(err["data"]["reason"], "user_deleted", err)

    def test_subscription_totals_over_his_period_do_not_move(self):
        self.assertEqual(E.stats_counts(self.window), self.before)

    def test_a_later_store_event_is_unmatched_and_keeps_nothing_of_him(self):
        at = E.now_ms()
        event = E.rc_event("RENEWAL", self.user, at=at, sub=E.rc_subscription_id(), expires=at + 30 * E.DAY)
        event["aliases"] = [self.user, self.personal["anonymous"]]
        event["subscriber_attributes"] = {"$email": {"value": self.personal["email"], "updated_at_ms": at}}
        E.rc_deliver(event)
        self.assertEqual(E.inbox_row("revenuecat", event["id"])[2], "unmatched")
        renewed = E.apple_transaction(self.user, self.original, E.apple_transaction_id(), purchase=at - E.HOUR,
                                      expires=at + 30 * E.DAY, signed=at)
        _, notification = E.apple_notify("DID_RENEW", transaction=renewed)
        self.assertEqual(E.inbox_row("apple_notification", notification)[2], "unmatched")
        self.assertEqual(occurrences([self.user, self.personal["email"], self.personal["anonymous"]]), {})


class ErasureEdges(unittest.TestCase):
    def test_an_unknown_user_is_1001_and_a_deleted_one_stays_deleted_for_the_routes(self):
        self.assertEqual(rpc_error("users.delete", {"userId": E.new_user(), "actor": E.ACTOR})["code"], 1001)

    def test_a_user_with_only_an_unmatched_event_waiting_is_erased_with_it(self):
        """An id that never became a user (only a candidate of an unmatched event) is not a
        user: 1001; imported and erased, the waiting event keeps nothing of him."""
        user = E.new_user()
        at = E.now_ms()
        event = E.rc_event("INITIAL_PURCHASE", user, at=at, sub=E.rc_subscription_id(), expires=at + E.DAY)
        E.rc_deliver(event)
        self.assertEqual(E.inbox_row("revenuecat", event["id"])[2], "unmatched")
        ok("users.import", {"users": [{"id": user, "createdAt": "2024-01-01T00:00:00Z"}], "actor": E.ACTOR})
        ok("users.delete", {"userId": user, "actor": E.ACTOR})
        self.assertEqual(occurrences([user]), {})


class ErasureRacingTheApp(unittest.TestCase):
    """A request of his arriving while users.delete runs waits for it and is then 410, writing
    nothing: the erasure is held mid-way (a MariaDB session locks his subscription row, which
    it deletes after it has taken his user row), each route's request is sent, and the lock
    released."""

    def test_each_write_route_waiting_on_an_erasure_is_410_and_writes_nothing(self):
        from test_rpc_atomicity import LockHolder, blocked_transaction, transaction_gone
        routes = [
            ("POST", "/api/v1/billing/paywall-events", {"type": "view", "placement": "onboarding", "eventId": "racing"}),
            ("POST", "/api/v1/billing/usage", {"meter": "recurringGeneration", "amount": 1, "idempotencyKey": "racing"}),
            ("GET", "/api/v1/billing/offerings?placement=onboarding", None),
        ]
        for method, path, body in routes:
            with self.subTest(route=path):
                user = E.known_user()
                at = E.now_ms()
                E.rc_deliver(E.rc_event("INITIAL_PURCHASE", user, at=at - E.HOUR, sub=E.rc_subscription_id(), expires=at + E.DAY))
                holder = LockHolder(f"SELECT subscription_id FROM billing_subscriptions WHERE user_id = {sql_string(user)} FOR UPDATE")
                answers = {}
                try:
                    s = socket.socket(socket.AF_UNIX)
                    s.connect(RPC_SOCKET)
                    s.sendall(json.dumps({"jsonrpc": "2.0", "method": "users.delete", "id": 1,
                                          "params": {"userId": user, "actor": E.ACTOR}}).encode() + b"\n")
                    trx, _ = blocked_transaction()
                    app = threading.Thread(target=lambda: answers.update(r=request(
                        method, path, body=body, headers={"Authorization": "Bearer " + E.token(user)}, timeout=30)))
                    app.start()
                    # The app's request now waits behind the erasure too (two waiting transactions),
                    # or, for a route that takes no lock first, has not been answered yet.
                    wait_until(lambda: len(sql("SELECT trx_id FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'")) >= 2, 3)
                finally:
                    holder.release()
                app.join(30)
                reply = json.loads(s.makefile().readline())
                s.close()
                self.assertIn("result", reply, reply)
                self.assertEqual((answers["r"].status, answers["r"].json()["error"]["code"]), (410, "user_deleted"), answers["r"])
                self.assertEqual(occurrences([user]), {})


class IdsCompareByteForByte(unittest.TestCase):
    def test_a_sub_with_whitespace_or_control_characters_at_either_end_is_refused(self):
        victim = E.known_user()
        for sub in [victim + " ", " " + victim, victim + "\t", victim + "\n", victim + "\u00a0", victim + "\u0085",
                    victim + "\u2003", "\u3000" + victim, victim[:8] + "\x7f" + victim[8:], victim[:8] + "\x01" + victim[8:]]:
            with self.subTest(sub=repr(sub)):
                r = request("GET", "/api/v1/billing/access", headers={"Authorization": "Bearer " + E.token(sub)})
                self.assertEqual(r.status, 401, r)
                self.assertEqual(r.json()["error"]["code"], "invalid_subject", r)

    def test_sql_does_not_pad(self):
        victim = E.known_user()
        self.assertEqual(sql("SELECT COUNT(*) FROM billing_users WHERE id = " + sql_string(victim + " ")), [["0"]])
        self.assertEqual(sql("SELECT COUNT(*) FROM billing_access WHERE user_id = " + sql_string(victim + "  ")), [["0"]])
        self.assertEqual(sql("SELECT COLLATION_NAME, COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                             "AND COLLATION_NAME LIKE 'utf8mb4%bin' GROUP BY 1"),
                         [["utf8mb4_nopad_bin", sql("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                                                    "AND COLLATION_NAME LIKE 'utf8mb4%bin'")[0][0]]])

    def test_idempotency_keys_that_differ_by_a_trailing_space_are_two_keys(self):
        user = E.known_user()
        for key in ["k-space", "k-space "]:
            r = request("POST", "/api/v1/billing/usage", body={"meter": "recurringGeneration", "amount": 1, "idempotencyKey": key},
                        headers={"Authorization": "Bearer " + E.token(user)})
            self.assertEqual(r.status, 200, r)
        self.assertEqual(sql("SELECT COUNT(*) FROM usage_ledger WHERE user_id = " + sql_string(user)), [["2"]])


if __name__ == "__main__":
    unittest.main()
