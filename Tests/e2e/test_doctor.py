"""`billing-rpc doctor` (issue 20): on the healthy test stack every check passes (exit 0);
then each piece is broken on its own — in a copy of the configuration or a copy of the
migrations, never in the running stack — and the doctor names that check ✗ with a fix,
passes the others, and exits 1."""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import unittest
import uuid

from harness.billing import HTTP_BASE, REPO, VAR_DIR, sql, sql_string

BIN_DIR = os.path.dirname(os.environ.get("BILLING_RPC_BINARY", os.path.join(REPO, ".build/release/billing-rpc")))
CONFIG = os.path.join(VAR_DIR, "billing.json")
SQL = os.path.join(REPO, "sql")


def doctor(config=CONFIG, sql_dir=SQL, url=HTTP_BASE, env=None, extra=(), prefix=()):
    args = [*prefix, os.path.join(BIN_DIR, "billing-rpc"), "doctor", "--config", config, "--sql-dir", sql_dir, "--json",
            *extra]
    if url:
        args += ["--url", url]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BILLING__")}
    environment.update(env or {})
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, env=environment)
    return r.returncode, {c["check"]: c for c in json.loads(r.stdout)} if r.stdout.strip() else {}, r


class Doctor(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)
        with open(CONFIG) as f:
            self.config = json.load(f)

    def write_config(self, edit):
        config = json.loads(json.dumps(self.config))
        edit(config)
        path = os.path.join(self.tmp, "billing.json")
        with open(path, "w") as f:
            json.dump(config, f)
        return path

    def secret(self, name, text, mode=0o600):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text + "\n")
        os.chmod(path, mode)
        return path

    def assert_only_failing(self, checks, name, status):
        self.assertEqual(status, 1)
        self.assertIn(name, checks)
        self.assertFalse(checks[name]["ok"], checks[name])
        self.assertTrue(checks[name]["fix"], f"{name} says how to fix it")
        others = [c for n, c in checks.items() if n != name and not c["ok"]]
        self.assertEqual(others, [], f"only {name} fails")

    def test_the_healthy_stack_passes_every_check(self):
        status, checks, r = doctor()
        self.assertEqual(status, 0, r.stdout + r.stderr)
        for name in ["configuration", "secret files", "database", "database grants", "migrations", "clock", "disk space",
                     "workers", "through nginx", "token keys", "App Store roots", "webhook endpoints", "live changes",
                     "entitlement keys", "offer signing key"]:
            with self.subTest(check=name):
                self.assertTrue(checks[name]["ok"], checks.get(name))
        # The plain output: one line each, and the verdict.
        plain = subprocess.run([os.path.join(BIN_DIR, "billing-rpc"), "doctor", "--config", CONFIG, "--sql-dir", SQL],
                               capture_output=True, text=True, timeout=120)
        self.assertTrue(all(line.startswith("✓") for line in plain.stdout.splitlines()[:-1]), plain.stdout)
        self.assertRegex(plain.stdout.splitlines()[-1], r"^all \d+ checks pass$")
        self.assertRegex(checks["live changes"]["detail"], r"^nchan answers on /\S+/nchan\.sock: \d+ channels, \d+ apps waiting$")
        self.assertEqual(checks["webhook endpoints"]["detail"], "none configured (webhooks.endpoints)")
        self.assertRegex(checks["entitlement keys"]["detail"], r"^1 key\(s\), EC P-256 \(ES256\); kid [A-Za-z0-9_-]{43} signs")
        self.assertRegex(checks["offer signing key"]["detail"], r"^apple\.inAppKey key E2EKEY1234 loads \(EC P-256\)")

    def test_live_changes_without_nchan_listening(self):
        absent = os.path.join(self.tmp, "nchan.sock")
        status, checks, _ = doctor(self.write_config(lambda c: c.setdefault("live", {}).update(publisherSocket=absent)))
        self.assert_only_failing(checks, "live changes", status)
        self.assertIn(absent, checks["live changes"]["detail"])
        self.assertIn("libnginx-mod-nchan", checks["live changes"]["fix"])

    def test_a_webhook_endpoint_with_a_delivery_failed_for_good(self):
        endpoint = "doctor-" + uuid.uuid4().hex[:8]
        secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
        config = self.write_config(lambda c: c.setdefault("webhooks", {}).update(
            endpoints=[{"id": endpoint, "url": "https://127.0.0.1:9/hooks", "secret": secret}]))
        # The stack's own billing-rpc has no endpoints: what it queued is not this test's.
        sql("UPDATE billing_outbox SET fanned_out_at = UTC_TIMESTAMP(3) WHERE fanned_out_at IS NULL")
        status, checks, r = doctor(config)
        self.assertEqual(status, 0, r.stdout)
        self.assertEqual(checks["webhook endpoints"]["detail"], f"{endpoint} up to date")
        user = str(uuid.uuid4())
        outbox = sql(f"INSERT INTO billing_outbox (user_id, type, revision, data, created_at, fanned_out_at) VALUES "
                     f"({sql_string(user)}, 'access.changed', 1, '{{}}', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3)) RETURNING id")[0][0]
        self.addCleanup(sql, f"DELETE FROM billing_outbox WHERE id = {int(outbox)}")
        sql(f"INSERT INTO billing_webhook_deliveries (endpoint_id, outbox_id, user_id, status, attempts, next_attempt_at, created_at) "
            f"VALUES ({sql_string(endpoint)}, {int(outbox)}, {sql_string(user)}, 'failed', 30, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))")
        status, checks, _ = doctor(config)
        self.assert_only_failing(checks, "webhook endpoints", status)
        self.assertEqual(checks["webhook endpoints"]["detail"], f"{endpoint}: 1 failed for good")
        self.assertIn(f"webhooks.deliveries --endpointId {endpoint} --status failed", checks["webhook endpoints"]["fix"])

    def test_a_secret_others_can_read(self):
        with open(os.path.join(VAR_DIR, "secrets", "db-password")) as f:
            password = f.read().strip()
        path = self.secret("db-password", password, 0o644)
        status, checks, _ = doctor(self.write_config(lambda c: c["database"].update(passwordFile=path)))
        self.assert_only_failing(checks, "secret files", status)
        self.assertIn("chmod 0600", checks["secret files"]["fix"])

    def test_a_wrong_database_password(self):
        path = self.secret("db-password", "not-the-password")
        status, checks, _ = doctor(self.write_config(lambda c: c["database"].update(passwordFile=path)))
        self.assertEqual(status, 1)
        self.assertFalse(checks["database"]["ok"])
        self.assertNotIn("migrations", checks, "checks that need the database are not run without it")

    def test_an_account_that_can_change_the_schema(self):
        def as_root(config):
            config["database"].update(user="root", password="")
            config["database"].pop("passwordFile", None)
        status, checks, _ = doctor(self.write_config(as_root))
        self.assert_only_failing(checks, "database grants", status)

    def test_a_changed_applied_migration_and_a_pending_one(self):
        changed = os.path.join(self.tmp, "sql-changed")
        shutil.copytree(SQL, changed)
        first = sorted(n for n in os.listdir(changed) if n.endswith(".sql"))[0]
        with open(os.path.join(changed, first), "a") as f:
            f.write("\n-- edited after it was applied\n")
        status, checks, _ = doctor(sql_dir=changed)
        self.assert_only_failing(checks, "migrations", status)
        self.assertIn("changed", checks["migrations"]["detail"])
        pending = os.path.join(self.tmp, "sql-pending")
        shutil.copytree(SQL, pending)
        number = len([n for n in os.listdir(pending) if n.endswith(".sql")]) + 1
        with open(os.path.join(pending, f"{number:03d}_not_yet.sql"), "w") as f:
            f.write("SELECT 1;\n")
        status, checks, _ = doctor(sql_dir=pending)
        self.assert_only_failing(checks, "migrations", status)
        self.assertIn("pending", checks["migrations"]["detail"])

    def test_a_datadir_short_of_space(self):
        # The threshold is the operator's: one larger than the disk makes any datadir short.
        status, checks, _ = doctor(extra=["--min-free-bytes", str(1 << 62)])
        self.assert_only_failing(checks, "disk space", status)

    def test_a_clock_that_drifted(self):
        # This process's clock moved a minute ahead (libfaketime); the database's did not.
        status, checks, r = doctor(prefix=["faketime", "-f", "+60s"])
        self.assertEqual(status, 1)
        self.assertFalse(checks["clock"]["ok"], checks["clock"])
        self.assertIn("NTP", checks["clock"]["fix"])
        # The workers' published state now looks a minute old too: that one may fail with it.
        failing = sorted(n for n, c in checks.items() if not c["ok"])
        self.assertIn(failing, (["clock"], ["clock", "workers"]))

    def test_no_worker_up(self):
        empty = os.path.join(self.tmp, "metrics")
        os.makedirs(empty)
        status, checks, _ = doctor(self.write_config(lambda c: c["server"].update(metricsDirectory=empty)))
        self.assert_only_failing(checks, "workers", status)

    def test_nothing_answering_where_nginx_should(self):
        status, checks, _ = doctor(url="http://127.0.0.1:9")
        self.assert_only_failing(checks, "through nginx", status)

    def test_unreadable_token_keys(self):
        path = self.secret("keys.json", "{not json")
        status, checks, _ = doctor(self.write_config(lambda c: c["auth"].update(keysFile=path)))
        self.assertEqual(status, 1)
        failing = [n for n, c in checks.items() if not c["ok"]]
        self.assertTrue(failing in (["token keys"], ["configuration"]), failing)

    def test_token_keys_about_to_expire(self):
        key, cert = os.path.join(self.tmp, "k.pem"), os.path.join(self.tmp, "c.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3", "-subj", "/CN=expiring",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        with open(cert) as f:
            path = self.secret("keys.json", json.dumps({"soon-1": f.read()}), 0o644)
        status, checks, _ = doctor(self.write_config(lambda c: c["auth"].update(keysFile=path)))
        self.assert_only_failing(checks, "token keys", status)
        self.assertIn("expires by", checks["token keys"]["detail"])

    def test_token_keys_from_the_issuer_url(self):
        from harness.fake_key_server import FakeKeyServer, Key
        server = FakeKeyServer(self.tmp)
        self.addCleanup(server.stop)
        server.publish(Key.rsa("doctor-1"), Key.rsa("doctor-2"), max_age=600)
        config = self.write_config(lambda c: (c["auth"].pop("keysFile", None),
                                              c["auth"].update(keysUrl=server.url, caFile=server.ca_file)))
        status, checks, r = doctor(config)
        self.assertEqual(status, 0, r.stdout)
        self.assertRegex(checks["token keys"]["detail"], r"^2 key\(s\) at https://127\.0\.0\.1:\d+/keys, fresh for 600 s")
        server.down = True
        status, checks, _ = doctor(config)
        self.assert_only_failing(checks, "token keys", status)
        self.assertIn("HTTP 503", checks["token keys"]["detail"])

    def test_the_doctor_follows_the_sites_redirect(self):
        # A listener answering 301 to the stack's own nginx, as the production site's port 80 does.
        import http.server
        import threading

        class Redirect(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(301)
                self.send_header("Location", HTTP_BASE + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        status, checks, r = doctor(url="http://127.0.0.1:%d" % server.server_address[1])
        self.assertEqual(status, 0, r.stdout)
        self.assertTrue(checks["through nginx"]["ok"], checks["through nginx"])

    def test_an_app_store_root_that_is_not_a_certificate(self):
        path = self.secret("root.der", "garbage", 0o644)
        status, checks, _ = doctor(self.write_config(lambda c: c.setdefault("apple", {}).update(trustedRootsFiles=[path])))
        self.assertEqual(status, 1)
        failing = [n for n, c in checks.items() if not c["ok"]]
        self.assertTrue(failing in (["App Store roots"], ["configuration"]), failing)


if __name__ == "__main__":
    unittest.main()
