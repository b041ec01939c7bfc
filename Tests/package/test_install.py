"""The installed Debian package (scripts/package, installed by scripts/test's `package` layer):
every installed file's owner and mode, the users and groups, the binaries starting and
linking only Debian's libraries, the units passing `systemd-analyze verify` with an exposure
score of at most 2.0, and who may reach what (SPEC §13), tried for real as each uid:

- nginx's user (www-data) reaches a worker socket made as billing-fcgi@.socket makes it, and
  neither the admin socket nor any secret;
- the workers' user (fcgibilling) cannot reach the admin socket nor the secrets;
- a stranger reaches nothing; an operator in fcgibilling-admin but not in admin.allowedUsers
  is refused by billing-rpc's peer check and leaves an audit row;
- root is served.

billing-rpc and a worker run from the installed files as their units run them (ExecStart=,
Environment= and User= read from the installed units; LoadCredential= emulated by a
per-service copy of the secrets, as systemd makes one), against the test stack's MariaDB.
No systemd as PID 1 is needed."""
import grp
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import unittest

# The harness's helpers (root's SQL on the test stack's socket, polling) serve here too.
from harness.billing import sql, wait_until

VAR_DIR = os.environ["BILLING_VAR_DIR"]
DB_PORT = int(os.environ["BILLING_DB_PORT"])
DB_SOCKET = os.path.join(VAR_DIR, "run", "mariadb.sock")
UNITS = "/lib/systemd/system"
SQL_DIR = "/usr/share/fcgibilling/sql"
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
REPO_SQL = os.path.join(REPO, "sql")
ADMIN_SOCKET = "/run/fcgibilling-rpc/billing-rpc.sock"
SECRETS = ["db-password", "db-migrator-password", "revenuecat-webhook-secret"]
STRANGER, OPERATOR = "billing-pkg-stranger", "billing-pkg-operator"


def unit_values(unit, key):
    with open(os.path.join(UNITS, unit)) as f:
        return [line.split("=", 1)[1].strip() for line in f if line.startswith(key + "=")]


# Run as another uid: tries each action and reports what happened, as JSON.
PROBE = r"""
import json, socket, sys
out = {}
for kind, path in json.loads(sys.argv[1]):
    try:
        if kind == "connect":
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            # A refused peer is answered before it sends anything: read that first.
            s.settimeout(1)
            try:
                data = s.recv(65536)
            except socket.timeout:
                data = b""
            s.settimeout(10)
            if data:
                out[path] = "reply:" + data.decode(errors="replace")
                continue
            s.sendall(b'{"jsonrpc":"2.0","method":"system.health","id":1}\n')
            s.shutdown(socket.SHUT_WR)
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            out[path] = "reply:" + data.decode(errors="replace")
        else:
            open(path, "rb").read()
            out[path] = "read"
    except PermissionError:
        out[path] = "EACCES"
    except OSError as e:
        out[path] = "error:" + str(e)
print(json.dumps(out))
"""


