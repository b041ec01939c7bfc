"""Upgrades that cannot half-apply (issue 31), with dpkg itself on this machine:

- the installed package, pointed at a scratch database of the test stack's MariaDB, applies
  its migrations in its postinst (reinstalled: the upgrade path, `configure <old version>`);
- an upgrade to a build whose new migration fails makes `dpkg -i` fail: the package is left
  half-configured, the failed migration is not recorded, and a worker started from the old
  binaries before the upgrade still serves (its binary replaced on disk, not in memory);
- going back to the previous .deb (the rollback docs/operations.md describes) configures
  cleanly, the schema as it was;
- an upgrade that cannot reach the database fails too (nothing restarted) until MariaDB is
  back, or the operator leaves the migrations to billing-rpc's start
  (FCGIBILLING_SKIP_MIGRATION=1 dpkg --configure -a).

The broken build is debtools.repack_with_broken_migration: what a bad release would ship."""
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

from harness.billing import sql, wait_until
from harness.debtools import repack_with_broken_migration

VAR_DIR = os.environ["BILLING_VAR_DIR"]
DB_PORT = int(os.environ["BILLING_DB_PORT"])
CONFIG = "/etc/fcgibilling/billing.json"
MIGRATOR_SECRET = "/etc/fcgibilling/secrets/db-migrator-password"
SCRATCH_DB = "billing_pkg_upgrade"


def dpkg(*args, env=None):
    return subprocess.run(["dpkg", *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, DEBIAN_FRONTEND="noninteractive", **(env or {})))


def package_state():
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Status}|${Version}", "fcgibilling"], capture_output=True, text=True)
    status, _, version = r.stdout.partition("|")
    return status, version


def applied_migrations():
    out = sql(f"SELECT version FROM {SCRATCH_DB}.schema_migrations ORDER BY version")
    return [int(row[0]) for row in out]


