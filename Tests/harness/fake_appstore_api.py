"""A local HTTPS fake of Apple's App Store Server API for the reconciliation tests.

It speaks the two endpoints FCGIBilling calls, with their real request and response shapes:
Get All Subscription Statuses (`GET /inApps/v1/subscriptions/{transactionId}`) and Get
Transaction History v2 (`GET /inApps/v2/history/{transactionId}?revision=…&sort=ASCENDING`),
under two base URLs (`…/production`, `…/sandbox`). Every answer's transactions and renewal
infos are JWS signed, when asked, by the test CA shaped like Apple's (appstore.py, chain A).
TLS uses a server certificate from a CA of its own (`ca_file`, trusted by the client through
`apple.serverApi.caFile`). Every request's bearer token is checked like Apple does: ES256
with the In-App Purchase key it generated (`key_file`), `kid`, `iss`, `aud`
`appstoreconnect-v1`, `bid`, `iat`/`exp` at most 60 minutes apart; a bad token is 401.

Scenarios: `news` is what Apple knows per subscription (its transactions, renewal info,
status, environment); `down` answers 503 to everything; `rate_limit(n, retry_after)`
answers 429 with Retry-After n times and counts requests that came back before the wait
was over (`early`); `page_size` pages the history; a subscription in the sandbox answers
404 / errorCode 4040010 in production. Standard library plus `cryptography` (already
needed by appstore.py)."""
import base64
import datetime
import http.server
import ipaddress
import json
import os
import ssl
import threading
import time
import urllib.parse

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from . import appstore as A

ISSUER_ID = "57246542-96fe-1a63-e053-0824d011072a"
KEY_ID = "FAKEKEY123"


