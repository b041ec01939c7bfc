#!/usr/bin/env python3
"""End-to-end tests of a running billing-rpc daemon (stdlib only).

    BILLING_RPC_SOCKET=/tmp/rpch.sock PYTHONPATH=Tests python3 Tests/e2e/test_rpc.py -v

Optional, when the daemon was started with matching flags:
    BILLING_RPC_READ_TIMEOUT=2        daemon runs with --read-timeout 2
    BILLING_RPC_MAX_CONNECTIONS=8     daemon runs with --max-connections 8
    BILLING_RPC_BINARY=.build/debug/billing-rpc   lifecycle tests start their own daemon
    BILLING_RPC_MAX_MESSAGE_BYTES=4194304         the daemon's admin.maxMessageBytes
scripts/test sets all of them (and fails on any skipped test).
"""
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

SOCKET = os.environ.get("BILLING_RPC_SOCKET") or os.path.join(
    os.environ.get("BILLING_VAR_DIR") or "./var", "run", "billing-rpc.sock")
MAX_MESSAGE_BYTES = int(os.environ.get("BILLING_RPC_MAX_MESSAGE_BYTES") or 1 << 20)


def connect(path=SOCKET, timeout=5.0):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


class Client:
    """One connection; reads reply lines in order."""

    def __init__(self, path=SOCKET, timeout=5.0):
        self.sock = connect(path, timeout)
        self.buffer = b""

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_line(self, text):
        self.sock.sendall(text.encode() + b"\n")

    def read_line(self, timeout=5.0):
        """The next reply line as JSON, or None on timeout, or EOFError when closed."""
        self.sock.settimeout(timeout)
        while b"\n" not in self.buffer:
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return None
            if not chunk:
                raise EOFError("daemon closed the connection")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def exchange(self, text, timeout=5.0):
        self.send_line(text)
        return self.read_line(timeout)

    def call(self, method, params=None, id=1):
        request = {"jsonrpc": "2.0", "method": method, "id": id}
        if params is not None:
            request["params"] = params
        return self.exchange(json.dumps(request))


def error(code, id=None):
    return {"code": code, "id": id}


def shape(reply):
    """(code, id) of an error reply, ignoring message and data."""
    return {"code": reply["error"]["code"], "id": reply["id"]}


