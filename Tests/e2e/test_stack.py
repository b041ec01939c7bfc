"""End to end through nginx and the real processes: routing, limits, rolling restarts,
the database going away and coming back, and the admin socket's isolation."""
import json
import os
import socket
import threading
import time
import unittest
import urllib.parse

from harness.billing import (HTTP_BASE, REPO, RPC_SOCKET, VAR_DIR, request, rpc, script, wait_until,
                     worker_pids)


class HealthAndRouting(unittest.TestCase):
    def test_health_is_ok_with_request_id(self):
        r = request("GET", "/api/v1/health")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers["content-type"].split(";")[0], "application/json")
        body = r.json()
        self.assertEqual(body["status"], "ok")
        self.assertEqual(body["database"], "ok")
        self.assertRegex(r.headers.get("x-request-id", ""), r"^[0-9a-f]{16,64}$")

    def test_ping_needs_no_database(self):
        r = request("GET", "/api/v1/ping")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json(), {"ok": True})

    def test_unknown_api_route_is_a_json_404(self):
        r = request("GET", "/api/v1/does-not-exist")
        self.assertEqual(r.status, 404, r)
        self.assertEqual(r.json()["error"]["code"], "not_found")
        self.assertIsInstance(r.json()["error"]["message"], str)

    def test_route_outside_the_api_is_a_json_404_from_nginx(self):
        r = request("GET", "/index.php")
        self.assertEqual(r.status, 404, r)
        self.assertEqual(r.json()["error"]["code"], "not_found")

    def test_wrong_method_is_405_with_allow(self):
        r = request("DELETE", "/api/v1/health")
        self.assertEqual(r.status, 405, r)
        self.assertEqual(r.json()["error"]["code"], "method_not_allowed")
        self.assertIn("GET", r.headers.get("allow", ""))

    def test_body_over_the_worker_limit_is_413_from_the_worker(self):
        # server.maxBodyBytes is 1 MiB; nginx lets up to 1 MiB + 64 KiB through.
        r = request("POST", "/api/v1/health", body=b"{" + b" " * (1048576 + 1000) + b"}",
                    headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 413, r)
        self.assertEqual(r.json()["error"]["code"], "payload_too_large")

    def test_body_over_the_nginx_limit_is_a_json_413(self):
        r = request("POST", "/api/v1/health", body=b"x" * (3 * 1048576),
                    headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 413, r)
        self.assertEqual(r.json()["error"]["code"], "payload_too_large")


