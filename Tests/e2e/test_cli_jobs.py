"""The operator's long jobs through scripts/billing-admin (issue 20): users.import from a CSV
or JSON-lines file in batches, grandfather.applyCohort paged until done, progress (plain
lines without a terminal, one JSON object per batch with --json, a bar on a terminal),
Ctrl-C mid-run printing the command that resumes — which completes the job with every
member applied once — and destructive calls asking first (refused without a terminal
unless --yes; answered on a real pseudo-terminal)."""
import json
import os
import pty
import select
import shlex
import signal
import subprocess
import tempfile
import time
import unittest
import uuid

from harness.billing import REPO, RPC_SOCKET, rpc, sql, sql_string

ADMIN = os.path.join(REPO, "scripts", "billing-admin")
ACTOR = "e2e-cli@ops"


def admin(*args, stdin=subprocess.DEVNULL, timeout=300):
    env = dict(os.environ, BILLING_RPC_SOCKET=RPC_SOCKET)
    return subprocess.run([ADMIN, *args], env=env, stdin=stdin, capture_output=True, text=True, timeout=timeout)


def iso(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def private_hour():
    """[start, end) of a random hour of 2003-2009: no other test's cohort (test_admin's
    25,000 users, one a minute, fill the first 18 days of 2001 and count 2001 exactly)."""
    start = 1041379200 + (uuid.uuid4().int % (7 * 365 * 24)) * 3600
    return start, start + 3600


def cohort_file(tmp, count, hour, jsonl=False):
    """COUNT users created within `hour`, one second apart."""
    users = [str(uuid.uuid4()) for _ in range(count)]
    path = os.path.join(tmp, "users.jsonl" if jsonl else "users.csv")
    with open(path, "w") as f:
        if not jsonl:
            f.write("id,createdAt\n")
        for i, user in enumerate(users):
            created = iso(hour[0] + i)
            f.write(json.dumps({"id": user, "createdAt": created}) + "\n" if jsonl else f"{user},{created}\n")
    return users, path


def members(campaign):
    rows = sql("SELECT COUNT(*), COUNT(DISTINCT user_id) FROM billing_campaign_members WHERE campaign = "
               + sql_string(campaign))
    return int(rows[0][0]), int(rows[0][1])


def known(users):
    ids = ", ".join(sql_string(u) for u in users)
    return int(sql(f"SELECT COUNT(*) FROM billing_users WHERE id IN ({ids})")[0][0])


class Import(unittest.TestCase):
    def test_a_csv_file_in_batches_with_progress_lines(self):
        with tempfile.TemporaryDirectory() as tmp:
            users, path = cohort_file(tmp, 1200, private_hour())
            r = admin("users.import", "--file", path, "--actor", ACTOR, "--batchSize", "500")
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = [l for l in r.stderr.splitlines() if l.startswith("users.import:")]
            self.assertEqual([l.split()[1] for l in lines], ["500/1200", "1000/1200", "1200/1200"])
            self.assertIn("done: 1200 users", r.stdout)
            self.assertEqual(known(users), 1200)
            # Again: nothing breaks, nothing doubles.
            self.assertEqual(admin("users.import", "--file", path, "--actor", ACTOR).returncode, 0)
            self.assertEqual(known(users), 1200)

    def test_json_lines_and_json_progress(self):
        with tempfile.TemporaryDirectory() as tmp:
            users, path = cohort_file(tmp, 300, private_hour(), jsonl=True)
            r = admin("--json", "users.import", "--file", path, "--actor", ACTOR, "--batchSize", "100")
            self.assertEqual(r.returncode, 0, r.stderr)
            records = [json.loads(l) for l in r.stdout.splitlines()]
            self.assertEqual([rec["done"] for rec in records[:-1]], [100, 200, 300])
            self.assertTrue(all(rec["total"] == 300 and rec["job"] == "users.import" for rec in records[:-1]))
            self.assertEqual(records[-1]["users"], 300)
            self.assertEqual(known(users), 300)

    def test_an_unreadable_file_is_a_usage_error(self):
        r = admin("users.import", "--file", "/nonexistent/users.csv", "--actor", ACTOR)
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot read", r.stderr)


class Cohort(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.hour = private_hour()
        self.users, path = cohort_file(self.tmp.name, 1000, self.hour)
        r = admin("users.import", "--file", path, "--actor", ACTOR)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.campaign = "e2e-cli-" + uuid.uuid4().hex[:10]
        start, end = iso(self.hour[0]), iso(self.hour[1])
        self.args = ["grandfather.applyCohort", "--campaign", self.campaign, "--tier", "pro", "--createdFrom", start,
                     "--createdBefore", end, "--reason", "e2e", "--actor", ACTOR]

    def test_pages_until_done_and_a_rerun_applies_nothing_twice(self):
        r = admin(*self.args, "--batchSize", "300")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done: 1000 users scanned, 1000 applied", r.stdout)
        progress = [l for l in r.stderr.splitlines() if l.startswith("grandfather.applyCohort:")]
        self.assertGreaterEqual(len(progress), 4)
        self.assertTrue(all("/1000" in l for l in progress))
        self.assertEqual(members(self.campaign), (1000, 1000))
        again = admin(*self.args, "--batchSize", "300")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("0 applied", again.stdout)
        self.assertEqual(members(self.campaign), (1000, 1000))

    def test_ctrl_c_mid_run_prints_the_resume_command_and_resuming_completes_it(self):
        env = dict(os.environ, BILLING_RPC_SOCKET=RPC_SOCKET)
        # As from a terminal: SIGINT at its default disposition in the child even when this
        # run inherited it ignored (a job started with `&` by a non-interactive shell), where
        # Python would install no KeyboardInterrupt handler and the interrupt would be lost.
        proc = subprocess.Popen([ADMIN, *self.args, "--batchSize", "20"], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        # Interrupt once some batches committed (the first progress line), mid-run.
        first = proc.stderr.readline()
        self.assertTrue(first.startswith("grandfather.applyCohort:"), first)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 130, err)
        self.assertIn("resume with:", err)
        command = err.split("resume with:", 1)[1].strip().splitlines()[0]
        argv = shlex.split(command)
        self.assertEqual(argv[0], "billing-admin")
        self.assertIn("--cursor", argv)
        partial = members(self.campaign)
        self.assertLess(partial[0], 1000, "interrupted before the end")
        resumed = admin(*argv[1:], "--batchSize", "250")
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertEqual(members(self.campaign), (1000, 1000), "every member once, none twice")


class Confirmation(unittest.TestCase):
    def grant(self):
        user = str(uuid.uuid4())
        imported = rpc("users.import", {"users": [{"id": user, "createdAt": "2020-01-01T00:00:00Z"}], "actor": ACTOR})
        self.assertIn("result", imported, imported)
        reply = rpc("grants.create", {"userId": user, "tier": "plus", "reason": "e2e", "idempotencyKey": uuid.uuid4().hex,
                                      "actor": ACTOR})
        self.assertIn("result", reply, reply)
        return reply["result"]["grantId"]

    def active(self, grant_id):
        return sql(f"SELECT revoked_at IS NULL FROM billing_grants WHERE id = {int(grant_id)}") == [["1"]]

    def test_without_a_terminal_a_destructive_call_needs_yes(self):
        grant_id = self.grant()
        r = admin("grants.revoke", "--grantId", str(grant_id), "--actor", ACTOR, "--reason", "e2e")
        self.assertEqual(r.returncode, 2)
        self.assertIn("pass --yes", r.stderr)
        self.assertIn("grants.revoke revokes the grant", r.stderr)
        self.assertTrue(self.active(grant_id), "nothing was done")
        r = admin("--yes", "grants.revoke", "--grantId", str(grant_id), "--actor", ACTOR, "--reason", "e2e")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(self.active(grant_id))

    def on_a_terminal(self, args, answer):
        """Runs billing-admin on a pseudo-terminal, answers the question; (status, output)."""
        pid, fd = pty.fork()
        if pid == 0:
            os.environ["BILLING_RPC_SOCKET"] = RPC_SOCKET
            os.execv(ADMIN, [ADMIN, *args])
        output = b""
        deadline = time.monotonic() + 60
        answered = False
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
            if not answered and b"Proceed? [y/N]" in output:
                os.write(fd, answer.encode() + b"\n")
                answered = True
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        return os.waitstatus_to_exitcode(status), output.decode(errors="replace")

    def test_on_a_terminal_it_asks_and_obeys_the_answer(self):
        grant_id = self.grant()
        args = ["grants.revoke", "--grantId", str(grant_id), "--actor", ACTOR, "--reason", "e2e"]
        status, output = self.on_a_terminal(args, "n")
        self.assertEqual(status, 2, output)
        self.assertIn("Proceed? [y/N]", output)
        self.assertTrue(self.active(grant_id))
        status, output = self.on_a_terminal(args, "y")
        self.assertEqual(status, 0, output)
        self.assertFalse(self.active(grant_id))

    def test_a_long_job_draws_a_bar_on_a_terminal(self):
        with tempfile.TemporaryDirectory() as tmp:
            _, path = cohort_file(tmp, 400, private_hour())
            status, output = self.on_a_terminal(["users.import", "--file", path, "--actor", ACTOR, "--batchSize", "100"], "")
            self.assertEqual(status, 0, output)
            self.assertIn("\r", output)
            self.assertRegex(output, r"users\.import \[#+-*\] 400/400")


class RetryQuarantined(unittest.TestCase):
    def test_every_open_row_once_and_the_job_ends_though_they_still_fail(self):
        # Rows a replay cannot resolve (not JSON): retried once each, then the job ends —
        # paging by id, not by "the first open rows", which would be the same rows forever.
        tag = uuid.uuid4().hex
        values = ", ".join(
            f"('apple_notification', 'bundle_mismatch', SHA2('{tag}-{i}', 256), 'not json {tag}', NOW(3), NOW(3))" for i in range(7))
        sql("INSERT INTO billing_quarantine (provider, reason, payload_sha256, payload, received_at, last_received_at) VALUES "
            + values)
        mine = [int(r[0]) for r in sql(f"SELECT id FROM billing_quarantine WHERE payload LIKE '%{tag}%' ORDER BY id")]
        self.assertEqual(len(mine), 7)
        before = {int(r[0]): int(r[1]) for r in sql(
            "SELECT id, retry_count FROM billing_quarantine WHERE id IN (" + ",".join(map(str, mine)) + ")")}
        r = admin("--json", "events.retryQuarantined", "--all", "true", "--limit", "3", "--actor", ACTOR,
                  "--afterId", str(mine[0] - 1))
        self.assertEqual(r.returncode, 0, r.stderr)
        summary = json.loads(r.stdout.splitlines()[-1])
        self.assertGreaterEqual(summary["rows"], 7)
        after = {int(r[0]): int(r[1]) for r in sql(
            "SELECT id, retry_count FROM billing_quarantine WHERE id IN (" + ",".join(map(str, mine)) + ")")}
        for row in mine:
            self.assertEqual(after[row], before[row] + 1, f"row {row} retried exactly once")


class ListAll(unittest.TestCase):
    def test_every_page_of_the_audit(self):
        reply = rpc("grandfather.audit", {"limit": 2})
        self.assertIn("result", reply, reply)
        r = admin("--json", "grandfather.audit", "--all", "--limit", "50")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = json.loads(r.stdout)
        total = int(sql("SELECT COUNT(*) FROM audit_log WHERE action IN ('grandfather.apply', 'grandfather.revoke')")[0][0])
        self.assertEqual(len(rows), total)


if __name__ == "__main__":
    unittest.main()


class TypedParameters(unittest.TestCase):
    """`--name value` is read as the type the method declares (system.listMethods'
    paramTypes), not guessed from the value: a digits-only idempotency key stays a string, a
    grant id is an integer, a boolean is true or false, and a value that is not of its type
    is refused before anything is sent."""

    def grant(self, *extra):
        user = str(uuid.uuid4())
        rpc("users.import", {"users": [{"id": user, "createdAt": iso(time.time() - 86400)}], "actor": ACTOR})
        return user, admin("--json", "grants.create", "--userId", user, "--tier", "pro", "--reason", "typed",
                           "--actor", ACTOR, *extra)

    def test_a_digits_only_idempotency_key_is_sent_as_a_string(self):
        user, r = self.grant("--idempotencyKey", "123")
        self.assertEqual(r.returncode, 0, r.stderr)
        grant = json.loads(r.stdout)
        # The same key again is the same grant (idempotent), as a string key would be.
        again = admin("--json", "grants.create", "--userId", user, "--tier", "pro", "--reason", "typed",
                      "--actor", ACTOR, "--idempotencyKey", "123")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(json.loads(again.stdout)["grantId"], grant["grantId"])
        rows = sql("SELECT idempotency_key FROM billing_grants WHERE id = %d" % int(grant["grantId"]))
        self.assertEqual(rows, [["123"]])

    def test_an_integer_parameter_is_an_integer_and_a_word_is_refused_before_sending(self):
        user, r = self.grant("--idempotencyKey", "k-" + str(uuid.uuid4()))
        grant_id = json.loads(r.stdout)["grantId"]
        bad = admin("grants.revoke", "--grantId", "seven", "--actor", ACTOR, "--reason", "typed", "--yes")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--grantId takes an integer", bad.stderr)
        ok = admin("--json", "grants.revoke", "--grantId", str(grant_id), "--actor", ACTOR, "--reason", "typed", "--yes")
        self.assertEqual(ok.returncode, 0, ok.stderr)

    def test_the_declared_types_are_listed(self):
        r = admin("grants.create", "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("idempotencyKey: string", r.stdout)
        methods = {m["name"]: m for m in rpc("system.listMethods")["result"]}
        self.assertEqual(methods["grants.revoke"]["paramTypes"]["grantId"], "integer")
        self.assertEqual(methods["grandfather.applyCohort"]["paramTypes"]["dryRun"], "boolean")
