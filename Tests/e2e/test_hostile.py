"""Hostile input on every surface (issue 7): HTTP through nginx, raw FastCGI straight to a
worker socket, the JSON-RPC admin socket, webhook secrets, ID tokens and SQL injection
strings. Each case asserts a precise answer and that nothing was written; no timing
assertions (client timeouts only detect hangs)."""
import base64
import hashlib
import json
import os
import re
import socket
import struct
import threading
import time
import unittest
import uuid

from harness.billing import RPC_SOCKET, VAR_DIR, request, rpc, rpc_raw, sql, sql_string, wait_until, worker_pids
from harness.tokens import DevSigner as Signer
from harness.tokens import b64url as b64u

WEBHOOK = "/api/v1/billing/webhooks/revenuecat"
SECRET_FILE = os.path.join(VAR_DIR, "secrets", "revenuecat-webhook-secret")
INJECTIONS = [
    "'; DROP TABLE billing_events; --",
    "\" OR \"1\"=\"1",
    "1' OR '1'='1' /*",
    "x'); DELETE FROM billing_users; -- ",
    "\\'; SELECT SLEEP(5); #",
    "%' UNION SELECT user_id FROM billing_access -- ",
    "Robert'); DROP TABLE billing_access;--\u02bc\u2019",
    "\\x00\\'\\\"\\\\%_",
]


def secret():
    with open(SECRET_FILE) as f:
        return f.read().strip()


def inbox_count(event_id):
    return int(sql(f"SELECT COUNT(*) FROM billing_events WHERE provider_event_id = {sql_string(event_id)}")[0][0])


def user_rows(user_id):
    return int(sql(f"SELECT COUNT(*) FROM billing_users WHERE id = {sql_string(user_id)}")[0][0])


def event(**fields):
    now = int(time.time() * 1000)
    user = fields.pop("user", str(uuid.uuid4()))
    e = {"id": "hostile-" + uuid.uuid4().hex, "type": "INITIAL_PURCHASE", "app_user_id": user,
         "product_id": "app.pro.monthly", "entitlement_ids": ["pro"], "purchased_at_ms": now,
         "expiration_at_ms": now + 30 * 86_400_000, "event_timestamp_ms": now, "environment": "PRODUCTION",
         "store": "APP_STORE", "original_transaction_id": "hostile-" + uuid.uuid4().hex}
    e.update(fields)
    return e


def post_webhook(body, headers=None, content_type="application/json"):
    h = {"Authorization": secret()}
    if content_type is not None:
        h["Content-Type"] = content_type
    h.update(headers or {})
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    return request("POST", WEBHOOK, body=body, headers=h)


