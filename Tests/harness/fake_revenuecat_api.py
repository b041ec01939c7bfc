"""A local HTTPS fake of RevenueCat's REST API v1 "Get or Create Customer" for the end-to-end tests.

`GET /v1/subscribers/{app_user_id}` with the real response shape (RevenueCat/docs,
openapi-spec/api-v1.yaml, components.schemas.Subscriber and components.examples.Subscriber):

    {"request_date": "2019-07-26T17:40:10Z", "request_date_ms": 1564162810884,
     "subscriber": {"entitlements": {id: {expires_date, grace_period_expires_date,
                                          product_identifier, purchase_date}},
                    "first_seen", "last_seen", "management_url", "non_subscriptions":
                    {product_id: [{id, is_sandbox, purchase_date, store, store_transaction_id}]},
                    "original_app_user_id", "original_application_version",
                    "original_purchase_date", "other_purchases": {}, "subscriber_attributes",
                    "subscriptions": {product_id: {auto_resume_date, billing_issues_detected_at,
                                      expires_date, grace_period_expires_date, is_sandbox,
                                      original_purchase_date, ownership_type, period_type,
                                      purchase_date, refunded_at, store, store_transaction_id,
                                      unsubscribe_detected_at}}}}

Dates are ISO 8601 UTC with a 'Z' and whole seconds. A customer the fake knows answers 200; an
unknown App User ID is created (as the real endpoint does) and answers 201 with an empty
customer, then 200 from then on. Errors are RevenueCat's `{"code": N, "message": "..."}`
(401 code 7225 for a missing or wrong secret key, 500 code 7110 when `down`).

TLS uses a server certificate from a CA of its own (`ca_file`, for `revenuecat.caFile`); the
secret key (`api_key`, also in `key_file` for `revenuecat.apiKeyFile`) must come as
`Authorization: Bearer <key>`. Scenarios: `subscribers[user_id]` is what RevenueCat knows of a
customer (the `subscriber` object, partially: the fake fills in the rest); `down` answers
`down_status` to everything; `hang_seconds` sleeps before every answer; `rate_limit(n,
retry_after)` answers 429 with Retry-After n times and counts the requests that came back
before the wait was over (`early`); `fail_next(status, body)` queues canned answers. Every
request is in `requests`. Standard library plus `cryptography` (through fake_appstore_api)."""
import datetime
import http.server
import json
import os
import secrets
import ssl
import sys
import threading
import time
import urllib.parse

from .fake_appstore_api import _tls_files, send_json

PREFIX = "/v1/subscribers/"
APP_STORE_MANAGEMENT_URL = "https://apps.apple.com/account/subscriptions"
PLAY_STORE_MANAGEMENT_URL = "https://play.google.com/store/account/subscriptions"

# Error codes of RevenueCat's v1 backend (purchases-ios, Sources/Error Handling/BackendErrorCode.swift).
INVALID_API_KEY = 7225
INTERNAL_SERVER_ERROR = 7110
EMPTY_APP_USER_ID = 7220
BAD_REQUEST = 7226


def now_ms():
    return int(time.time() * 1000)


def iso(ms):
    """RevenueCat's date format: ISO 8601, UTC, whole seconds, 'Z' ("2019-07-26T23:45:40Z"); None stays None."""
    if ms is None:
        return None
    moment = datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _price(price):
    if price is None or isinstance(price, dict):
        return price
    amount, currency = price
    return {"amount": amount, "currency": currency}


def _transaction_id(store):
    if store == "play_store":
        digits = "".join(str(secrets.randbelow(10)) for _ in range(20))
        return f"GPA.{digits[:4]}-{digits[4:8]}-{digits[8:12]}-{digits[12:17]}"
    if store in ("app_store", "mac_app_store"):
        return str(1000000000000000 + secrets.randbelow(10 ** 15))
    return secrets.token_hex(16)


class Entry(dict):
    """A helper's result: the JSON object itself, plus where it belongs (`kind`, `key`)."""

    def __init__(self, kind, key, fields):
        super().__init__(fields)
        self.kind = kind   # "subscriptions", "non_subscriptions" or "entitlements"
        self.key = key     # product id (subscriptions, non_subscriptions) or entitlement id


