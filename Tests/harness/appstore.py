"""A test CA shaped like Apple's and App Store signed data for the end-to-end tests.

`python3 Tests/harness/appstore.py generate DIR` (run by scripts/test before the stack starts)
writes a trusted root, an untrusted second root, their intermediates (WWDR OID
1.2.840.113635.100.6.2.1) and leaves (receipt-signing OID 1.2.840.113635.100.6.11.1), with
key identifiers so OpenSSL's strict mode accepts them, plus overlay.json, the
configuration overlay trusting the first root. `appstore.py fuzz-seeds CA_DIR OUT_DIR`
writes the seed corpus of the `appstore` fuzz target. Needs the `cryptography` package (a
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
            "com.example.plus.yearly": {"tier": "plus", "cadence": "yearly"},
            # One-time products (SPEC §15): Apple announces their purchase with ONE_TIME_CHARGE.
            "com.example.pro.lifetime": {"tier": "pro", "cadence": "lifetime"},
            "com.example.plus.pass30": {"tier": "plus", "cadence": "non_renewing", "duration": "P1M"},
            "com.example.coins100": {"cadence": "consumable"}}
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


def section_notification_payload(notification_type, section_name, section, subtype=None, signed=None, uuid_=None):
    """A decoded notification whose app section is not `data` (SPEC §15): `summary`
    (RENEWAL_EXTENSION), `externalPurchaseToken` (EXTERNAL_PURCHASE_TOKEN), `appData`
    (RESCIND_CONSENT), shaped as in Apple's app-store-server-library test resources."""
    payload = {"notificationType": notification_type, "notificationUUID": uuid_ or str(uuid.uuid4()), section_name: section,
               "version": "2.0", "signedDate": signed or now_ms()}
    if subtype:
        payload["subtype"] = subtype
    return payload


def summary_section(product="com.example.plus.monthly", environment="Production", bundle=BUNDLE_ID, app_apple_id=APP_APPLE_ID):
    return {"environment": environment, "appAppleId": app_apple_id, "bundleId": bundle, "productId": product,
            "requestIdentifier": str(uuid.uuid4()), "storefrontCountryCodes": ["CAN", "USA", "MEX"],
            "succeededCount": 5, "failedCount": 2}


def external_purchase_token_section(sandbox=False, bundle=BUNDLE_ID, app_apple_id=APP_APPLE_ID):
    return {"externalPurchaseId": ("SANDBOX_" if sandbox else "") + str(uuid.uuid4()), "tokenCreationDate": now_ms(),
            "appAppleId": app_apple_id, "bundleId": bundle}


def app_data_section(environment="Production", bundle=BUNDLE_ID, app_apple_id=APP_APPLE_ID):
    return {"appAppleId": app_apple_id, "bundleId": bundle, "environment": environment,
            "signedAppTransactionInfo": "signed-app-transaction-info"}


def pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()


ENTITLEMENT_KEY_FILES = ("entitlement-key-1.pem", "entitlement-key-2.pem")
ENTITLEMENT_ISSUER = "https://billing.e2e.example"
OFFLINE_SECONDS = 259200
IN_APP_KEY_FILE = "in-app-key.pem"
IN_APP_KEY_ID = "E2EKEY1234"
IN_APP_ISSUER_ID = "57246542-96fe-1a63-e053-0824d011072a"


