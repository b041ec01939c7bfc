"""Database accounts (SPEC §13): the schema belongs to the migrator account (`billing-rpc
migrate` runs as billing_migrator); the runtime account the workers and billing-rpc use has
DML only. Tried for real with the runtime account's own password, over the stack's socket."""
import os
import subprocess
import unittest

from harness.billing import DB_SOCKET, VAR_DIR, sql


def as_runtime(statement):
    """Runs one statement as the runtime account; returns (ok, stderr)."""
    with open(os.path.join(VAR_DIR, "secrets", "db-password")) as f:
        password = f.read().strip()
    r = subprocess.run(["mariadb", "--no-defaults", "--protocol=socket", "-S", DB_SOCKET, "-ubilling", f"-p{password}",
                        "-N", "-B", "billing", "-e", statement], capture_output=True, text=True, timeout=30)
    return r.returncode == 0, r.stderr


class DatabaseAccounts(unittest.TestCase):
    def test_runtime_account_has_dml_only(self):
        ok, err = as_runtime("SELECT value FROM billing_flags LIMIT 1")
        self.assertTrue(ok, err)
        ok, err = as_runtime("UPDATE billing_flags SET value = value WHERE 1 = 0")
        self.assertTrue(ok, err)
        for statement in ["CREATE TABLE e2e_intruder (id INT)", "DROP TABLE billing_flags", "ALTER TABLE billing_flags ADD COLUMN x INT",
                          "TRUNCATE TABLE billing_paywall_events", "CREATE TRIGGER e2e_t BEFORE INSERT ON audit_log FOR EACH ROW SET @x = 1",
                          "DROP TRIGGER audit_log_peer", "GRANT SELECT ON billing.* TO 'billing'@'%'",
                          "CREATE USER 'e2e_intruder'@'localhost'", "DROP DATABASE billing"]:
            with self.subTest(statement=statement):
                ok, err = as_runtime(statement)
                self.assertFalse(ok, f"the runtime account could run: {statement}")
                self.assertRegex(err, r"denied|ERROR 1044|ERROR 1142|ERROR 1227|ERROR 1045|ERROR 1410", err)
        self.assertEqual(sql("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'billing' "
                             "AND table_name = 'e2e_intruder'"), [["0"]])

    def test_schema_objects_belong_to_the_migrator(self):
        definers = sql("SELECT DISTINCT definer FROM information_schema.triggers WHERE trigger_schema = 'billing'")
        self.assertTrue(definers, "the schema has triggers")
        for (definer,) in definers:
            self.assertTrue(definer.startswith("billing_migrator@"), f"a trigger defined by {definer}")
        grants = "\n".join(row[0] for row in sql("SHOW GRANTS FOR 'billing'@'localhost'"))
        self.assertIn("GRANT SELECT, INSERT, UPDATE, DELETE ON `billing`.*", grants)
        self.assertNotIn("ALL PRIVILEGES ON `billing`", grants)


if __name__ == "__main__":
    unittest.main()
