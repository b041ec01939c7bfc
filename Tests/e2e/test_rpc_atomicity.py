"""JSON-RPC mutations are atomic (issue 7): a call whose client disconnects while it runs
either commits completely, with its audit_log rows, or leaves nothing; a call that fails
midway leaves no partial rows and no audit row; in a batch, each call stands alone.

"Mid-call" is made deterministic with a MariaDB session holding a row lock the mutation
needs after it has written some of its rows: the test waits until the daemon's transaction
is in LOCK WAIT with rows modified, disconnects, then releases. Failures are injected with
a trigger (SIGNAL) on a table the mutation writes, scoped to this test's users or actor and
dropped afterwards. Reads go to the database as root."""
import hashlib
import json
import os
import socket
import subprocess
import time
import unittest
import uuid

from harness.billing import RPC_SOCKET, VAR_DIR, mariadb_command, rpc, rpc_raw, sql, sql_string, wait_until
from test_admin import paying_pro

DOOMED = "atomicity-doomed@ops"


def new_user():
    return str(uuid.uuid4())


def ok(method, params):
    reply = rpc(method, params)
    assert "result" in reply, (method, reply)
    return reply["result"]


def count(statement):
    return int(sql(statement)[0][0])


def audit_rows(actor, action=None):
    where = f"actor = {sql_string(actor)}" + (f" AND action = {sql_string(action)}" if action else "")
    return count(f"SELECT COUNT(*) FROM audit_log WHERE {where}")


class LockHolder:
    """A MariaDB session that holds the rows `select_for_update` locks until release()."""

    def __init__(self, select_for_update):
        self.process = subprocess.Popen(mariadb_command("-N", "-B", "--unbuffered"), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.process.stdin.write(f"START TRANSACTION;\n{select_for_update};\nSELECT 'locked';\n")
        self.process.stdin.flush()
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"the lock holder ended: {self.process.stderr.read()}")
            if line.strip() == "locked":
                return

    def release(self):
        if self.process.poll() is None:
            self.process.stdin.write("COMMIT;\n")
            self.process.stdin.close()
            self.process.wait(timeout=30)
        self.process.stdout.close()
        self.process.stderr.close()


# InnoDB refreshes INNODB_TRX only when it was not read for 100 ms: polled faster, it never
# changes. Every poll of it waits longer than that.
TRX_POLL_SECONDS = 0.25