def write_private(path, text):
    """Writes a credential readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


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
    # What the server signs (SPEC §17): two entitlement keys (the first signs; the second is
    # for the rotation tests) and the In-App Purchase key of offer signatures, each 0600 as
    # the doctor wants a credential.
    signing = []
    for name in ENTITLEMENT_KEY_FILES + (IN_APP_KEY_FILE,):
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            write_private(path, pem(ec.generate_private_key(ec.SECP256R1())))
        signing.append(path)
    overlay = {"apple": {"trustedRootsFiles": [os.path.join(directory, "a-root.der")], "bundleId": BUNDLE_ID,
                         "appAppleId": APP_APPLE_ID, "environments": ["Production", "Sandbox"],
                         "inAppKey": {"issuerId": IN_APP_ISSUER_ID, "keyId": IN_APP_KEY_ID, "privateKeyFile": signing[-1]}},
               "entitlements": {"signingKeyFiles": [signing[0]], "issuer": ENTITLEMENT_ISSUER, "offlineSeconds": OFFLINE_SECONDS},
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


def fuzz_seeds(ca_dir, out_dir):
    """The seed corpus of the `appstore` fuzz target (Fuzz/Targets, Fuzz/corpus/appstore), signed
    with the committed fuzz CA (Fuzz/appstore-ca, chain "a" only). The first byte of a seed
    picks the target's mode: 0 a webhook body, 1 a posted transaction JWS, 2 a notification
    payload the target signs (with `transactionInfo`/`renewalInfo` objects it signs and nests),
    3 a transaction payload the target signs, 4 a JWS header the target signs a fixed
    transaction under. Valid data first, then a few broken or hostile variants."""
    a = load_chain(ca_dir, "a")
    b = Chain("FCGIBilling fuzz B")
    os.makedirs(out_dir, exist_ok=True)
    signed = int(dt(2025, 6).timestamp() * 1000)
    day = 86400_000
    seeds = {}

    def tx(**extra):
        return transaction_payload(original_id="2000000001", transaction_id="2000000002", purchase=signed - day,
                                   expires=signed + 30 * day, signed=signed, **extra)

    def renewal(**extra):
        return renewal_payload("2000000001", signed=signed, **extra)

    def note(kind, subtype=None, transaction=None, renewal_info=None, chain=a, **extra):
        payload = notification_payload(chain, kind, subtype, transaction=transaction, renewal=renewal_info, signed=signed,
                                       uuid_="6b1a4d2e-0000-4000-8000-00000000000%d" % (len(seeds) % 10))
        payload.update(extra)
        return payload

    def body(jws):
        return json.dumps({"signedPayload": jws}).encode()

    token = "6f1c1a8e-8a4e-4f37-9a44-1d2b3c4d5e6f"
    notes = {
        "subscribed": note("SUBSCRIBED", "INITIAL_BUY", tx(appAccountToken=token), renewal()),
        "did-renew": note("DID_RENEW", None, tx(), renewal()),
        "renewal-off": note("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", tx(), renewal(autoRenewStatus=0)),
        "downgrade": note("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", tx(product="com.example.pro.monthly"),
                          renewal(product="com.example.plus.monthly")),
        "grace": note("DID_FAIL_TO_RENEW", "GRACE_PERIOD", tx(), renewal(gracePeriodExpiresDate=signed + 6 * day,
                                                                           isInBillingRetryPeriod=True)),
        "refund": note("REFUND", None, tx(revocationDate=signed, revocationReason=0)),
        "trial": note("SUBSCRIBED", "INITIAL_BUY", tx(offerType=1, offerDiscountType="FREE_TRIAL", price=0), renewal()),
        "test": note("TEST"),
    }
    for name, payload in notes.items():
        seeds[f"0-{name}"] = b"\x00" + body(a.sign(payload))
    good = a.sign(notes["did-renew"])
    h, p, sig = good.split(".")
    flipped = bytearray(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
    flipped[len(flipped) // 2] ^= 0x01
    hostile = {
        "untrusted-chain": b.sign(note("DID_RENEW", None, tx(), chain=b)),
        "alg-none": sign_jws(notes["test"], None, a.x5c(), alg="none", raw_signature=b""),
        "x5c-missing": sign_jws(notes["test"], a.leaf_key, None),
        "x5c-two": sign_jws(notes["test"], a.leaf_key, a.x5c()[:2]),
        "x5c-truncated": sign_jws(notes["test"], a.leaf_key, [a.x5c()[0][:200]] + a.x5c()[1:]),
        "payload-bit-flip": f"{h}.{b64url(bytes(flipped))}.{sig}",
        "nested-untrusted": a.sign(dict(notes["did-renew"], data=dict(notes["did-renew"]["data"], signedTransactionInfo=b.sign(tx())))),
    }
    for name, jws in hostile.items():
        seeds[f"0-{name}"] = b"\x00" + body(jws)
    seeds["0-not-a-string"] = b"\x00" + b'{"signedPayload": 5}'
    for name, payload in {"tx": tx(), "tx-trial": tx(offerType=1, offerDiscountType="FREE_TRIAL", price=0),
                          "tx-revoked": tx(revocationDate=signed, revocationReason=1), "tx-token": tx(appAccountToken=token)}.items():
        seeds[f"1-{name}"] = b"\x01" + a.sign(payload).encode()
    seeds["1-tx-untrusted"] = b"\x01" + b.sign(tx()).encode()
    for name, payload in notes.items():
        unsigned = dict(payload, data=dict(payload["data"]))
        for field, plain in (("signedTransactionInfo", "transactionInfo"), ("signedRenewalInfo", "renewalInfo")):
            jws = unsigned["data"].pop(field, None)
            if jws is not None:
                part = jws.split(".")[1]
                unsigned["data"][plain] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        seeds[f"2-{name}"] = b"\x02" + json.dumps(unsigned).encode()
    seeds["3-tx"] = b"\x03" + json.dumps(tx()).encode()
    seeds["3-tx-trial"] = b"\x03" + json.dumps(tx(offerType=1, offerDiscountType="FREE_TRIAL", price=0, currency="USD")).encode()
    seeds["3-tx-revoked"] = b"\x03" + json.dumps(tx(revocationDate=signed + day, appAccountToken=token.upper())).encode()
    headers = {"good": {"alg": "ES256", "x5c": a.x5c()}, "alg-none": {"alg": "none", "x5c": a.x5c()},
               "alg-hs256": {"alg": "HS256", "x5c": a.x5c()}, "x5c-empty": {"alg": "ES256", "x5c": []},
               "x5c-four": {"alg": "ES256", "x5c": a.x5c() + a.x5c()[2:]}, "x5c-chain-b": {"alg": "ES256", "x5c": b.x5c()},
               "x5c-self-signed": {"alg": "ES256", "x5c": [a.x5c()[2]] * 3},
               "x5c-not-strings": {"alg": "ES256", "x5c": [1, None, {"a": 1}]}, "x5c-string": {"alg": "ES256", "x5c": a.x5c()[0]}}
    for name, header in headers.items():
        seeds[f"4-{name}"] = b"\x04" + json.dumps(header).encode()
    for name, data in seeds.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
    return len(seeds)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "generate":
        generate(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "fuzz-seeds":
        print(f"{fuzz_seeds(sys.argv[2], sys.argv[3])} seeds written to {sys.argv[3]}")
    else:
        print("usage: appstore.py generate DIR | appstore.py fuzz-seeds CA_DIR OUT_DIR", file=sys.stderr)
        sys.exit(2)