class UpgradeWithABrokenMigration(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        debs = sorted(glob.glob(os.path.join(VAR_DIR, "package", "fcgibilling_*.deb")))
        assert debs, "no package built in %s/package" % VAR_DIR
        cls.deb = debs[-1]
        cls.version = package_state()[1]
        cls.tmp = tempfile.mkdtemp(prefix="fcgibilling-upgrade-")
        os.chmod(cls.tmp, 0o755)
        cls.sql_files = sorted(f for f in os.listdir("/usr/share/fcgibilling/sql") if f.endswith(".sql"))
        # The operator's setup, against a scratch database: billing.json naming it, the
        # migrator account's password in the generated secret's place (both restored after).
        shutil.copy(CONFIG, os.path.join(cls.tmp, "billing.json.saved"))
        shutil.copy(MIGRATOR_SECRET, os.path.join(cls.tmp, "migrator.saved"))
        sql(f"DROP DATABASE IF EXISTS {SCRATCH_DB}; CREATE DATABASE {SCRATCH_DB};"
            f"GRANT ALL PRIVILEGES ON {SCRATCH_DB}.* TO 'billing_migrator'@'localhost';"
            f"GRANT ALL PRIVILEGES ON {SCRATCH_DB}.* TO 'billing_migrator'@'127.0.0.1';")
        shutil.copy(os.path.join(VAR_DIR, "secrets", "db-migrator-password"), MIGRATOR_SECRET)
        cls.write_config(port=DB_PORT)
        cls.broken, _ = repack_with_broken_migration(cls.deb, cls.tmp)
        cls.worker = None

    @classmethod
    def tearDownClass(cls):
        if cls.worker is not None and cls.worker.poll() is None:
            cls.worker.send_signal(signal.SIGTERM)
            cls.worker.wait(30)
        # Back to the build under test, configured, with its own configuration.
        if package_state() != ("install ok installed", cls.version):
            dpkg("-i", cls.deb, env={"FCGIBILLING_SKIP_MIGRATION": "1"})
        shutil.copy(os.path.join(cls.tmp, "billing.json.saved"), CONFIG)
        shutil.copy(os.path.join(cls.tmp, "migrator.saved"), MIGRATOR_SECRET)
        sql(f"DROP DATABASE IF EXISTS {SCRATCH_DB}")
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def write_config(cls, port):
        with open(os.path.join(cls.tmp, "billing.json.saved")) as f:
            config = json.load(f)
        config["database"].update({"host": "127.0.0.1", "port": port, "name": SCRATCH_DB})
        config["database"].pop("socket", None)
        with open(CONFIG, "w") as f:
            json.dump(config, f)

    def worker_health(self):
        env = dict(os.environ, REQUEST_METHOD="GET", REQUEST_URI="/api/v1/health", DOCUMENT_URI="/api/v1/health",
                   SERVER_PROTOCOL="HTTP/1.1", REMOTE_ADDR="127.0.0.1", QUERY_STRING="")
        r = subprocess.run(["cgi-fcgi", "-bind", "-connect", self.worker_socket], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=30)
        return r.stdout.split(b"\r\n")[0]

    def test_a_failed_migration_fails_the_upgrade_and_the_old_workers_keep_serving(self):
        # The upgrade path (configure <previous version>) applies every migration.
        r = dpkg("-i", self.deb)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(applied_migrations(), list(range(1, len(self.sql_files) + 1)))
        self.assertEqual(package_state(), ("install ok installed", self.version))

        # A worker of this version serving (the stack's configuration, the installed binary).
        self.worker_socket = os.path.join(self.tmp, "old-worker.sock")
        log = open(os.path.join(self.tmp, "old-worker.out"), "ab")
        type(self).worker = subprocess.Popen(
            ["/usr/sbin/billing-fcgi", "--config", os.path.join(VAR_DIR, "billing.json"), "--socket", self.worker_socket,
             "--threads", "2", "--log-file", os.path.join(self.tmp, "old-worker.log"),
             "--metrics-dir", os.path.join(self.tmp, "metrics")], stdout=log, stderr=log)
        log.close()
        self.assertTrue(wait_until(lambda: os.path.exists(self.worker_socket), 20))
        self.assertEqual(self.worker_health(), b"Status: 200 OK")

        # The broken release: dpkg fails, loudly, and says what to do.
        r = dpkg("-i", self.broken)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("a migration failed", r.stdout + r.stderr)
        self.assertIn("no_such_table", r.stdout + r.stderr)
        self.assertEqual(package_state(), ("install ok half-configured", self.version + "+broken1"))
        self.assertEqual(applied_migrations(), list(range(1, len(self.sql_files) + 1)), "the failed migration is not recorded")
        # The running worker was not restarted and still serves from the old binary.
        self.assertIsNone(self.worker.poll())
        self.assertEqual(self.worker_health(), b"Status: 200 OK")
        # Trying again fails the same way (nothing half-applied to trip over).
        r = dpkg("--configure", "-a")
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(package_state()[0], "install ok half-configured")

        # Rollback: the previous .deb configures cleanly over the same schema.
        r = dpkg("-i", self.deb)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(package_state(), ("install ok installed", self.version))
        self.assertIn("up to date", r.stdout)
        self.assertEqual(applied_migrations(), list(range(1, len(self.sql_files) + 1)))
        self.assertEqual(self.worker_health(), b"Status: 200 OK")

    def test_an_upgrade_that_cannot_reach_the_database_fails_until_told_otherwise(self):
        self.write_config(port=1)  # nothing listens there
        try:
            r = dpkg("-i", self.deb)
            self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("cannot reach the database", r.stdout + r.stderr)
            self.assertEqual(package_state()[0], "install ok half-configured")
            r = dpkg("--configure", "-a", env={"FCGIBILLING_SKIP_MIGRATION": "1"})
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("migrations not applied here", r.stdout)
            self.assertEqual(package_state(), ("install ok installed", self.version))
        finally:
            self.write_config(port=DB_PORT)


if __name__ == "__main__":
    unittest.main()
