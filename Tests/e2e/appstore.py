"""A test CA shaped like Apple's and App Store signed data for the end-to-end tests.

`python3 Tests/e2e/appstore.py generate DIR` (run by scripts/test before the stack starts)
writes a trusted root, an untrusted second root, their intermediates (WWDR OID
1.2.840.113635.100.6.2.1) and leaves (receipt-signing OID 1.2.840.113635.100.6.11.1), with
key identifiers so OpenSSL's strict mode accepts them, plus overlay.json, the
configuration overlay trusting the first root. Needs the `cryptography` package (a
dependency of Apple's app-store-server-library, the oracle)."""
import base64
import datetime
import json
import os
import sys
import time
import uuid

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa, padding
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

WWDR_OID = x509.ObjectIdentifier("1.2.840.113635.100.6.2.1")
RECEIPT_OID = x509.ObjectIdentifier("1.2.840.113635.100.6.11.1")
BUNDLE_ID = "com.example.fcgibilling"
APP_APPLE_ID = 1234567
PRODUCTS = {"com.example.plus.monthly": {"tier": "plus", "cadence": "monthly"},
            "com.example.pro.monthly": {"tier": "pro", "cadence": "monthly"},
            "com.example.plus.yearly": {"tier": "plus", "cadence": "yearly"}}
UTC = datetime.timezone.utc


def dt(year, month=1, day=1):
    return datetime.datetime(year, month, day, tzinfo=UTC)


def new_key(curve=None):
    return ec.generate_private_key(curve or ec.SECP256R1())


def make_cert(subject, key, issuer_name=None, issuer_key=None, ca=False, path_length=None, oid=None,
              not_before=dt(2020), not_after=dt(2045), skid=True, akid=True, sign_hash=None):
    """One certificate; self-signed when issuer_key is None."""
    issuer_key = issuer_key or key
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "FCGIBilling tests")])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name or name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(not_before).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length if ca else None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
    else:
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
    if skid:
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    if akid and issuer_key is not key:
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    if oid is not None:
        builder = builder.add_extension(x509.UnrecognizedExtension(oid, b"\x05\x00"), critical=False)
    return builder.sign(issuer_key, sign_hash or hashes.SHA256())


class Chain:
    """root → intermediate (WWDR OID) → leaf (receipt OID), with their keys."""

    def __init__(self, label, root=None, root_key=None, leaf_kwargs=None, int_kwargs=None):
        self.root_key = root_key or new_key()
        self.root = root or make_cert(f"{label} Root CA", self.root_key, ca=True)
        self.int_key = new_key()
        self.intermediate = make_cert(f"{label} WWDR", self.int_key, self.root.subject, self.root_key, ca=True,
                                      path_length=0, oid=WWDR_OID, **(int_kwargs or {}))
        self.leaf_key = new_key((leaf_kwargs or {}).pop("curve", None) if leaf_kwargs else None)
        self.leaf = make_cert(f"{label} receipt signing", self.leaf_key, self.intermediate.subject, self.int_key,
                              oid=RECEIPT_OID, **(leaf_kwargs or {}))

    def x5c(self):
        return [der_b64(self.leaf), der_b64(self.intermediate), der_b64(self.root)]

    def sign(self, payload, **kwargs):
        return sign_jws(payload, self.leaf_key, self.x5c(), **kwargs)


def der_b64(cert):
    return base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_jws(payload, key, x5c, alg="ES256", header_extra=None, raw_signature=None):
    header = {"alg": alg, "x5c": x5c} if x5c is not None else {"alg": alg}
    if alg is None:
        header.pop("alg")
    header.update(header_extra or {})
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    signing_input = (b64url(json.dumps(header).encode()) + "." + b64url(body)).encode()
    if raw_signature is not None:
        sig = raw_signature
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        width = (key.curve.key_size + 7) // 8
        r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        sig = r.to_bytes(width, "big") + s.to_bytes(width, "big")
    elif isinstance(key, rsa.RSAPrivateKey):
        sig = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    else:
        sig = b"\x00" * 64
    return signing_input.decode() + "." + b64url(sig)


def now_ms():
    return int(time.time() * 1000)


