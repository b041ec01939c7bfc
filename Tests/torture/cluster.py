#!/usr/bin/env python3
"""FCGIBilling on a three-node MariaDB Galera cluster, proven under the storm (SPEC §12,
docs/scaling.md). See --help.

On this one machine, under --var-dir (default var/cluster):
  - three `mariadbd` with wsrep on (Debian's galera-4), their own ports, data dirs and
    server_id, node 1 bootstrapping the cluster, nodes 2 and 3 joining it by SST
    (mariabackup); scripts/lib/stack.sh galera_node_start;
  - two "worker hosts", each its own var dir, workers and nginx on its own port: host A
    writes through node 1, host B through node 2;
  - the migrations applied once (through node 2, replicated to all as TOI DDL); then the
    schema checks Galera needs: every table has a primary key, the nodes have distinct
    server_ids (UUID_SHORT), the same tables and triggers everywhere.
Phases:
  storm      scripts/torture's storm (duplicates, reordering, both providers, transfer races,
             snapshots compared with a serial replay into shadow users), its senders spread
             over both hosts; node 2 is killed -9 mid-storm and started again (it must catch
             up by IST, not a full SST). Then: every acknowledged event is in the inbox
             exactly once, every snapshot equals the serial replay.
  partition  nodes 1 and 3 frozen (SIGSTOP): node 2 is a minority and refuses statements
             (wsrep_ready OFF, error 1047): host B answers 503 to every delivery, nothing
             is acknowledged; the nodes thawed, the cluster re-forms and the same deliveries
             land exactly once.
  throughput the same number of fresh deliveries by the same senders through host A
             alone, then through both hosts.
Prints one line
  cluster: N deliveries, N acknowledged, 0 lost, 0 duplicated, snapshots right N/N, conflicts retried N
(deliveries: webhook deliveries planned, duplicates included; acknowledged: distinct events
answered 2xx; lost: acknowledged and not in the inbox; duplicated: inbox rows beyond one per
event id; snapshots right: users whose snapshot equals the serial replay; conflicts retried:
the workers' billing_db_retries_total over both hosts), then the throughput line. Exits 0
only when every check held. An acknowledged event missing from the inbox is explained on
stderr (LOST ...): each 2xx answer it got (host, when sent and answered, body with the inbox
id) and the workers' log lines naming that inbox id. Stops everything it started (also on
Ctrl-C), unless --keep. Each run starts from empty data dirs and logs, unless --keep-data
(the last run's stay for reading until the next). --no-kill, --storms, --users, --senders
and --deliveries are for debugging (more conflicts, a storm without the kill, several
storms on one cluster).
"""
import argparse
import collections
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import torture as T  # Tests/torture/torture.py, beside this file

ROOT = T.ROOT

PROFILES = {
    # storm deliveries (duplicates included), users, senders, duplicate share; fresh
    # deliveries per throughput run; deliveries tried during the partition
    "short": dict(deliveries=1500, users=40, senders=8, duplicates=0.30, throughput=400, partition=20),
    "long": dict(deliveries=8000, users=200, senders=16, duplicates=0.30, throughput=2000, partition=100),
}
NODES = 3