class HostileHTTP(unittest.TestCase):
    """Through nginx: a precise 4xx for every malformed request, never a 5xx, nothing written."""

    def assert_refused(self, r, status, event_id=None, code=None):
        self.assertEqual(r.status, status, r)
        self.assertEqual(r.headers.get("content-type", "").split(";")[0], "application/json", r)
        if code:
            self.assertEqual(r.json()["error"]["code"], code, r)
        if event_id:
            self.assertEqual(inbox_count(event_id), 0, "a refused delivery must not be written")

    def test_oversized_bodies(self):
        e = event()
        body = json.dumps({"event": e, "padding": "x" * (1048576 + 10)}).encode()
        self.assert_refused(post_webhook(body), 413, e["id"], "payload_too_large")
        self.assert_refused(post_webhook(b"[" * 10 + b"0" * (4 * 1048576)), 413, None, "payload_too_large")

    def test_wrong_content_types(self):
        for content_type in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                             "application/jsonx", "json", "application/xml"]:
            e = event()
            with self.subTest(content_type=content_type):
                self.assert_refused(post_webhook({"api_version": "1.0", "event": e}, content_type=content_type), 415,
                                    e["id"], "unsupported_media_type")
        e = event()
        r = post_webhook({"api_version": "1.0", "event": e}, content_type="application/json; charset=utf-8")
        self.assertEqual(r.status, 200, r)

    def test_invalid_utf8(self):
        for raw in [b'{"api_version":"1.0","event":{"id":"\xff\xfe","type":"RENEWAL"}}',
                    b'{"event":{"id":"ok","type":"RENEWAL\xc0\xaf"}}', b'\xef\xbb\xbf{"event":{}}',
                    b'{"event":{"id":"\xed\xa0\x80"}}']:
            with self.subTest(raw=raw):
                self.assert_refused(post_webhook(raw), 400, None, "invalid_json")

    def test_deep_nesting(self):
        e = event()
        nested = {"api_version": "1.0", "event": e}
        body = json.dumps(nested)[:-1] + ', "x": ' + "[" * 5000 + "]" * 5000 + "}"
        self.assert_refused(post_webhook(body.encode()), 400, e["id"], "invalid_json")
        self.assert_refused(post_webhook(b"[" * 200000), 400, None, "invalid_json")

    def test_huge_numbers(self):
        for value in ["1" * 400, "1e999999", "-9223372036854775809", "18446744073709551616"]:
            e = event()
            body = json.dumps({"api_version": "1.0", "event": e})
            body = body.replace('"event_timestamp_ms": %d' % e["event_timestamp_ms"], '"event_timestamp_ms": ' + value)
            with self.subTest(value=value[:30]):
                r = post_webhook(body.encode())
                self.assertIn(r.status, (400,), r)
                self.assertEqual(inbox_count(e["id"]), 0)
        for value in [1e300, 2 ** 62, -1]:
            e = event(expiration_at_ms=value)
            with self.subTest(value=value):
                self.assert_refused(post_webhook({"event": e}), 400, e["id"], "invalid_payload")
        e = event(price_in_purchased_currency=1e308, currency="EUR")
        self.assert_refused(post_webhook({"event": e}), 400, e["id"], "invalid_payload")

    def test_duplicate_keys(self):
        e = event()
        body = json.dumps({"api_version": "1.0", "event": e})
        body = body.replace('"type": "INITIAL_PURCHASE"', '"type": "INITIAL_PURCHASE", "type": "EXPIRATION"')
        self.assert_refused(post_webhook(body.encode()), 400, e["id"], "invalid_json")

    def test_wrong_shapes(self):
        for body in [b"", b"null", b"[]", b'"event"', b"{}", b'{"event": []}', b'{"event": {"id": 5, "type": "RENEWAL"}}',
                     b'{"event": {"id": "x", "type": "RENEWAL", "aliases": "not-an-array"}}', b"{,}", b"{\"event\":"]:
            with self.subTest(body=body):
                r = post_webhook(body)
                self.assertEqual(r.status, 400, r)

    def test_strings_longer_than_their_columns(self):
        # Every string the decoder accepts must fit its column: strict mode would turn an
        # overlong one into a 500 (and a provider retry loop) instead of a precise 400.
        for field, length in [("store", 33), ("product_id", 192),
                              ("original_transaction_id", 192), ("new_product_id", 192), ("cancel_reason", 65),
                              ("id", 192), ("type", 65)]:
            e = event(**{field: "P" * length})
            with self.subTest(field=field, length=length):
                r = post_webhook({"event": e})
                self.assertEqual(r.status, 400, r)
                self.assertEqual(inbox_count(e["id"]), 0)

    def test_values_the_inbox_constraints_would_refuse(self):
        # A 400 from the decoder, never a 500 from a CHECK constraint.
        for fields in [{"currency": "\u20ac", "price_in_purchased_currency": 1}, {"currency": "E1", "price_in_purchased_currency": 1},
                       {"currency": "eu", "price_in_purchased_currency": 1}, {"currency": 5}]:
            e = event(**fields)
            with self.subTest(fields=fields):
                self.assert_refused(post_webhook({"event": e}), 400, e["id"], "invalid_payload")
        # Accepted: a price without any currency is dropped, an unknown period type is not stored.
        for fields in [{"price_in_purchased_currency": 4.99}, {"period_type": "P" * 32}]:
            e = event(**fields)
            with self.subTest(fields=fields):
                r = post_webhook({"event": e})
                self.assertEqual(r.status, 200, r)
                self.assertEqual(inbox_count(e["id"]), 1)

    def test_slow_body_does_not_block_the_workers(self):
        # nginx buffers request bodies: a client that stalls mid-body never reaches a worker.
        stalled = []
        for _ in range(12):
            s = socket.create_connection(("127.0.0.1", int(os.environ.get("BILLING_HTTP_BASE", "http://127.0.0.1:8080").rsplit(":", 1)[1])), timeout=20)
            s.sendall(b"POST " + WEBHOOK.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Authorization: " + secret().encode() + b"\r\nContent-Length: 1000\r\n\r\n{\"event\":")
            stalled.append(s)
        try:
            r = request("GET", "/api/v1/health", timeout=10)
            self.assertEqual(r.status, 200, r)
        finally:
            for s in stalled:
                s.close()

    def test_header_and_path_junk(self):
        for path in ["/api/v1/billing/access?%ff%fe=\x01", "/api/v1/health/../../etc/passwd", "/api/v1/" + "a" * 3000,
                     "/api/v1/billing/webhooks/revenuecat%00"]:
            with self.subTest(path=path[:40]):
                try:
                    r = request("GET", path)
                except Exception:  # http.client refuses some of these itself
                    continue
                self.assertTrue(400 <= r.status < 500, r)


class FastCGIClient:
    """Just enough FastCGI to speak to a worker socket directly (bypassing nginx), and to lie."""
    BEGIN, ABORT, END, PARAMS, STDIN, STDOUT = 1, 2, 3, 4, 5, 6

    @staticmethod
    def record(kind, request_id, content, version=1):
        padding = (8 - len(content) % 8) % 8
        return struct.pack(">BBHHBx", version, kind, request_id, len(content), padding) + content + b"\0" * padding

    @staticmethod
    def pair(name, value):
        def length(n):
            return struct.pack(">B", n) if n < 128 else struct.pack(">I", n | 0x80000000)
        return length(len(name)) + length(len(value)) + name + value

    @classmethod
    def params(cls, request_id, params):
        data = b"".join(cls.pair(k.encode(), v.encode() if isinstance(v, str) else v) for k, v in params.items())
        out = b""
        for i in range(0, len(data), 65535):
            out += cls.record(cls.PARAMS, request_id, data[i:i + 65535])
        return out + cls.record(cls.PARAMS, request_id, b"")

    @classmethod
    def begin(cls, request_id=1):
        return cls.record(cls.BEGIN, request_id, struct.pack(">HB5x", 1, 0))

    @classmethod
    def base_params(cls, uri, method="GET", content_length=""):
        return {"REQUEST_METHOD": method, "REQUEST_URI": uri, "DOCUMENT_URI": uri.split("?")[0], "SCRIPT_NAME": uri.split("?")[0],
                "QUERY_STRING": "", "CONTENT_LENGTH": content_length, "CONTENT_TYPE": "application/json",
                "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "localhost"}


def worker_socket():
    return os.path.join(VAR_DIR, "run", "worker-1.sock")


def fcgi_exchange(payload, timeout=15, close_write=True):
    """Sends raw bytes to worker 1; returns what came back before the worker closed (or b'')."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(worker_socket())
    try:
        try:
            s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if close_write:
            s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        return data
    finally:
        s.close()


def fcgi_stdout(data):
    """The STDOUT stream of a FastCGI reply."""
    out, i = b"", 0
    while i + 8 <= len(data):
        _, kind, _, length, padding = struct.unpack(">BBHHBx", data[i:i + 8])
        if kind == FastCGIClient.STDOUT:
            out += data[i + 8:i + 8 + length]
        i += 8 + length + padding
    return out


def fcgi_status(data):
    m = re.match(rb"Status: (\d+)", fcgi_stdout(data))
    return int(m.group(1)) if m else None


class RawFastCGI(unittest.TestCase):
    """Straight to a worker socket: it drops the bad request and keeps serving."""
    F = FastCGIClient

    def ping_works(self):
        reply = fcgi_exchange(self.F.begin() + self.F.params(1, self.F.base_params("/api/v1/ping")) + self.F.record(self.F.STDIN, 1, b""))
        return fcgi_status(reply) == 200

    def setUp(self):
        self.assertTrue(self.ping_works(), "the raw FastCGI client must work against a healthy worker")
        self.pid = self.worker_pid()

    def tearDown(self):
        self.assertTrue(wait_until(self.ping_works, 10), "the worker keeps serving after a hostile request")
        self.assertEqual(self.worker_pid(), self.pid, "the worker process survived")
        self.assertEqual(request("GET", "/api/v1/health").status, 200)

    def worker_pid(self):
        with open(os.path.join(VAR_DIR, "run", "worker-1.pid")) as f:
            return int(f.read())

    def test_truncated_records(self):
        full = self.F.begin() + self.F.params(1, self.F.base_params("/api/v1/ping")) + self.F.record(self.F.STDIN, 1, b"")
        for cut in [1, 7, 8, 12, 16, 17, 40, len(full) - 1]:
            with self.subTest(cut=cut):
                fcgi_exchange(full[:cut])

    def test_lying_content_length(self):
        body = json.dumps({"event": event()}).encode()
        for declared, sent in [(len(body) + 100, body), (5, body), (10 ** 12, body), (-1, body), ("12abc", body), (len(body), b"")]:
            with self.subTest(declared=declared):
                params = self.F.base_params(WEBHOOK, "POST", str(declared))
                params["HTTP_AUTHORIZATION"] = secret()
                reply = fcgi_exchange(self.F.begin() + self.F.params(1, params) + self.F.record(self.F.STDIN, 1, sent)
                                      + self.F.record(self.F.STDIN, 1, b""))
                status = fcgi_status(reply)
                self.assertIn(status, (400, 413), reply[:300])

    def test_huge_params(self):
        params = self.F.base_params("/api/v1/ping")
        params["HTTP_X_JUNK"] = "j" * (4 * 1048576)
        for i in range(2000):
            params[f"HTTP_X_{i}"] = "v" * 100
        reply = fcgi_exchange(self.F.begin() + self.F.params(1, params) + self.F.record(self.F.STDIN, 1, b""), timeout=30)
        self.assertIn(fcgi_status(reply), (200, 400, 431, None))

    def test_garbage_and_wrong_versions(self):
        for payload in [os.urandom(64), b"\0" * 64, b"GET / HTTP/1.1\r\n\r\n",
                        self.F.record(self.F.BEGIN, 1, struct.pack(">HB5x", 1, 0), version=9),
                        self.F.begin() + self.F.record(self.F.PARAMS, 1, b"\xff\xff\xff\xff\xff\xff\xff\xff"),
                        self.F.begin() + self.F.record(self.F.STDIN, 1, b"x" * 100) + self.F.record(self.F.END, 1, b"")]:
            with self.subTest(payload=payload[:16]):
                fcgi_exchange(payload)

    def test_stalled_connection_leaves_other_threads_serving(self):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(worker_socket())
        s.sendall(self.F.begin() + self.F.params(1, self.F.base_params("/api/v1/ping"))[:20])
        try:
            self.assertTrue(self.ping_works())
        finally:
            s.close()


class HostileRPC(unittest.TestCase):
    """The admin socket: clear errors, no stuck daemon."""

    def tearDown(self):
        self.assertEqual(rpc("system.health")["result"]["status"], "ok", "the daemon keeps serving")

    def connect(self, timeout=15):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(timeout)
        s.connect(RPC_SOCKET)
        return s

    def read_line(self, s):
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data

    def test_16_mb_message(self):
        s = self.connect()
        try:
            message = b'{"jsonrpc":"2.0","method":"system.health","params":{"x":"' + b"x" * (16 << 20) + b'"},"id":1}\n'
            try:
                s.sendall(message)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the daemon answered and closed before we finished sending
            reply = json.loads(self.read_line(s))
            self.assertEqual(reply["error"]["code"], -32600)
            self.assertIn("too large", reply["error"]["message"].lower())
            self.assertIsNone(reply["id"])
        finally:
            s.close()

    def test_no_newline_then_eof(self):
        s = self.connect()
        try:
            s.sendall(b'{"jsonrpc":"2.0","method":"system.health","id":7}')
            s.shutdown(socket.SHUT_WR)
            data = self.read_line(s)
            if data:  # a final unterminated line may be served; if so, correctly
                self.assertEqual(json.loads(data)["id"], 7)
        finally:
            s.close()

    def test_no_newline_ever(self):
        s = self.connect(timeout=30)
        try:
            s.sendall(b'{"jsonrpc":"2.0","method":"system.health","id":7')
            # The read timeout of the daemon (10 s in the test stack) ends this connection.
            data = self.read_line(s)
            self.assertTrue(data == b"" or b"error" in data, data[:200])
        finally:
            s.close()

    def test_10000_element_batch(self):
        batch = [{"jsonrpc": "2.0", "method": "system.health", "id": i} for i in range(10000)]
        reply = json.loads(rpc_raw(json.dumps(batch).encode(), timeout=30))
        self.assertIsInstance(reply, dict, "one error object, not 10,000 replies")
        self.assertEqual(reply["error"]["code"], -32600)
        self.assertIn("batch", reply["error"]["message"].lower() + json.dumps(reply["error"].get("data", "")).lower())
        self.assertIsNone(reply["id"])

    def test_client_disconnect_mid_call(self):
        for _ in range(20):
            s = self.connect()
            s.sendall(b'{"jsonrpc":"2.0","method":"system.listMethods","id":1}\n' * 50)
            s.close()
        s = self.connect()
        s.sendall(b'{"jsonrpc":"2.0","method":"plans.list","id":1}\n{"jsonrpc":"2.0","method":"plans.l')
        s.close()

    def test_100_concurrent_connections(self):
        results = []
        lock = threading.Lock()

        def one(i):
            try:
                line = rpc_raw(json.dumps({"jsonrpc": "2.0", "method": "system.health", "id": i}).encode(), timeout=30)
                reply = json.loads(line) if line else None
            except (OSError, ValueError) as e:
                reply = e
            with lock:
                results.append(reply)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertFalse(any(t.is_alive() for t in threads), "no client hangs")
        served = [r for r in results if isinstance(r, dict) and "result" in r]
        refused = [r for r in results if isinstance(r, dict) and "error" in r]
        other = [r for r in results if not isinstance(r, dict)]
        self.assertEqual(len(results), 100)
        self.assertGreater(len(served), 0)
        for r in refused:
            self.assertIsInstance(r["error"]["message"], str)
        # A refusal is a line or, racing the close, a reset: never silence until a timeout.
        for r in other:
            self.assertNotIsInstance(r, socket.timeout, r)


class WebhookSecrets(unittest.TestCase):
    def attempt(self, authorization):
        e = event()
        headers = {"Content-Type": "application/json"}
        if authorization is not None:
            headers["Authorization"] = authorization
        r = request("POST", WEBHOOK, body=json.dumps({"event": e}).encode(), headers=headers)
        return r, e["id"], e["app_user_id"]

    def test_secret_variants_are_401_and_write_nothing(self):
        good = secret()
        flipped = good[:-1] + ("0" if good[-1] != "0" else "1")
        variants = {"missing": None, "empty": "", "wrong case": good.swapcase(), "upper scheme": "BEARER" + good[6:],
                    "one byte off": flipped, "one byte short": good[:-1], "one byte more": good + "0",
                    "no scheme": good.split(" ", 1)[-1], "inner space": good.replace(" ", "  ", 1), "huge": good + "x" * 6000,
                    "too huge for nginx": good + "x" * 20000,
                    "double": good + ", " + good, "nul": good[:10] + "\x00" + good[11:]}
        for name, value in variants.items():
            with self.subTest(variant=name):
                try:
                    r, event_id, user = self.attempt(value)
                except ValueError:  # http.client refuses a NUL in a header itself
                    continue
                # nginx itself refuses a NUL (400) or an over-long header line (431), in the
                # API's JSON envelope (SPEC §19).
                expected = {"nul": (400, "bad_request"), "too huge for nginx": (431, "header_too_large")}.get(name, (401, "bad_secret"))
                self.assertEqual(r.status, expected[0], (name, r))
                self.assertEqual(r.json()["error"]["code"], expected[1], (name, r))
                self.assertEqual(inbox_count(event_id), 0)
                self.assertEqual(user_rows(user), 0)
        r, event_id, _ = self.attempt(good)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(inbox_count(event_id), 1)


class TokenAttacks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.signer = Signer()

    def access(self, token):
        return request("GET", "/api/v1/billing/access", headers={"Authorization": "Bearer " + token} if token is not None else {})

    def test_a_good_token_works(self):
        token, user = self.signer.token()
        r = self.access(token)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["userId"], user)

    def test_attacks_are_401_and_write_nothing(self):
        now = int(time.time())
        with open(os.path.join(VAR_DIR, "secrets", "dev-token-cert.pem"), "rb") as f:
            cert_pem = f.read()
        cases = {}
        cases["expired"] = self.signer.token({"exp": now - 3600, "iat": now - 7200})
        cases["not yet valid"] = self.signer.token({"nbf": now + 3600})
        cases["issued in the future"] = self.signer.token({"iat": now + 3600})
        cases["wrong issuer"] = self.signer.token({"iss": "https://evil.example"})
        cases["wrong audience"] = self.signer.token({"aud": "someone-else"})
        cases["audience list without us"] = self.signer.token({"aud": ["a", "b"]})
        cases["no exp"] = self.signer.token({"exp": None})
        cases["exp as string"] = self.signer.token({"exp": str(now + 600)})
        cases["unknown kid"] = self.signer.token(header={"kid": "dev-2"})
        cases["no kid"] = self.signer.token(header={"kid": None})
        cases["kid injection"] = self.signer.token(header={"kid": "../../secrets/dev-token-key.pem' OR 1=1"})
        cases["crit header"] = self.signer.token(header={"crit": ["exp"]})
        cases["empty subject"] = self.signer.token({"sub": ""})
        cases["control characters in subject"] = self.signer.token({"sub": "a\nb"})
        cases["huge subject"] = self.signer.token({"sub": "u" * 129})
        # Unsigned and confused algorithms.
        t, u = self.signer.token(header={"alg": "none"}, signature=b"")
        cases["alg none"] = (t, u)
        cases["alg none, no dot"] = (t.rstrip("."), u)
        t, u = self.signer.token(header={"alg": "HS256"}, signature=b"")
        hmac_input = t.rsplit(".", 1)[0].encode()
        import hmac
        cases["HS256 with the public certificate as secret"] = (hmac_input.decode() + "." + b64u(hmac.new(cert_pem, hmac_input, "sha256").digest()), u)
        cases["ES256 header on the RSA key"] = self.signer.token(header={"alg": "ES256"})
        cases["RS512"] = self.signer.token(header={"alg": "RS512"})
        # Tampering with a genuinely signed token.
        good, user = self.signer.token()
        h, p, s = good.split(".")
        other = json.loads(base64.urlsafe_b64decode(p + "=="))
        other["sub"] = str(uuid.uuid4())
        cases["payload swapped, signature kept"] = (h + "." + b64u(json.dumps(other).encode()) + "." + s, other["sub"])
        cases["signature stripped"] = (h + "." + p + ".", user)
        cases["signature truncated"] = (h + "." + p + "." + s[:-4], user)
        cases["signature of zeros"] = (h + "." + p + "." + b64u(b"\0" * 256), user)
        cases["padding in segments"] = (h + "==." + p + "." + s, user)
        cases["four segments"] = (good + ".x", user)
        cases["huge token"] = (h + "." + p + "A" * 6000 + "." + s, user)
        cases["token too huge for nginx"] = (h + "." + p + "A" * 20000 + "." + s, user)
        cases["JSON instead of JWS"] = ('{"sub":"%s"}' % user, user)
        for name, (token, subject) in cases.items():
            with self.subTest(case=name):
                r = self.access(token)
                self.assertEqual(r.status, 431 if name == "token too huge for nginx" else 401, (name, r))
                self.assertIn("error", r.json(), (name, r))
                if subject:
                    self.assertEqual(user_rows(subject), 0, "a refused token must not create a user")
        for header in [None, "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "bearer " + good + " extra"]:
            with self.subTest(header=header):
                r = request("GET", "/api/v1/billing/access", headers={"Authorization": header} if header is not None else {})
                self.assertEqual(r.status, 401, r)


class AppleJWSAttacks(unittest.TestCase):
    """App Store signed data under attack, on both routes through nginx: the notification
    webhook (`signedPayload`) and the client transaction route (`signedTransaction`). Each
    case gets its precise status and error code, writes nothing to the inbox, the bindings or
    the users, nor to the quarantine (which keeps only deliveries whose signature verified and a
    setting refused, docs/appstore.md; a refused transaction is never kept), and the workers keep serving. Cases test_appstore.py already runs on the transaction
    route against Apple's own verifier (alg none/HS256, chain B, x5c missing or not base64,
    an unrelated signer, a tampered payload, a leaf expired or not yet valid at signedDate)
    are run here on the notification route only."""
    WEBHOOK = "/api/v1/billing/webhooks/apple"
    TRANSACTIONS = "/api/v1/billing/apple/transactions"

    @classmethod
    def setUpClass(cls):
        from harness import appstore as A  # needs `cryptography` (scripts/test installs it with the App Store oracle)
        cls.A = A
        ca = os.path.join(VAR_DIR, "testca")
        cls.a, cls.b = A.load_chain(ca, "a"), A.load_chain(ca, "b")
        cls.signer = Signer()
        cls.pids = worker_pids()

    def tearDown(self):
        self.assertEqual(request("GET", "/api/v1/health").status, 200, "the workers keep serving")

    @classmethod
    def tearDownClass(cls):
        assert worker_pids() == cls.pids, "no worker died on hostile App Store data"

    # ---------------------------------------------------------------- building blocks

    def leaf(self, key, issuer=None, issuer_key=None, **kwargs):
        """A leaf with the receipt OID, issued by the trusted intermediate unless told otherwise."""
        A = self.A
        return A.make_cert("hostile leaf", key, issuer or self.a.intermediate.subject, issuer_key or self.a.int_key,
                           oid=A.RECEIPT_OID, **kwargs)

    def x5c(self, leaf):
        return [self.A.der_b64(leaf), self.A.der_b64(self.a.intermediate), self.A.der_b64(self.a.root)]

    def attacks(self):
        """(name, sign(payload) -> JWS, error code): every JWS/x5c attack, as functions of the payload."""
        A, a, b = self.A, self.a, self.b
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        self_key = A.new_key()
        self_signed = A.make_cert("self-signed leaf", self_key, oid=A.RECEIPT_OID)
        p384_key = A.new_key(ec.SECP384R1())
        p384_leaf = self.leaf(p384_key)
        rsa_key = rsa.generate_private_key(65537, 2048)
        rsa_leaf = self.leaf(rsa_key)
        expired = self.leaf(a.leaf_key, not_before=A.dt(2021), not_after=A.dt(2022))
        future = self.leaf(a.leaf_key, not_before=A.dt(2040), not_after=A.dt(2041))
        good_x5c = a.x5c()
        truncated_der = base64.b64encode(base64.b64decode(good_x5c[0])[:200]).decode()

        def other_payload_signature(payload):
            h, p, _ = a.sign(payload).split(".")
            _, _, signature = a.sign(dict(payload, signedDate=payload["signedDate"] + 1)).split(".")
            return f"{h}.{p}.{signature}"

        def bit_flip(payload):
            # One bit of one character of a value inside the payload: still valid JSON, still
            # base64url, but no longer what was signed.
            h, p, sig = a.sign(payload).split(".")
            raw = bytearray(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
            at = raw.index(b'"signedDate":') + len(b'"signedDate": ') + 3
            raw[at] ^= 0x01  # a digit stays a digit
            json.loads(raw)
            return f"{h}.{b64u(bytes(raw))}.{sig}"

        def sign(key, x5c, **kw):
            return lambda payload: A.sign_jws(payload, key, x5c, **kw)

        return [
            ("alg none, empty signature", sign(None, good_x5c, alg="none", raw_signature=b""), "malformed_jws"),
            ("alg none, a signature", sign(None, good_x5c, alg="none", raw_signature=b"\x00" * 64), "unsupported_algorithm"),
            ("alg HS256 keyed with the leaf certificate", lambda payload: self.hs256(payload, good_x5c), "unsupported_algorithm"),
            ("chain not rooted in the configured root", sign(b.leaf_key, b.x5c()), "untrusted_chain"),
            ("self-signed leaf", sign(self_key, [A.der_b64(self_signed), A.der_b64(a.intermediate), A.der_b64(a.root)]), "untrusted_chain"),
            ("self-signed leaf alone three times", sign(self_key, [A.der_b64(self_signed)] * 3), "untrusted_chain"),
            ("truncated DER leaf", sign(a.leaf_key, [truncated_der] + good_x5c[1:]), "invalid_certificate"),
            ("truncated base64 leaf", sign(a.leaf_key, [good_x5c[0][:-7]] + good_x5c[1:]), "invalid_certificate"),
            ("garbage intermediate", sign(a.leaf_key, [good_x5c[0], "AAAA", good_x5c[2]]), "invalid_certificate"),
            ("x5c entries not strings", sign(a.leaf_key, [1, None, {"a": 1}]), "invalid_certificate"),
            ("x5c not an array", sign(a.leaf_key, good_x5c[0]), "invalid_chain_length"),
            ("x5c missing", sign(a.leaf_key, None), "invalid_chain_length"),
            ("huge x5c array", sign(a.leaf_key, good_x5c * 60), "invalid_chain_length"),
            ("P-384 leaf", sign(p384_key, self.x5c(p384_leaf)), "unexpected_key"),
            ("RSA leaf", sign(rsa_key, self.x5c(rsa_leaf)), "unexpected_key"),
            ("signature of another payload", other_payload_signature, "bad_signature"),
            ("payload bit flip", bit_flip, "bad_signature"),
            ("leaf expired at signedDate", sign(a.leaf_key, self.x5c(expired)), "untrusted_chain"),
            ("leaf not yet valid at signedDate", sign(a.leaf_key, self.x5c(future)), "untrusted_chain"),
        ]

    def hs256(self, payload, x5c):
        import hmac
        header = b64u(json.dumps({"alg": "HS256", "x5c": x5c}).encode())
        body = b64u(json.dumps(payload).encode())
        secret = base64.b64decode(x5c[0])
        return f"{header}.{body}." + b64u(hmac.new(secret, f"{header}.{body}".encode(), "sha256").digest())

    def notification(self, **tx):
        """A valid DID_RENEW notification payload naming a fresh subscription; (payload, uuid, original)."""
        A = self.A
        original = "9" + str(uuid.uuid4().int)[:15]
        transaction = A.transaction_payload(original_id=original, transaction_id="8" + original[1:], **tx)
        payload = A.notification_payload(self.a, "DID_RENEW", transaction=transaction,
                                         renewal=A.renewal_payload(original))
        return payload, payload["notificationUUID"], original

    def post_notification(self, body):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        return request("POST", self.WEBHOOK, body=body, headers={"Content-Type": "application/json"})

    def post_transaction(self, body, user=None):
        token, user = self.signer.token({"sub": user} if user else None)
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        return request("POST", self.TRANSACTIONS, body=body,
                       headers={"Content-Type": "application/json", "Authorization": "Bearer " + token}), user

    def assert_nothing_written(self, original, event_ids=(), user=None):
        self.assertEqual(sql(f"SELECT COUNT(*) FROM billing_events WHERE subscription_id = {sql_string(original)}"), [["0"]])
        for event_id in event_ids:
            self.assertEqual(inbox_count(event_id), 0)
        self.assertEqual(sql(f"SELECT COUNT(*) FROM billing_apple_bindings WHERE original_transaction_id = {sql_string(original)}"), [["0"]])
        self.assertEqual(sql(f"SELECT COUNT(*) FROM billing_binding_audit WHERE original_transaction_id = {sql_string(original)}"), [["0"]])
        if user:
            self.assertEqual(user_rows(user), 0, "a refused transaction must not make its poster known")

    def quarantined(self, body):
        return sql(f"SELECT reason, deliveries FROM billing_quarantine WHERE payload_sha256 = '{hashlib.sha256(body).hexdigest()}'")

    def assert_refused(self, r, status, code):
        self.assertEqual(r.status, status, r)
        self.assertEqual(r.headers.get("content-type", "").split(";")[0], "application/json", r)
        self.assertEqual(r.json()["error"]["code"], code, r)

    # ---------------------------------------------------------------- the cases

    def test_the_valid_baseline_is_accepted_on_both_routes(self):
        # Without this, every refusal below could be a broken fixture.
        payload, note_id, original = self.notification()
        r = self.post_notification({"signedPayload": self.a.sign(payload)})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(inbox_count(note_id), 1)
        transaction = self.A.transaction_payload()
        r, user = self.post_transaction({"signedTransaction": self.a.sign(transaction)})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(inbox_count(transaction["transactionId"]), 1)
        self.assertEqual(user_rows(user), 1)

    def test_notification_route_refuses_every_attack_and_writes_nothing(self):
        for name, sign, code in self.attacks():
            with self.subTest(case=name):
                payload, note_id, original = self.notification()
                jws = sign(payload)
                body = json.dumps({"signedPayload": jws}).encode()
                rows = sql("SELECT COUNT(*) FROM billing_quarantine")
                r = self.post_notification(body)
                self.assert_refused(r, 422, code)
                self.assert_nothing_written(original, [note_id])
                # Nothing that fails verification is stored: no setting could make it verify.
                self.assertEqual(self.quarantined(jws.encode()), [], "a delivery that does not verify is never quarantined")
                self.assertEqual(self.quarantined(body), [])
                self.assertEqual(sql("SELECT COUNT(*) FROM billing_quarantine"), rows)

    def test_notification_with_an_attacked_nested_transaction_writes_nothing(self):
        A, a = self.A, self.a
        for name, sign, code in self.attacks():
            if name in ("signature of another payload",):
                continue  # needs the outer payload; the nested bit flip covers a nested bad signature
            with self.subTest(case=name):
                payload, note_id, original = self.notification()
                transaction = A.transaction_payload(original_id=original, transaction_id="7" + original[1:])
                payload["data"]["signedTransactionInfo"] = sign(transaction)
                body = json.dumps({"signedPayload": a.sign(payload)}).encode()
                r = self.post_notification(body)
                self.assert_refused(r, 422, code)
                self.assert_nothing_written(original, [note_id])

    def test_transaction_route_refuses_the_attacks_test_appstore_does_not_run(self):
        covered = {"alg none, a signature", "alg HS256 keyed with the leaf certificate", "chain not rooted in the configured root",
                   "x5c missing", "leaf expired at signedDate", "leaf not yet valid at signedDate", "signature of another payload"}
        ran = 0
        for name, sign, code in self.attacks():
            if name in covered:
                continue
            with self.subTest(case=name):
                original = "6" + str(uuid.uuid4().int)[:15]
                transaction = self.A.transaction_payload(original_id=original)
                body = json.dumps({"signedTransaction": sign(transaction)}).encode()
                r, user = self.post_transaction(body)
                self.assert_refused(r, 422, code)
                self.assert_nothing_written(original, [transaction["transactionId"]], user=user)
                self.assertEqual(self.quarantined(body), [], "a refused transaction is not quarantined (StoreKit replays it)")
                ran += 1
        self.assertGreaterEqual(ran, 10)

    def test_signed_data_that_is_not_a_string(self):
        for value in [5, None, True, ["a.b.c"], {"signedPayload": "a.b.c"}, ""]:
            with self.subTest(value=value):
                r = self.post_notification({"signedPayload": value})
                self.assert_refused(r, 400, "invalid_payload")
                self.assertEqual(self.quarantined(json.dumps({"signedPayload": value}).encode()), [])
                r, user = self.post_transaction({"signedTransaction": value})
                self.assert_refused(r, 400, "invalid_payload")
                self.assertEqual(user_rows(user), 0)

    def test_huge_signed_data_is_413(self):
        payload, note_id, original = self.notification()
        # A JWS past the App Store bound (256 KiB) inside a body the HTTP limit (1 MiB) accepts.
        padded = dict(payload, padding="x" * 300_000)
        body = json.dumps({"signedPayload": self.a.sign(padded)}).encode()
        r = self.post_notification(body)
        self.assert_refused(r, 413, "payload_too_large")
        self.assert_nothing_written(original, [note_id])
        self.assertEqual(self.quarantined(body), [], "longer than any App Store data: nothing to keep")
        transaction = self.A.transaction_payload(original_id=original, padding="x" * 300_000)
        r, user = self.post_transaction({"signedTransaction": self.a.sign(transaction)})
        self.assert_refused(r, 413, "payload_too_large")
        self.assert_nothing_written(original, [transaction["transactionId"]], user=user)
        # Past the HTTP limit: refused before any parsing.
        padded = dict(payload, padding="x" * 1_200_000)
        r = self.post_notification({"signedPayload": self.a.sign(padded)})
        self.assert_refused(r, 413, "payload_too_large")
        r, user = self.post_transaction({"signedTransaction": "x" * 1_200_000})
        self.assert_refused(r, 413, "payload_too_large")
        self.assert_nothing_written(original, [note_id], user=user)


class SQLInjection(unittest.TestCase):
    """Every string field of a delivery reaches MariaDB only as a bound value: stored and
    read back byte for byte, and the schema is intact."""

    def read_back(self, event_id):
        rows = sql("SELECT provider_event_id, product_id, new_product_id, subscription_id, store, event_type, "
                   "JSON_UNQUOTE(JSON_EXTRACT(payload, '$.app_user_id')), JSON_UNQUOTE(JSON_EXTRACT(payload, '$.cancel_reason')), "
                   f"HEX(provider_event_id), HEX(product_id), HEX(subscription_id) FROM billing_events WHERE provider_event_id = {sql_string(event_id)}")
        self.assertEqual(len(rows), 1, rows)
        return rows[0]

    def test_injection_strings_are_stored_verbatim(self):
        for i, s in enumerate(INJECTIONS):
            with self.subTest(string=s):
                event_id = s + f" #{i} " + uuid.uuid4().hex[:8]
                e = event(id=event_id, product_id=s, new_product_id=s, original_transaction_id=s + str(i),
                          app_user_id=s, cancel_reason=s[:60], store=s[:32], type="PRODUCT_CHANGE", aliases=[s, s[::-1]])
                r = post_webhook({"api_version": "1.0", "event": e})
                self.assertEqual(r.status, 200, r)
                row = self.read_back(event_id)
                self.assertEqual(bytes.fromhex(row[8]).decode(), event_id)
                self.assertEqual(bytes.fromhex(row[9]).decode(), s)
                self.assertEqual(bytes.fromhex(row[10]).decode(), s + str(i))
                self.assertEqual(row[4], s[:32].lower())
                self.assertEqual(row[6], s)
                # The same string a second time is a duplicate of that exact id, nothing else.
                r = post_webhook({"api_version": "1.0", "event": e})
                self.assertEqual(r.json(), {"duplicate": True})
        for table in ["billing_events", "billing_users", "billing_access", "billing_subscriptions"]:
            self.assertEqual(sql(f"SHOW TABLES LIKE '{table}'"), [[table]])

    def test_injection_in_a_token_subject_and_usage_fields(self):
        # A token's sub is an opaque id (SPEC: up to 128 characters): stored as it is. One
        # with whitespace at an end is refused (SPEC §19) and stores nothing.
        signer = Signer()
        for s in INJECTIONS:
            with self.subTest(subject=s):
                token, _ = signer.token({"sub": s})
                r = request("GET", "/api/v1/billing/access", headers={"Authorization": "Bearer " + token})
                if s != s.strip():
                    self.assertEqual((r.status, r.json()["error"]["code"]), (401, "invalid_subject"), r)
                    self.assertEqual(sql(f"SELECT COUNT(*) FROM billing_users WHERE id = {sql_string(s)}"), [["0"]])
                    continue
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json()["userId"], s)
                rows = sql(f"SELECT HEX(id) FROM billing_users WHERE id = {sql_string(s)}")
                self.assertEqual([bytes.fromhex(row[0]).decode() for row in rows], [s])
                for meter_or_key in [s[:64]]:
                    r = request("POST", "/api/v1/billing/usage", body={"meter": meter_or_key, "amount": 1, "idempotencyKey": s},
                                headers={"Authorization": "Bearer " + token})
                    self.assertTrue(400 <= r.status < 500, r)
        self.assertEqual(sql("SHOW TABLES LIKE 'billing_users'"), [["billing_users"]])


if __name__ == "__main__":
    unittest.main()
