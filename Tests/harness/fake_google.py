"""A local HTTPS fake of the two Google endpoints billing reads Play through (SPEC §18), for
the end-to-end tests, answering their real shapes:

- the OAuth 2 token endpoint of a service account (RFC 7523 JWT-bearer grant, as
  https://developers.google.com/identity/protocols/oauth2/service-account documents it):
  `POST /token` with `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=JWT`,
  the JWT RS256 under the key file's `private_key_id`, claims `iss` (the account's email),
  `scope`, `aud` (this URL), `iat`, `exp` (at most an hour later). Answers
  `{"access_token", "expires_in", "token_type": "Bearer"}`, or 400 `{"error":
  "invalid_grant", "error_description"}`;
- the Play Developer API (androidpublisher v3, its discovery document):
  `GET /androidpublisher/v3/applications/{packageName}/purchases/subscriptionsv2/tokens/{token}`
  answers the SubscriptionPurchaseV2 the test set for the token (`subscription_v2` builds
  one: kind, regionCode, startTime, subscriptionState, lineItems [{productId, expiryTime,
  autoRenewingPlan {autoRenewEnabled, recurringPrice}, offerDetails {basePlanId, offerId,
  offerTags}, offerPhase, latestSuccessfulOrderId}], linkedPurchaseToken,
  canceledStateContext, testPurchase, acknowledgementState, externalAccountIdentifiers, etag),
  `GET …/purchases/productsv2/tokens/{token}` the ProductPurchaseV2 of a one-time product
  (`product_v2` builds one: productLineItem [{productId, productOfferDetails}],
  purchaseStateContext {purchaseState}, purchaseCompletionTime, orderId,
  obfuscatedExternalAccountId, testPurchaseContext, acknowledgementState), and
  `POST /androidpublisher/v3/applications/{packageName}/purchases/subscriptions/
  {subscriptionId}/tokens/{token}:acknowledge` or `…/purchases/products/{productId}/tokens/
  {token}:acknowledge` (an empty 200), and `GET …/purchases/voidedpurchases?startTime&type&token`
  (`voided`: VoidedPurchase entries {purchaseToken, purchaseTimeMillis, voidedTimeMillis,
  orderId, voidedSource, voidedReason}, paged by `voided_page_size` with tokenPagination;
  without `type=1` only one-time products, as Google does). Errors are Google's
  `{"error": {"code", "message", "status"}}`: 401 UNAUTHENTICATED without a valid access
  token, 404 NOT_FOUND for a token or package it does not know, 503 UNAVAILABLE when `down`.

The service account's key file (Google's JSON shape, `type: service_account`) is written by
the fake: `key_file`, for `google.serviceAccountFile`. TLS uses a CA of its own (`ca_file`).
`grants` counts access tokens granted; `revoke_tokens()` makes the granted ones invalid (a
401 follows); `acknowledged[token]` counts acknowledgements. Failure scenarios of the API:
`down` (503 to everything), `hang_seconds` (sleeps before every answer), and
`fail_next(status, body, headers)` queueing canned answers (a 429 RESOURCE_EXHAUSTED with
Retry-After, a 200 that is not the documented shape) served before the real one.

It is also the Pub/Sub push's signer: `GET /oauth2/v3/certs` publishes its RSA keys as Google
does (a JWK set, `Cache-Control: max-age`), `push_token()` makes the OIDC token a push
subscription sends (RS256, `iss` https://accounts.google.com, `aud`, `email`,
`email_verified`, `sub`, `iat`, `exp` an hour later), and `push_body()` the push itself
(`{"message": {"data": base64 DeveloperNotification, "messageId", "publishTime"},
"subscription"}`) as https://cloud.google.com/pubsub/docs/push documents it.
`key_fetches` counts the key set's downloads. Standard library, PyJWT and `cryptography`."""
import base64
import datetime
import http.server
import json
import os
import secrets
import ssl
import threading
import time
import urllib.parse

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from .fake_appstore_api import _tls_files, send_json, serve_https

SCOPE = "https://www.googleapis.com/auth/androidpublisher"
GRANT_TYPE = "urn:ietf:params:oauth:grant-type:jwt-bearer"
API_PREFIX = "/androidpublisher/v3/applications/"
PACKAGE = "com.example.fcgibilling"
PUSH_ACCOUNT = "pubsub-push@fcgibilling-e2e.iam.gserviceaccount.com"
PUSH_AUDIENCE = "https://billing.example.com/api/v1/billing/webhooks/google"


def rfc3339(ms):
    """Google's Timestamp format: UTC, nanoseconds, Z."""
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + ".%03d000000Z" % millis


