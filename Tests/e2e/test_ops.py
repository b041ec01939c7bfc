"""Operating the service: metrics scrape across workers, access log lines, SIGUSR1 log
reopening, per-worker state in system.health and workerctl, the production unit files'
ExecStart lines run by hand, and the production nginx site passing `nginx -t`."""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import uuid

from harness.billing import REPO, VAR_DIR, request, rpc, script, sql, wait_until, worker_pids

RUN = os.path.join(VAR_DIR, "run")
LOG = os.path.join(VAR_DIR, "log")
WORKERS = int(os.environ.get("BILLING_WORKERS", "2"))
BIN_DIR = os.path.dirname(os.environ.get("BILLING_RPC_BINARY", os.path.join(REPO, ".build/release/billing-rpc")))


def scrape():
    r = request("GET", "/metrics")
    assert r.status == 200, r
    return r, r.body.decode()


def sample(text, name, **labels):
    """The value of the sample NAME{labels...} (labels may be a subset), summed over matches."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        m = re.match(r'^([a-z_]+)(?:\{(.*)\})? (\S+)$', line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
            found = True
    return total if found else None


class Metrics(unittest.TestCase):
    def test_a_scrape_aggregates_every_worker(self):
        for _ in range(20):
            request("GET", "/api/v1/ping")
        request("GET", "/api/v1/no/such/route")
        time.sleep(1.3)  # every worker publishes each second
        r, text = scrape()
        self.assertTrue(r.headers["content-type"].startswith("text/plain; version=0.0.4"), r.headers)
        self.assertIn("x-request-id", r.headers)
        self.assertEqual(sample(text, "billing_metrics_workers"), WORKERS, text[:2000])
        pids = worker_pids()
        for i in range(1, WORKERS + 1):
            worker = f"worker-{i}"
            self.assertEqual(sample(text, "billing_worker_info", worker=worker, pid=str(pids[f"{worker}.pid"])), 1)
            self.assertIsNotNone(sample(text, "billing_worker_busy_threads", worker=worker))
            self.assertEqual(sample(text, "billing_worker_threads", worker=worker), 4)
            self.assertIsNotNone(sample(text, "billing_webhook_events_total", worker=worker, provider="revenuecat", outcome="applied"))
            self.assertIsNotNone(sample(text, "billing_usage_decisions_total", worker=worker, outcome="refused"))
            self.assertIsNotNone(sample(text, "billing_db_errors_total", worker=worker, kind="unavailable"))
            self.assertIsNotNone(sample(text, "billing_db_retries_total", worker=worker))
        # nginx spreads 20 pings over the workers; the scrape sees all of them.
        self.assertGreaterEqual(sample(text, "billing_http_requests_total", route="/api/v1/ping", status="200"), 20)
        self.assertGreaterEqual(sample(text, "billing_http_requests_total", route="unmatched", status="404"), 1)
        self.assertGreaterEqual(sample(text, "billing_http_request_duration_seconds_count", route="/api/v1/ping"), 20)
        self.assertGreaterEqual(sample(text, "billing_http_request_duration_seconds_bucket", route="/api/v1/ping", le="+Inf"), 20)
        # Each family is declared once.
        types = re.findall(r"^# TYPE (\S+) ", text, re.M)
        self.assertEqual(len(types), len(set(types)))

    def test_process_build_and_database_gauges(self):
        time.sleep(1.1)
        _, text = scrape()
        version = subprocess.run([os.path.join(BIN_DIR, "billing-fcgi"), "--version"], capture_output=True, text=True,
                                 check=True).stdout.split()[1]
        for i in range(1, WORKERS + 1):
            worker = f"worker-{i}"
            self.assertEqual(sample(text, "billing_build_info", worker=worker, version=version), 1)
            self.assertGreater(sample(text, "process_resident_memory_bytes", worker=worker), 1 << 20)
            self.assertGreater(sample(text, "process_open_fds", worker=worker), 3)
            self.assertGreater(sample(text, "process_start_time_seconds", worker=worker), 1_700_000_000)
            self.assertIsNotNone(sample(text, "process_cpu_seconds_total", worker=worker))
            # The stack's keys come from auth.keysFile: one key, its age since it was read.
            self.assertEqual(sample(text, "billing_auth_keys", worker=worker), 1)
            self.assertGreaterEqual(sample(text, "billing_auth_keys_age_seconds", worker=worker), 0)
        self.assertEqual(sample(text, "billing_database_gauges_up"), 1)
        open_rows = int(sql("SELECT COUNT(*) FROM billing_quarantine WHERE resolved_at IS NULL")[0][0])
        self.assertEqual(sample(text, "billing_quarantine_open"), open_rows)
        for provider in ["apple", "revenuecat"]:
            self.assertGreaterEqual(sample(text, "billing_reconcile_lag_seconds", provider=provider), 0)
        # One applied event, just received and a minute old: the lag is about that minute.
        user = str(uuid.uuid4())
        rpc("users.import", {"users": [{"id": user, "createdAt": "2024-01-01T00:00:00Z"}], "actor": "e2e-ops"})
        secret = open(os.path.join(VAR_DIR, "secrets", "revenuecat-webhook-secret")).read().strip()
        at = int(time.time() * 1000) - 60_000
        event = {"event": {"id": f"lag-{time.time_ns()}", "type": "INITIAL_PURCHASE", "app_user_id": user,
                           "original_app_user_id": user, "aliases": [user], "product_id": "com.example.pro.monthly",
                           "entitlement_ids": ["pro"], "period_type": "NORMAL", "purchased_at_ms": at,
                           "expiration_at_ms": at + 30 * 86_400_000, "environment": "PRODUCTION", "store": "APP_STORE",
                           "event_timestamp_ms": at, "transaction_id": f"lag-{time.time_ns()}",
                           "original_transaction_id": f"lag-{time.time_ns()}"}}
        r = request("POST", "/api/v1/billing/webhooks/revenuecat", event, {"Authorization": secret})
        self.assertEqual(r.status, 200, r)
        _, text = scrape()
        self.assertGreaterEqual(sample(text, "billing_ingestion_lag_seconds"), 59)
        self.assertLess(sample(text, "billing_ingestion_lag_seconds"), 600)

    def test_webhook_outcomes_are_counted(self):
        _, before = scrape()
        secret = open(os.path.join(VAR_DIR, "secrets", "revenuecat-webhook-secret")).read().strip()
        event = {"event": {"id": f"metrics-{time.time_ns()}", "type": "TEST", "event_timestamp_ms": 1_700_000_000_000}}
        self.assertEqual(request("POST", "/api/v1/billing/webhooks/revenuecat", event, {"Authorization": secret}).status, 200)
        self.assertEqual(request("POST", "/api/v1/billing/webhooks/revenuecat", event, {"Authorization": secret}).status, 200)
        self.assertEqual(request("POST", "/api/v1/billing/webhooks/revenuecat", event, {"Authorization": "wrong"}).status, 401)
        time.sleep(1.3)
        _, after = scrape()

        def delta(outcome):
            return (sample(after, "billing_webhook_events_total", provider="revenuecat", outcome=outcome) or 0) - \
                   (sample(before, "billing_webhook_events_total", provider="revenuecat", outcome=outcome) or 0)
        self.assertEqual(delta("ignored"), 1)
        self.assertEqual(delta("duplicate"), 1)
        self.assertEqual(delta("rejected"), 1)

    def test_metrics_are_not_under_the_api_and_nginx_restricts_them(self):
        self.assertEqual(request("GET", "/api/v1/metrics").status, 404)
        conf = open(os.path.join(VAR_DIR, "nginx", "nginx.conf")).read()
        block = conf[conf.index("location = /metrics"):]
        block = block[:block.index("}")]
        self.assertIn("allow 127.0.0.1;", block)
        self.assertIn("deny all;", block)

    def test_a_stopped_worker_leaves_no_snapshot(self):
        files = sorted(f for f in os.listdir(os.path.join(RUN, "metrics")) if f.endswith(".json"))
        self.assertEqual(files, [f"worker-{i}.json" for i in range(1, WORKERS + 1)])


class Logs(unittest.TestCase):
    def access_line(self, request_id):
        for name in sorted(os.listdir(LOG)):
            if re.match(r"worker-\d+\.log", name):
                with open(os.path.join(LOG, name)) as f:
                    for line in f:
                        entry = json.loads(line)
                        if entry.get("request.id") == request_id and entry.get("msg") == "request":
                            return entry
        return None

    def test_one_json_line_per_request_with_id_route_status_latency_outcome(self):
        r = request("POST", "/api/v1/billing/usage", {"meter": "x"}, {"Authorization": "Bearer nope"})
        self.assertEqual(r.status, 401)
        rid = r.headers["x-request-id"]
        self.assertTrue(wait_until(lambda: self.access_line(rid) is not None, 5), rid)
        entry = self.access_line(rid)
        self.assertEqual(entry["http.route"], "/api/v1/billing/usage")
        self.assertEqual(entry["http.method"], "POST")
        self.assertEqual(entry["http.status"], 401)
        self.assertEqual(entry["outcome"], r.json()["error"]["code"])
        self.assertIsInstance(entry["duration.us"], int)
        self.assertEqual(entry["level"], "info")
        # nginx logged the same id.
        self.assertTrue(wait_until(lambda: f"rid={rid}" in open(os.path.join(LOG, "nginx-access.log")).read(), 5))

    def test_sigusr1_reopens_the_log_file(self):
        pid = worker_pids()["worker-1.pid"]
        path = os.path.join(LOG, "worker-1.log")
        rotated = path + ".rotated"
        os.rename(path, rotated)
        try:
            os.kill(pid, signal.SIGUSR1)
            # nginx spreads requests over the workers: worker 1 gets some and writes the new file.
            def reopened():
                request("GET", "/api/v1/ping")
                return os.path.exists(path) and os.path.getsize(path) > 0
            self.assertTrue(wait_until(reopened, 10), "worker 1 did not reopen its log")
            with open(path) as f:
                lines = [json.loads(line) for line in f]
            self.assertTrue(any(entry.get("msg") == "request" for entry in lines), lines[:3])
            with open(rotated) as f:
                self.assertIn('"reopening logs"', f.read())
            self.assertEqual(worker_pids()["worker-1.pid"], pid, "SIGUSR1 must not restart the worker")
        finally:
            with open(rotated) as old, open(path + ".merged", "w") as merged:
                merged.write(old.read())
                if os.path.exists(path):
                    merged.write(open(path).read())
            os.replace(path + ".merged", path)
            os.unlink(rotated)
            os.kill(pid, signal.SIGUSR1)


class WorkerState(unittest.TestCase):
    def test_system_health_lists_every_worker(self):
        time.sleep(1.1)
        health = rpc("system.health")["result"]
        pids = worker_pids()
        workers = {w["worker"]: w for w in health["workers"]}
        self.assertEqual(sorted(workers), [f"worker-{i}" for i in range(1, WORKERS + 1)])
        for name, w in workers.items():
            self.assertEqual(w["pid"], pids[f"{name}.pid"])
            self.assertGreaterEqual(w["uptimeSeconds"], 0)
            self.assertEqual(w["threads"], 4)
            self.assertIn(w["busy"], range(0, 5))
            self.assertGreaterEqual(w["requestsServed"], 0)

    def test_workerctl_status_shows_requests_and_busy(self):
        out = script("workerctl", "status").stdout.splitlines()
        self.assertEqual(out[0].split()[:6], ["WORKER", "PID", "STATE", "UPTIME", "REQUESTS", "BUSY"])
        pids = worker_pids()
        for line in out[1:]:
            fields = line.split()
            self.assertEqual(fields[2], "up", line)
            self.assertEqual(int(fields[1]), pids[f"worker-{fields[0]}.pid"])
            self.assertTrue(fields[4].isdigit(), line)
            self.assertRegex(fields[5], r"^\d+/4$")


def exec_lines(unit, key):
    lines = []
    with open(os.path.join(REPO, "deploy", "systemd", unit)) as f:
        for line in f:
            if line.startswith(key + "="):
                lines.append(line.split("=", 1)[1].strip())
    return lines


LOCATION = r"^[ \t]*location[ \t]+([^{\n]+?)[ \t]*\{([^}]*)\}"


def api_locations(text):
    """{matcher: [its limit_req lines]} of an nginx file's /api/v1 locations."""
    return {matcher: re.findall(r"limit_req\s+zone=[^;]*;", body)
            for matcher, body in re.findall(LOCATION, text, re.M) if "/api/v1" in matcher}