def blocked_transaction(seconds=10):
    """(trx id, rows modified) of the transaction waiting for a lock, once there is one."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(TRX_POLL_SECONDS)
        rows = sql("SELECT trx_id, trx_rows_modified FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'")
        if rows:
            return rows[0][0], int(rows[0][1])
    raise AssertionError("the call never waited for the held lock")


def transaction_gone(trx_id):
    time.sleep(TRX_POLL_SECONDS)
    return count(f"SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_id = {sql_string(trx_id)}") == 0


def send_and_disconnect_mid_call(method, params, select_for_update):
    """Sends the call, waits until it blocks on the held lock with rows written, closes the
    connection, then releases the lock. Returns (trx id, rows it had modified)."""
    holder = LockHolder(select_for_update)
    s = socket.socket(socket.AF_UNIX)
    try:
        s.settimeout(10)
        s.connect(RPC_SOCKET)
        s.sendall(json.dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": 1}).encode() + b"\n")
        return blocked_transaction()
    finally:
        s.close()  # before the release: the call is still waiting when its client goes
        holder.release()


class Trigger:
    """A BEFORE trigger that fails the statement (SIGNAL 45000) when `condition` holds."""

    def __init__(self, test, table, event, condition):
        self.name = "atomicity_" + uuid.uuid4().hex[:12]
        script = (f"DELIMITER //\nCREATE TRIGGER {self.name} BEFORE {event} ON {table} FOR EACH ROW "
                  f"IF {condition} THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected failure {self.name}'; END IF//\n"
                  "DELIMITER ;\n")
        subprocess.run(mariadb_command(), input=script, text=True, check=True, capture_output=True, timeout=30)
        test.addCleanup(lambda: sql(f"DROP TRIGGER IF EXISTS {self.name}"))

    def assert_internal_error(self, test, reply):
        """The injected failure is a plain -32603: nothing of the SQL error reaches the client."""
        test.assertIn("error", reply, reply)
        test.assertEqual(reply["error"]["code"], -32603, reply)
        test.assertNotIn("injected", json.dumps(reply))


class DisconnectMidCall(unittest.TestCase):
    def test_grandfather_apply_users_commits_whole_after_the_client_left(self):
        user, campaign, actor = new_user(), "atomic-" + uuid.uuid4().hex[:8], f"atomic-{uuid.uuid4().hex[:8]}@ops"
        ok("users.import", {"users": [{"id": user, "createdAt": "2024-01-01T00:00:00Z"}], "actor": actor})
        revision = count(f"SELECT revision FROM billing_access WHERE user_id = {sql_string(user)}")
        # applyUsers writes the campaign, then the membership, whose trigger (migration 009)
        # touches the user's access row: held there, with two rows written.
        trx, modified = send_and_disconnect_mid_call(
            "grandfather.applyUsers", {"campaign": campaign, "tier": "plus", "userIds": [user], "reason": "atomicity", "actor": actor},
            f"SELECT revision FROM billing_access WHERE user_id = {sql_string(user)} FOR UPDATE")
        self.assertGreaterEqual(modified, 2, "the call was mid-transaction, with its rows written, when the client left")
        self.assertTrue(wait_until(lambda: transaction_gone(trx), 15))
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_campaigns WHERE name = {sql_string(campaign)}"), 1)
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_campaign_members WHERE campaign = {sql_string(campaign)}"), 1)
        self.assertEqual(audit_rows(actor, "grandfather.apply"), 1)
        self.assertEqual(count(f"SELECT revision FROM billing_access WHERE user_id = {sql_string(user)}"), revision + 1)

    def test_grandfather_apply_users_failing_after_the_client_left_leaves_nothing(self):
        user, campaign, actor = new_user(), "atomic-" + uuid.uuid4().hex[:8], f"atomic-{uuid.uuid4().hex[:8]}@ops"
        ok("users.import", {"users": [{"id": user, "createdAt": "2024-01-01T00:00:00Z"}], "actor": actor})
        revision = count(f"SELECT revision FROM billing_access WHERE user_id = {sql_string(user)}")
        Trigger(self, "billing_access", "UPDATE", f"NEW.user_id = {sql_string(user)}")
        trx, modified = send_and_disconnect_mid_call(
            "grandfather.applyUsers", {"campaign": campaign, "tier": "plus", "userIds": [user], "reason": "atomicity", "actor": actor},
            f"SELECT revision FROM billing_access WHERE user_id = {sql_string(user)} FOR UPDATE")
        self.assertGreaterEqual(modified, 2)
        self.assertTrue(wait_until(lambda: transaction_gone(trx), 15))
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_campaigns WHERE name = {sql_string(campaign)}"), 0)
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_campaign_members WHERE campaign = {sql_string(campaign)}"), 0)
        self.assertEqual(audit_rows(actor, "grandfather.apply"), 0, "no audit row survives the failure")
        self.assertEqual(count(f"SELECT revision FROM billing_access WHERE user_id = {sql_string(user)}"), revision)
        self.assertEqual(rpc("system.health")["result"]["status"], "ok")

    def test_users_delete_commits_whole_after_the_client_left(self):
        user, actor = new_user(), f"atomic-{uuid.uuid4().hex[:8]}@ops"
        ok("users.import", {"users": [{"id": user, "createdAt": "2024-01-01T00:00:00Z"}], "actor": actor})
        paying_pro(user)
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_subscriptions WHERE user_id = {sql_string(user)}"), 1)
        # users.delete marks the user deleted, then deletes his subscription rows: held there.
        trx, modified = send_and_disconnect_mid_call(
            "users.delete", {"userId": user, "actor": actor, "reason": "atomicity"},
            f"SELECT subscription_id FROM billing_subscriptions WHERE user_id = {sql_string(user)} FOR UPDATE")
        self.assertGreaterEqual(modified, 1)
        self.assertTrue(wait_until(lambda: transaction_gone(trx), 15))
        # Erased whole (SPEC §19): no row names him, his id's hash is remembered, one audit row.
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_users WHERE id = {sql_string(user)}"), 0)
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_subscriptions WHERE user_id = {sql_string(user)}"), 0)
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_access WHERE user_id = {sql_string(user)}"), 0)
        self.assertEqual(count("SELECT COUNT(*) FROM billing_erased_users WHERE id_sha256 = "
                               + sql_string(hashlib.sha256(user.encode()).hexdigest())), 1)
        self.assertEqual(audit_rows(actor, "users.delete"), 1)


class InjectedFailure(unittest.TestCase):
    """The audit row is the last write of most mutations: failing it must take every earlier
    write of the call with it. Each case then runs with a normal actor, to show the rows
    checked are the ones the call writes."""

    def setUp(self):
        self.trigger = Trigger(self, "audit_log", "INSERT", f"NEW.actor = {sql_string(DOOMED)}")
        self.actor = f"atomic-{uuid.uuid4().hex[:8]}@ops"
        self.user = new_user()
        ok("users.import", {"users": [{"id": self.user, "createdAt": "2024-01-01T00:00:00Z"}], "actor": self.actor})

    def doomed(self, method, params):
        reply = rpc(method, dict(params, actor=DOOMED))
        self.trigger.assert_internal_error(self, reply)
        self.assertEqual(audit_rows(DOOMED), 0)

    def revision(self):
        return count(f"SELECT revision FROM billing_access WHERE user_id = {sql_string(self.user)}")

    def test_users_import(self):
        fresh = [new_user(), new_user()]
        params = {"users": [{"id": u, "createdAt": "2024-02-01T00:00:00Z"} for u in fresh]}
        self.doomed("users.import", params)
        for u in fresh:
            self.assertEqual(count(f"SELECT COUNT(*) FROM billing_users WHERE id = {sql_string(u)}"), 0)
            self.assertEqual(count(f"SELECT COUNT(*) FROM billing_access WHERE user_id = {sql_string(u)}"), 0)
        self.assertEqual(ok("users.import", dict(params, actor=self.actor))["inserted"], 2)

    def test_grants_create_and_revoke(self):
        key = "atomic-" + uuid.uuid4().hex
        params = {"userId": self.user, "tier": "pro", "reason": "atomicity", "idempotencyKey": key}
        before = self.revision()
        self.doomed("grants.create", params)
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_grants WHERE idempotency_key = {sql_string(key)}"), 0)
        self.assertEqual(self.revision(), before)
        grant_id = ok("grants.create", dict(params, actor=self.actor))["grantId"]
        before = self.revision()
        self.doomed("grants.revoke", {"grantId": grant_id, "reason": "atomicity"})
        self.assertEqual(sql(f"SELECT revoked_at IS NULL FROM billing_grants WHERE id = {int(grant_id)}"), [["1"]])
        self.assertEqual(self.revision(), before)
        ok("grants.revoke", {"grantId": grant_id, "reason": "atomicity", "actor": self.actor})
        self.assertEqual(sql(f"SELECT revoked_at IS NULL FROM billing_grants WHERE id = {int(grant_id)}"), [["0"]])

    def test_grandfather_apply_users_and_revoke(self):
        campaign = "atomic-" + uuid.uuid4().hex[:8]
        params = {"campaign": campaign, "tier": "plus", "userIds": [self.user], "reason": "atomicity"}
        before = self.revision()
        self.doomed("grandfather.applyUsers", params)
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_campaigns WHERE name = {sql_string(campaign)}"), 0)
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_campaign_members WHERE campaign = {sql_string(campaign)}"), 0)
        self.assertEqual(self.revision(), before)
        self.assertEqual(ok("grandfather.applyUsers", dict(params, actor=self.actor))["applied"], 1)
        self.doomed("grandfather.revoke", {"campaign": campaign})
        self.assertEqual(sql(f"SELECT revoked_at IS NULL FROM billing_campaigns WHERE name = {sql_string(campaign)}"), [["1"]])
        self.assertTrue(ok("grandfather.revoke", {"campaign": campaign, "actor": self.actor})["changed"])

    def test_users_delete(self):
        paying_pro(self.user)
        self.doomed("users.delete", {"userId": self.user})
        self.assertEqual(sql(f"SELECT deleted_at IS NULL FROM billing_users WHERE id = {sql_string(self.user)}"), [["1"]])
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_subscriptions WHERE user_id = {sql_string(self.user)}"), 1)
        self.assertEqual(sql(f"SELECT tier FROM billing_access WHERE user_id = {sql_string(self.user)}"), [["pro"]])
        self.assertTrue(ok("users.delete", {"userId": self.user, "actor": self.actor})["deleted"])

    def test_flags_set(self):
        # Setting the current value still writes (updated_by) and audits: safe for the other tests.
        current = ok("flags.get", None)["enforcement"]
        stamp = sql("SELECT updated_by, updated_at FROM billing_flags WHERE name = 'enforcement'")
        self.doomed("flags.set", {"enforcement": current})
        self.assertEqual(sql("SELECT updated_by, updated_at FROM billing_flags WHERE name = 'enforcement'"), stamp)

    def test_flags_set_of_two_flags_is_one_transaction(self):
        """SPEC §19: the second flag's write failing takes the first's with it."""
        flags = ok("flags.get", None)
        stamp = sql("SELECT name, value, updated_by, updated_at FROM billing_flags ORDER BY name")
        Trigger(self, "billing_flags", "INSERT", "NEW.name = 'purchases.enabled' AND NEW.updated_by = " + sql_string(self.actor))
        Trigger(self, "billing_flags", "UPDATE", "NEW.name = 'purchases.enabled' AND NEW.updated_by = " + sql_string(self.actor))
        reply = rpc("flags.set", {"enforcement": flags["enforcement"], "purchases.enabled": flags["purchases.enabled"],
                                  "actor": self.actor})
        self.trigger.assert_internal_error(self, reply)
        self.assertEqual(sql("SELECT name, value, updated_by, updated_at FROM billing_flags ORDER BY name"), stamp)
        self.assertEqual(audit_rows(self.actor, "flags.set"), 0)


class QuarantineReplay(unittest.TestCase):
    """events.retryQuarantined replays each row in one transaction: the event's ingestion
    (inbox row, binding, fold), the quarantine row's resolution and its audit row commit
    together or not at all. The row here is an App Store notification signed by the trusted
    chain A, stored as if it had been refused before the operator fixed the trust settings."""

    def setUp(self):
        from harness import appstore as A  # needs `cryptography` (scripts/test installs it)
        a = A.load_chain(os.path.join(VAR_DIR, "testca"), "a")
        self.actor = f"atomic-{uuid.uuid4().hex[:8]}@ops"
        self.user = new_user()
        ok("users.import", {"users": [{"id": self.user, "createdAt": "2024-01-01T00:00:00Z"}], "actor": self.actor})
        self.original = "5" + str(uuid.uuid4().int)[:15]
        transaction = A.transaction_payload(original_id=self.original, appAccountToken=self.user)
        payload = A.notification_payload(a, "SUBSCRIBED", "INITIAL_BUY", transaction=transaction,
                                         renewal=A.renewal_payload(self.original))
        self.note = payload["notificationUUID"]
        body = json.dumps({"signedPayload": a.sign(payload)})
        sql("INSERT INTO billing_quarantine (provider, reason, payload_sha256, payload, received_at, last_received_at) "
            f"VALUES ('apple_notification', 'untrusted_chain', {sql_string(hashlib.sha256(body.encode()).hexdigest())}, "
            f"{sql_string(body)}, NOW(3), NOW(3))")
        [[self.id]] = sql(f"SELECT id FROM billing_quarantine WHERE payload_sha256 = {sql_string(hashlib.sha256(body.encode()).hexdigest())}")

    def state(self):
        """Everything a replay of the row may write."""
        return {
            "inbox": count(f"SELECT COUNT(*) FROM billing_events WHERE provider_event_id = {sql_string(self.note)}"),
            "binding": count(f"SELECT COUNT(*) FROM billing_apple_bindings WHERE original_transaction_id = {sql_string(self.original)}"),
            "tier": sql(f"SELECT tier FROM billing_access WHERE user_id = {sql_string(self.user)}")[0][0],
            "revision": count(f"SELECT revision FROM billing_access WHERE user_id = {sql_string(self.user)}"),
            "quarantine": sql(f"SELECT reason, retry_count, retried_at, resolved_at, resolution, event_id FROM billing_quarantine WHERE id = {self.id}"),
        }

    def test_a_failing_resolution_leaves_nothing_of_the_replay(self):
        before = self.state()
        self.assertEqual(before["inbox"], 0)
        self.assertEqual(before["quarantine"], [["untrusted_chain", "0", "NULL", "NULL", "NULL", "NULL"]])
        trigger = Trigger(self, "audit_log", "INSERT", f"NEW.actor = {sql_string(DOOMED)}")
        trigger.assert_internal_error(self, rpc("events.retryQuarantined", {"ids": [int(self.id)], "actor": DOOMED}))
        self.assertEqual(self.state(), before, "the event is not applied and the row stays open")
        self.assertEqual(audit_rows(DOOMED), 0)

        # The same row with a normal actor: applied once, resolved, audited once.
        result = ok("events.retryQuarantined", {"ids": [int(self.id)], "actor": self.actor})
        [entry] = result["results"]
        self.assertEqual(entry["outcome"], "applied", entry)
        after = self.state()
        self.assertEqual(after["inbox"], 1)
        self.assertEqual(after["binding"], 1)
        self.assertEqual(after["tier"], "plus")
        [[reason, retries, _, resolved, resolution, event_id]] = after["quarantine"]
        self.assertEqual((retries, resolution, int(event_id)), ("1", "applied", entry["eventId"]))
        self.assertNotEqual(resolved, "NULL")
        self.assertEqual(audit_rows(self.actor, "events.retryQuarantined"), 1)
        # Resolved: a second retry changes nothing and audits nothing.
        again = ok("events.retryQuarantined", {"ids": [int(self.id)], "actor": self.actor})["results"]
        self.assertEqual([r["outcome"] for r in again], ["already_resolved"])
        self.assertEqual(self.state(), after)
        self.assertEqual(audit_rows(self.actor, "events.retryQuarantined"), 1)


class Batches(unittest.TestCase):
    def test_each_call_of_a_batch_stands_alone(self):
        """JSON-RPC 2.0: a batch is not a transaction. The valid call commits with its audit
        row; the invalid ones are refused whole, with nothing written and nothing audited."""
        user, fresh, actor = new_user(), new_user(), f"atomic-{uuid.uuid4().hex[:8]}@ops"
        ok("users.import", {"users": [{"id": user, "createdAt": "2024-01-01T00:00:00Z"}], "actor": actor})
        good, bad = "atomic-" + uuid.uuid4().hex, "atomic-" + uuid.uuid4().hex
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "grants.create",
             "params": {"userId": user, "tier": "plus", "reason": "r", "idempotencyKey": good, "actor": actor}},
            {"jsonrpc": "2.0", "id": 2, "method": "grants.create",
             "params": {"userId": user, "tier": "gold", "reason": "r", "idempotencyKey": bad, "actor": actor}},
            {"jsonrpc": "2.0", "id": 3, "method": "users.import",
             "params": {"users": [{"id": fresh, "createdAt": "2024-01-01T00:00:00Z"}, {"id": "not-a-uuid", "createdAt": "2024-01-01T00:00:00Z"}],
                        "actor": actor}},
            {"jsonrpc": "2.0", "id": 4, "method": "grandfather.applyUsers",
             "params": {"campaign": "atomic-" + uuid.uuid4().hex[:8], "tier": "plus", "userIds": [user, new_user()], "reason": "r", "actor": actor}},
        ]
        replies = {r["id"]: r for r in json.loads(rpc_raw(json.dumps(batch).encode()))}
        self.assertIn("result", replies[1], replies[1])
        self.assertEqual(replies[2]["error"]["code"], -32602)
        self.assertEqual(replies[3]["error"]["code"], -32602)
        self.assertEqual(replies[3]["error"]["data"]["field"], "users[1].id")
        self.assertEqual(replies[4]["error"]["code"], 1001, "an unknown user fails applyUsers whole")
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_grants WHERE idempotency_key = {sql_string(good)}"), 1)
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_grants WHERE idempotency_key = {sql_string(bad)}"), 0)
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_users WHERE id = {sql_string(fresh)}"), 0)
        self.assertEqual(count(f"SELECT COUNT(*) FROM billing_campaign_members WHERE user_id = {sql_string(user)}"), 0)
        # One users.import (the setup) and one grants.create: nothing from the refused calls.
        self.assertEqual(sql(f"SELECT action, COUNT(*) FROM audit_log WHERE actor = {sql_string(actor)} GROUP BY action ORDER BY action"),
                         [["grants.create", "1"], ["users.import", "1"]])


if __name__ == "__main__":
    unittest.main()
