"""Development ID tokens, the one way the tests sign them: RS256 (PKCS#1 v1.5, SHA-256) with
the stack's development key ($BILLING_VAR_DIR/secrets/dev-token-key.pem, made by
scripts/lib/stack.sh dev_secrets), the kid, issuer and audience of scripts/lib/stack.sh
(DEV_TOKEN_*) — what scripts/dev-token prints (billing-rpc dev-token), signed here with
`cryptography` so thousands of users cost no subprocess each.

    token(user)                 a valid token for user (cached per user), the stack's key
    DevSigner(key_path)         the same for another stack's key (torture, cluster); also
      .token(claims, header, signature)
                                a token with any header, claims or signature (the negative
                                tests), for a new random user unless claims name one
    jwt(header, claims, sign)   header.claims.signature, sign(signing input) -> bytes
"""
import base64
import json
import os
import re
import threading
import time
import uuid

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

from .billing import VAR_DIR

STACK_SH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts", "lib", "stack.sh")


def _stack_constants():
    """DEV_TOKEN_KID, DEV_TOKEN_ISSUER and DEV_TOKEN_AUDIENCE as scripts/lib/stack.sh sets them."""
    with open(STACK_SH) as f:
        found = dict(re.findall(r"^DEV_TOKEN_(KID|ISSUER|AUDIENCE)=(\S+)$", f.read(), re.M))
    return found["KID"], found["ISSUER"], found["AUDIENCE"]


DEV_KID, DEV_ISSUER, DEV_AUDIENCE = _stack_constants()
# Long enough for the longest run (torture's long profile) to use one token per user.
LIFETIME_SECONDS = 6 * 3600


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(header, claims, sign):
    """The compact JWS of `header` and `claims` (JSON objects), signed by sign(signing input bytes)."""
    signing_input = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
    return signing_input + "." + b64url(sign(signing_input.encode()))


class DevSigner:
    """RS256 with a stack's development key (loaded on first use), tokens as scripts/dev-token
    makes them."""

    def __init__(self, key_path=None):
        self.key_path = key_path or os.path.join(VAR_DIR, "secrets", "dev-token-key.pem")
        self._key = None
        self._lock = threading.Lock()
        self._cache = {}

    def sign(self, data):
        with self._lock:
            if self._key is None:
                with open(self.key_path, "rb") as f:
                    self._key = serialization.load_pem_private_key(f.read(), None)
        return self._key.sign(data, padding.PKCS1v15(), hashes.SHA256())

    def for_user(self, user):
        """A valid token for user (one per user and signer)."""
        with self._lock:
            cached = self._cache.get(user)
        if cached is None:
            now = int(time.time())
            cached = jwt({"alg": "RS256", "kid": DEV_KID, "typ": "JWT"},
                         {"iss": DEV_ISSUER, "aud": DEV_AUDIENCE, "sub": user, "iat": now - 5, "exp": now + LIFETIME_SECONDS},
                         self.sign)
            with self._lock:
                self._cache[user] = cached
        return cached

    def token(self, claims=None, header=None, signature=None):
        """(token, its sub): the development header and claims (a new random user, issued now,
        expiring in 10 minutes) updated with `claims` and `header` (a member set to None is
        removed), signed with the key unless `signature` (bytes) is given."""
        now = int(time.time())
        c = {"iss": DEV_ISSUER, "aud": DEV_AUDIENCE, "sub": str(uuid.uuid4()), "iat": now, "exp": now + 600}
        c.update(claims or {})
        c = {k: v for k, v in c.items() if v is not None}
        h = {"alg": "RS256", "kid": DEV_KID, "typ": "JWT"}
        h.update(header or {})
        h = {k: v for k, v in h.items() if v is not None}
        return jwt(h, c, self.sign if signature is None else lambda _: signature), c.get("sub")


_default = DevSigner()


def token(user):
    """A valid development token for user on the stack of $BILLING_VAR_DIR (cached per user)."""
    return _default.for_user(user)