def transaction_payload(original_id=None, transaction_id=None, product="com.example.plus.monthly", environment="Production",
                        purchase=None, expires=None, signed=None, bundle=BUNDLE_ID, **extra):
    now = now_ms()
    original_id = original_id or str(uuid.uuid4().int)[:16]
    payload = {"transactionId": transaction_id or original_id, "originalTransactionId": original_id, "bundleId": bundle,
               "productId": product, "purchaseDate": purchase or now - 3600_000, "originalPurchaseDate": purchase or now - 3600_000,
               "expiresDate": expires or now + 30 * 86400_000, "quantity": 1, "type": "Auto-Renewable Subscription",
               "inAppOwnershipType": "PURCHASED", "signedDate": signed or now, "environment": environment,
               "transactionReason": "PURCHASE", "storefront": "FRA", "storefrontId": "143442", "price": 4990, "currency": "EUR"}
    payload.update(extra)
    return {k: v for k, v in payload.items() if v is not None}


def renewal_payload(original_id, product="com.example.plus.monthly", environment="Production", signed=None, **extra):
    payload = {"originalTransactionId": original_id, "autoRenewProductId": product, "productId": product,
               "autoRenewStatus": 1, "signedDate": signed or now_ms(), "environment": environment}
    payload.update(extra)
    return payload


def notification_payload(chain, notification_type, subtype=None, transaction=None, renewal=None, environment="Production",
                         signed=None, bundle=BUNDLE_ID, app_apple_id=APP_APPLE_ID, uuid_=None):
    data = {"bundleId": bundle, "environment": environment, "appAppleId": app_apple_id, "bundleVersion": "1"}
    if transaction is not None:
        data["signedTransactionInfo"] = chain.sign(transaction)
    if renewal is not None:
        data["signedRenewalInfo"] = chain.sign(renewal)
    payload = {"notificationType": notification_type, "notificationUUID": uuid_ or str(uuid.uuid4()), "data": data,
               "version": "2.0", "signedDate": signed or now_ms()}
    if subtype:
        payload["subtype"] = subtype
    return payload


def pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()


def generate(directory):
    """Writes the trusted chain A, the untrusted chain B and overlay.json into directory."""
    os.makedirs(directory, exist_ok=True)
    for label in ("a", "b"):
        chain = Chain(f"FCGIBilling test {label.upper()}")
        for name, cert in (("root", chain.root), ("intermediate", chain.intermediate), ("leaf", chain.leaf)):
            with open(os.path.join(directory, f"{label}-{name}.der"), "wb") as f:
                f.write(cert.public_bytes(serialization.Encoding.DER))
            with open(os.path.join(directory, f"{label}-{name}.pem"), "wb") as f:
                f.write(cert.public_bytes(serialization.Encoding.PEM))
        for name, key in (("root", chain.root_key), ("intermediate", chain.int_key), ("leaf", chain.leaf_key)):
            with open(os.path.join(directory, f"{label}-{name}-key.pem"), "w") as f:
                f.write(pem(key))
    overlay = {"apple": {"trustedRootsFiles": [os.path.join(directory, "a-root.der")], "bundleId": BUNDLE_ID,
                         "appAppleId": APP_APPLE_ID, "environments": ["Production", "Sandbox"]},
               "products": PRODUCTS, "binding": {"policy": "deny"}}
    with open(os.path.join(directory, "overlay.json"), "w") as f:
        json.dump(overlay, f, indent=2)


def load_chain(directory, label):
    """Chain A or B as generate() wrote it."""
    chain = Chain.__new__(Chain)
    def cert(name):
        with open(os.path.join(directory, f"{label}-{name}.der"), "rb") as f:
            return x509.load_der_x509_certificate(f.read())
    def key(name):
        with open(os.path.join(directory, f"{label}-{name}-key.pem"), "rb") as f:
            return serialization.load_pem_private_key(f.read(), None)
    chain.root, chain.intermediate, chain.leaf = cert("root"), cert("intermediate"), cert("leaf")
    chain.root_key, chain.int_key, chain.leaf_key = key("root"), key("intermediate"), key("leaf")
    return chain


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "generate":
        print("usage: appstore.py generate DIR", file=sys.stderr)
        sys.exit(2)
    generate(sys.argv[2])
