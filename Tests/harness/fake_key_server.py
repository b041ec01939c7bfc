"""A local HTTPS server publishing ID-token signing keys as identity providers do, for the
end-to-end tests of `auth.keysUrl` (SPEC §3):

- `form="certificates"`: Google's `{kid: PEM certificate}` map, the form of Firebase's
  https://www.googleapis.com/robot/v1/metadata/x509/securetoken@system.gserviceaccount.com
  (RSA keys in self-signed X.509 certificates);
- `form="jwks"`: a JWKS, `{"keys": [{kty, kid, use, alg, n, e | crv, x, y}]}`, the form of
  Sign in with Apple's https://appleid.apple.com/auth/keys and of Google's
  https://www.googleapis.com/oauth2/v3/certs.

Answers carry `Cache-Control: public, max-age=N, must-revalidate, no-transform` and `Age`,
as Google's do. `publish(key, ...)` replaces the set; `down` answers 503 to everything;
`body` answers those bytes with 200 (a truncated or keyless document); `hang_seconds` sleeps
before answering (beyond the client's timeout); `stop()` stops listening. Every request's
time is in `requests`.

Keys are made here (`Key.rsa()`, `Key.ec()`) and sign tokens (`Key.token(claims)`), RS256
or ES256, with `cryptography`. TLS uses a CA of its own (`ca_file`, for `auth.caFile`)."""
import datetime
import http.server
import threading
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from .fake_appstore_api import _tls_files, send_json, serve_https
from .tokens import b64url, jwt



def _int_bytes(number, length=None):
    return number.to_bytes(length or (number.bit_length() + 7) // 8, "big")


class Key:
    """One signing key of the issuer: its private half signs, its public half is published."""

    def __init__(self, kid, private):
        self.kid = kid
        self.private = private
        self.alg = "RS256" if isinstance(private, rsa.RSAPrivateKey) else "ES256"
        self._certificate = None

    @classmethod
    def rsa(cls, kid):
        return cls(kid, rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @classmethod
    def ec(cls, kid):
        return cls(kid, ec.generate_private_key(ec.SECP256R1()))

    def certificate_pem(self):
        """A self-signed certificate of the public key, as Google publishes them (made once)."""
        if self._certificate is None:
            self._certificate = self._make_certificate()
        return self._certificate

    def _make_certificate(self):
        now = datetime.datetime.now(datetime.timezone.utc)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "securetoken.system.gserviceaccount.com")])
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.private.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=30))
                .sign(self.private, hashes.SHA256()))
        return cert.public_bytes(serialization.Encoding.PEM).decode()

    def jwk(self):
        numbers = self.private.public_key().public_numbers()
        if self.alg == "RS256":
            return {"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256",
                    "n": b64url(_int_bytes(numbers.n)), "e": b64url(_int_bytes(numbers.e))}
        return {"kty": "EC", "kid": self.kid, "use": "sig", "alg": "ES256", "crv": "P-256",
                "x": b64url(_int_bytes(numbers.x, 32)), "y": b64url(_int_bytes(numbers.y, 32))}

    def sign(self, signing_input):
        if self.alg == "RS256":
            return self.private.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        r, s = decode_dss_signature(self.private.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        return _int_bytes(r, 32) + _int_bytes(s, 32)

    def token(self, claims):
        return jwt({"alg": self.alg, "kid": self.kid, "typ": "JWT"}, claims, self.sign)


class FakeKeyServer:
    PATH = "/keys"

    def __init__(self, directory, form="certificates"):
        self.form = form
        self.ca_file, cert_file, key_file = _tls_files(directory)
        self.lock = threading.Lock()
        self.keys = []
        self.max_age = 3600
        self.age = 0
        self.down = False
        self.body = None          # bytes answered with 200 instead of the keys (a broken answer)
        self.hang_seconds = 0     # sleep before answering (a timeout)
        self.requests = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                with fake.lock:
                    fake.requests.append(time.monotonic())
                    hang = fake.hang_seconds
                if hang:
                    time.sleep(hang)
                with fake.lock:
                    if fake.body is not None:
                        send_json(self, 200, fake.body, {"Cache-Control": "public, max-age=%d" % fake.max_age})
                        return
                    if fake.down:
                        send_json(self, 503, {"error": "unavailable"}, {})
                        return
                    if self.path != FakeKeyServer.PATH:
                        send_json(self, 404, {"error": "not found"}, {})
                        return
                    body = fake.document()
                    headers = {"Cache-Control": "public, max-age=%d, must-revalidate, no-transform" % fake.max_age,
                               "Age": str(fake.age)}
                send_json(self, 200, body, headers)

        self.server, self.port, self.thread = serve_https(Handler, cert_file, key_file)

    @property
    def url(self):
        return "https://127.0.0.1:%d%s" % (self.port, self.PATH)

    def publish(self, *keys, max_age=None):
        with self.lock:
            self.keys = list(keys)
            if max_age is not None:
                self.max_age = max_age

    def document(self):
        if self.form == "jwks":
            return {"keys": [key.jwk() for key in self.keys]}
        return {key.kid: key.certificate_pem() for key in self.keys}

    def count(self):
        with self.lock:
            return len(self.requests)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
