"""The stack as the e2e, package and system tests reach it: real HTTP
through nginx (http.client), real JSON-RPC over the admin Unix socket, root's SQL on the
private MariaDB, and the stack's own scripts. Standard library only."""
import http.client
import json
import os
import socket
import subprocess
import time
import urllib.parse

HTTP_BASE = os.environ.get("BILLING_HTTP_BASE", "http://127.0.0.1:8080")
RPC_SOCKET = os.environ.get("BILLING_RPC_SOCKET", "var/run/billing-rpc.sock")
REPO = os.environ.get("BILLING_REPO", os.getcwd())
VAR_DIR = os.environ.get("BILLING_VAR_DIR", os.path.join(REPO, "var"))


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<{self.status} {self.body[:200]!r}>"


def request(method, path, body=None, headers=None, timeout=10, source=None):
    """One HTTP request on a fresh connection, from SOURCE (an address of this host) when
    given; returns Response (never raises on 4xx/5xx)."""
    url = urllib.parse.urlsplit(HTTP_BASE)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


def rpc_raw(line, sock_path=None, timeout=10):
    """Sends one line to billing-rpc and returns the reply line (bytes, without newline)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(sock_path or RPC_SOCKET)
        s.sendall(line if line.endswith(b"\n") else line + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data.rstrip(b"\n")


def rpc(method, params=None, id=1):
    message = {"jsonrpc": "2.0", "method": method, "id": id}
    if params is not None:
        message["params"] = params
    return json.loads(rpc_raw(json.dumps(message).encode()))


def script(name, *args, check=True, timeout=300):
    """Runs scripts/NAME with the stack's environment."""
    return subprocess.run([os.path.join(REPO, "scripts", name), *args], check=check, timeout=timeout,
                          capture_output=True, text=True)


DB_SOCKET = os.path.join(VAR_DIR, "run", "mariadb.sock")


def mariadb_command(*options):
    """The mariadb client as root on the stack's socket, database billing."""
    return ["mariadb", "--no-defaults", "--protocol=socket", "-S", DB_SOCKET, "-uroot", *options, "billing"]


def sql(statement):
    """Rows of one statement run as root (the test's own reads and fixtures, never the service's)."""
    r = subprocess.run(mariadb_command("-N", "-B", "--raw", "-e", statement), capture_output=True, text=True,
                       timeout=30, check=True)
    return [line.split("\t") for line in r.stdout.splitlines()]


def sql_string(value):
    """A SQL string literal for the test's own queries."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def worker_pids():
    pids = {}
    run = os.path.join(VAR_DIR, "run")
    for name in sorted(os.listdir(run)):
        if name.startswith("worker-") and name.endswith(".pid"):
            with open(os.path.join(run, name)) as f:
                pids[name] = int(f.read().strip())
    return pids


def wait_until(predicate, seconds, interval=0.1):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