def subscription(product_id, purchase_ms, expires_ms, period_type="normal", store="app_store", is_sandbox=False,
                 unsubscribe_detected_ms=None, billing_issues_detected_ms=None, grace_period_expires_ms=None,
                 refunded_ms=None, ownership_type="PURCHASED", store_transaction_id=None, original_purchase_ms=None,
                 price=None, auto_resume_ms=None, display_name=None, **extra):
    """One `subscriber.subscriptions[product_id]` value. Every documented key is present (null
    when not set), except `display_name` and `price` ((amount, currency) or a dict), which are
    only present when given; `extra` adds or overrides keys (e.g. product_plan_identifier)."""
    fields = {"auto_resume_date": iso(auto_resume_ms),
              "billing_issues_detected_at": iso(billing_issues_detected_ms),
              "expires_date": iso(expires_ms),
              "grace_period_expires_date": iso(grace_period_expires_ms),
              "is_sandbox": is_sandbox,
              "original_purchase_date": iso(purchase_ms if original_purchase_ms is None else original_purchase_ms),
              "ownership_type": ownership_type,
              "period_type": period_type,
              "purchase_date": iso(purchase_ms),
              "refunded_at": iso(refunded_ms),
              "store": store,
              "store_transaction_id": store_transaction_id or _transaction_id(store),
              "unsubscribe_detected_at": iso(unsubscribe_detected_ms)}
    if display_name is not None:
        fields["display_name"] = display_name
    if price is not None:
        fields["price"] = _price(price)
    fields.update(extra)
    return Entry("subscriptions", product_id, fields)


def non_subscription(product_id, purchase_ms, store="app_store", is_sandbox=False, purchase_id=None,
                     store_transaction_id=None, display_name=None, price=None, **extra):
    """One purchase in `subscriber.non_subscriptions[product_id]` (a list of these)."""
    fields = {"id": purchase_id or secrets.token_hex(5),
              "is_sandbox": is_sandbox,
              "purchase_date": iso(purchase_ms),
              "store": store,
              "store_transaction_id": store_transaction_id or _transaction_id(store)}
    if display_name is not None:
        fields["display_name"] = display_name
    if price is not None:
        fields["price"] = _price(price)
    fields.update(extra)
    return Entry("non_subscriptions", product_id, fields)


def entitlement(entitlement_id, product_identifier, purchase_ms, expires_ms=None, grace_period_expires_ms=None,
                **extra):
    """One `subscriber.entitlements[entitlement_id]` value; `expires_ms=None` is a lifetime entitlement."""
    fields = {"expires_date": iso(expires_ms),
              "grace_period_expires_date": iso(grace_period_expires_ms),
              "product_identifier": product_identifier,
              "purchase_date": iso(purchase_ms)}
    fields.update(extra)
    return Entry("entitlements", entitlement_id, fields)


def error(code, message):
    """RevenueCat v1's error body (components.schemas.Error)."""
    return {"code": code, "message": message}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    fake = None

    def handle_error(self, request, client_address):
        # A client that refuses the certificate or hangs up mid-answer: note it, print nothing.
        with self.fake.lock:
            self.fake.errors.append(repr(sys.exc_info()[1]))