def subscription_v2(product, base_plan, state, expiry_ms, *, user=None, auto_renew=True, start_ms=None, offer_id=None,
                    offer_phase="basePrice", test=False, acknowledged=True, linked_token=None, canceled_by=None,
                    price=("EUR", 4, 990000000), order="GPA.3312-4455-6677-88990"):
    """A SubscriptionPurchaseV2 as purchases.subscriptionsv2.get answers it."""
    item = {"productId": product, "expiryTime": rfc3339(expiry_ms),
            "offerDetails": {"basePlanId": base_plan, "offerTags": []}, "latestSuccessfulOrderId": order,
            "offerPhase": {offer_phase: {}}}
    if offer_id:
        item["offerDetails"]["offerId"] = offer_id
    if auto_renew is None:
        item["prepaidPlan"] = {"allowExtendAfterTime": rfc3339(expiry_ms - 86400_000)}
    else:
        currency, units, nanos = price
        item["autoRenewingPlan"] = {"autoRenewEnabled": auto_renew,
                                    "recurringPrice": {"currencyCode": currency, "units": str(units), "nanos": nanos}}
    purchase = {"kind": "androidpublisher#subscriptionPurchaseV2", "regionCode": "FR",
                "startTime": rfc3339(start_ms if start_ms is not None else expiry_ms - 30 * 86400_000),
                "subscriptionState": state, "latestOrderId": order, "lineItems": [item],
                "acknowledgementState": "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED" if acknowledged
                else "ACKNOWLEDGEMENT_STATE_PENDING", "etag": secrets.token_hex(8)}
    if user:
        purchase["externalAccountIdentifiers"] = {"obfuscatedExternalAccountId": user}
    if test:
        purchase["testPurchase"] = {}
    if linked_token:
        purchase["linkedPurchaseToken"] = linked_token
    if canceled_by:
        purchase["canceledStateContext"] = {canceled_by + "InitiatedCancellation": {}} if canceled_by != "replacement" \
            else {"replacementCancellation": {}}
    return purchase


def product_v2(product, state="PURCHASED", *, user=None, completed_ms=None, acknowledged=True, test=False,
               order="GPA.3371-2203-9914-55021"):
    """A ProductPurchaseV2 as purchases.productsv2.getproductpurchasev2 answers it (a one-time product)."""
    purchase = {"kind": "androidpublisher#productPurchaseV2",
                "productLineItem": [{"productId": product, "productOfferDetails": {"offerTags": [], "quantity": 1,
                                                                                   "refundableQuantity": 1,
                                                                                   "consumptionState": "CONSUMPTION_STATE_YET_TO_BE_CONSUMED",
                                                                                   "purchaseOptionId": "buy"}}],
                "purchaseStateContext": {"purchaseState": state}, "orderId": order, "regionCode": "FR",
                "acknowledgementState": "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED" if acknowledged
                else "ACKNOWLEDGEMENT_STATE_PENDING"}
    if state == "PURCHASED":
        purchase["purchaseCompletionTime"] = rfc3339(completed_ms if completed_ms is not None else int(time.time() * 1000))
    if user:
        purchase["obfuscatedExternalAccountId"] = user
    if test:
        purchase["testPurchaseContext"] = {"fopType": "TEST"}
    return purchase


def google_error(handler, status, message, status_name):
    send_json(handler, status, {"error": {"code": status, "message": message, "status": status_name}}, {})