class HealthAndMethods(unittest.TestCase):
    def test_health(self):
        with Client() as client:
            reply = client.call("system.health", id="h1")
        self.assertEqual(reply["jsonrpc"], "2.0")
        self.assertEqual(reply["id"], "h1")
        result = reply["result"]
        self.assertEqual(result["status"], "ok")
        self.assertIsInstance(result["pid"], int)
        self.assertGreaterEqual(result["uptimeSeconds"], 0)
        self.assertIn("version", result)
        self.assertRegex(result["serverTime"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertIsInstance(result["database"], dict)
        self.assertIn("status", result["database"])

    def test_list_methods(self):
        with Client() as client:
            names = [m["name"] for m in client.call("system.listMethods")["result"]]
        self.assertIn("system.health", names)
        self.assertIn("system.listMethods", names)
        self.assertEqual(names, sorted(names))

    def test_invalid_params(self):
        with Client() as client:
            self.assertEqual(client.call("system.health", {"verbose": True}, id=3)["error"]["code"], -32602)


class SpecificationExamples(unittest.TestCase):
    """The examples of section 7 that need no test-only method."""

    def test_method_not_found(self):
        with Client() as client:
            reply = client.exchange('{"jsonrpc": "2.0", "method": "foobar", "id": "1"}')
        self.assertEqual(reply, {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "1"})

    def test_parse_error(self):
        with Client() as client:
            reply = client.exchange('{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]')
        self.assertEqual(shape(reply), error(-32700))
        self.assertEqual(reply["error"]["message"], "Parse error")

    def test_invalid_request(self):
        with Client() as client:
            reply = client.exchange('{"jsonrpc": "2.0", "method": 1, "params": "bar"}')
        self.assertEqual(shape(reply), error(-32600))

    def test_batch_with_invalid_json(self):
        with Client() as client:
            reply = client.exchange('[{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},'
                                    '{"jsonrpc": "2.0", "method"]')
        self.assertEqual(shape(reply), error(-32700))

    def test_empty_batch_is_one_error_object(self):
        with Client() as client:
            reply = client.exchange("[]")
        self.assertIsInstance(reply, dict)
        self.assertEqual(shape(reply), error(-32600))

    def test_invalid_batches(self):
        with Client() as client:
            one = client.exchange("[1]")
            three = client.exchange("[1,2,3]")
        self.assertEqual([shape(r) for r in one], [error(-32600)])
        self.assertEqual([shape(r) for r in three], [error(-32600)] * 3)

    def test_notification_gets_no_reply(self):
        with Client() as client:
            client.send_line('{"jsonrpc": "2.0", "method": "foobar"}')
            self.assertIsNone(client.read_line(timeout=0.5))
            # The connection is still usable and the next line answers the next request.
            self.assertEqual(client.call("system.health", id=9)["id"], 9)


class Batches(unittest.TestCase):
    def test_mixed_batch_in_request_order(self):
        batch = [
            {"jsonrpc": "2.0", "method": "system.health", "id": "1"},
            {"jsonrpc": "2.0", "method": "system.health"},
            {"jsonrpc": "2.0", "method": "nope", "id": 2},
            {"foo": "boo"},
            {"jsonrpc": "2.0", "method": "system.listMethods", "id": 3.5},
        ]
        with Client() as client:
            reply = client.exchange(json.dumps(batch))
        self.assertEqual([r["id"] for r in reply], ["1", 2, None, 3.5])
        self.assertEqual(reply[0]["result"]["status"], "ok")
        self.assertEqual(reply[1]["error"]["code"], -32601)
        self.assertEqual(reply[2]["error"]["code"], -32600)
        self.assertIsInstance(reply[3]["result"], list)

    def test_batch_of_notifications_gets_no_reply(self):
        batch = [{"jsonrpc": "2.0", "method": "system.health"}, {"jsonrpc": "2.0", "method": "foobar", "params": [7]}]
        with Client() as client:
            client.send_line(json.dumps(batch))
            self.assertIsNone(client.read_line(timeout=0.5))
            self.assertEqual(client.call("system.health", id="after")["id"], "after")

    def test_pipelined_lines_blank_lines_and_crlf(self):
        with Client() as client:
            client.sock.sendall(b'{"jsonrpc":"2.0","method":"system.health","id":1}\r\n\n   \n'
                                b'{"jsonrpc":"2.0","method":"system.health","id":2}\n'
                                b'{"jsonrpc":"2.0","method":"system.health","id":3}\n')
            self.assertEqual([client.read_line()["id"] for _ in range(3)], [1, 2, 3])

    def test_id_types_are_echoed(self):
        with Client() as client:
            for id in ["x", 7, 9007199254740993, -1.25, None]:
                self.assertEqual(client.call("system.health", id=id)["id"], id)
            bad = client.exchange('{"jsonrpc":"2.0","method":"system.health","id":{"a":1}}')
            self.assertEqual(shape(bad), error(-32600))


class Limits(unittest.TestCase):
    def test_oversized_line_gets_an_error_and_the_connection_closes(self):
        with Client(timeout=10) as client:
            payload = b'{"jsonrpc":"2.0","method":"system.health","params":["' + b"x" * (MAX_MESSAGE_BYTES + 10)
            try:
                client.sock.sendall(payload)  # no newline: the daemon must not wait for one
            except (BrokenPipeError, ConnectionResetError):
                pass  # the daemon may close before everything is sent; its reply is still queued
            reply = client.read_line(timeout=10)
            self.assertEqual(shape(reply), error(-32600))
            self.assertIn("too large", reply["error"]["message"])
            with self.assertRaises((EOFError, ConnectionResetError)):
                while True:
                    if client.read_line(timeout=5) is None:
                        self.fail("connection left open after an oversized line")

    def test_a_line_just_under_the_limit_is_served(self):
        filler = "y" * (MAX_MESSAGE_BYTES - 200)
        with Client(timeout=10) as client:
            reply = client.exchange(json.dumps({"jsonrpc": "2.0", "method": "nope", "params": [filler], "id": 1}), timeout=10)
        self.assertEqual(reply["error"]["code"], -32601)

    @unittest.skipUnless(os.environ.get("BILLING_RPC_MAX_CONNECTIONS"), "set BILLING_RPC_MAX_CONNECTIONS to the daemon's --max-connections")
    def test_connections_over_the_limit_are_refused_with_one_line(self):
        limit = int(os.environ["BILLING_RPC_MAX_CONNECTIONS"])
        held = []
        try:
            # Fill the daemon up to its limit, each connection proven admitted by a call. A
            # connection an earlier test closed may still count for a moment (its thread
            # finishing): one refused here is retried, within a bound, rather than failing.
            deadline = time.monotonic() + 15
            while len(held) < limit:
                client = Client()
                try:
                    admitted = client.call("system.health").get("result", {}).get("status") == "ok"
                except (BrokenPipeError, ConnectionResetError, EOFError):
                    admitted = False
                if admitted:
                    held.append(client)
                    continue
                client.close()
                self.assertLess(time.monotonic(), deadline, f"only {len(held)} of {limit} connections were admitted")
                time.sleep(0.2)
            with Client() as extra:
                reply = extra.read_line(timeout=5)
                self.assertEqual(shape(reply), error(-32000))
                with self.assertRaises(EOFError):
                    extra.read_line(timeout=5)
        finally:
            for client in held:
                client.close()
        # The daemon notices the closed connections asynchronously: once it has, a new
        # client is admitted again (bounded wait; a refused attempt may see a closed pipe).
        def admitted():
            try:
                with Client() as client:
                    reply = client.call("system.health")
                    return bool(reply) and reply.get("result", {}).get("status") == "ok"
            except (OSError, EOFError):
                return False
        deadline = time.monotonic() + 10
        while not admitted():
            self.assertLess(time.monotonic(), deadline, "connections freed by closing clients were never admitted again")
            time.sleep(0.1)


class Concurrency(unittest.TestCase):
    def test_a_stalled_client_does_not_block_others(self):
        with Client() as slow:
            slow.sock.sendall(b'{"jsonrpc":"2.0","method":"system.h')
            started = time.monotonic()
            with Client() as fast:
                self.assertEqual(fast.call("system.health", id="fast")["id"], "fast")
            timeout = os.environ.get("BILLING_RPC_READ_TIMEOUT")
            if timeout:
                # Served while the stalled request was still pending, not after it was dropped.
                self.assertLess(time.monotonic() - started, float(timeout))
            if timeout:
                reply = slow.read_line(timeout=float(timeout) + 3)
                self.assertIsNotNone(reply, "the stalled connection was not timed out")
                self.assertEqual(shape(reply), error(-32001))
                with self.assertRaises(EOFError):
                    slow.read_line(timeout=3)

    def test_concurrent_clients(self):
        failures = []

        def worker(n):
            try:
                with Client(timeout=10) as client:
                    for i in range(25):
                        id = f"{n}-{i}"
                        reply = client.call("system.health", id=id)
                        if reply.get("id") != id or reply["result"]["status"] != "ok":
                            failures.append(reply)
            except Exception as exc:  # noqa: BLE001 - reported below
                failures.append(repr(exc))

        # Stay under the daemon's connection limit: refusals are tested separately.
        clients = min(16, int(os.environ.get("BILLING_RPC_MAX_CONNECTIONS", "32")) - 1)
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        self.assertEqual(failures, [])


@unittest.skipUnless(os.environ.get("BILLING_RPC_BINARY"), "set BILLING_RPC_BINARY to run lifecycle tests")
class Lifecycle(unittest.TestCase):
    """Starts private daemons on a temporary socket."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rpc-e2e-")
        self.path = os.path.join(self.dir, "rpc.sock")

    def start(self):
        process = subprocess.Popen([os.environ["BILLING_RPC_BINARY"], "--socket", self.path],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(100):
            if os.path.exists(self.path):
                try:
                    connect(self.path).close()
                    return process
                except OSError:
                    pass
            time.sleep(0.05)
        process.kill()
        self.fail("daemon did not start: " + process.stderr.read().decode())

    def test_stale_socket_replaced_live_socket_refused_sigterm_exits_0(self):
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(self.path)
        stale.close()  # a socket file nobody listens on
        daemon = self.start()
        try:
            self.assertEqual(os.stat(self.path).st_mode & 0o777, 0o660)
            second = subprocess.run([os.environ["BILLING_RPC_BINARY"], "--socket", self.path],
                                    capture_output=True, timeout=10)
            self.assertEqual(second.returncode, 1)
            self.assertIn(b"already listening", second.stderr)
            with Client(self.path) as client:
                self.assertEqual(client.call("system.health")["result"]["status"], "ok")
                daemon.send_signal(signal.SIGTERM)
                self.assertEqual(daemon.wait(10), 0)
                with self.assertRaises(EOFError):  # idle connections are closed at stop
                    client.read_line(timeout=2)
            self.assertFalse(os.path.exists(self.path))
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            daemon.stderr.close()

    def test_regular_file_is_not_replaced(self):
        with open(self.path, "w") as file:
            file.write("precious")
        result = subprocess.run([os.environ["BILLING_RPC_BINARY"], "--socket", self.path], capture_output=True, timeout=10)
        self.assertEqual(result.returncode, 1)
        self.assertIn(b"not a socket", result.stderr)
        with open(self.path) as file:
            self.assertEqual(file.read(), "precious")


if __name__ == "__main__":
    unittest.main()