def raw_exchange(data, timeout=5):
    """Sends bytes as they are on a fresh connection; returns (status, body) of nginx's answer."""
    url = urllib.parse.urlsplit(HTTP_BASE)
    with socket.create_connection((url.hostname, url.port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


class NginxErrorsAreJSON(unittest.TestCase):
    """SPEC §19: every error nginx answers by itself is the API's JSON envelope, not HTML."""
    def assertEnvelope(self, status, body, expected_status, code):
        self.assertEqual(status, expected_status, body)
        self.assertEqual(json.loads(body)["error"]["code"], code, body)

    def test_each_status_nginx_answers_itself(self):
        long_uri = "/api/v1/health?" + "a" * 20000
        cases = [
            ("malformed request line", b"GARBAGE\r\n\r\n", 400, "bad_request"),
            ("malformed header", b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n", 400, "bad_request"),
            ("HTTP/1.1 without Host", b"GET /api/v1/health HTTP/1.1\r\n\r\n", 400, "bad_request"),
            ("URI over the limit", f"GET {long_uri} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode(), 414, "uri_too_long"),
            ("header over the limit", ("GET /api/v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + "a" * 20000
                                       + "\r\n\r\n").encode(), 431, "header_too_large"),
            ("TRACE", b"TRACE /api/v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405, "method_not_allowed"),
            ("unknown transfer coding", b"POST /api/v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                        b"Transfer-Encoding: gzip\r\n\r\n", 501, "not_implemented"),
            ("an error page asked for directly", b"GET /_errors/bad_request HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
             404, "not_found"),
            ("no worker behind /_raw (the bench's responder, not running)",
             b"GET /_raw HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 502, "bad_gateway"),
        ]
        for name, data, status, code in cases:
            with self.subTest(case=name):
                self.assertEnvelope(*raw_exchange(data), status, code)


class AdminSocket(unittest.TestCase):
    def test_billing_rpc_answers_on_its_socket(self):
        reply = rpc("system.health", id="h-1")
        self.assertEqual(reply["jsonrpc"], "2.0")
        self.assertEqual(reply["id"], "h-1")
        self.assertEqual(reply["result"]["status"], "ok")

    def test_socket_mode_is_0660(self):
        self.assertEqual(os.stat(RPC_SOCKET).st_mode & 0o777, 0o660)

    def test_billing_rpc_is_not_reachable_through_nginx(self):
        call = {"jsonrpc": "2.0", "method": "system.health", "id": 1}
        for path in ["/rpc", "/api/v1/rpc", "/api/v1/system.health", "/billing-rpc.sock",
                     "/run/billing-rpc.sock", "/api/v1/../run/billing-rpc.sock", "/api/v1/admin"]:
            for method in ("GET", "POST"):
                r = request(method, path, body=call if method == "POST" else None)
                self.assertIn(r.status, (400, 404, 405), (path, method, r))
                self.assertNotIn(b"jsonrpc", r.body, (path, method))
        with open(os.path.join(VAR_DIR, "nginx", "nginx.conf")) as f:
            self.assertNotIn(os.path.basename(RPC_SOCKET), f.read())


class RollingRestart(unittest.TestCase):
    def test_restart_all_under_load_fails_no_request(self):
        before = worker_pids()
        stop = threading.Event()
        results = {"ok": 0, "failed": []}
        lock = threading.Lock()

        def load():
            paths = ["/api/v1/health", "/api/v1/ping"]
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    r = request("GET", paths[i % 2], timeout=15)
                    ok = r.status == 200
                    detail = r
                except Exception as e:  # a refused or reset connection is a failure too
                    ok, detail = False, repr(e)
                with lock:
                    if ok:
                        results["ok"] += 1
                    else:
                        results["failed"].append(detail)

        threads = [threading.Thread(target=load) for _ in range(6)]
        for t in threads:
            t.start()
        try:
            time.sleep(0.5)
            done = script("workerctl", "restart", "all")
            self.assertEqual(done.returncode, 0, done.stderr)
            time.sleep(0.5)
        finally:
            stop.set()
            for t in threads:
                t.join()
        after = worker_pids()
        self.assertEqual(set(before), set(after))
        for name in before:
            self.assertNotEqual(before[name], after[name], f"{name} was not restarted")
        self.assertEqual(results["failed"], [], f"{len(results['failed'])} failed of {results['ok']}")
        self.assertGreater(results["ok"], 50)
        status = script("workerctl", "status").stdout
        self.assertEqual(status.count(" up "), len(after), status)


class DatabaseOutage(unittest.TestCase):
    def test_health_is_503_while_mariadb_is_down_and_200_after_without_restart(self):
        pids = worker_pids()
        ctl = os.path.join(REPO, "scripts", "lib", "mariadb-ctl")
        self.assertEqual(request("GET", "/api/v1/health").status, 200)
        import subprocess
        subprocess.run([ctl, "stop"], check=True, timeout=120)
        try:
            # Every worker thread notices on its own connection; each answer must be a fast
            # 503, never a hang (the client timeout is the bound) nor a 5xx of another kind.
            for _ in range(12):
                r = request("GET", "/api/v1/health", timeout=3)
                self.assertEqual(r.status, 503, r)
                self.assertEqual(r.json()["status"], "unavailable")
                self.assertEqual(r.json()["database"], "down")
            self.assertEqual(request("GET", "/api/v1/ping").status, 200)
        finally:
            subprocess.run([ctl, "start"], check=True, timeout=120)
        self.assertTrue(wait_until(lambda: all(request("GET", "/api/v1/health").status == 200 for _ in range(8)), 15),
                        "health did not return to 200 after MariaDB came back")
        self.assertEqual(worker_pids(), pids, "workers must recover without a restart")
        self.assertEqual(rpc("system.health")["result"]["status"], "ok")


if __name__ == "__main__":
    unittest.main()