class FakeGoogle:
    def __init__(self, directory, package=PACKAGE, expires_in=3599):
        self.directory = directory
        self.package = package
        self.expires_in = expires_in
        self.ca_file, cert_file, key_file = _tls_files(directory)
        self.account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.key_id = secrets.token_hex(20)
        self.email = "billing-reader@fcgibilling-e2e.iam.gserviceaccount.com"
        self.purchases = {}
        self.products = {}          # one-time product purchases by token (product_v2)
        self.voided = []            # VoidedPurchase entries purchases.voidedpurchases.list answers
        self.voided_page_size = 2   # small, so a listing takes several pages (tokenPagination)
        self.acknowledged = {}
        self.grants = 0
        self.refused_grants = []
        self.tokens = {}            # access token -> expiry (epoch seconds)
        self.down = False
        self.hang_seconds = 0
        self.canned = []
        self.requests = []
        self.lock = threading.Lock()
        self.push_keys = [(secrets.token_hex(20), rsa.generate_private_key(public_exponent=65537, key_size=2048))]
        self.key_fetches = 0
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                fake.requests.append(("POST", self.path))
                if self.path == "/token":
                    return fake.token(self, body)
                fake.api(self, "POST")

            def do_GET(self):
                fake.requests.append(("GET", self.path))
                if self.path == "/oauth2/v3/certs":
                    return fake.certs(self)
                fake.api(self, "GET")

            def handle(self):
                try:
                    super().handle()
                except (ConnectionError, ssl.SSLError):
                    pass    # the client gave up waiting (the timeout scenario)

        self.server, self.port, _ = serve_https(Handler, cert_file, key_file)
        self.url = "https://127.0.0.1:%d" % self.port
        self.token_url = self.url + "/token"
        self.key_file = os.path.join(directory, "service-account.json")
        pem = self.account_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()).decode()
        document = {"type": "service_account", "project_id": "fcgibilling-e2e", "private_key_id": self.key_id,
                    "private_key": pem, "client_email": self.email, "client_id": "104242424242424242424",
                    "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": self.token_url,
                    "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
                    "universe_domain": "googleapis.com"}
        fd = os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(document, f)
        self.private_key_marker = pem.splitlines()[1]

    def overrides(self):
        """The environment a billing-rpc needs to read Play from this fake."""
        return {"BILLING__google__packageName": self.package, "BILLING__google__serviceAccountFile": self.key_file,
                "BILLING__google__tokenUrl": self.token_url, "BILLING__google__apiUrl": self.url,
                "BILLING__google__caFile": self.ca_file, "BILLING__google__maxAttempts": "2",
                "BILLING__google__timeoutSeconds": "2", "BILLING__google__maxRetryAfterSeconds": "2"}

    def push_overrides(self):
        """The environment of a worker taking this fake's pushes (with `overrides()`)."""
        return dict(self.overrides(), BILLING__google__pushKeysUrl=self.url + "/oauth2/v3/certs",
                    BILLING__google__pushAudience=PUSH_AUDIENCE, BILLING__google__pushServiceAccount=PUSH_ACCOUNT)

    # ------------------------------------------------------------------ the push's OIDC tokens

    def certs(self, handler):
        from jwt.algorithms import RSAAlgorithm
        keys = []
        for kid, key in self.push_keys:
            jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
            jwk.update(kid=kid, alg="RS256", use="sig")
            keys.append(jwk)
        with self.lock:
            self.key_fetches += 1
        send_json(handler, 200, {"keys": keys}, {"Cache-Control": "public, max-age=21600, must-revalidate, no-transform"})

    def push_token(self, *, audience=PUSH_AUDIENCE, email=PUSH_ACCOUNT, email_verified=True, key=None, kid=None,
                   issuer="https://accounts.google.com", ttl=3600, algorithm="RS256"):
        """The OIDC token a Pub/Sub push subscription sends in `Authorization: Bearer`."""
        own_kid, own_key = self.push_keys[0]
        now = int(time.time())
        claims = {"aud": audience, "azp": "104242424242424242425", "email": email, "email_verified": email_verified,
                  "exp": now + ttl, "iat": now, "iss": issuer, "sub": "104242424242424242425"}
        claims = {k: v for k, v in claims.items() if v is not None}
        return jwt.encode(claims, key or own_key, algorithm=algorithm, headers={"kid": kid or own_kid, "typ": "JWT"})

    def push_body(self, notification, message_id=None, package=None):
        """A push of `notification` (the DeveloperNotification's kind member, e.g.
        `{"subscriptionNotification": {...}}`)."""
        developer = {"version": "1.0", "packageName": package or self.package, "eventTimeMillis": str(int(time.time() * 1000))}
        developer.update(notification)
        data = base64.b64encode(json.dumps(developer).encode()).decode()
        message_id = message_id or str(secrets.randbelow(10 ** 16))
        return {"message": {"data": data, "messageId": message_id, "message_id": message_id,
                            "publishTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                            "publish_time": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()), "attributes": {}},
                "subscription": "projects/fcgibilling-e2e/subscriptions/play-rtdn-push"}

    def fail_next(self, status, body, headers=None, method=None):
        """The next API request (of `method`, when given) is answered `status` with `body`
        (bytes as they are, else JSON)."""
        with self.lock:
            self.canned.append((method, (status, body, headers or {})))

    def revoke_tokens(self):
        with self.lock:
            self.tokens.clear()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------ the token endpoint

    def token(self, handler, body):
        form = urllib.parse.parse_qs(body.decode(), strict_parsing=False)
        def refuse(why):
            self.refused_grants.append(why)
            send_json(handler, 400, {"error": "invalid_grant", "error_description": why}, {})
        if handler.headers.get("Content-Type", "").split(";")[0] != "application/x-www-form-urlencoded":
            return refuse("not a form")
        if form.get("grant_type") != [GRANT_TYPE] or len(form.get("assertion", [])) != 1:
            return refuse("unsupported grant")
        assertion = form["assertion"][0]
        try:
            header = jwt.get_unverified_header(assertion)
            claims = jwt.decode(assertion, key=self.account_key.public_key(), algorithms=["RS256"], audience=self.token_url,
                                issuer=self.email, options={"require": ["iss", "aud", "iat", "exp", "scope"]})
        except jwt.PyJWTError as error:
            return refuse("Invalid JWT Signature." if isinstance(error, jwt.InvalidSignatureError) else str(error))
        if header.get("kid") != self.key_id:
            return refuse("kid is not the key's private_key_id")
        if SCOPE not in claims["scope"].split(" ") or claims["exp"] - claims["iat"] > 3600:
            return refuse("Invalid JWT: scope or lifetime")
        access = "ya29.fake-" + secrets.token_urlsafe(24)
        with self.lock:
            self.grants += 1
            self.tokens[access] = time.time() + self.expires_in
        send_json(handler, 200, {"access_token": access, "expires_in": self.expires_in, "token_type": "Bearer"}, {})

    # ------------------------------------------------------------------ androidpublisher

    def api(self, handler, method):
        if self.hang_seconds:
            time.sleep(self.hang_seconds)
        with self.lock:
            index = next((i for i, (m, _) in enumerate(self.canned) if m in (None, method)), None)
            canned = self.canned.pop(index)[1] if index is not None else None
        if canned:
            return send_json(handler, *canned)
        if self.down:
            return google_error(handler, 503, "The service is currently unavailable.", "UNAVAILABLE")
        authorization = handler.headers.get("Authorization", "")
        token = authorization[len("Bearer "):] if authorization.startswith("Bearer ") else None
        with self.lock:
            valid = token is not None and self.tokens.get(token, 0) > time.time()
        if not valid:
            return google_error(handler, 401, "Request had invalid authentication credentials.", "UNAUTHENTICATED")
        path = urllib.parse.urlsplit(handler.path).path
        if not path.startswith(API_PREFIX):
            return google_error(handler, 404, "Not Found", "NOT_FOUND")
        package, _, rest = urllib.parse.unquote(path[len(API_PREFIX):]).partition("/")
        if package != self.package:
            return google_error(handler, 404, "No application was found for the given package name.", "NOT_FOUND")
        if method == "GET" and rest.startswith("purchases/subscriptionsv2/tokens/"):
            purchase = self.purchases.get(rest[len("purchases/subscriptionsv2/tokens/"):])
            if purchase is None:
                return google_error(handler, 404, "The purchase token was not found.", "NOT_FOUND")
            return send_json(handler, 200, purchase, {})
        if method == "GET" and rest == "purchases/voidedpurchases":
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query)
            since = int(query.get("startTime", ["0"])[0])
            with self.lock:
                listed = [v for v in self.voided if int(v["voidedTimeMillis"]) >= since
                          and (query.get("type", ["0"])[0] == "1" or v.get("_oneTime"))]
            start = int(query.get("token", ["0"])[0] or 0)
            page = [{k: v for k, v in entry.items() if not k.startswith("_")}
                    for entry in listed[start:start + self.voided_page_size]]
            answer = {"pageInfo": {"totalResults": len(listed), "resultPerPage": self.voided_page_size, "startIndex": start},
                      "voidedPurchases": page}
            if start + self.voided_page_size < len(listed):
                answer["tokenPagination"] = {"nextPageToken": str(start + self.voided_page_size)}
            return send_json(handler, 200, answer, {})
        if method == "GET" and rest.startswith("purchases/productsv2/tokens/"):
            purchase = self.products.get(rest[len("purchases/productsv2/tokens/"):])
            if purchase is None:
                return google_error(handler, 404, "The purchase token was not found.", "NOT_FOUND")
            return send_json(handler, 200, purchase, {})
        acknowledging = method == "POST" and rest.endswith(":acknowledge")
        if acknowledging and (rest.startswith("purchases/subscriptions/") or rest.startswith("purchases/products/")):
            collection = "subscriptions" if rest.startswith("purchases/subscriptions/") else "products"
            _, _, tail = rest.partition("purchases/%s/" % collection)
            product_id, _, purchase_token = tail[:-len(":acknowledge")].partition("/tokens/")
            if collection == "subscriptions":
                purchase = self.purchases.get(purchase_token)
                items = [i["productId"] for i in purchase["lineItems"]] if purchase else []
            else:
                purchase = self.products.get(purchase_token)
                items = [i["productId"] for i in purchase["productLineItem"]] if purchase else []
            if purchase is None or product_id not in items:
                return google_error(handler, 404, "The purchase token was not found.", "NOT_FOUND")
            with self.lock:
                self.acknowledged[purchase_token] = self.acknowledged.get(purchase_token, 0) + 1
                purchase["acknowledgementState"] = "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED"
            handler.send_response(200)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        google_error(handler, 404, "Not Found", "NOT_FOUND")