class FakeRevenueCatAPI:
    """`FakeRevenueCatAPI(directory)`; serving as soon as built unless `start=False`; a context manager."""

    def __init__(self, directory, api_key=None, start=True):
        # A directory of its own: _tls_files' names are the App Store fake's too.
        self.directory = os.path.join(directory, "revenuecat-api")
        os.makedirs(self.directory, exist_ok=True)
        self.api_key = api_key or "sk_" + "".join(secrets.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
                                                  for _ in range(32))
        self.key_file = os.path.join(self.directory, "api-key")
        with open(self.key_file, "w") as f:
            f.write(self.api_key + "\n")
        self.ca_file, cert_file, key_file = _tls_files(self.directory)
        self.lock = threading.Lock()
        self.subscribers = {}         # app_user_id → (partial) subscriber object; _body() fills in the rest
        self.first_seen_ms = {}       # app_user_id → when it was created (first set or first asked about)
        self.create_unknown = True    # unknown user: create it and answer 201 (False: 404, not RevenueCat's behaviour)
        self.request_date_ms = None   # None: the time of the request
        self.down = False
        self.down_status = 500
        self.hang_seconds = 0
        self.requests = []            # one dict per request, see _record()
        self.auth_failures = []       # the Authorization header of every refused request
        self.errors = []              # connections that failed (TLS refused, client hung up)
        self.early = 0                # requests that came back before Retry-After was over
        self.early_requests = []
        self.rate_limited = 0
        self._rate_limits = 0
        self._retry_after = 0
        self._retry_after_header = True
        self._not_before = 0.0
        self._canned = []             # (status, body, headers), after the key, path and rate-limit checks
        self._stopping = threading.Event()
        self._started = False
        self._stopped = False
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 60

            def log_message(self, *args):
                pass

            def do_GET(self):
                status, body, headers, hang = fake.answer(self.path, self.headers)
                if hang and fake._stopping.wait(hang):
                    self.close_connection = True
                    return
                send_json(self, status, body, headers)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.fake = self
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert_file, key_file)
        # The handshake happens in the handler thread, so a silent client cannot stall accept().
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-revenuecat", daemon=True)
        if start:
            self.start()

    def start(self):
        if not self._started:
            self._started = True
            self.thread.start()
        return self

    def stop(self):
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()          # wakes every hanging answer
        if self._started:
            self.server.shutdown()
            self.thread.join(timeout=10)
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---------------------------------------------------------------- configuration

    @property
    def base_url(self):
        """For `revenuecat.apiUrl`; the fake serves `/v1/subscribers/…` under it."""
        return f"https://127.0.0.1:{self.port}"

    def overrides(self):
        """BILLING__… environment overrides pointing a daemon at this fake."""
        return {"BILLING__revenuecat__apiUrl": self.base_url, "BILLING__revenuecat__caFile": self.ca_file,
                "BILLING__revenuecat__apiKeyFile": self.key_file}

    def set_subscriber(self, user_id, *entries, **fields):
        """Replaces what RevenueCat knows of `user_id`: helper entries (subscription(),
        non_subscription(), entitlement()) sorted into place, plus any subscriber fields."""
        state = {"subscriptions": {}, "non_subscriptions": {}, "entitlements": {}}
        for entry in entries:
            if entry.kind == "non_subscriptions":
                state["non_subscriptions"].setdefault(entry.key, []).append(entry)
            else:
                state[entry.kind][entry.key] = entry
        state.update(fields)
        with self.lock:
            self.subscribers[user_id] = state
            self.first_seen_ms.setdefault(user_id, now_ms())
        return state

    def add(self, user_id, *entries):
        """Adds helper entries to what RevenueCat knows of `user_id` (created if unknown)."""
        with self.lock:
            state = self.subscribers.setdefault(user_id, {})
            self.first_seen_ms.setdefault(user_id, now_ms())
            for entry in entries:
                if entry.kind == "non_subscriptions":
                    state.setdefault("non_subscriptions", {}).setdefault(entry.key, []).append(entry)
                else:
                    state.setdefault(entry.kind, {})[entry.key] = entry
            return state

    def rate_limit(self, times, retry_after, header=True):
        """The next `times` requests answer 429 with `Retry-After: retry_after` (seconds; no
        header at all with header=False) and a body whose `backoff_ms` says the same."""
        with self.lock:
            self._rate_limits = times
            self._retry_after = retry_after
            self._retry_after_header = header
            self._not_before = 0.0

    def fail_next(self, status, body=None, headers=None, times=1):
        """The next `times` authenticated requests answer `status` with `body` (a JSON value, or
        bytes sent as they are; default RevenueCat's error shape) and extra `headers`."""
        if body is None:
            body = error(INTERNAL_SERVER_ERROR if status >= 500 else BAD_REQUEST, f"Canned {status}")
        with self.lock:
            self._canned.extend([(status, body, dict(headers or {}))] * times)

    def count(self, user_id=None, status=None):
        with self.lock:
            return sum(1 for r in self.requests if (user_id is None or r["user_id"] == user_id)
                       and (status is None or r["status"] == status))

    def customer_info(self, user_id, at_ms=None):
        """The body the fake would answer for a known `user_id` (for comparisons in tests)."""
        with self.lock:
            return self._body(user_id, self.subscribers.get(user_id, {}), at_ms or now_ms())

    # ---------------------------------------------------------------- the API

    def _body(self, user_id, state, at_ms):
        request_ms = self.request_date_ms if self.request_date_ms is not None else at_ms
        first_seen = self.first_seen_ms.setdefault(user_id, min(at_ms, request_ms))
        subscriptions = state.get("subscriptions", {})
        management_url = None
        latest = None
        for entry in subscriptions.values():
            expires = entry.get("expires_date")
            if expires and expires > iso(request_ms) and entry.get("store") in (
                    "app_store", "mac_app_store", "play_store") and (latest is None or expires > latest[0]):
                latest = (expires, entry["store"])
        if latest is not None:
            management_url = PLAY_STORE_MANAGEMENT_URL if latest[1] == "play_store" else APP_STORE_MANAGEMENT_URL
        subscriber = {"entitlements": {},
                      "first_seen": iso(first_seen),
                      "last_seen": iso(first_seen),
                      "management_url": management_url,
                      "non_subscriptions": {},
                      "original_app_user_id": user_id,
                      "original_application_version": None,
                      "original_purchase_date": None,
                      "other_purchases": {},
                      "subscriber_attributes": {},
                      "subscriptions": {}}
        subscriber.update(state)
        return {"request_date": iso(request_ms), "request_date_ms": request_ms, "subscriber": subscriber}

    def _record(self, path, headers, user_id, status):
        record = {"method": "GET", "path": path, "user_id": user_id, "time": time.time(),
                  "monotonic": time.monotonic(), "status": status,
                  "authorization": headers.get("Authorization"), "x_platform": headers.get("X-Platform"),
                  "user_agent": headers.get("User-Agent")}
        self.requests.append(record)
        return record

    def answer(self, path, headers):
        """(status, body, headers, seconds to hang) for one GET; records it."""
        arrived = time.monotonic()
        raw_path, _, _ = path.partition("?")
        user_id = None
        if raw_path.startswith(PREFIX) and "/" not in raw_path[len(PREFIX):]:
            try:
                user_id = urllib.parse.unquote(raw_path[len(PREFIX):], errors="strict")
            except UnicodeDecodeError:
                user_id = None
        authorization = headers.get("Authorization", "")
        with self.lock:
            hang = self.hang_seconds
            record = self._record(path, headers, user_id, None)
            if authorization != "Bearer " + self.api_key:
                self.auth_failures.append(authorization)
                record["status"] = 401
                return 401, error(INVALID_API_KEY, "Invalid API key."), {}, hang
            if not raw_path.startswith(PREFIX) or "/" in raw_path[len(PREFIX):]:
                record["status"] = 404
                return 404, {"message": "Not found."}, {}, hang
            if user_id is None:
                record["status"] = 400
                return 400, error(BAD_REQUEST, "Invalid app_user_id."), {}, hang
            if user_id == "":
                record["status"] = 400
                return 400, error(EMPTY_APP_USER_ID, "app_user_id is empty."), {}, hang
            if self._not_before and arrived < self._not_before:
                self.early += 1
                self.early_requests.append(record)
            if self._rate_limits > 0:
                self._rate_limits -= 1
                self.rate_limited += 1
                self._not_before = arrived + self._retry_after
                record["status"] = 429
                extra = {"Retry-After": str(self._retry_after)} if self._retry_after_header else {}
                body = {"type": "rate_limit_error", "message": "Rate limit exceeded",
                        "retryable": True, "doc_url": "https://errors.rev.cat/rate-limit-error",
                        "backoff_ms": int(self._retry_after * 1000)}
                return 429, body, extra, hang
            if self._canned:
                status, body, extra = self._canned.pop(0)
                record["status"] = status
                return status, body, extra, hang
            if self.down:
                record["status"] = self.down_status
                return self.down_status, error(INTERNAL_SERVER_ERROR, "Internal server error."), {}, hang
            status = 200
            if user_id not in self.subscribers:
                if not self.create_unknown:
                    record["status"] = 404
                    return 404, {"message": "Subscriber not found."}, {}, hang
                self.subscribers[user_id] = {}
                status = 201
            body = self._body(user_id, self.subscribers[user_id], now_ms())
            record["status"] = status
            return status, body, {}, hang
