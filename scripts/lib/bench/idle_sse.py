"""The bench's live-changes row (SPEC §16): CLIENTS apps hold an SSE stream of
GET /api/v1/billing/access/changes open at once (the bench users' tokens in turn, each
after his current revision, so nothing is sent and every stream waits), and while they are
held: nginx's resident memory (master and workers, summed) against before they came, the
workers' busy threads (billing_worker_busy_threads on /metrics, summed; the /metrics request
is one of them), and /api/v1/health's throughput under wrk against a run without them.
Every stream must be answered 200 text/event-stream and still be open at the end.
Arguments: BASE_URL TOKENS_FILE RUN_DIR CLIENTS SECONDS WRK_THREADS WRK_CONNECTIONS.
Prints one line: key=value pairs for scripts/bench."""
import http.client
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import time
import urllib.parse

base, tokens_file, run_dir, clients, seconds, wrk_threads, wrk_connections = sys.argv[1:8]
clients, seconds = int(clients), int(seconds)
url = urllib.parse.urlsplit(base)
tokens = open(tokens_file).read().split()


def get(path, token=None):
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": "Bearer " + token} if token else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def nginx_rss_kib():
    with open(os.path.join(run_dir, "nginx.pid")) as f:
        master = int(f.read().strip())
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            if int(pid) != master and int(stat.rsplit(")", 1)[1].split()[1]) != master:
                continue
            with open(f"/proc/{pid}/status") as f:
                total += int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        except (OSError, AttributeError, ValueError):
            continue
    return total


def busy_threads():
    status, body = get("/metrics")
    if status != 200:
        raise SystemExit(f"idle_sse: /metrics answered {status}")
    return sum(float(m.group(1)) for m in re.finditer(r'^billing_worker_busy_threads\{[^}]*\} ([0-9.e+-]+)$', body.decode(), re.M))


def health_rps():
    out = subprocess.run(["wrk", f"-t{wrk_threads}", f"-c{wrk_connections}", f"-d{seconds}s", base + "/api/v1/health"],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"^Requests/sec:\s+([0-9.]+)", out, re.M).group(1))


revisions = {}
for token in tokens:
    status, body = get("/api/v1/billing/access", token)
    if status != 200:
        raise SystemExit(f"idle_sse: GET /billing/access answered {status}")
    revisions[token] = json.loads(body)["revision"]

health_alone = health_rps()
rss_before = nginx_rss_kib()

selector = selectors.DefaultSelector()
streams = []
started = time.monotonic()
for i in range(clients):
    token = tokens[i % len(tokens)]
    s = socket.create_connection((url.hostname, url.port))
    s.sendall((f"GET /api/v1/billing/access/changes?after={revisions[token]} HTTP/1.1\r\nHost: {url.hostname}\r\n"
               f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n").encode())
    s.setblocking(False)
    streams.append({"socket": s, "head": b""})
    selector.register(s, selectors.EVENT_READ, streams[-1])

# Every stream answered: its head read, then nothing more is expected.
answered = 0
deadline = time.monotonic() + 60
while answered < clients and time.monotonic() < deadline:
    for key, _ in selector.select(timeout=1):
        stream = key.data
        chunk = stream["socket"].recv(65536)
        if not chunk:
            raise SystemExit("idle_sse: a stream was closed before its answer")
        stream["head"] += chunk
        if b"\r\n\r\n" in stream["head"]:
            selector.unregister(stream["socket"])
            head = stream["head"].split(b"\r\n\r\n", 1)[0].decode("latin-1")
            if not head.startswith("HTTP/1.1 200") or "text/event-stream" not in head.lower():
                raise SystemExit(f"idle_sse: a stream was answered {head.splitlines()[0]!r}")
            answered += 1
opened_seconds = time.monotonic() - started
if answered < clients:
    raise SystemExit(f"idle_sse: {answered} of {clients} streams answered within 60 s")

# Past the authorizations (the workers publish their gauges every second), held idle.
time.sleep(2)
rss_held = nginx_rss_kib()
busy = []
for _ in range(5):
    busy.append(busy_threads())
    time.sleep(0.5)
health_held = health_rps()

# Still open: nothing but nchan's pings (comment lines) came, no stream was closed.
closed = 0
for stream in streams:
    try:
        data = stream["socket"].recv(65536)
        if data == b"" or b"\ndata:" in data:
            closed += 1
    except BlockingIOError:
        pass
    stream["socket"].close()
if closed:
    raise SystemExit(f"idle_sse: {closed} of {clients} streams were closed or sent data while idle")

print(f"clients={clients} opened_seconds={opened_seconds:.2f} rss_before_kib={rss_before} rss_held_kib={rss_held} "
      f"busy_max={max(busy):.0f} health_alone={health_alone:.0f} health_held={health_held:.0f}")