def geo_entries(text):
    """The entries of the `geo $billing_limited` block, without comments, blanks squeezed."""
    block = re.search(r"geo \$billing_limited \{([^}]*)\}", text).group(1)
    lines = (re.sub(r"#.*", "", line).strip().rstrip(";") for line in block.splitlines())
    return [" ".join(line.split()) for line in lines if line]


class ProductionFiles(unittest.TestCase):
    """The unit files' commands, run by hand against the test stack's configuration with the
    production paths mapped to a temporary directory (no systemd on the test machines)."""

    def command(self, line, tmp, instance="9"):
        mapping = {
            "%i": instance,
            "${BILLING_CONFIG}": os.path.join(VAR_DIR, "billing.json"),
            "/usr/sbin": BIN_DIR,
            "/usr/share/fcgibilling/sql": os.path.join(REPO, "sql"),
            "/run/fcgibilling-rpc": os.path.join(tmp, "run"),
            "/run/fcgibilling": os.path.join(tmp, "run"),
            "/var/log/fcgibilling-rpc": os.path.join(tmp, "log"),
            "/var/log/fcgibilling": os.path.join(tmp, "log"),
            # LoadCredential='s directory: the dev stack's secrets carry the same names.
            "%d": os.path.join(VAR_DIR, "secrets"),
        }
        for key, value in mapping.items():
            line = line.replace(key, value)
        self.assertNotIn("$", line)
        return shlex.split(line)

    def test_worker_unit_execstart_serves_and_stops_cleanly(self):
        [start] = exec_lines("billing-fcgi@.service", "ExecStart")
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "run")); os.makedirs(os.path.join(tmp, "log"))
            proc = subprocess.Popen(self.command(start, tmp), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            try:
                sock = os.path.join(tmp, "run", "worker-9.sock")
                self.assertTrue(wait_until(lambda: os.path.exists(sock), 10), proc.stdout.read1() if proc.poll() is not None else "")
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(sock)
                snapshot = os.path.join(tmp, "run", "metrics", "worker-9.json")
                self.assertTrue(wait_until(lambda: os.path.exists(snapshot), 5))
                self.assertEqual(json.load(open(snapshot))["pid"], proc.pid)
                self.assertTrue(os.path.getsize(os.path.join(tmp, "log", "worker-9.log")) > 0)
            finally:
                proc.send_signal(signal.SIGTERM)
                self.assertEqual(proc.wait(30), 0)
            self.assertFalse(os.path.exists(sock))
            self.assertFalse(os.path.exists(snapshot))

    def test_rpc_unit_migrates_then_serves(self):
        """billing-rpc.service requires the migrate oneshot, which holds the migrator's
        credential; the daemon's own unit names only the runtime account's (SPEC §19)."""
        self.assertEqual(exec_lines("billing-rpc.service", "ExecStartPre"), [])
        self.assertEqual(exec_lines("billing-rpc.service", "Requires"), ["fcgibilling-migrate.service"])
        self.assertIn("fcgibilling-migrate.service", exec_lines("billing-rpc.service", "After")[0])
        self.assertEqual(exec_lines("billing-rpc.service", "LoadCredential"), ["db-password:/etc/fcgibilling/secrets/db-password"])
        with open(os.path.join(REPO, "deploy", "systemd", "billing-rpc.service")) as f:
            settings = "".join(line for line in f if not line.startswith("#"))
        self.assertNotIn("migrator", settings)
        self.assertEqual(exec_lines("fcgibilling-migrate.service", "LoadCredential"),
                         ["db-migrator-password:/etc/fcgibilling/secrets/db-migrator-password"])
        [pre] = exec_lines("fcgibilling-migrate.service", "ExecStart")
        [start] = exec_lines("billing-rpc.service", "ExecStart")
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "run")); os.makedirs(os.path.join(tmp, "log"))
            env = dict(os.environ)
            for assignment in exec_lines("fcgibilling-migrate.service", "Environment"):
                name, value = assignment.split("=", 1)
                env[name] = value.replace("%d", os.path.join(VAR_DIR, "secrets"))
            migrated = subprocess.run(self.command(pre, tmp), capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(migrated.returncode, 0, migrated.stderr)
            self.assertIn("up to date", migrated.stdout)
            sock = os.path.join(tmp, "run", "billing-rpc.sock")
            env = dict(os.environ, BILLING__admin__socket=sock)
            proc = subprocess.Popen(self.command(start, tmp), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            try:
                self.assertTrue(wait_until(lambda: os.path.exists(sock), 10))
                from harness.billing import rpc_raw
                reply = json.loads(rpc_raw(b'{"jsonrpc":"2.0","method":"system.health","id":1}', sock_path=sock))
                self.assertEqual(reply["result"]["database"]["status"], "ok")
                self.assertEqual(len(reply["result"]["workers"]), WORKERS)
            finally:
                proc.send_signal(signal.SIGTERM)
                self.assertEqual(proc.wait(30), 0)

    def test_units_are_hardened(self):
        for unit in ["billing-fcgi@.service", "billing-rpc.service"]:
            text = open(os.path.join(REPO, "deploy", "systemd", unit)).read()
            for option in ["NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "ProtectHome=yes",
                           "CapabilityBoundingSet=", "User=fcgibilling", "ExecReload=/bin/kill -USR1 $MAINPID",
                           "Type=notify", "NotifyAccess=main", "LoadCredential=db-password:"]:
                self.assertIn(option, text, unit)

    def test_production_nginx_site_passes_nginx_t(self):
        site = open(os.path.join(REPO, "deploy", "nginx", "fcgibilling.conf")).read()
        template = open(os.path.join(REPO, "nginx", "nginx.conf.template")).read()
        # The same error pages and retry rules as the dev/test configuration.
        for rule in ["fastcgi_next_upstream error timeout non_idempotent;", "max_fails=0", "location = /metrics",
                     "allow 127.0.0.1;"]:
            self.assertIn(rule, site)
            self.assertIn(rule, template)
        # nginx's own errors: one file both include (SPEC §19), every status nginx answers itself.
        self.assertIn("include /etc/nginx/fcgibilling_errors.conf;", site)
        self.assertIn("include @REPO_DIR@/nginx/fcgibilling_errors.conf;", template)
        errors = open(os.path.join(REPO, "nginx", "fcgibilling_errors.conf")).read()
        for status in [400, 403, 404, 405, 413, 414, 429, 494, 500, 501, 502, 503, 504]:
            self.assertRegex(errors, r"(?m)^error_page %d (=\d+ )?/_errors/\w+;" % status)
        for matcher, body in re.findall(LOCATION, errors, re.M):
            self.assertIn("internal;", body, matcher)
            self.assertIn("default_type application/json;", body, matcher)
            self.assertRegex(body, r"return \d{3} '\{\"error\":\{\"code\":\"\w+\",\"message\":", matcher)
        # Connections per client address (SPEC §19): the same zones and limits in both files.
        for rule in ["limit_conn_zone $billing_limit_key zone=billing_conn_api:10m;",
                     "limit_conn_zone $billing_limit_key zone=billing_conn_webhooks:2m;", "limit_conn_status 429;"]:
            self.assertIn(rule, site)
            self.assertIn(rule, template)
        self.assertEqual(re.findall(r"limit_conn (\w+ \d+);", site), re.findall(r"limit_conn (\w+ \d+);", template))
        # The same rate limits (docs/operations.md, "Rate limits"): zones, rates, the 429 page.
        for rule in ["limit_req_zone $billing_limit_key zone=billing_api:10m rate=20r/s;",
                     "limit_req_zone $billing_limit_key zone=billing_webhooks:2m rate=200r/s;",
                     "limit_req_zone $billing_limit_key zone=billing_health:2m rate=20r/s;",
                     "default  $binary_remote_addr;", "limit_req_status 429;"]:
            self.assertIn(rule, site)
            self.assertIn(rule, template)
        # Every API location is limited, by the same zone and burst in both files, and sets no
        # FastCGI setting of its own: all inherit the server's (one set of retry rules).
        self.assertEqual(api_locations(site), api_locations(template))
        self.assertEqual(set(api_locations(site)),
                         {"/api/v1/", "/api/v1/billing/webhooks/", "= /api/v1/health", "= /api/v1/ping",
                          "= /api/v1/billing/access/changes"})
        # Live changes (SPEC §16): the same nchan locations in both, the publisher on a Unix socket only.
        for text, prefix in ((site, "/etc/nginx/"), (template, "@REPO_DIR@/nginx/")):
            self.assertIn(f"include {prefix}fcgibilling_live.conf;", text)
            self.assertIn(f"include {prefix}fcgibilling_live_publisher.conf;", text)
            self.assertRegex(text, r"server \{\s*listen unix:\S+/nchan.sock;")
        self.assertIn("load_module /usr/lib/nginx/modules/ngx_nchan_module.so;", template)
        live = open(os.path.join(REPO, "nginx", "fcgibilling_live.conf")).read()
        self.assertEqual(len(re.findall(r"(?m)^    internal;$", live)), len(re.findall(r"(?m)^location ", live)),
                         "every subscriber location is internal")
        for text in (site, template):
            for matcher, body in re.findall(LOCATION, text, re.M):
                if "/api/v1" in matcher:
                    settings = [line.strip() for line in body.split(";") if "fastcgi_" in line]
                    self.assertEqual(settings, ["fastcgi_pass billing_workers"], matcher)
        # add_header in the 429 and 503 pages replaces the server's: HSTS is repeated there.
        for name in ["= /_errors/rate_limited", "= /_errors/unavailable"]:
            [page] = [body for matcher, body in re.findall(LOCATION, errors, re.M) if matcher == name]
            self.assertIn("add_header Retry-After 1 always;", page)
            self.assertIn('add_header Strict-Transport-Security "max-age=63072000" always;', page)
        # Only the dev/test file exempts an address, and only 127.0.0.1 (the load tools').
        self.assertEqual(geo_entries(site), ["default 1"])
        self.assertEqual(geo_entries(template), ["default 1", "127.0.0.1/32 0"])
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=t",
                            "-keyout", f"{tmp}/k.pem", "-out", f"{tmp}/c.pem"], check=True, capture_output=True)
            os.makedirs(f"{tmp}/logs")
            site = (site.replace("/etc/ssl/fcgibilling/fullchain.pem", f"{tmp}/c.pem")
                    .replace("/etc/ssl/fcgibilling/privkey.pem", f"{tmp}/k.pem")
                    .replace("/etc/nginx/fcgibilling_fastcgi_params.conf", os.path.join(REPO, "nginx", "fastcgi_params.conf"))
                    .replace("/etc/nginx/fcgibilling_errors.conf", os.path.join(REPO, "nginx", "fcgibilling_errors.conf"))
                    .replace("/etc/nginx/fcgibilling_live.conf", os.path.join(REPO, "nginx", "fcgibilling_live.conf"))
                    .replace("/etc/nginx/fcgibilling_live_publisher.conf",
                             os.path.join(REPO, "nginx", "fcgibilling_live_publisher.conf"))
                    .replace("/run/fcgibilling-live/", f"{tmp}/")
                    .replace("/var/log/nginx/", f"{tmp}/logs/"))
            open(f"{tmp}/site.conf", "w").write(site)
            open(f"{tmp}/nginx.conf", "w").write(
                "load_module /usr/lib/nginx/modules/ngx_nchan_module.so;\n"
                f"pid {tmp}/nginx.pid;\nerror_log {tmp}/logs/error.log;\nevents {{}}\nhttp {{\n"
                f"client_body_temp_path {tmp}/b; fastcgi_temp_path {tmp}/f; proxy_temp_path {tmp}/p;\n"
                f"uwsgi_temp_path {tmp}/u; scgi_temp_path {tmp}/s;\ninclude {tmp}/site.conf;\n}}\n")
            checked = subprocess.run(["nginx", "-t", "-p", tmp, "-c", f"{tmp}/nginx.conf", "-e", f"{tmp}/logs/error.log"],
                                     capture_output=True, text=True)
            self.assertEqual(checked.returncode, 0, checked.stderr)


if __name__ == "__main__":
    unittest.main()
