"""The package under a real systemd (issue 31): a Debian 12 root (debootstrap, cached by
scripts/lib/stack.sh nspawn_root) booted by `systemd-nspawn -b` with systemd as PID 1 and a
network of its own (loopback only), where MariaDB, nginx and the package are installed and
configured as an operator would (docs/operations.md, "Production"). In order:

 1. install: `dpkg -i` on a first install whose database has no account yet succeeds and says so;
 2. configure: the accounts, billing.json, `billing-rpc migrate`, the units enabled, the site
    enabled with a certificate, `nginx -t`;
 3. serve through nginx over TLS, the workers started by socket activation on the first
    connections; an app token verified; /metrics on the metrics listener; the doctor;
 4. a worker restarted by systemctl and one killed -9 (systemd starts it again): no request
    through nginx fails meanwhile;
 5. each uid's reach: nginx's user reaches the worker sockets and neither the admin socket
    nor a secret; the workers' user neither; root is served by billing-admin;
 6. an upgrade to a build whose migration fails: dpkg fails, nothing restarts (same main
    pids), nginx still serves; the previous .deb then configures and restarts the daemons
    (new pids);
 7. purge: the services stopped, the sockets, configuration, logs and the site's link gone,
    `nginx -t` passes.

Commands run inside the container with nsenter into its namespaces. Environment:
FCGIBILLING_NSPAWN_ROOT (the cached root; a copy is booted), FCGIBILLING_DEB (the package),
FCGIBILLING_SYSTEM_DIR (a scratch directory)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from harness.billing import wait_until
from harness.debtools import deb_version, repack_with_broken_migration
from harness.fake_key_server import Key

TEMPLATE = os.environ["FCGIBILLING_NSPAWN_ROOT"]
DEB = os.environ["FCGIBILLING_DEB"]
WORK = os.environ["FCGIBILLING_SYSTEM_DIR"]
SHARED = "/mnt/fcgibilling"          # inside: WORK/shared, bound read-only
HOST = "billing.example.com"          # the site's server_name
ISSUER, AUDIENCE = "https://issuer.fcgibilling.test", "fcgibilling-system"


class Container:
    def __init__(self, root, shared):
        self.log = open(os.path.join(WORK, "nspawn.log"), "ab")
        self.process = subprocess.Popen(
            ["systemd-nspawn", "--quiet", "--directory", root, "--register=no", "--keep-unit", "--private-network",
             "--boot", "--console=passive", "--bind-ro=%s:%s" % (shared, SHARED)],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        self.pid = None
        if not wait_until(self.find_init, 30):
            self.process.kill()
            self.process.wait(30)
            raise AssertionError("no systemd in the container: %s" % open(self.log.name).read()[-2000:])

    def find_init(self):
        """The container's PID 1, seen from here: a process whose NSpid ends in 1 under nspawn."""
        if self.process.poll() is not None:
            raise AssertionError("systemd-nspawn exited %s: %s" % (self.process.returncode, open(self.log.name).read()[-2000:]))
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/status" % entry) as f:
                    status = f.read()
            except OSError:
                continue
            ns = re.search(r"^NSpid:\s+(.*)$", status, re.M)
            ppid = re.search(r"^PPid:\s+(\d+)$", status, re.M)
            try:
                with open("/proc/%s/comm" % entry) as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if ns and ppid and int(ppid.group(1)) == self.process.pid and ns.group(1).split()[-1] == "1" and comm == "systemd":
                self.pid = int(entry)
                return True
        return False

    def run(self, command, check=True, timeout=300, input=None):
        r = subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-u", "-i", "-n", "-p", "--",
                            "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
                            "/bin/sh", "-c", command],
                           capture_output=True, text=True, timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise AssertionError("in the container: %s\nexit %d\n%s%s" % (command, r.returncode, r.stdout, r.stderr))
        return r

    def main_pid(self, unit):
        return int(self.run("systemctl show -p MainPID --value %s" % unit).stdout.strip())

    def stop(self):
        if self.process.poll() is None:
            self.run("systemctl poweroff", check=False, timeout=30)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        self.log.close()


class SystemdInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        shutil.rmtree(WORK, ignore_errors=True)
        os.makedirs(WORK)
        cls.root = os.path.join(WORK, "root")
        subprocess.run(["cp", "-a", "--reflink=auto", TEMPLATE, cls.root], check=True)
        cls.shared = os.path.join(WORK, "shared")
        os.makedirs(cls.shared)
        cls.version = deb_version(DEB)
        shutil.copy(DEB, os.path.join(cls.shared, "fcgibilling.deb"))
        broken, cls.broken_version = repack_with_broken_migration(DEB, tempfile.mkdtemp(dir=WORK))
        shutil.copy(broken, os.path.join(cls.shared, "fcgibilling-broken.deb"))
        # The app's ID-token key, published as a {kid: PEM} file (the container reaches no issuer).
        cls.key = Key.rsa("system-1")
        with open(os.path.join(cls.shared, "token-keys.json"), "w") as f:
            json.dump({cls.key.kid: cls.key.certificate_pem()}, f)
        cls.box = Container(cls.root, cls.shared)
        try:
            # Until systemd answers on its bus (the first calls may come before it listens).
            states = []

            def booted():
                r = cls.box.run("systemctl is-system-running --wait", check=False, timeout=120)
                states.append((r.stdout + r.stderr).strip())
                return r.stdout.strip() in ("running", "degraded")
            assert wait_until(booted, 90, interval=1), states[-3:]
            failed = cls.box.run("systemctl --failed --no-legend --plain", check=False).stdout.strip()
            print("container booted (%s)%s" % (states[-1], "; failed units: " + failed if failed else ""), file=sys.stderr)
        except BaseException:
            cls.box.stop()   # unittest skips tearDownClass when setUpClass fails
            raise

    @classmethod
    def tearDownClass(cls):
        cls.box.stop()
        shutil.rmtree(WORK, ignore_errors=True)

    def curl(self, path, token=None):
        """Through nginx over TLS, as the app would: (status, body)."""
        auth = "-H 'Authorization: Bearer %s'" % token if token else ""
        r = self.box.run("curl -s -k -w '\\n%%{http_code}' --resolve %s:443:127.0.0.1 %s https://%s%s" % (HOST, auth, HOST, path),
                         check=False)
        body, _, status = r.stdout.rpartition("\n")
        return int(status) if status.isdigit() else 0, body

    def token(self, subject="6f1c1a8e-8a4e-4f37-9a44-1d2b3c4d5e6f"):
        now = int(time.time())
        return self.key.token({"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "iat": now, "exp": now + 3600})

    def health_ok(self):
        status, body = self.curl("/api/v1/health")
        return status == 200 and json.loads(body).get("database") == "ok"

    def test_1_install_before_the_database_is_set_up(self):
        r = self.box.run("dpkg -i %s/fcgibilling.deb" % SHARED)
        self.assertIn("the database is not reachable yet", r.stdout)
        self.assertEqual(self.box.run("dpkg-query -W -f '${Status} ${Version}' fcgibilling").stdout,
                         "install ok installed %s" % self.version)
        # Nothing enabled or started by the package itself.
        for unit in ["billing-rpc.service", "billing-fcgi@1.socket"]:
            self.assertNotEqual(self.box.run("systemctl is-enabled %s" % unit, check=False).stdout.strip(), "enabled", unit)
        self.assertIn("billing-rpc %s" % self.version, self.box.run("billing-rpc --version").stdout)

    def test_2_configure_as_an_operator(self):
        b = self.box
        b.run("""set -e
            mariadb -e "CREATE DATABASE billing CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
              CREATE USER 'billing_migrator'@'localhost' IDENTIFIED BY '$(cat /etc/fcgibilling/secrets/db-migrator-password)';
              GRANT ALL PRIVILEGES ON billing.* TO 'billing_migrator'@'localhost';
              CREATE USER 'billing'@'localhost' IDENTIFIED BY '$(cat /etc/fcgibilling/secrets/db-password)';
              GRANT SELECT, INSERT, UPDATE, DELETE ON billing.* TO 'billing'@'localhost';"
            install -m 0640 -g fcgibilling %(shared)s/token-keys.json /etc/fcgibilling/token-keys.json
            python3 - <<'PY'
import json
c = json.load(open("/etc/fcgibilling/billing.json"))
c["database"].update(host="localhost", socket="/run/mysqld/mysqld.sock")
c["auth"] = {"keysFile": "/etc/fcgibilling/token-keys.json", "issuer": "%(issuer)s", "audience": "%(audience)s"}
c["apple"] = {"trustedRootsFiles": []}
json.dump(c, open("/etc/fcgibilling/billing.json", "w"))
PY
            mkdir -p /etc/ssl/fcgibilling
            openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=%(host)s -keyout /etc/ssl/fcgibilling/privkey.pem \
                -out /etc/ssl/fcgibilling/fullchain.pem 2>/dev/null
            ln -sfn ../sites-available/fcgibilling /etc/nginx/sites-enabled/fcgibilling
            """ % {"shared": SHARED, "issuer": ISSUER, "audience": AUDIENCE, "host": HOST})
        migrated = b.run("BILLING__database__user=billing_migrator "
                         "BILLING__database__passwordFile=/etc/fcgibilling/secrets/db-migrator-password billing-rpc migrate")
        self.assertIn("migrations: applied 1 ", migrated.stdout)
        b.run("systemctl enable --now billing-rpc.service billing-fcgi@1.socket billing-fcgi@2.socket")
        b.run("nginx -t && systemctl reload nginx")
        self.assertEqual(b.run("systemctl is-active billing-rpc.service").stdout.strip(), "active")
        # Its start ran the migrator unit, which found nothing to do.
        self.assertEqual(b.run("systemctl show -p Result --value fcgibilling-migrate.service").stdout.strip(), "success")
        self.assertIn("up to date", b.run("journalctl --no-pager -u fcgibilling-migrate.service").stdout)

    def test_2b_no_running_daemon_holds_the_migrators_password(self):
        """SPEC §19: the migrator's credential is the oneshot migrate unit's only."""
        b = self.box
        migrator = b.run("cat /etc/fcgibilling/secrets/db-migrator-password").stdout.strip()
        self.assertTrue(migrator)
        self.assertEqual(b.run("ls /run/credentials/billing-rpc.service").stdout.split(), ["db-password"])
        self.assertNotIn("fcgibilling-migrate.service", b.run("ls /run/credentials").stdout.split(),
                         "the oneshot's credentials are gone with it")
        for unit in ["billing-rpc.service", "billing-fcgi@1.service"]:
            pid = b.run("systemctl show -p MainPID --value %s" % unit).stdout.strip()
            if pid == "0":
                continue   # a worker not started by a connection yet
            environ = b.run("tr '\\0' '\\n' </proc/%s/environ" % pid).stdout
            self.assertNotIn(migrator, environ, unit)
            self.assertNotIn("migrator", environ, unit)
            fds = b.run("ls -l /proc/%s/fd" % pid).stdout
            self.assertNotIn("migrator", fds, unit)

    def test_3_serves_through_nginx_by_socket_activation(self):
        self.assertTrue(wait_until(self.health_ok, 30), self.curl("/api/v1/health"))
        for _ in range(6):     # both workers get a connection (nginx round robin)
            self.assertTrue(self.health_ok())
        for n in (1, 2):
            self.assertEqual(self.box.run("systemctl is-active billing-fcgi@%d.service" % n, check=False).stdout.strip(),
                             "active", "worker %d started by its socket" % n)
        status, body = self.curl("/api/v1/billing/access", token=self.token())
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["tier"], "free")
        status, _ = self.curl("/api/v1/billing/access", token="not-a-token")
        self.assertEqual(status, 401)
        metrics = self.box.run("curl -s http://127.0.0.1:9464/metrics").stdout
        self.assertRegex(metrics, r'billing_build_info\{worker="worker-1",version="%s"\} 1' % re.escape(self.version))
        self.assertIn("process_resident_memory_bytes", metrics)
        self.assertEqual(self.curl("/metrics")[0], 404, "the public site does not serve /metrics")
        doctor = json.loads(self.box.run("billing-rpc doctor --json", check=False).stdout)
        checks = {c["check"]: c for c in doctor}
        for name in ["configuration", "secret files", "database", "migrations", "workers", "through nginx", "token keys"]:
            self.assertTrue(checks[name]["ok"], checks[name])

    def requests_while(self, action):
        """Health requests through nginx while `action` runs: their statuses. Paced under the
        site's health zone (20 r/s, burst 100): a refusal here is the restart's, never the
        rate limit's (unpaced, a slow restart once let the loop outrun the bucket)."""
        statuses, done = [], threading.Event()

        def load():
            while not done.is_set():
                statuses.append(self.curl("/api/v1/health")[0])
                time.sleep(0.06)

        thread = threading.Thread(target=load)
        thread.start()
        try:
            time.sleep(0.5)
            action()
            time.sleep(1.0)
        finally:
            done.set()
            thread.join(60)
        return statuses

    def test_4_a_restarted_and_a_killed_worker(self):
        before = self.box.main_pid("billing-fcgi@1.service")
        statuses = self.requests_while(lambda: self.box.run("systemctl restart billing-fcgi@1.service"))
        self.assertNotEqual(self.box.main_pid("billing-fcgi@1.service"), before)
        self.assertTrue(statuses and set(statuses) == {200}, statuses)

        killed = self.box.main_pid("billing-fcgi@2.service")

        def kill():
            self.box.run("kill -KILL %d" % killed)
            self.assertTrue(wait_until(lambda: self.box.main_pid("billing-fcgi@2.service") not in (0, killed), 20))

        statuses = self.requests_while(kill)
        self.assertTrue(statuses and set(statuses) == {200}, statuses)
        self.assertEqual(self.box.run("systemctl is-active billing-fcgi@2.service").stdout.strip(), "active")

    def reach(self, user, paths):
        probe = ("import socket, sys\n"
                 "for p in sys.argv[1:]:\n"
                 "    try:\n"
                 "        if p.endswith('.sock'):\n"
                 "            s = socket.socket(socket.AF_UNIX); s.connect(p); s.close()\n"
                 "        else:\n"
                 "            open(p, 'rb').read()\n"
                 "        print(p, 'ok')\n"
                 "    except PermissionError:\n"
                 "        print(p, 'EACCES')\n")
        out = self.box.run("runuser -u %s -- python3 -c \"%s\" %s" % (user, probe, " ".join(paths))).stdout
        return dict(line.rsplit(" ", 1) for line in out.splitlines())

    def test_5_each_uid_reaches_what_it_may(self):
        worker, admin = "/run/fcgibilling/worker-1.sock", "/run/fcgibilling-rpc/billing-rpc.sock"
        secret = "/etc/fcgibilling/secrets/db-password"
        self.assertEqual(self.reach("www-data", [worker, admin, secret]), {worker: "ok", admin: "EACCES", secret: "EACCES"})
        self.assertEqual(self.reach("fcgibilling", [admin, secret]), {admin: "EACCES", secret: "EACCES"})
        health = json.loads(self.box.run("billing-admin --json system.health").stdout)
        self.assertEqual(health["database"]["status"], "ok")
        self.assertEqual(len(health["workers"]), 2)

    def test_6_a_broken_migration_upgrade_leaves_the_daemons_serving(self):
        units = ["billing-rpc.service", "billing-fcgi@1.service", "billing-fcgi@2.service"]
        pids = {unit: self.box.main_pid(unit) for unit in units}
        r = self.box.run("dpkg -i %s/fcgibilling-broken.deb" % SHARED, check=False)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("a migration failed", r.stdout + r.stderr)
        self.assertEqual(self.box.run("dpkg-query -W -f '${Status} ${Version}' fcgibilling").stdout,
                         "install ok half-configured %s" % self.broken_version)
        self.assertEqual({unit: self.box.main_pid(unit) for unit in units}, pids,
                         "nothing restarted:\n" + self.box.run("journalctl --no-pager -n 60 -u billing-rpc.service", check=False).stdout)
        self.assertTrue(self.health_ok())
        # Rollback: the previous package configures, and restarts what runs on its binaries.
        r = self.box.run("dpkg -i %s/fcgibilling.deb" % SHARED, check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("migrations: up to date", r.stdout)
        after = {unit: self.box.main_pid(unit) for unit in units}
        for unit in units:
            self.assertNotIn(after[unit], (0, pids[unit]), "%s restarted after the configured upgrade" % unit)
        self.assertTrue(wait_until(self.health_ok, 20))

    def test_7_purge_removes_what_install_made(self):
        self.box.run("dpkg --purge fcgibilling")
        for unit in ["billing-rpc.service", "billing-fcgi@1.service", "billing-fcgi@1.socket"]:
            self.assertNotEqual(self.box.run("systemctl is-active %s" % unit, check=False).stdout.strip(), "active", unit)
        left = self.box.run("for p in /etc/fcgibilling /var/log/fcgibilling /var/log/fcgibilling-rpc /run/fcgibilling/worker-1.sock "
                            "/etc/nginx/sites-enabled/fcgibilling /usr/sbin/billing-rpc /etc/systemd/system/*.wants/billing-*; do [ -e $p ] || [ -L $p ] && echo $p; done; true")
        self.assertEqual(left.stdout.split(), [])
        self.box.run("nginx -t")


if __name__ == "__main__":
    unittest.main()