def probe_as(user, actions):
    r = subprocess.run(["runuser", "-u", user, "--", "python3", "-c", PROBE, json.dumps(actions)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def ensure_user(name, groups=()):
    if subprocess.run(["id", name], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    for group in groups:
        subprocess.run(["usermod", "-a", "-G", group, name], check=True)


class InstalledFiles(unittest.TestCase):
    def assert_owned(self, path, user, group, mode):
        st = os.lstat(path)
        self.assertEqual((pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name, oct(stat.S_IMODE(st.st_mode))),
                         (user, group, oct(mode)), path)

    def test_every_owner_and_mode(self):
        expected = [
            ("/usr/sbin/billing-fcgi", "root", "root", 0o755),
            ("/usr/sbin/billing-rpc", "root", "root", 0o755),
            ("/usr/bin/billing-admin", "root", "root", 0o755),
            ("/usr/share/fcgibilling/billing.json.example", "root", "root", 0o644),
            ("/usr/share/man/man8/billing-fcgi.8.gz", "root", "root", 0o644),
            ("/usr/share/man/man8/billing-rpc.8.gz", "root", "root", 0o644),
            ("/usr/share/man/man1/billing-admin.1.gz", "root", "root", 0o644),
            ("/usr/share/doc/fcgibilling/copyright", "root", "root", 0o644),
            ("/usr/share/doc/fcgibilling/changelog.gz", "root", "root", 0o644),
            ("/usr/share/doc/fcgibilling/operations.md", "root", "root", 0o644),
            ("/etc/fcgibilling", "root", "fcgibilling", 0o750),
            ("/etc/fcgibilling/billing.json", "root", "fcgibilling", 0o640),
            ("/etc/fcgibilling/secrets", "root", "root", 0o700),
            ("/var/log/fcgibilling", "fcgibilling", "fcgibilling", 0o750),
            ("/var/log/fcgibilling-rpc", "fcgibilling-rpc", "fcgibilling-rpc", 0o750),
            ("/run/fcgibilling", "fcgibilling", "fcgibilling", 0o711),
            ("/run/fcgibilling/metrics", "fcgibilling", "fcgibilling", 0o750),
            ("/run/fcgibilling-rpc", "fcgibilling-rpc", "fcgibilling-admin", 0o2750),
            ("/run/fcgibilling-live", "root", "fcgibilling-rpc", 0o750),
            ("/usr/lib/tmpfiles.d/fcgibilling.conf", "root", "root", 0o644),
            ("/etc/nginx/sites-available/fcgibilling", "root", "root", 0o644),
            ("/etc/nginx/fcgibilling_fastcgi_params.conf", "root", "root", 0o644),
            ("/etc/nginx/fcgibilling_errors.conf", "root", "root", 0o644),
            ("/etc/nginx/fcgibilling_live.conf", "root", "root", 0o644),
            ("/etc/nginx/fcgibilling_live_publisher.conf", "root", "root", 0o644),
            ("/etc/logrotate.d/fcgibilling", "root", "root", 0o644),
        ]
        expected += [(f"/etc/fcgibilling/secrets/{name}", "root", "root", 0o600) for name in SECRETS]
        expected += [(os.path.join(UNITS, unit), "root", "root", 0o644)
                     for unit in ["billing-fcgi@.service", "billing-fcgi@.socket", "billing-rpc.service",
                                  "fcgibilling-migrate.service"]]
        expected += [(os.path.join(SQL_DIR, f), "root", "root", 0o644) for f in os.listdir(SQL_DIR)]
        self.assertEqual(sorted(os.listdir(SQL_DIR)), sorted(f for f in os.listdir(REPO_SQL) if f.endswith(".sql")))
        self.assertFalse(os.path.exists("/opt/fcgibilling"), "nothing under /opt (Debian policy: lintian dir-or-file-in-opt)")
        for path, user, group, mode in expected:
            with self.subTest(path=path):
                self.assert_owned(path, user, group, mode)
        for name in SECRETS:
            with open(f"/etc/fcgibilling/secrets/{name}") as f:
                self.assertGreaterEqual(len(f.read().strip()), 32, f"{name} was generated")

    def test_users_and_groups(self):
        members = {g: set(grp.getgrnam(g).gr_mem) for g in ["fcgibilling", "fcgibilling-rpc", "fcgibilling-web", "fcgibilling-admin"]}
        self.assertIn("fcgibilling-rpc", members["fcgibilling"])
        self.assertEqual(members["fcgibilling-web"], {"www-data"})
        for group in ["fcgibilling", "fcgibilling-rpc", "fcgibilling-admin"]:
            self.assertNotIn("www-data", members[group], group)
        self.assertNotIn("fcgibilling", members["fcgibilling-admin"])
        self.assertNotIn("fcgibilling", members["fcgibilling-rpc"])
        for user in ["fcgibilling", "fcgibilling-rpc"]:
            entry = pwd.getpwnam(user)
            self.assertLess(entry.pw_uid, 1000, "a system user")
            self.assertEqual(entry.pw_shell, "/usr/sbin/nologin")

    def test_both_daemons_answer_the_package_version(self):
        version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "fcgibilling"], capture_output=True, text=True,
                                 check=True).stdout
        for binary in ["billing-fcgi", "billing-rpc"]:
            r = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
            self.assertEqual((r.returncode, r.stdout.strip()), (0, f"{binary} {version}"), r.stderr)

    def test_every_library_dependency_is_versioned(self):
        depends = subprocess.run(["dpkg-query", "-W", "-f", "${Depends}", "fcgibilling"], capture_output=True, text=True,
                                 check=True).stdout
        libraries = [d.strip() for d in depends.split(",") if d.strip().startswith("lib")]
        self.assertGreaterEqual(len(libraries), 6, depends)
        for dependency in libraries:
            self.assertRegex(dependency, r"^\S+ \(>= [^)]+\)$", depends)

    def test_logrotate_covers_every_log_directory(self):
        r = subprocess.run(["logrotate", "--debug", "/etc/logrotate.d/fcgibilling"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for directory in ["/var/log/fcgibilling", "/var/log/fcgibilling-rpc"]:
            self.assertIn(f"considering log {directory}/*.log", r.stdout + r.stderr)

    def test_the_site_serves_metrics_on_a_listener_of_its_own(self):
        with open("/etc/nginx/sites-available/fcgibilling") as f:
            site = f.read()
        servers = re.split(r"\nserver \{", site)[1:]
        metrics = [s for s in servers if "location = /metrics" in s]
        self.assertEqual(len(metrics), 1, "one server block serves /metrics")
        self.assertRegex(metrics[0], r"listen 127\.0\.0\.1:9464;")
        self.assertRegex(metrics[0], r"deny all;")
        public = [s for s in servers if "listen 443" in s]
        self.assertEqual(len(public), 1)
        self.assertNotIn("/metrics", public[0], "the public site does not serve /metrics")

    def test_binaries_start_and_link_only_debian_libraries(self):
        for binary in ["billing-fcgi", "billing-rpc"]:
            path = f"/usr/sbin/{binary}"
            r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("usage", r.stdout.lower())
            libs = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
            self.assertNotIn("not found", libs)
            self.assertNotIn("swift", libs.lower(), "the Swift runtime is linked statically")
        r = subprocess.run(["/usr/bin/billing-admin", "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_migrate_status_against_the_database(self):
        env = dict(os.environ, BILLING__database__socket=DB_SOCKET, BILLING__database__user="root",
                   BILLING__database__password="", BILLING__database__passwordFile=None)
        env = {k: v for k, v in env.items() if v is not None}
        # The packaged configuration and migrations are the defaults.
        r = subprocess.run(["billing-rpc", "migrate", "--status"], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"0*11.*applied|up to date|applied", r.stdout)

    def test_units_verify_and_their_exposure_is_at_most_2(self):
        units = [os.path.join(UNITS, u) for u in ["billing-fcgi@.socket", "billing-rpc.service", "fcgibilling-migrate.service"]]
        # A template is verified through an instance.
        with tempfile.TemporaryDirectory() as tmp:
            for name in ["billing-fcgi@.service", "billing-fcgi@.socket"]:
                shutil.copy(os.path.join(UNITS, name), os.path.join(tmp, name.replace("@.", "@1.")))
            r = subprocess.run(["systemd-analyze", "verify", "--man=no", *units, os.path.join(tmp, "billing-fcgi@1.service"),
                                os.path.join(tmp, "billing-fcgi@1.socket")], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotRegex(r.stdout + r.stderr, r"(?i)unknown|invalid|fail|not executable", r.stdout + r.stderr)
        for unit in ["billing-fcgi@.service", "billing-rpc.service", "fcgibilling-migrate.service"]:
            r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", os.path.join(UNITS, unit)],
                               capture_output=True, text=True, timeout=60)
            m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
            self.assertIsNotNone(m, r.stdout + r.stderr)
            self.assertLessEqual(float(m.group(1)), 2.0, f"{unit}: {m.group(0)}")


class WhoMayReachWhat(unittest.TestCase):
    """billing-rpc and one worker from the installed files, as their units run them."""

    @classmethod
    def setUpClass(cls):
        ensure_user(STRANGER)
        ensure_user(OPERATOR, groups=["fcgibilling-admin"])
        cls.tmp = tempfile.mkdtemp(prefix="fcgibilling-pkg-")
        os.chmod(cls.tmp, 0o755)
        # The configuration as an operator would write it, against the test stack's database.
        with open("/etc/fcgibilling/billing.json") as f:
            config = json.load(f)
        config["database"].update({"host": "127.0.0.1", "port": DB_PORT, "user": "billing"})
        config["database"].pop("socket", None)
        keys = os.path.join(cls.tmp, "token-keys.json")
        shutil.copy(os.path.join(VAR_DIR, "dev-token-keys.json"), keys)
        os.chmod(keys, 0o644)
        config["auth"]["keysFile"] = keys
        config["auth"].pop("keysUrl", None)   # this machine reaches no issuer
        config["apple"] = {"trustedRootsFiles": []}
        cls.config = os.path.join(cls.tmp, "billing.json")
        with open(cls.config, "w") as f:
            json.dump(config, f)
        os.chown(cls.config, 0, grp.getgrnam("fcgibilling").gr_gid)
        os.chmod(cls.config, 0o640)
        # The database password the test stack's runtime account has.
        with open(os.path.join(VAR_DIR, "secrets", "db-password")) as f:
            cls.db_password = f.read().strip()
        cls.procs = []
        cls.rpc = cls.start_unit("billing-rpc.service", "fcgibilling-rpc")
        assert wait_until(lambda: os.path.exists(ADMIN_SOCKET) or cls.rpc.poll() is not None, 20), "billing-rpc did not start"
        assert cls.rpc.poll() is None, cls.output("billing-rpc.service")
        cls.worker_socket = cls.start_worker("77")

    @classmethod
    def tearDownClass(cls):
        for proc in cls.procs:
            if isinstance(proc, int):
                try:
                    os.kill(proc, signal.SIGTERM)
                    os.waitpid(proc, 0)
                except ChildProcessError:
                    pass
            else:
                proc.terminate()
                proc.wait(30)
        for path in [cls.worker_socket]:
            if os.path.exists(path):
                os.unlink(path)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def credentials(cls, unit, user):
        """What LoadCredential= makes: a directory only the service's user can read, with a
        copy of each secret the unit names (here with the test stack's database password)."""
        directory = os.path.join(cls.tmp, "credentials", unit)
        os.makedirs(directory)
        uid = pwd.getpwnam(user).pw_uid
        for spec in unit_values(unit, "LoadCredential"):
            name, source = spec.split(":", 1)
            target = os.path.join(directory, name)
            if name == "db-password":
                with open(target, "w") as f:
                    f.write(cls.db_password + "\n")
            else:
                shutil.copy(source, target)
            os.chown(target, uid, -1)
            os.chmod(target, 0o400)
        os.chown(directory, uid, -1)
        os.chmod(directory, 0o500)
        os.chmod(os.path.dirname(directory), 0o755)
        return directory

    @classmethod
    def unit_command(cls, unit, user, instance=None):
        credentials = cls.credentials(unit, user)

        def expand(text):
            text = text.replace("${BILLING_CONFIG}", cls.config).replace("%d", credentials)
            return text.replace("%i", instance) if instance else text
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "BILLING_CONFIG": cls.config}
        for line in unit_values(unit, "Environment"):
            key, value = expand(line).split("=", 1)
            if key != "BILLING_CONFIG":
                env[key] = value
        [start] = unit_values(unit, "ExecStart")
        return shlex.split(expand(start)), env

    @classmethod
    def output(cls, unit):
        with open(os.path.join(cls.tmp, unit + ".out"), errors="replace") as f:
            return f.read()

    @classmethod
    def start_unit(cls, unit, user):
        [unit_user] = unit_values(unit, "User")
        assert unit_user == user, (unit, unit_user)
        argv, env = cls.unit_command(unit, user)
        out = open(os.path.join(cls.tmp, unit + ".out"), "wb")
        proc = subprocess.Popen(["runuser", "-u", user, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *argv],
                                stdout=out, stderr=subprocess.STDOUT)
        out.close()
        cls.procs.append(proc)
        return proc

    @classmethod
    def start_worker(cls, instance):
        """The socket as billing-fcgi@.socket makes it (ListenStream=, SocketUser=,
        SocketGroup=, SocketMode=), then the worker as billing-fcgi@.service runs it on it."""
        socket_unit = "billing-fcgi@.socket"
        [listen] = unit_values(socket_unit, "ListenStream")
        path = listen.replace("%i", instance)
        [owner] = unit_values(socket_unit, "SocketUser")
        [group] = unit_values(socket_unit, "SocketGroup")
        [mode] = unit_values(socket_unit, "SocketMode")
        if os.path.exists(path):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path)
        os.chown(path, pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid)
        os.chmod(path, int(mode, 8))
        sock.listen(64)
        unit = "billing-fcgi@.service"
        [user] = unit_values(unit, "User")
        argv, env = cls.unit_command(unit, user, instance)
        entry = pwd.getpwnam(user)
        out = os.open(os.path.join(cls.tmp, "worker.out"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(sock.fileno(), 3)
                os.set_inheritable(3, True)
                os.dup2(out, 1)
                os.dup2(out, 2)
                os.initgroups(user, entry.pw_gid)
                os.setgid(entry.pw_gid)
                os.setuid(entry.pw_uid)
                env.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        os.close(out)
        sock.close()
        cls.procs.append(pid)
        return path

    def fastcgi_health_as(self, user):
        env = {"REQUEST_METHOD": "GET", "REQUEST_URI": "/api/v1/health", "DOCUMENT_URI": "/api/v1/health",
               "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1", "QUERY_STRING": ""}
        return subprocess.run(["runuser", "-u", user, "--", "env", *[f"{k}={v}" for k, v in env.items()],
                               "cgi-fcgi", "-bind", "-connect", self.worker_socket],
                              capture_output=True, timeout=30, stdin=subprocess.DEVNULL)

    def secrets_and_admin(self):
        credentials = os.path.join(self.tmp, "credentials")
        actions = [["connect", ADMIN_SOCKET], ["read", "/etc/fcgibilling/billing.json"]]
        actions += [["read", f"/etc/fcgibilling/secrets/{name}"] for name in SECRETS]
        actions += [["read", os.path.join(credentials, unit, name)]
                    for unit in ["billing-rpc.service", "billing-fcgi@.service"]
                    for name in os.listdir(os.path.join(credentials, unit))]
        return actions

    def test_nginx_user_reaches_a_worker_socket(self):
        r = self.fastcgi_health_as("www-data")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith(b"Status: 200"), r.stdout[:200])

    def test_nginx_user_reaches_neither_the_admin_socket_nor_a_secret(self):
        results = probe_as("www-data", self.secrets_and_admin())
        for path, outcome in results.items():
            with self.subTest(path=path):
                self.assertEqual(outcome, "EACCES")

    def test_the_workers_user_reaches_neither_the_admin_socket_nor_a_secret(self):
        actions = [a for a in self.secrets_and_admin() if "billing-fcgi@" not in a[1] and "billing.json" not in a[1]]
        results = probe_as("fcgibilling", actions)
        for path, outcome in results.items():
            with self.subTest(path=path):
                self.assertEqual(outcome, "EACCES")

    def test_a_stranger_reaches_nothing(self):
        results = probe_as(STRANGER, self.secrets_and_admin() + [["connect", self.worker_socket]])
        for path, outcome in results.items():
            with self.subTest(path=path):
                self.assertEqual(outcome, "EACCES")
        r = self.fastcgi_health_as(STRANGER)
        self.assertFalse(r.stdout.startswith(b"Status: 200"))

    def test_an_operator_not_in_allowed_users_is_refused_by_the_peer_check_and_audited(self):
        uid = pwd.getpwnam(OPERATOR).pw_uid
        results = probe_as(OPERATOR, [["connect", ADMIN_SOCKET]])
        reply = results[ADMIN_SOCKET]
        self.assertTrue(reply.startswith("reply:"), reply)
        self.assertEqual(json.loads(reply[len("reply:"):].splitlines()[0])["error"]["code"], -32003)
        self.assertTrue(wait_until(lambda: sql(f"SELECT COUNT(*) FROM audit_log WHERE action = 'rpc.refused' AND peer_uid = {uid} "
                                               f"AND peer_user = '{OPERATOR}'") != [["0"]], 10))

    def test_the_admin_socket_belongs_to_billing_rpc_and_its_operators(self):
        st = os.stat(ADMIN_SOCKET)
        self.assertEqual((pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name, oct(stat.S_IMODE(st.st_mode))),
                         ("fcgibilling-rpc", "fcgibilling-admin", oct(0o660)))

    def test_billing_admin_finds_the_installed_socket_by_itself(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_")}
        r = subprocess.run(["billing-admin", "--json", "system.health"], cwd="/", env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["database"]["status"], "ok")

    def test_root_is_served(self):
        results = probe_as("root", [["connect", ADMIN_SOCKET]])
        reply = json.loads(results[ADMIN_SOCKET][len("reply:"):].splitlines()[0])
        self.assertEqual(reply["result"]["database"]["status"], "ok", reply)


if __name__ == "__main__":
    unittest.main()