def log(message):
    print(f"[cluster-test {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Host:
    """One worker host: its own var dir, workers and nginx, writing through one node."""

    def __init__(self, name, var_dir, http_port, node):
        self.name, self.var_dir, self.http_port, self.node = name, var_dir, http_port, node


class Cluster:
    """The three nodes and the two hosts, driven through scripts/lib/stack.sh functions;
    also the facade scripts/torture's Torture expects of its Stack."""

    def __init__(self, args):
        self.args = args
        self.var_dir = os.path.abspath(args.var_dir)
        self.run_dir = os.path.join(self.var_dir, "run")
        self.env = dict(os.environ, BILLING_VAR_DIR=self.var_dir, GALERA_NODES=str(NODES),
                        GALERA_DB_PORT=str(args.db_port), GALERA_GCOMM_PORT=str(args.gcomm_port),
                        BILLING_WORKERS=str(args.workers), BILLING_THREADS=str(args.threads))
        self.env.pop("BILLING_CONFIG", None)
        self.env.pop("BILLING_CONFIG_OVERLAY", None)
        self.hosts = [Host("A", os.path.join(self.var_dir, "host-a"), args.http_port, 1),
                      Host("B", os.path.join(self.var_dir, "host-b"), args.http_port + 1, 2)]
        self.workers = args.workers * len(self.hosts)  # the Torture's supervisor numbers them 1..N over the hosts
        self.http_port = args.http_port
        self.lock_wait = 2
        self.frozen = set()

    # -------------------------------------------------------------- shell

    def host_env(self, host):
        env = dict(self.env, BILLING_VAR_DIR=host.var_dir, BILLING_HTTP_PORT=str(host.http_port))
        env["BILLING_CONFIG_OVERLAY"] = os.path.join(host.var_dir, "cluster-overlay.json")
        return env

    def sh(self, command, host=None, check=True, timeout=300):
        script = f'source "{ROOT}/scripts/lib/stack.sh"; stack_defaults; bin_dir; {command}'
        r = subprocess.run(["bash", "-c", script], env=self.host_env(host) if host else self.env, timeout=timeout,
                           capture_output=True, text=True)
        if check and r.returncode != 0:
            sys.stderr.write(r.stderr[-3000:])
            raise SystemExit(f"cluster-test: `{command}` failed")
        return r

    def daemon_setup(self):
        """(environment, configuration file, binary directory) of a billing-rpc of the run's own:
        host A's (the torture storm's RevenueCat puller)."""
        host = self.hosts[0]
        return (self.host_env(host), os.path.join(host.var_dir, "billing.json"),
                self.sh("echo $BIN_DIR", host=host).stdout.strip())

    def node_socket(self, n):
        return os.path.join(self.run_dir, f"node-{n}.sock")

    def node_pid(self, n):
        try:
            with open(os.path.join(self.run_dir, f"node-{n}.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def node_sql(self, n, statement, database="billing", timeout=60):
        r = subprocess.run(["mariadb", "--no-defaults", "--protocol=socket", "-S", self.node_socket(n), "-uroot", "-N", "-B",
                            database, "-e", statement], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"mariadb (node {n}): {r.stderr.strip()}")
        return [line.split("\t") for line in r.stdout.splitlines()]

    def status(self, n, name):
        try:
            rows = self.node_sql(n, f"SHOW GLOBAL STATUS LIKE '{name}'", database="mysql", timeout=10)
            return rows[0][1] if rows else None
        except (RuntimeError, subprocess.TimeoutExpired):
            return None

    # -------------------------------------------------------------- Torture's Stack facade

    def sql(self, statement, timeout=60):
        return self.node_sql(1, statement, timeout=timeout)

    def split(self, i):
        return self.hosts[(i - 1) // self.args.workers], (i - 1) % self.args.workers + 1

    def worker_pid(self, i):
        host, k = self.split(i)
        try:
            with open(os.path.join(host.var_dir, "run", f"worker-{k}.pid")) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return pid if b"billing-fcgi" in f.read() else None
        except (OSError, ValueError):
            return None

    def worker_alive(self, i):
        pid = self.worker_pid(i)
        try:
            with open(f"/proc/{pid}/stat") as f:
                return pid is not None and f.read().split(")")[-1].split()[0] != "Z"
        except (OSError, TypeError):
            return False

    def worker_start(self, i):
        host, k = self.split(i)
        return self.sh(f"worker_start {k}", host=host, check=False).returncode == 0

    # -------------------------------------------------------------- up and down

    def up(self):
        os.makedirs(self.var_dir, exist_ok=True)
        self.down()
        if not self.args.keep_data:
            # The nodes' logs too: a run reads its own (IST, errors), and they grew without bound.
            for sub in ("galera", "host-a", "host-b", "log"):
                shutil.rmtree(os.path.join(self.var_dir, sub), ignore_errors=True)
        self.sh("STACK_PACKAGES=(galera-4 mariadb-backup socat); ensure_packages")
        if not self.args.no_build:
            self.sh("build_release", timeout=1800)
        started = time.monotonic()
        self.sh("galera_node_start 1 --wsrep-new-cluster")
        # Accounts and time zones on node 1 alone: the joiners receive them by SST.
        self.sh('DB_SOCKET=$(galera_socket 1); db_bootstrap; dev_secrets')
        for n in range(2, NODES + 1):
            self.sh(f"galera_node_start {n}")
        log(f"cluster of {self.status(1, 'wsrep_cluster_size')} nodes up in {time.monotonic() - started:.1f}s")
        # The App Store test CA and the storm's catalog, shared by both hosts.
        self.ca_dir = os.path.join(self.var_dir, "testca")
        T.appstore().generate(self.ca_dir)
        with open(os.path.join(self.ca_dir, "overlay.json")) as f:
            base_overlay = json.load(f)
        base_overlay["products"] = dict(base_overlay.get("products", {}), **T.CATALOG)
        for host in self.hosts:
            os.makedirs(host.var_dir, exist_ok=True)
            shutil.rmtree(os.path.join(host.var_dir, "secrets"), ignore_errors=True)
            shutil.copytree(os.path.join(self.var_dir, "secrets"), os.path.join(host.var_dir, "secrets"))
            shutil.copy(os.path.join(self.var_dir, "dev-token-keys.json"), os.path.join(host.var_dir, "dev-token-keys.json"))
            overlay = dict(base_overlay, database={"socket": self.node_socket(host.node), "lockWaitTimeoutSeconds": self.lock_wait})
            with open(os.path.join(host.var_dir, "cluster-overlay.json"), "w") as f:
                json.dump(overlay, f)
            self.sh("config_generate", host=host)
        # Once, through node 2: TOI replicates the DDL to every node.
        self.sh("migrate", host=self.hosts[1])
        for host in self.hosts:
            self.sh("workers_start && nginx_start", host=host)
        with open(os.path.join(self.var_dir, "secrets", "revenuecat-webhook-secret")) as f:
            self.webhook_secret = f.read().strip()
        self.tokens = T.harness("tokens").DevSigner(os.path.join(self.var_dir, "secrets", "dev-token-key.pem"))

    def thaw(self):
        for n in list(self.frozen):
            pid = self.node_pid(n)
            if pid:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            self.frozen.discard(n)

    def down(self):
        self.thaw()
        for host in self.hosts:
            if os.path.isdir(host.var_dir):
                self.sh("nginx_stop; workers_stop", host=host, check=False)
        if os.path.isdir(self.var_dir):
            self.sh("galera_stop", check=False)

    def retries(self):
        """billing_db_retries_total summed over both hosts' workers (their /metrics)."""
        total = 0
        for host in self.hosts:
            c = T.Client(host.http_port, 10)
            status, body, _ = c.request("GET", "/metrics")
            c.close()
            if status == 200:
                for line in body.decode().splitlines():
                    m = re.match(r"billing_db_retries_total(?:\{[^}]*\})? ([0-9.e+]+)$", line)
                    if m:
                        total += int(float(m.group(1)))
        return total


class ClusterTorture(T.Torture):
    """scripts/torture's Torture, its clients spread over the hosts."""

    def __init__(self, args, cluster):
        super().__init__(args, cluster)
        self.profile = dict(PROFILES[args.profile])
        for name in ("deliveries", "users", "senders"):
            if getattr(args, name, None):
                self.profile[name] = getattr(args, name)
        self.next_host = 0
        self.host_lock = threading.Lock()
        # Every 2xx answer per (provider, event id): host, wall-clock times, body (for
        # explain_losses).
        self.acks = collections.defaultdict(list)
        self.acks_lock = threading.Lock()

    def deliver(self, client, stats, spec, deadline, retry_pause=0.05):
        original = client.request

        def request(method, path, body=None, headers=None):
            sent = time.time()
            status, data, seconds = original(method, path, body=body, headers=headers)
            if 200 <= status < 300:
                host = "A" if client.port == self.stack.hosts[0].http_port else "B"
                with self.acks_lock:
                    self.acks[T.key(spec)].append((host, sent, time.time(), status, data[:200].decode(errors="replace"), spec.get("kind")))
            return status, data, seconds

        client.request = request
        try:
            return super().deliver(client, stats, spec, deadline, retry_pause)
        finally:
            del client.request

    def explain_losses(self):
        """For every acknowledged event missing from the inbox: its 2xx answers (host, sent,
        answered, body) and the workers' log lines of the inbox id they named."""
        lost = []
        for name, provider in self.providers.items():
            rows = self.stack.sql(f"SELECT provider_event_id FROM billing_events WHERE provider = '{provider.inbox_provider}' "
                                  f"AND provider_event_id LIKE '{self.run}-%'")
            present = {r[0] for r in rows}
            lost += [(name, i) for p, i in self.all_acked if p == name and i not in present]
        for k in sorted(lost):
            log(f"LOST {k}")
            for host, sent, answered, status, body, kind in self.acks.get(k, []):
                log(f"  {kind} host {host} sent {time.strftime('%H:%M:%S', time.localtime(sent))}.{int(sent * 1000) % 1000:03d} "
                    f"answered {time.strftime('%H:%M:%S', time.localtime(answered))}.{int(answered * 1000) % 1000:03d} {status} {body}")
                m = re.search(r'"eventId":\s*(\d+)', body)
                if m:
                    for host_ in self.stack.hosts:
                        out = subprocess.run(["grep", "-rh", f"\"event.id\":{m.group(1)}[,}}]", os.path.join(host_.var_dir, "log")],
                                             capture_output=True, text=True).stdout
                        for line in out.splitlines()[:5]:
                            log(f"    host {host_.name} log: {line[:400]}")
        self.report["lost_explained"] = [list(k) for k in lost]

    def client(self, host=None):
        if host is None:
            with self.host_lock:
                host = self.stack.hosts[self.next_host % len(self.stack.hosts)]
                self.next_host += 1
        return T.Client(host.http_port, self.args.client_timeout)

    def scan_logs(self):
        counts = {"fatal": 0}
        for host in self.stack.hosts:
            log_dir = os.path.join(host.var_dir, "log")
            for name in os.listdir(log_dir):
                if name.startswith("worker-") and name.endswith(".out"):
                    with open(os.path.join(log_dir, name), errors="replace") as f:
                        counts["fatal"] += len(re.findall(r"Fatal error|Segmentation fault|Illegal instruction", f.read()))
        return counts

    # -------------------------------------------------------------- schema

    def phase_schema(self):
        c = self.stack
        no_pk = c.node_sql(1, """
            SELECT t.table_name FROM information_schema.tables t
            LEFT JOIN information_schema.table_constraints k
              ON k.table_schema = t.table_schema AND k.table_name = t.table_name AND k.constraint_type = 'PRIMARY KEY'
            WHERE t.table_schema = 'billing' AND t.table_type = 'BASE TABLE' AND k.constraint_name IS NULL""")
        self.check(not no_pk, f"schema: every table has a primary key (without: {[r[0] for r in no_pk]})")
        ids = [c.node_sql(n, "SELECT @@server_id")[0][0] for n in range(1, NODES + 1)]
        self.check(len({int(i) % 256 for i in ids}) == NODES, f"schema: distinct server_id per node, also modulo 256 for UUID_SHORT ({ids})")
        shapes = []
        for n in range(1, NODES + 1):
            shapes.append(tuple(c.node_sql(n, """
                SELECT (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'billing'),
                       (SELECT COUNT(*) FROM information_schema.triggers WHERE trigger_schema = 'billing'),
                       (SELECT COUNT(*) FROM schema_migrations)""")[0]))
        self.check(len(set(shapes)) == 1, f"schema: the same tables, triggers and migrations on every node (tables, triggers, migrations: {shapes})")
        lease = c.node_sql(3, "SELECT COUNT(*), COUNT(holder) FROM schema_migrations_lock")[0]
        self.check(lease == ["1", "0"], f"schema: the migrator's cluster lease row exists and was released ({lease})")
        increments = [c.node_sql(n, "SELECT @@auto_increment_increment, @@auto_increment_offset")[0] for n in range(1, NODES + 1)]
        self.report["schema"] = {"server_ids": ids, "tables_triggers_migrations": shapes[0], "auto_increment": increments}
        log(f"schema: auto_increment (increment, offset) per node {increments} (wsrep_auto_increment_control)")

    # -------------------------------------------------------------- storm with a node killed

    def node_killer(self, stats, total, done):
        """Kills node 2 (host B's) -9 once a quarter of the deliveries were answered, starts
        it again two seconds later and waits until it is Synced."""
        c = self.stack
        if self.args.no_kill:
            self.report["node_kill"] = {"killed": False, "skipped": True}
            return
        while not done.is_set() and stats.sent < total // 4:
            time.sleep(0.05)
        if done.is_set():
            self.report["node_kill"] = {"killed": False}
            return
        ist_before = self.ist_count(2)
        pid = c.node_pid(2)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        at_sent = stats.sent
        log(f"storm: node 2 (pid {pid}) killed -9 after {at_sent} requests")
        time.sleep(2)
        r = c.sh("galera_node_start 2", check=False)
        back = time.monotonic() - killed_at
        log(f"storm: node 2 Synced again {back:.1f}s after the kill (requests so far {stats.sent})")
        self.report["node_kill"] = {"killed": True, "at_request": at_sent, "synced_after_seconds": round(back, 1),
                                    "ist": self.ist_count(2) > ist_before, "restart_ok": r.returncode == 0}

    def ist_count(self, n):
        try:
            with open(os.path.join(self.stack.var_dir, "log", f"node-{n}.log"), errors="replace") as f:
                return len(re.findall(r"IST received", f.read()))
        except OSError:
            return 0

    def phase_storm(self):
        # --storms N: the later storms' event ids under the run's prefix, distinct from the first's.
        self.storms_run = getattr(self, "storms_run", 0) + 1
        base = self.run
        if self.storms_run > 1:
            self.run = f"{base}-s{self.storms_run}"
        try:
            self.one_storm()
        finally:
            self.run = base

    def one_storm(self):
        # The storm's Stats is made inside phase_storm: watch requests through a wrapper.
        done = threading.Event()
        watched = {}
        original = T.Stats

        class Watched(original):
            def __init__(self):
                super().__init__()
                watched.setdefault("storm", self)

        T.Stats = Watched
        total = self.profile["deliveries"]
        killer = None

        def start_killer():
            while "storm" not in watched and not done.is_set():
                time.sleep(0.02)
            if "storm" in watched:
                self.node_killer(watched["storm"], total, done)

        killer = threading.Thread(target=start_killer, daemon=True)
        killer.start()
        try:
            super().phase_storm()
        finally:
            T.Stats = original
            done.set()
            killer.join(timeout=300)
        kill = self.report.get("node_kill", {})
        if not self.args.no_kill:
            self.check(kill.get("killed"), f"storm: a database node was killed mid-storm ({kill})")
            self.check(kill.get("restart_ok") and kill.get("ist"), f"storm: the node rejoined by IST ({kill})")
        synced = [self.stack.status(n, "wsrep_local_state_comment") for n in range(1, NODES + 1)]
        self.check(synced == ["Synced"] * NODES, f"storm: every node Synced at the end ({synced})")
        counts = [self.stack.node_sql(n, f"SELECT COUNT(*) FROM billing_events WHERE provider_event_id LIKE '{self.run}-%'")[0][0]
                  for n in range(1, NODES + 1)]
        self.check(len(set(counts)) == 1, f"storm: every node holds the same inbox ({counts})")

    # -------------------------------------------------------------- partition

    def phase_partition(self):
        c = self.stack
        host_b = c.hosts[1]
        for n in (1, 3):
            os.kill(c.node_pid(n), signal.SIGSTOP)
            c.frozen.add(n)
        log("partition: nodes 1 and 3 frozen; waiting for node 2 to leave the primary component")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and c.status(2, "wsrep_ready") != "OFF":
            time.sleep(0.2)
        ready = c.status(2, "wsrep_ready")
        stats = T.Stats()
        now_ms = int(time.time() * 1000)
        user = str(uuid.uuid4())
        specs = [{"id": f"{self.run}-P{k:03d}", "user": user, "kind": "renewal", "at": now_ms - 86_400_000 + k,
                  "expires": now_ms + 30 * 86_400_000, "product": "app.pro.monthly", "subscription": f"{self.run}-P",
                  "provider": T.PROVIDERS[k % 2]} for k in range(self.profile["partition"])]
        client = self.client(host_b)
        during = {}
        for spec in specs:
            stats.ids.add(T.key(spec))
            path, body, headers = self.providers[T.key(spec)[0]].delivery(spec)
            status, _, seconds = client.request("POST", path, body=body, headers=headers)
            stats.record(status, seconds, T.key(spec))
            during[status] = during.get(status, 0) + 1
        c.thaw()
        log(f"partition: host B answered {during} while node 2 was alone (wsrep_ready {ready}); nodes thawed")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and [c.status(n, "wsrep_local_state_comment") for n in range(1, NODES + 1)] != ["Synced"] * NODES:
            time.sleep(0.2)
        synced = [c.status(n, "wsrep_local_state_comment") for n in range(1, NODES + 1)]
        landed = all(self.deliver(client, stats, spec, time.monotonic() + 120) for spec in specs)
        rows = c.node_sql(1, f"SELECT COUNT(*), COUNT(DISTINCT provider, provider_event_id) FROM billing_events "
                             f"WHERE provider_event_id LIKE '{self.run}-P%'")[0]
        self.finish_load("partition", stats)
        self.report["partition"] = {"wsrep_ready_on_node_2": ready, "statuses_during": {str(k): v for k, v in during.items()},
                                    "synced_after": synced, "landed_after": landed, "inbox_rows": rows}
        self.check(ready == "OFF", f"partition: node 2 alone refuses statements (wsrep_ready {ready})")
        self.check(set(during) == {503}, f"partition: host B answered 503 to every delivery, acknowledged none ({during})")
        self.check(synced == ["Synced"] * NODES, f"partition: the cluster re-formed ({synced})")
        self.check(landed and rows == [str(len(specs))] * 2, f"partition: every delivery retried after it landed exactly once ({rows})")

    # -------------------------------------------------------------- throughput

    def phase_throughput(self):
        result = {}
        for label, hosts in (("one host", self.stack.hosts[:1]), ("two hosts", self.stack.hosts)):
            n = self.profile["throughput"]
            now_ms = int(time.time() * 1000)
            users = [str(uuid.uuid4()) for _ in range(max(10, n // 10))]
            work = queue.Queue()
            tag = "1" if len(hosts) == 1 else "2"
            for k in range(n):
                u = users[k % len(users)]
                work.put({"id": f"{self.run}-H{tag}-{k:05d}", "user": u, "kind": "renewal", "at": now_ms - 86_400_000 + k,
                          "expires": now_ms + 30 * 86_400_000, "product": "app.pro.monthly",
                          "subscription": f"{self.run}-H{tag}-{u[:8]}", "provider": T.PROVIDERS[k % 2]})
            stats = T.Stats()

            def sender(host):
                client = self.client(host)
                while True:
                    try:
                        spec = work.get_nowait()
                    except queue.Empty:
                        return
                    with stats.lock:
                        stats.ids.add(T.key(spec))
                    self.deliver(client, stats, spec, time.monotonic() + 120)

            senders = [threading.Thread(target=sender, args=(hosts[i % len(hosts)],), daemon=True)
                       for i in range(self.profile["senders"])]
            started = time.monotonic()
            for t in senders:
                t.start()
            for t in senders:
                t.join()
            seconds = time.monotonic() - started
            self.finish_load("throughput " + label, stats)
            result[label] = {"deliveries": n, "seconds": round(seconds, 2), "per_second": round(n / seconds, 1),
                             "statuses": {str(k): v for k, v in stats.statuses.items()}}
            self.check(len(stats.acked) == n, f"throughput ({label}): every delivery acknowledged ({len(stats.acked)}/{n})")
        self.report["throughput"] = result


def main():
    parser = argparse.ArgumentParser(prog="cluster-test", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short", action="store_const", dest="profile", const="short", help="the CI profile (about a minute and a half on 2 cores; scripts/test runs it)")
    parser.add_argument("--profile", choices=sorted(PROFILES))
    parser.add_argument("--var-dir", default=os.path.join(ROOT, "var", "cluster"))
    parser.add_argument("--http-port", type=int, default=26080, help="host A; host B uses the next port")
    parser.add_argument("--db-port", type=int, default=26306, help="node 1; nodes 2 and 3 use the next ports")
    parser.add_argument("--gcomm-port", type=int, default=26567, help="node 1's group port (IST +1, SST +2); nodes 2 and 3: +10, +20")
    parser.add_argument("--workers", type=int, default=2, help="workers per host")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--client-timeout", type=float, default=60)
    parser.add_argument("--storm-deadline", type=float, default=600)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--skip", action="append", default=[], choices=["partition", "throughput"])
    parser.add_argument("--no-build", action="store_true", help="use the release binaries already built")
    parser.add_argument("--keep", action="store_true", help="leave everything running")
    parser.add_argument("--keep-data", action="store_true", help="do not wipe the nodes' data dirs and logs first")
    parser.add_argument("--report", help="write the JSON report here too")
    parser.add_argument("--verbose", action="store_true")
    # Debugging the cluster (issue 18): more storms, more conflicts, no kill.
    parser.add_argument("--storms", type=int, default=1, help="run the storm phase this many times (debugging)")
    parser.add_argument("--no-kill", action="store_true", help="storm without killing node 2 (debugging)")
    parser.add_argument("--deliveries", type=int, help="override the profile's storm deliveries")
    parser.add_argument("--users", type=int, help="override the profile's storm users (fewer: more conflicts)")
    parser.add_argument("--senders", type=int, help="override the profile's senders")
    parser.set_defaults(profile="long")
    args = parser.parse_args()
    args.kill_every = 0  # the storm kills a database node, not workers

    began = time.monotonic()
    cluster = Cluster(args)

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    torture = None
    try:
        log(f"profile {args.profile}: three Galera nodes (MariaDB {args.db_port}-{args.db_port + NODES - 1}), "
            f"hosts A and B (HTTP {args.http_port}, {args.http_port + 1}) in {cluster.var_dir}")
        cluster.up()
        torture = ClusterTorture(args, cluster)
        phases = ["schema"] + ["storm"] * args.storms + [p for p in ("partition", "throughput") if p not in args.skip]
        for name in phases:
            log(f"phase {name}")
            started = time.monotonic()
            try:
                getattr(torture, "phase_" + name)()
            except Exception as e:  # a phase that breaks is a failure; the others still run
                cluster.thaw()
                torture.check(False, f"{name}: {type(e).__name__}: {e}")
            log(f"phase {name} took {time.monotonic() - started:.1f}s")
        torture.final_checks()
        if torture.report.get("totals", {}).get("lost"):
            torture.explain_losses()
        storm = torture.report.get("storm", {})
        deliveries = sum(p["deliveries"] for p in storm.get("by_provider", {}).values())
        acked = storm.get("acknowledged_events", 0)
        totals = torture.report.get("totals", {})
        rows = cluster.sql(f"SELECT COUNT(*) - COUNT(DISTINCT provider, provider_event_id) FROM billing_events "
                           f"WHERE provider_event_id LIKE '{torture.run}-%'")
        duplicated = int(rows[0][0])
        compared = storm.get("users", 0) + 2 * storm.get("transfer_pairs", 0)
        right = compared - storm.get("snapshot_mismatches", compared)
        retried = cluster.retries()
        conflicts = {n: {k: cluster.status(n, k) for k in ("wsrep_local_cert_failures", "wsrep_local_bf_aborts")}
                     for n in range(1, NODES + 1)}
        torture.report["wsrep_conflicts"] = conflicts
        torture.check(duplicated == 0, f"inbox rows beyond one per event id: {duplicated}")
        torture.report["seconds"] = round(time.monotonic() - began, 1)
        print(json.dumps(torture.report, indent=2), file=sys.stderr)
        if args.report:
            with open(args.report, "w") as f:
                f.write(json.dumps(torture.report, indent=2) + "\n")
        print(f"cluster: {deliveries} deliveries, {acked} acknowledged, {totals.get('lost', 0)} lost, {duplicated} duplicated, "
              f"snapshots right {right}/{compared}, conflicts retried {retried}")
        tp = torture.report.get("throughput")
        if tp:
            one, two = tp["one host"], tp["two hosts"]
            print(f"cluster throughput: one host {one['per_second']} deliveries/s, two hosts {two['per_second']} deliveries/s "
                  f"({one['deliveries']} fresh deliveries each, {PROFILES[args.profile]['senders']} senders, "
                  f"{os.cpu_count()} cores shared by the three nodes and both hosts)")
        certification = sum(int(v["wsrep_local_cert_failures"] or 0) + int(v["wsrep_local_bf_aborts"] or 0) for v in conflicts.values())
        print(f"cluster: certification failures and brute-force aborts on the nodes {certification}; "
              f"node 2 killed and back by IST in {torture.report.get('node_kill', {}).get('synced_after_seconds')}s; "
              f"took {time.monotonic() - began:.0f}s")
    except KeyboardInterrupt:
        log("interrupted")
        if torture:
            torture.failures.append("interrupted")
    finally:
        if not args.keep:
            cluster.down()
    failures = torture.failures if torture else ["the cluster did not come up"]
    log(f"{'FAILED: ' + str(len(failures)) + ' check(s): ' + '; '.join(failures) if failures else 'all checks held'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