def _b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def send_json(handler, status, body, headers):
    """One answer of a fake API: `body` as JSON (bytes are sent as they are), with `headers`."""
    data = bytes(body) if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def serve_https(handler, cert_file, key_file):
    """A threading HTTPS server on 127.0.0.1 (a free port) with `handler`, serving from a
    daemon thread: (server, port, thread)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, server.server_address[1], thread


def _tls_files(directory):
    """A CA and a server certificate for 127.0.0.1 signed by it; returns (ca.pem, cert.pem, key.pem)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Fake App Store API test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = [os.path.join(directory, name) for name in ("api-ca.pem", "api-cert.pem", "api-key.pem")]
    with open(paths[0], "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths[1], "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths[2], "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return paths


class Subscription:
    """What Apple knows of one subscription."""

    def __init__(self, original_id, environment="Production"):
        self.original_id = original_id
        self.environment = environment
        self.transactions = []   # JWSTransaction payloads, oldest first
        self.renewal = None      # JWSRenewalInfo payload
        self.status = 1          # 1 active, 2 expired, 3 billing retry, 4 grace, 5 revoked


class FakeAppStoreAPI:
    def __init__(self, directory, chain):
        self.chain = chain
        self.api_key = ec.generate_private_key(ec.SECP256R1())
        self.key_file = os.path.join(directory, "api-key.p8")
        with open(self.key_file, "w") as f:
            f.write(A.pem(self.api_key))
        self.ca_file, cert_file, key_file = _tls_files(directory)
        self.lock = threading.Lock()
        self.news = {}
        self.down = False
        self.page_size = 20
        self.requests = []        # (environment, endpoint, query) of every authenticated request
        self.auth_failures = []   # why a token was refused
        self.claims = []          # the claims of every accepted token
        self._rate_limits = 0
        self._retry_after = 0
        self._not_before = 0.0
        self.early = 0            # requests that came back before Retry-After was over
        self.rate_limited = 0
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                status, body, headers = fake.answer(self.path, self.headers.get("Authorization", ""))
                send_json(self, status, body, headers)

        self.server, self.port, self.thread = serve_https(Handler, cert_file, key_file)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    # ---------------------------------------------------------------- configuration

    @property
    def production_url(self):
        return f"https://127.0.0.1:{self.port}/production"

    @property
    def sandbox_url(self):
        return f"https://127.0.0.1:{self.port}/sandbox"

    def overrides(self):
        """BILLING__… environment overrides pointing a billing-rpc at this fake."""
        return {"BILLING__apple__serverApi__issuerId": ISSUER_ID, "BILLING__apple__serverApi__keyId": KEY_ID,
                "BILLING__apple__serverApi__privateKeyFile": self.key_file,
                "BILLING__apple__serverApi__productionUrl": self.production_url,
                "BILLING__apple__serverApi__sandboxUrl": self.sandbox_url,
                "BILLING__apple__serverApi__caFile": self.ca_file}

    def subscription(self, original_id, environment="Production"):
        with self.lock:
            return self.news.setdefault(original_id, Subscription(original_id, environment))

    def rate_limit(self, times, retry_after):
        with self.lock:
            self._rate_limits = times
            self._retry_after = retry_after
            self._not_before = 0.0

    def count(self, environment=None, endpoint=None):
        with self.lock:
            return sum(1 for e, p, _ in self.requests if (environment is None or e == environment)
                       and (endpoint is None or p == endpoint))

    # ---------------------------------------------------------------- the API

    def check_token(self, authorization):
        """Apple's rules for the bearer token; returns a refusal reason or None."""
        if not authorization.startswith("Bearer "):
            return "no bearer token"
        parts = authorization[len("Bearer "):].split(".")
        if len(parts) != 3:
            return "not a compact JWS"
        header, claims = json.loads(_b64url_decode(parts[0])), json.loads(_b64url_decode(parts[1]))
        if header.get("alg") != "ES256" or header.get("kid") != KEY_ID or header.get("typ") != "JWT":
            return "header"
        raw = _b64url_decode(parts[2])
        if len(raw) != 64:
            return "signature length"
        signature = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        try:
            self.api_key.public_key().verify(signature, (parts[0] + "." + parts[1]).encode(), ec.ECDSA(hashes.SHA256()))
        except Exception:
            return "signature"
        now = time.time()
        if claims.get("iss") != ISSUER_ID or claims.get("aud") != "appstoreconnect-v1" or claims.get("bid") != A.BUNDLE_ID:
            return "claims"
        iat, exp = claims.get("iat"), claims.get("exp")
        if not isinstance(iat, int) or not isinstance(exp, int) or iat > now + 60 or exp <= now or exp - iat > 3600:
            return "times"
        with self.lock:
            self.claims.append(claims)
        return None

    def answer(self, path, authorization):
        url = urllib.parse.urlsplit(path)
        segments = url.path.strip("/").split("/")
        query = dict(urllib.parse.parse_qsl(url.query))
        refusal = self.check_token(authorization)
        if refusal:
            with self.lock:
                self.auth_failures.append(refusal)
            return 401, {"errorCode": 4010000, "errorMessage": "Unauthenticated"}, {}
        if len(segments) != 5 or segments[0] not in ("production", "sandbox") or segments[1] != "inApps" \
                or (segments[2], segments[3]) not in (("v1", "subscriptions"), ("v2", "history")):
            return 404, {"errorCode": 4040000, "errorMessage": "Not found"}, {}
        environment, endpoint, transaction_id = segments[0], segments[3], segments[4]
        with self.lock:
            self.requests.append((environment, endpoint, query))
            now = time.monotonic()
            if self._not_before and now < self._not_before:
                self.early += 1
            if self._rate_limits > 0:
                self._rate_limits -= 1
                self.rate_limited += 1
                self._not_before = now + self._retry_after
                return 429, {"errorCode": 4290000, "errorMessage": "Rate limit exceeded."}, {"Retry-After": str(self._retry_after)}
            if self.down:
                return 503, {"errorCode": 5000000, "errorMessage": "An unknown error occurred."}, {}
            subscription = next((s for s in self.news.values()
                                 if s.original_id == transaction_id
                                 or any(t["transactionId"] == transaction_id for t in s.transactions)), None)
        if subscription is None or subscription.environment.lower() != environment:
            return 404, {"errorCode": 4040010, "errorMessage": "Transaction id not found."}, {}
        signed = A.now_ms()
        if endpoint == "subscriptions":
            latest = dict(subscription.transactions[-1], signedDate=signed)
            item = {"status": subscription.status, "originalTransactionId": subscription.original_id,
                    "signedTransactionInfo": self.chain.sign(latest)}
            if subscription.renewal is not None:
                item["signedRenewalInfo"] = self.chain.sign(dict(subscription.renewal, signedDate=signed))
            return 200, {"environment": subscription.environment, "bundleId": A.BUNDLE_ID, "appAppleId": A.APP_APPLE_ID,
                         "data": [{"subscriptionGroupIdentifier": "21000001", "lastTransactions": [item]}]}, {}
        start = int(query.get("revision") or 0)
        page = subscription.transactions[start:start + self.page_size]
        more = start + self.page_size < len(subscription.transactions)
        return 200, {"revision": str(start + len(page)), "hasMore": more, "bundleId": A.BUNDLE_ID,
                     "appAppleId": A.APP_APPLE_ID, "environment": subscription.environment,
                     "signedTransactions": [self.chain.sign(dict(t, signedDate=signed)) for t in page]}, {}
