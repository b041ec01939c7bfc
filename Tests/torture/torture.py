#!/usr/bin/env python3
"""Fault injection and load against a private FCGIBilling stack on loopback. See --help.

Phases (each can be skipped with --skip NAME):
  storm     webhook deliveries for many users from both providers (RevenueCat webhooks and
            App Store Server Notifications V2), a share of them duplicated, shuffled, sent by
            concurrent senders that retry every non-2xx like the providers do, while a worker
            is killed -9 every --kill-every seconds and a supervisor restarts it (systemd
            Restart=always). Every user gets deliveries from both providers: half of them one
            subscription both providers report on (App Store data takes precedence), the
            other half one subscription per provider; a third of them also hold a Google
            Play subscription (Real-Time Developer Notifications by Pub/Sub push, OIDC-signed,
            each read back from a local HTTPS fake of the Play Developer API,
            Tests/harness/fake_google.py, which states the token as it stands at the end, so
            every read says the same whatever the order: highest access across the stores
            wins). The histories hold renewals,
            cancellations, plan changes, expirations and refunds, and also billing errors
            with a grace period (BILLING_ISSUE with grace plus RevenueCat's
            CANCELLATION/BILLING_ERROR beside it; DID_FAIL_TO_RENEW/GRACE_PERIOD), refunds
            of an earlier period (RevenueCat CUSTOMER_SUPPORT cancellation, App Store REFUND
            of that period's transaction) and App Store family-sharing REVOKEs. Beside them,
            pairs of users whose two events race: a RevenueCat purchase for one and the
            TRANSFER of it to the other, sent at the same instant by two senders. And pulls
            racing the webhooks (SPEC §15): a billing-rpc of its own, pointed at a local HTTPS
            fake of RevenueCat's REST API (Tests/harness/fake_revenuecat_api.py) that answers each
            user's RevenueCat subscription as it stood at one request date inside the
            histories, pulls every RevenueCat user twice, in random order, while his webhooks
            arrive (some before he is known). Then: every acknowledged event is in the inbox
            exactly once, every pull was recorded and its events applied, and every user's
            snapshot equals the serial replay of the same distinct events (and the same pull,
            after them) into a shadow user (for a pair, two shadow users). And the outbox
            sent on (SPEC §16): a billing-rpc of its own with one HTTPS endpoint (a local
            receiver verifying each delivery with the Standard Webhooks library) is killed -9
            every --dispatch-kill-every seconds from the storm's start to the replay's end and
            started again at once; then every access.changed row reached the endpoint, each
            revision at least once, each user's in revision order.
  rolling   `scripts/workerctl restart all` under load: zero failed requests.
  dbkill    MariaDB killed -9 under load, restarted: fast 503s while down (no request slower
            than the connect timeout + slack), workers recover without a restart, nothing
            acknowledged lost.
  lock      a session holds a user's billing_access row FOR UPDATE for --lock-seconds: the
            webhook answers 503 after a bounded wait; the retry lands exactly once.
  overload  4 x (workers x threads) concurrent clients: only 2xx/503, never a hang, nothing lost.
  memory    worker RSS before/after a run of requests (wrk), reported; fails on gross growth.
            The long profile runs 120 s (about 250k requests on 2 shared cores); for the
            issue's 1M add --memory-seconds 480 (e.g. with --skip for the other phases).

Everything runs against its own stack (MariaDB, workers, billing-rpc, nginx) under
--var-dir on --http-port/--db-port, started with scripts/lib/stack.sh and stopped at the end
(--keep leaves it up). Exit status 0 only when every check of every phase held.
Providers are pluggable (class Provider): RevenueCat and App Store. The summary (stderr, and
"providers" in the JSON report) gives per provider: deliveries sent (HTTP requests, with
duplicates and retries), distinct events, acknowledged, present in the inbox, duplicated,
lost and 5xx other than 503. Run by scripts/torture (with Tests/ on PYTHONPATH, for the
harness package); standard library, and `cryptography` through the harness: the App Store
provider signs with the test CA the stack trusts (Tests/harness/appstore.py), the
development ID tokens with the stack's key (Tests/harness/tokens.py).
"""
import argparse
import collections
import http.client
import importlib
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The storm's products, for the App Store catalog (RevenueCat names tiers by entitlement).
CATALOG = {"app.plus.monthly": {"tier": "plus", "cadence": "monthly"},
           "app.pro.monthly": {"tier": "pro", "cadence": "monthly"},
           "app.pro.yearly": {"tier": "pro", "cadence": "yearly"}}
PROVIDERS = ("revenuecat", "apple")


def harness(name):
    """harness.NAME (Tests/harness), imported on first use: appstore (test CA, signing),
    tokens (development ID tokens) and fake_revenuecat_api need `cryptography`."""
    try:
        return importlib.import_module("harness." + name)
    except ImportError as e:
        raise SystemExit(f"torture: harness.{name} needs Tests/ on PYTHONPATH (scripts/torture sets it) and the Python package cryptography ({e})")


def appstore():
    return harness("appstore")


PROFILES = {
    # deliveries, users, senders, duplicate share, memory seconds
    "short": dict(deliveries=2000, users=50, senders=8, duplicates=0.30, memory_seconds=5, phase_seconds=6),
    "long": dict(deliveries=20000, users=500, senders=32, duplicates=0.30, memory_seconds=120, phase_seconds=20),
}


def log(message):
    print(f"[torture {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ the stack

class Stack:
    """The private stack, driven through scripts/lib/stack.sh functions."""

    def __init__(self, var_dir, http_port, db_port, workers, threads, lock_wait):
        self.var_dir = os.path.abspath(var_dir)
        self.http_port = http_port
        self.workers = workers
        self.threads = threads
        self.lock_wait = lock_wait
        self.env = dict(os.environ, BILLING_VAR_DIR=self.var_dir, BILLING_HTTP_PORT=str(http_port),
                        BILLING_DB_PORT=str(db_port), BILLING_WORKERS=str(workers), BILLING_THREADS=str(threads))
        self.env.pop("BILLING_CONFIG", None)
        self.run_dir = os.path.join(self.var_dir, "run")
        self.db_socket = os.path.join(self.run_dir, "mariadb.sock")

    def sh(self, command, check=True, timeout=180):
        script = f'source "{ROOT}/scripts/lib/stack.sh"; stack_defaults; bin_dir; {command}'
        return subprocess.run(["bash", "-c", script], env=self.env, check=check, timeout=timeout,
                              capture_output=True, text=True)

    def up(self, build):
        os.makedirs(self.var_dir, exist_ok=True)
        # The App Store test CA (chain "a" trusted, as scripts/test does for the e2e layer)
        # and a catalog naming the storm's products.
        self.ca_dir = os.path.join(self.var_dir, "testca")
        appstore().generate(self.ca_dir)
        with open(os.path.join(self.ca_dir, "overlay.json")) as f:
            config = json.load(f)
        config["products"] = dict(config.get("products", {}), **CATALOG)
        config["database"] = {"lockWaitTimeoutSeconds": self.lock_wait}
        # Google Play from a local fake (token endpoint, androidpublisher, push keys).
        google_dir = os.path.join(self.var_dir, "google")
        os.makedirs(google_dir, exist_ok=True)
        F = harness("fake_google")
        self.google = F.FakeGoogle(google_dir)
        config["google"] = {
            "packageName": self.google.package, "serviceAccountFile": self.google.key_file, "tokenUrl": self.google.token_url,
            "apiUrl": self.google.url, "caFile": self.google.ca_file, "pushKeysUrl": self.google.url + "/oauth2/v3/certs",
            "pushAudience": F.PUSH_AUDIENCE, "pushServiceAccount": F.PUSH_ACCOUNT}
        overlay = os.path.join(self.var_dir, "torture-overlay.json")
        with open(overlay, "w") as f:
            json.dump(config, f)
        self.env["BILLING_CONFIG_OVERLAY"] = overlay
        self.sh("stack_down", check=False)
        args = [os.path.join(ROOT, "scripts", "dev-up")] + ([] if build else ["--no-build"])
        r = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-4000:])
            raise SystemExit("torture: the stack did not come up")
        with open(os.path.join(self.var_dir, "secrets", "revenuecat-webhook-secret")) as f:
            self.webhook_secret = f.read().strip()
        self.tokens = harness("tokens").DevSigner(os.path.join(self.var_dir, "secrets", "dev-token-key.pem"))

    def down(self):
        self.sh("stack_down", check=False, timeout=300)
        google, self.google = getattr(self, "google", None), None
        if google:
            google.stop()

    def daemon_setup(self):
        """(environment, configuration file, binary directory) of a billing-rpc of the run's own."""
        return dict(self.env), os.path.join(self.var_dir, "billing.json"), self.sh("echo $BIN_DIR").stdout.strip()

    def worker_pid(self, i):
        try:
            with open(os.path.join(self.run_dir, f"worker-{i}.pid")) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"billing-fcgi" not in f.read():
                    return None
            return pid
        except (OSError, ValueError):
            return None

    def worker_alive(self, i):
        pid = self.worker_pid(i)
        if pid is None:
            return False
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(")")[-1].split()[0] != "Z"
        except OSError:
            return False

    def worker_start(self, i):
        return self.sh(f"worker_start {i}", check=False).returncode == 0

    def mariadb_pid(self):
        try:
            with open(os.path.join(self.run_dir, "mariadb.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def sql(self, statement, timeout=60):
        r = subprocess.run(["mariadb", "--no-defaults", "--protocol=socket", "-S", self.db_socket, "-uroot", "-N", "-B",
                            "billing", "-e", statement], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"mariadb: {r.stderr.strip()}")
        return [line.split("\t") for line in r.stdout.splitlines()]

    def rss_kib(self):
        out = {}
        for i in range(1, self.workers + 1):
            pid = self.worker_pid(i)
            try:
                with open(f"/proc/{pid}/status") as f:
                    out[i] = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
            except (OSError, AttributeError, TypeError):
                out[i] = None
        return out


# ------------------------------------------------------------------------------ HTTP

class Client:
    """One keep-alive connection to nginx; reconnects after any error."""

    def __init__(self, port, timeout):
        self.port = port
        self.timeout = timeout
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        """Returns (status, body bytes, seconds); status 0 for a transport error."""
        started = time.monotonic()
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("connection", "").lower() == "close":
                    self.close()
                return r.status, data, time.monotonic() - started
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                # A keep-alive connection nginx closed between requests: one fresh try.
                self.close()
                if attempt == 2 or time.monotonic() - started > 1:
                    return 0, str(e).encode(), time.monotonic() - started
            except (OSError, http.client.HTTPException) as e:
                self.close()
                return 0, str(e).encode(), time.monotonic() - started
        return 0, b"", time.monotonic() - started

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def is_bad_5xx(status):
    return status >= 500 and status != 503


class Stats:
    """Requests and their statuses; deliveries also per provider, keyed (provider, event id)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = 0
        self.statuses = collections.Counter()
        self.by_provider = collections.defaultdict(collections.Counter)
        self.acked = set()
        self.ids = set()
        self.slowest = 0.0
        self.slow_503 = 0.0

    def record(self, status, seconds, key=None):
        with self.lock:
            self.sent += 1
            self.statuses[status] += 1
            self.slowest = max(self.slowest, seconds)
            if status == 503:
                self.slow_503 = max(self.slow_503, seconds)
            if key is not None:
                self.by_provider[key[0]][status] += 1
                if 200 <= status < 300:
                    self.acked.add(key)

    @property
    def bad_5xx(self):
        return sum(n for s, n in self.statuses.items() if is_bad_5xx(s))


# ------------------------------------------------------------------------------ providers

class Provider:
    """A store that delivers webhooks. Subclasses render a provider-neutral event spec
    (dict: id, user, kind, at, expires, product, subscription) into (path, body, headers)."""
    name = "abstract"
    inbox_provider = "abstract"
    # What the inbox's provider_event_id puts before the spec's id.
    inbox_prefix = ""

    def delivery(self, spec):
        raise NotImplementedError


class RevenueCatProvider(Provider):
    name = "revenuecat"
    inbox_provider = "revenuecat"
    TYPES = {"purchase": "INITIAL_PURCHASE", "renewal": "RENEWAL", "cancellation": "CANCELLATION",
             "uncancellation": "UNCANCELLATION", "billing_issue": "BILLING_ISSUE", "expiration": "EXPIRATION",
             "product_change": "PRODUCT_CHANGE", "refund": "CANCELLATION", "billing_grace": "BILLING_ISSUE",
             "billing_error": "CANCELLATION", "refund_earlier": "CANCELLATION", "transfer": "TRANSFER"}
    CANCEL_REASONS = {"cancellation": "UNSUBSCRIBE", "refund": "CUSTOMER_SUPPORT", "refund_earlier": "CUSTOMER_SUPPORT",
                      "billing_error": "BILLING_ERROR"}

    def __init__(self, secret):
        self.secret = secret

    def delivery(self, spec):
        kind = spec["kind"]
        if kind == "transfer":
            # The sender's purchases move to the receiver: no product fields.
            event = {"id": spec["id"], "type": "TRANSFER", "app_user_id": spec["user"], "original_app_user_id": spec["user"],
                     "aliases": [spec["user"]], "transferred_from": [spec["from"]], "transferred_to": [spec["to"]],
                     "event_timestamp_ms": spec["at"], "environment": "PRODUCTION", "store": "APP_STORE"}
        else:
            # Every event carries the transaction of the period it is about (the current one,
            # or for a refund of an earlier period that one), as RevenueCat sends it.
            period = spec.get("refunded") or {"tx": spec.get("period_tx", spec["subscription"]),
                                              "start": spec.get("period_start", spec["at"]), "expires": spec["expires"]}
            refund = kind in ("refund", "refund_earlier")
            event = {
                "id": spec["id"], "type": self.TYPES[kind], "app_user_id": spec["user"],
                "original_app_user_id": spec["user"], "aliases": [spec["user"]],
                "product_id": spec["product"], "entitlement_ids": [spec["product"].split(".")[1]],
                "period_type": "NORMAL", "purchased_at_ms": period["start"], "expiration_at_ms": period["expires"],
                "event_timestamp_ms": spec["at"], "environment": "PRODUCTION", "store": "APP_STORE",
                "original_transaction_id": spec["subscription"], "transaction_id": period["tx"],
                "price_in_purchased_currency": -4.99 if refund else 4.99, "currency": "EUR",
            }
            if kind in self.CANCEL_REASONS:
                event["cancel_reason"] = self.CANCEL_REASONS[kind]
            if kind == "billing_grace":
                event["grace_period_expiration_at_ms"] = spec["grace"]
            if kind == "product_change":
                event["new_product_id"] = spec["new_product"]
        body = json.dumps({"api_version": "1.0", "event": event}).encode()
        return "/api/v1/billing/webhooks/revenuecat", body, {"Authorization": self.secret, "Content-Type": "application/json"}


class AppleProvider(Provider):
    """App Store Server Notifications V2: `{signedPayload}`, a JWS whose x5c chain is the test
    CA the stack trusts, with the transaction and renewal info nested and signed the same
    way. The app set `appAccountToken` to its user id, which is how a notification names
    the user (bound on first sight when he is known, else kept unmatched for him)."""
    name = "apple"
    inbox_provider = "apple_notification"
    TYPES = {"purchase": ("SUBSCRIBED", "INITIAL_BUY"), "renewal": ("DID_RENEW", None),
             "cancellation": ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED"),
             "uncancellation": ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED"),
             "billing_issue": ("DID_FAIL_TO_RENEW", None), "expiration": ("EXPIRED", "VOLUNTARY"),
             "product_change": ("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE"), "refund": ("REFUND", None),
             "billing_grace": ("DID_FAIL_TO_RENEW", "GRACE_PERIOD"), "refund_earlier": ("REFUND", None),
             "revoke": ("REVOKE", None)}
    REVOCATIONS = ("refund", "refund_earlier", "revoke")

    def __init__(self, ca_dir):
        self.A = appstore()
        self.chain = self.A.load_chain(ca_dir, "a")

    def delivery(self, spec):
        A, kind = self.A, spec["kind"]
        notification_type, subtype = self.TYPES[kind]
        # The transaction of the period the notification is about: the current one, or for a
        # refund of an earlier period that one.
        period = spec.get("refunded") or {"tx": spec.get("period_tx", spec["subscription"]),
                                          "start": spec.get("period_start", spec["at"]), "expires": spec["expires"]}
        extra = {"appAccountToken": spec["user"]}
        if kind in self.REVOCATIONS:
            extra.update(revocationDate=spec["at"], revocationReason=0 if kind == "revoke" else 1)
        if kind == "revoke":
            extra["inAppOwnershipType"] = "FAMILY_SHARED"
        transaction = A.transaction_payload(
            original_id=spec["subscription"], product=spec["product"], purchase=period["start"], expires=period["expires"],
            signed=spec["at"], transaction_id=period["tx"], **extra)
        renewal = None
        if kind not in self.REVOCATIONS:
            renewal = A.renewal_payload(spec["subscription"], product=spec.get("new_product", spec["product"]), signed=spec["at"],
                                        autoRenewStatus=0 if kind in ("cancellation", "expiration") else 1)
            if kind in ("billing_issue", "billing_grace"):
                renewal["isInBillingRetryPeriod"] = True
                renewal["expirationIntent"] = 2
            if kind == "billing_grace":
                renewal["gracePeriodExpiresDate"] = spec["grace"]
        payload = A.notification_payload(self.chain, notification_type, subtype, transaction=transaction, renewal=renewal,
                                         signed=spec["at"], uuid_=spec["id"])
        body = json.dumps({"signedPayload": self.chain.sign(payload)}).encode()
        return "/api/v1/billing/webhooks/apple", body, {"Content-Type": "application/json"}


class GoogleProvider(Provider):
    """Real-Time Developer Notifications by Pub/Sub push: `{message: {data: base64
    DeveloperNotification, messageId}, subscription}` with the push's OIDC token, both from
    fake_google.py (whose keys the stack's `google.pushKeysUrl` names). The spec's id is the
    messageId (inbox key `gpush:<id>`), its subscription the purchase token; the worker reads
    the token's state from the fake."""
    name = "google"
    inbox_provider = "google_play"
    inbox_prefix = "gpush:"
    TYPES = {"purchase": 4, "renewal": 2, "cancellation": 3, "uncancellation": 7, "billing_issue": 6, "on_hold": 5,
             "recovered": 1, "expiration": 13}

    def __init__(self, fake):
        self.fake = fake

    def delivery(self, spec):
        body = self.fake.push_body({"subscriptionNotification": {"version": "1.0", "notificationType": self.TYPES[spec["kind"]],
                                                                 "purchaseToken": spec["subscription"]}}, message_id=spec["id"])
        return ("/api/v1/billing/webhooks/google", json.dumps(body).encode(),
                {"Authorization": "Bearer " + self.fake.push_token(), "Content-Type": "application/json"})


# A Play subscription's state at the end of the storm: (subscriptionState, expiry from now in
# days, auto-renew), the notifications that lead there drawn from GoogleProvider.TYPES.
PLAY_ENDS = [("SUBSCRIPTION_STATE_ACTIVE", 12, True), ("SUBSCRIPTION_STATE_CANCELED", 9, False),
             ("SUBSCRIPTION_STATE_IN_GRACE_PERIOD", 3, True), ("SUBSCRIPTION_STATE_ON_HOLD", -2, True),
             ("SUBSCRIPTION_STATE_EXPIRED", -5, False)]


def play_history(rng, user, run, n_events, now_ms):
    """One user's Play subscription: a purchase token, its state at the end (`play_state`:
    for fake_google.subscription_v2), and `n_events` pushes about it (the first a purchase)."""
    token = f"{run}-gpt{uuid.uuid4().hex}.AO-J1Oz"
    state, days, auto_renew = rng.choice(PLAY_ENDS)
    product = rng.choice(["plus_monthly", "pro_monthly"])
    end = {"product": product, "state": state, "expires": now_ms + days * 86_400_000, "auto_renew": auto_renew,
           "start": now_ms - rng.randint(20, 90) * 86_400_000, "acknowledged": rng.random() < 0.7}
    kinds = list(GoogleProvider.TYPES)
    return [{"id": f"{run}-{user[:8]}g-{k:03d}", "user": user, "kind": "purchase" if k == 0 else rng.choice(kinds),
             "at": now_ms, "subscription": token, "provider": "google", "play_state": end} for k in range(n_events)]


def play_purchase(F, end, user):
    """The SubscriptionPurchaseV2 fake_google answers for a Play history's end state."""
    return F.subscription_v2(end["product"], "monthly", end["state"], end["expires"], user=user, auto_renew=end["auto_renew"],
                             start_ms=end["start"], acknowledged=end["acknowledged"])


# Kinds only one provider has: RevenueCat's CANCELLATION/BILLING_ERROR, Apple's REVOKE.
ONLY = {"billing_error": "revenuecat", "revoke": "apple"}


def user_history(rng, user, run, n_events, now_ms, tag="", provider="revenuecat", shared=False):
    """A plausible, timestamp-distinct event history of one user's subscription
    (provider-neutral specs, each naming the provider that delivers it; `shared`: both
    providers will report on it, so the kinds of either may appear). Every spec names the
    period it is about (`period_tx`, `period_start`). Besides renewals, cancellations and
    the like: billing errors with a grace period (a BILLING_ISSUE with grace, and from
    RevenueCat the CANCELLATION/BILLING_ERROR beside it, stamped up to two minutes before
    or after), refunds of an earlier period, and family-sharing revocations (App Store).
    Expiry and grace times stay hours away from now so a snapshot read a second later agrees."""
    day = 86_400_000
    start = now_ms - rng.randint(60, 200) * day
    product = rng.choice(["app.plus.monthly", "app.pro.monthly", "app.pro.yearly"])
    subscription = f"{run}-{uuid.uuid4().hex[:12]}{tag}"
    rc, apple = shared or provider == "revenuecat", shared or provider == "apple"
    kinds = {"renewal": 10, "cancellation": 2, "uncancellation": 2, "billing_issue": 1, "product_change": 1,
             "expiration": 1, "refund": 1, "billing_grace": 1, "refund_earlier": 1}
    if apple:
        kinds["revoke"] = 0.5
    specs = []
    periods = []
    at = start
    expires = at + 30 * day
    for k in range(n_events):
        if k == 0:
            kind = "purchase"
        else:
            kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
        at += rng.randint(1, 5) * day // 2 + rng.randint(0, 999)
        event_id = f"{run}-{user[:8]}{tag}-{k:03d}"
        if kind == "refund_earlier" and len(periods) < 2:
            kind = "renewal"
        if kind in ("purchase", "renewal"):
            expires = at + 30 * day
            periods.append({"tx": subscription if kind == "purchase" else event_id + ".t", "start": at, "expires": expires})
        spec = {"id": event_id, "user": user, "kind": kind, "at": at, "expires": expires, "product": product,
                "subscription": subscription, "provider": provider, "period_tx": periods[-1]["tx"],
                "period_start": periods[-1]["start"]}
        if kind == "product_change":
            spec["new_product"] = rng.choice(["app.plus.monthly", "app.pro.monthly", "app.pro.yearly"])
        if kind == "refund_earlier":
            spec["refunded"] = dict(rng.choice(periods[:-1]))
        if kind == "billing_grace":
            spec["grace"] = max(expires, at) + 6 * day
        specs.append(spec)
        if kind == "billing_grace" and rc:
            offset = rng.choice((-1, 1)) * rng.randint(1, 120_000)
            specs.append(dict(spec, id=event_id + "e", kind="billing_error", at=at + offset, provider="revenuecat",
                              grace=None))
    # Keep the end of the history away from now (the snapshot is judged at read time).
    if abs(expires - now_ms) < 6 * 3_600_000:
        for s in specs:
            s["expires"] = s["expires"] + day
            if s.get("refunded"):
                s["refunded"] = dict(s["refunded"], expires=s["refunded"]["expires"] + day)
            if s.get("grace"):
                s["grace"] += day
    for s in specs:
        if s.get("grace") and abs(s["grace"] - now_ms) < 6 * 3_600_000:
            s["grace"] += day
    return specs


def mixed_history(rng, user, run, n_events, now_ms):
    """Deliveries from both providers for one user: one subscription both report on (each
    event from either, except the kinds only one provider has), or one subscription per
    provider."""
    if rng.random() < 0.5:
        specs = user_history(rng, user, run, n_events, now_ms, shared=True)
        for s in specs:
            s["provider"] = ONLY.get(s["kind"]) or rng.choice(PROVIDERS)
        free = [s for s in specs if s["kind"] not in ONLY]
        if len(free) > 1:  # both providers at least once
            for s, provider in zip(rng.sample(free, 2), PROVIDERS):
                s["provider"] = provider
        return specs
    half = max(1, n_events // 2)
    return (user_history(rng, user, run, half, now_ms, tag="a", provider="apple")
            + user_history(rng, user, run, max(1, n_events - half), now_ms, tag="r", provider="revenuecat"))


def transfer_pair(rng, run, i, now_ms):
    """Two fresh users and the two RevenueCat events that concern both, delivered as one race
    group (both at the same instant): the sender's INITIAL_PURCHASE and the TRANSFER of his
    purchases to the receiver, stamped later."""
    day, hour = 86_400_000, 3_600_000
    sender, receiver = str(uuid.uuid4()), str(uuid.uuid4())
    product = rng.choice(["app.plus.monthly", "app.pro.monthly", "app.pro.yearly"])
    subscription = f"{run}-x{uuid.uuid4().hex[:12]}"
    at = now_ms - rng.randint(2, 20) * day - rng.randint(0, 999)
    purchase = {"id": f"{run}-X{i:03d}-p", "user": sender, "kind": "purchase", "at": at, "expires": at + 30 * day,
                "product": product, "subscription": subscription, "provider": "revenuecat", "period_tx": subscription,
                "period_start": at}
    transfer = {"id": f"{run}-X{i:03d}-t", "user": receiver, "kind": "transfer", "at": at + rng.randint(1, 24) * hour,
                "from": sender, "to": receiver, "provider": "revenuecat"}
    return {"sender": sender, "receiver": receiver, "tier": product.split(".")[1], "events": [purchase, transfer]}


def key(spec):
    return spec.get("provider", "revenuecat"), spec["id"]


def pulled_entries(F, specs, request_ms):
    """What RevenueCat's REST API answers at `request_ms` for one user's RevenueCat
    subscription: fake_revenuecat_api entries (`F`) built from his RevenueCat events stamped
    before then — the period in force, renewal intent, billing issue and grace, a refund."""
    before = sorted((s for s in specs if s.get("provider") == "revenuecat" and s["kind"] != "transfer" and s["at"] < request_ms),
                    key=lambda s: s["at"])
    if not before:
        return []
    last, product = before[-1], before[0]["product"]
    kind = last["kind"]
    entry = F.subscription(product, last["period_start"], last["expires"], store="app_store",
                           unsubscribe_detected_ms=last["at"] if kind in ("cancellation", "expiration") else None,
                           billing_issues_detected_ms=last["at"] if kind in ("billing_issue", "billing_grace", "billing_error") else None,
                           grace_period_expires_ms=last.get("grace") if kind == "billing_grace" else None,
                           refunded_ms=last["at"] if kind == "refund" else None, store_transaction_id=last["period_tx"],
                           original_purchase_ms=before[0]["period_start"], price=(4.99, "EUR"))
    return [entry, F.entitlement(product.split(".")[1], product, last["period_start"], last["expires"])]


def start_billing_rpc(binary, config, env, socket_path, log_file):
    """A billing-rpc of the storm's own on `socket_path`: its process once it listens."""
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    proc = subprocess.Popen([os.path.join(binary, "billing-rpc"), "--config", config, "--log-file", log_file],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while not os.path.exists(socket_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if not os.path.exists(socket_path):
        stop_billing_rpc(proc)
        raise RuntimeError("a billing-rpc of the storm's own did not start")
    return proc


def stop_billing_rpc(proc):
    """SIGTERM, as systemd stops it; SIGKILL after 30 s."""
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


class Puller:
    """A billing-rpc of the storm's own: the stack's binary and configuration, on a private
    socket, its sweeper off, pointed at a local HTTPS fake of RevenueCat's REST API."""

    def __init__(self, stack, directory):
        F = harness("fake_revenuecat_api")
        self.F = F
        self.fake = F.FakeRevenueCatAPI(directory)
        self.socket = os.path.join(directory, "puller.sock")
        self.log = os.path.join(directory, "puller.log")
        self.lock = threading.Lock()
        self.retried = 0
        base_env, config, binary = stack.daemon_setup()
        env = dict(base_env, BILLING__admin__socket=self.socket, BILLING__reconcile__sweepEverySeconds="0",
                   BILLING__revenuecat__timeoutSeconds="10", **self.fake.overrides())
        try:
            self.proc = start_billing_rpc(binary, config, env, self.socket, self.log)
        except RuntimeError:
            self.fake.stop()
            raise SystemExit("torture: the puller's billing-rpc did not start")

    # -32002 is "retry later" (ErrorMapping.swift, docs/scaling.md): a transaction that lost
    # its lock or its Galera certification more often than its bounded retries allow. An
    # operator's script calls again; so does this one, a few times, and counts it.
    RETRIES = 5

    def reconcile(self, user):
        """subscriptions.reconcile of one user: the RevenueCat outcome, or the error after
        RETRIES calls answered -32002 (each retry is counted in `self.retried`)."""
        message = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "subscriptions.reconcile",
                              "params": {"userId": user, "actor": "torture@ops"}}).encode()
        for attempt in range(1, self.RETRIES + 2):
            reply = json.loads(harness("billing").rpc_raw(message, sock_path=self.socket, timeout=120))
            code = reply.get("error", {}).get("code")
            if code != -32002 or attempt > self.RETRIES:
                break
            with self.lock:
                self.retried += 1
            time.sleep(0.2 * attempt)
        if "result" not in reply:
            return f"error {code}"
        return reply["result"].get("revenuecat", {}).get("outcome", "absent")

    def stop(self):
        stop_billing_rpc(self.proc)
        self.fake.stop()


class Dispatcher:
    """A billing-rpc of the storm's own that sends the outbox to one HTTPS endpoint (SPEC §16):
    the stack's binary and configuration, on a private socket, its sweeper and live publisher
    off, `webhooks.endpoints` a local receiver that verifies every delivery with the Standard
    Webhooks library (Tests/harness/fake_webhook_receiver.py). It is killed -9 while deliveries
    are pending and started again at once (systemd's Restart=always), again and again."""

    def __init__(self, stack, directory):
        receiver = harness("fake_webhook_receiver")
        os.makedirs(directory, exist_ok=True)
        self.stack = stack
        self.receiver = receiver.FakeWebhookReceiver(directory, "storm", receiver.tls_files(directory))
        self.socket = os.path.join(directory, "dispatcher.sock")
        self.log = os.path.join(directory, "dispatcher.log")
        base_env, self.config, self.binary = stack.daemon_setup()
        self.env = dict(base_env, BILLING__admin__socket=self.socket, BILLING__reconcile__sweepEverySeconds="0",
                        BILLING__live__publisherSocket="", BILLING__webhooks__caFile=self.receiver.ca_file,
                        BILLING__webhooks__endpoints=json.dumps([self.receiver.endpoint(["access.changed"])]),
                        BILLING__webhooks__timeoutSeconds="5", BILLING__webhooks__connectTimeoutSeconds="2")
        self.kills = 0
        self.kills_mid_dispatch = 0
        self.proc = None
        # The run's changes are the rows after this one (a kept var dir holds older runs').
        self.first_id = int(stack.sql("SELECT COALESCE(MAX(id), 0) FROM billing_outbox")[0][0])
        self.start()

    def start(self):
        self.proc = start_billing_rpc(self.binary, self.config, self.env, self.socket, self.log)

    def pending(self):
        """Outbox rows not fanned out plus deliveries not yet acknowledged."""
        rows = self.stack.sql("SELECT (SELECT COUNT(*) FROM billing_outbox WHERE fanned_out_at IS NULL AND type = 'access.changed'), "
                              "(SELECT COUNT(*) FROM billing_webhook_deliveries WHERE endpoint_id = 'storm' AND status <> 'delivered')")
        return int(rows[0][0]) + int(rows[0][1])

    def killer(self, stop, every):
        """kill -9 every `every` seconds, then started again at once; counts the kills that
        came while deliveries were pending (received before, and still to send)."""
        while not stop.wait(every):
            mid = len(self.receiver.received) > 0 and self.pending() > 0
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1
            self.kills_mid_dispatch += mid
            try:
                self.start()
            except RuntimeError as e:
                log(f"dispatcher: {e}")
                return

    def drain(self, seconds):
        deadline = time.monotonic() + seconds
        while self.pending() > 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.pending()

    def stop(self):
        stop_billing_rpc(self.proc)
        self.receiver.stop()


def shadow(spec, shadows):
    """The same event for the shadow users (`shadows`: user -> shadow user), under other ids."""
    copy = dict(spec)
    copy["id"] = "S" + spec["id"]
    copy["user"] = shadows[spec["user"]]
    for field in ("subscription", "period_tx"):
        if spec.get(field):
            copy[field] = "S" + spec[field]
    if spec.get("refunded"):
        copy["refunded"] = dict(spec["refunded"], tx="S" + spec["refunded"]["tx"])
    for field in ("from", "to"):
        if field in spec:
            copy[field] = shadows[spec[field]]
    return copy


# ------------------------------------------------------------------------------ the torture

class Torture:
    def __init__(self, args, stack):
        self.args = args
        self.stack = stack
        self.profile = PROFILES[args.profile]
        self.rng = random.Random(args.seed)
        self.run = f"T{uuid.uuid4().hex[:6]}"
        self.providers = {"revenuecat": RevenueCatProvider(stack.webhook_secret), "apple": AppleProvider(stack.ca_dir)}
        # Google Play when the stack has its fake (scripts/torture's; the cluster's has none).
        self.google = getattr(stack, "google", None)
        if self.google:
            self.providers["google"] = GoogleProvider(self.google)
        self.failures = []
        self.report = collections.OrderedDict()
        # (provider, event id) of every event of the run, and of those answered 2xx.
        self.all_acked = set()
        self.all_ids = set()
        # provider -> status -> deliveries sent (every request, duplicates and retries included).
        self.sent_by_provider = collections.defaultdict(collections.Counter)
        self.kills = 0
        self.restarts = 0
        self.restarting = None
        self.bad_5xx_total = 0

    def check(self, condition, message):
        if condition:
            log(f"ok: {message}")
        else:
            log(f"FAILED: {message}")
            self.failures.append(message)

    def client(self):
        return Client(self.stack.http_port, self.args.client_timeout)

    def get_access(self, client, user):
        return client.request("GET", "/api/v1/billing/access",
                              headers={"Authorization": "Bearer " + self.stack.tokens.for_user(user)})

    def deliver(self, client, stats, spec, deadline, retry_pause=0.05):
        """Sends one delivery until it is answered 2xx (like a provider), or the deadline."""
        path, body, headers = self.providers[key(spec)[0]].delivery(spec)
        pause = retry_pause
        while True:
            status, data, seconds = client.request("POST", path, body=body, headers=headers)
            stats.record(status, seconds, key(spec))
            if 200 <= status < 300:
                return True
            if status >= 500 and status != 503 and self.args.verbose:
                log(f"{status} for {spec['id']}: {data[:200]!r}")
            if status in (400, 401, 404, 413, 422):
                log(f"permanent {status} for {spec['id']}: {data[:300]!r}")
                return False
            if time.monotonic() > deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    # -------------------------------------------------------------- background faults

    def supervisor(self, stop):
        """systemd Restart=always: a dead worker is started again."""
        while not stop.is_set():
            for i in range(1, self.stack.workers + 1):
                if not self.stack.worker_alive(i):
                    self.restarting = i
                    try:
                        if self.stack.worker_start(i):
                            self.restarts += 1
                    finally:
                        self.restarting = None
            stop.wait(0.2)

    def killer(self, stop, every):
        # The first kill comes early: a fast storm (the short profile takes about two
        # seconds) must still lose a worker mid-flight.
        wait = min(every, 0.5)
        while not stop.wait(wait):
            # One worker down at a time: the pool is meant to answer while one dies. On a
            # loaded machine a worker can take longer than `every` to come back (the
            # supervisor's start returns once its socket accepts); killing the other then
            # would leave none, and nginx says 502 (stop 47's local run).
            if self.restarting is not None or not all(
                    self.stack.worker_alive(j) for j in range(1, self.stack.workers + 1)):
                wait = 0.05
                continue
            wait = every
            i = self.rng.randint(1, self.stack.workers)
            pid = self.stack.worker_pid(i)
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.kills += 1
                except ProcessLookupError:
                    pass

    # -------------------------------------------------------------- phases

    def phase_storm(self):
        p = self.profile
        users = [str(uuid.uuid4()) for _ in range(p["users"])]
        shadows = {u: str(uuid.uuid4()) for u in users}
        distinct = int(round(p["deliveries"] * (1 - p["duplicates"])))
        per_user = max(1, distinct // len(users))
        now_ms = int(time.time() * 1000)
        histories = {u: mixed_history(self.rng, u, self.run, per_user, now_ms) for u in users}
        # A third of the users also subscribe on Google Play; the fake states each token (and
        # its shadow's, "S" + token, naming the shadow user) as it stands at the end.
        play_users = users[::3] if self.google else []
        for u in play_users:
            play = play_history(self.rng, u, self.run, max(2, per_user // 3), now_ms)
            histories[u] += play
            F = harness("fake_google")
            self.google.purchases[play[0]["subscription"]] = play_purchase(F, play[0]["play_state"], u)
            self.google.purchases["S" + play[0]["subscription"]] = play_purchase(F, play[0]["play_state"], shadows[u])
        # Events that touch two users: a RevenueCat purchase and the TRANSFER of it to
        # another user, sent at the same instant by two senders (one race group), for fresh
        # pairs of users known before the storm. Their duplicates come one by one later.
        pairs = [transfer_pair(self.rng, self.run, i, now_ms) for i in range(max(2, len(users) // 5))]
        for pair in pairs:
            shadows[pair["sender"]], shadows[pair["receiver"]] = str(uuid.uuid4()), str(uuid.uuid4())
        events = [s for u in users for s in histories[u]] + [e for pair in pairs for e in pair["events"]]
        deliveries = [s for u in users for s in histories[u]] + [list(pair["events"]) for pair in pairs]
        while sum(len(d) if isinstance(d, list) else 1 for d in deliveries) < p["deliveries"]:
            deliveries.append(self.rng.choice(events))
        self.rng.shuffle(deliveries)
        flat = [s for d in deliveries for s in (d if isinstance(d, list) else [d])]
        duplicated = len(flat) - len(events)
        planned = {name: collections.Counter() for name in self.providers}
        for d in flat:
            planned[key(d)[0]]["deliveries"] += 1
        for e in events:
            planned[key(e)[0]]["events"] += 1
        kinds = collections.Counter(e["kind"] for e in events)
        log(f"storm: {len(flat)} deliveries of {len(events)} distinct events ({duplicated} duplicates) "
            f"for {len(users)} users and {len(pairs)} transfer pairs, {p['senders']} senders, kill -9 every {self.args.kill_every}s; "
            + ", ".join(f"{name} {c['deliveries']} deliveries of {c['events']} events" for name, c in planned.items())
            + "; kinds " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))

        # A third of the users are known before the storm, a third become known during it
        # (racing the unmatched-event claims), the rest only at the end. Both users of every
        # transfer pair are known before.
        c = self.client()
        for u in users[: len(users) // 3] + [pair[role] for pair in pairs for role in ("sender", "receiver")]:
            self.get_access(c, u)
        late = users[len(users) // 3: 2 * len(users) // 3]

        # RevenueCat's REST API, as it stood at one request date inside the histories: the
        # same answer for a user and his shadow. Every RevenueCat user is pulled twice while
        # the storm runs, in random order.
        puller = Puller(self.stack, os.path.join(self.stack.var_dir, "puller"))
        request_ms = now_ms - 2 * 86_400_000 - 12 * 3_600_000
        puller.fake.request_date_ms = request_ms
        pulled_users = []
        for u in users:
            entries = pulled_entries(puller.F, histories[u], request_ms)
            if entries:
                pulled_users.append(u)
                puller.fake.set_subscriber(u, *entries)
                puller.fake.set_subscriber(shadows[u], *entries)
        pull_order = pulled_users * 2
        self.rng.shuffle(pull_order)
        pull_outcomes = collections.Counter()

        # The outbox sent to an endpoint by a billing-rpc killed -9 again and again, from the
        # storm's start until its serial replay is over (scripts/torture's; the cluster's
        # storm, without --dispatch-kill-every, leaves it out).
        kill_every = getattr(self.args, "dispatch_kill_every", None)
        dispatcher = Dispatcher(self.stack, os.path.join(self.stack.var_dir, "dispatcher")) if kill_every is not None else None
        dispatch_stop = threading.Event()
        dispatch_killer = threading.Thread(target=dispatcher.killer, args=(dispatch_stop, kill_every), daemon=True) if dispatcher else None

        stats = Stats()
        work = queue.Queue()
        for d in deliveries:
            work.put(d)
        deadline = time.monotonic() + self.args.storm_deadline
        stop = threading.Event()
        helpers = [threading.Thread(target=self.supervisor, args=(stop,), daemon=True)]
        if self.args.kill_every > 0:
            helpers.append(threading.Thread(target=self.killer, args=(stop, self.args.kill_every), daemon=True))

        def sender():
            client = self.client()
            while True:
                try:
                    spec = work.get_nowait()
                except queue.Empty:
                    return
                if isinstance(spec, list):
                    self.race(spec, stats, deadline)
                else:
                    self.deliver(client, stats, spec, deadline)

        def latecomer():
            client = self.client()
            for u in late:
                self.get_access(client, u)
                time.sleep(0.01)

        def pulling():
            for u in pull_order:
                pull_outcomes[puller.reconcile(u)] += 1

        started = time.monotonic()
        for t in helpers:
            t.start()
        if dispatcher and kill_every > 0:
            dispatch_killer.start()
        senders = [threading.Thread(target=sender, daemon=True) for _ in range(p["senders"])]
        senders.append(threading.Thread(target=latecomer, daemon=True))
        senders.append(threading.Thread(target=pulling, daemon=True))
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        stop.set()
        for t in helpers:
            t.join(timeout=30)
        # Every worker is back (the supervisor's last round may still be starting one).
        for i in range(1, self.stack.workers + 1):
            if not self.stack.worker_alive(i):
                self.stack.worker_start(i)
        elapsed = time.monotonic() - started
        log(f"storm: {stats.sent} requests in {elapsed:.1f}s, statuses {dict(stats.statuses)}, "
            f"{self.kills} kills, {self.restarts} restarts")

        # Serial replay: the same distinct events, one at a time per shadow user (a transfer
        # pair's two events one after the other, in intrinsic order).
        replay_stats = Stats()
        c = self.client()
        for u in shadows:
            self.get_access(c, shadows[u])
        replay_queue = queue.Queue()
        for u in users:
            replay_queue.put((u, histories[u]))
        for pair in pairs:
            replay_queue.put((None, pair["events"]))
        replay_pulls = collections.Counter()
        replay_lock = threading.Lock()

        def replayer():
            client = self.client()
            while True:
                try:
                    u, history = replay_queue.get_nowait()
                except queue.Empty:
                    return
                for spec in history:
                    self.deliver(client, replay_stats, shadow(spec, shadows), time.monotonic() + 60)
                if u in pulled_users:
                    outcome = puller.reconcile(shadows[u])
                    with replay_lock:
                        replay_pulls[outcome] += 1

        threads = [threading.Thread(target=replayer, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        puller.stop()

        # Every user known now: the rest of them claim their unmatched events.
        for u in users:
            self.get_access(c, u)
        if dispatcher:
            dispatch_stop.set()
            if dispatch_killer.is_alive():
                dispatch_killer.join(timeout=60)
            try:
                self.check_dispatch(dispatcher, kill_every)
            finally:
                dispatcher.stop()

        ids = {key(s) for s in events}
        stats.ids = ids
        self.finish_load("storm", stats)
        self.report["storm"] = {
            "deliveries": len(deliveries), "distinct_events": len(events), "duplicate_deliveries": duplicated,
            "by_provider": {name: {"deliveries": c["deliveries"], "distinct_events": c["events"],
                                   "requests_sent": sum(stats.by_provider[name].values()),
                                   "acknowledged_events": sum(1 for k in stats.acked if k[0] == name),
                                   "statuses": {str(k): v for k, v in sorted(stats.by_provider[name].items())}}
                            for name, c in planned.items()},
            "users": len(users), "transfer_pairs": len(pairs), "kinds": dict(sorted(kinds.items())),
            "senders": p["senders"], "requests_sent": stats.sent,
            "acknowledged_events": len(stats.acked), "statuses": {str(k): v for k, v in sorted(stats.statuses.items())},
            "worker_kills": self.kills, "worker_restarts": self.restarts, "seconds": round(elapsed, 1),
            "max_request_seconds": round(stats.slowest, 2),
        }
        self.check(len(stats.acked) == len(ids), f"storm: every distinct event acknowledged ({len(stats.acked)}/{len(ids)})")
        self.check(all(planned[name]["events"] > 0 for name in self.providers),
                   f"storm: every provider delivered ({ {name: c['events'] for name, c in planned.items()} })")
        self.bad_5xx_total += replay_stats.bad_5xx
        self.report["storm"]["replay_statuses"] = {str(k): v for k, v in sorted(replay_stats.statuses.items())}
        self.check(stats.bad_5xx + replay_stats.bad_5xx == 0,
                   f"storm: no 5xx other than 503 (storm {stats.bad_5xx}, serial replay {replay_stats.bad_5xx})")
        self.check(self.args.kill_every <= 0 or self.kills > 0, f"storm: workers were killed ({self.kills})")
        self.check(all(self.stack.worker_alive(i) for i in range(1, self.stack.workers + 1)), "storm: every killed worker is back")

        # The transfers are not vacuous: in the serial replay every receiver holds the
        # sender's tier and every sender is free.
        wrong = []
        for pair in pairs:
            r = json.loads(self.get_access(c, shadows[pair["receiver"]])[1]).get("tier")
            s = json.loads(self.get_access(c, shadows[pair["sender"]])[1]).get("tier")
            if (r, s) != (pair["tier"], "free"):
                wrong.append((pair["tier"], r, s))
        self.check(not wrong, f"storm: serial replay of the transfer pairs: receivers hold the tier, senders are free "
                              f"({len(pairs) - len(wrong)}/{len(pairs)}; wrong (want, receiver, sender): {wrong[:3]})")

        # Snapshots: storm user == shadow user, ignoring identity, revision and time.
        mismatches = []
        compared = list(users) + [pair[role] for pair in pairs for role in ("sender", "receiver")]
        for u in compared:
            s1, b1, _ = self.get_access(c, u)
            s2, b2, _ = self.get_access(c, shadows[u])
            a, b = (normalized(b1) if s1 == 200 else ("status", s1)), (normalized(b2) if s2 == 200 else ("status", s2))
            if a != b:
                mismatches.append((u, a, b))
        for u, a, b in mismatches[:3]:
            log(f"snapshot mismatch for {u}:\n  storm  {a}\n  serial {b}")
        self.report["storm"]["snapshot_mismatches"] = len(mismatches)
        if self.google:
            # Not vacuous: Play decides some of the compared snapshots (its tier the highest).
            from_play = sum(1 for u in compared
                            if (json.loads(self.get_access(c, u)[1]).get("store") or {}).get("platform") == "google_play")
            self.report["storm"]["snapshots_from_play"] = from_play
            self.check(from_play > 0, f"storm: Google Play decides some snapshots ({from_play})")
        self.check(not mismatches, f"storm: every user's snapshot equals the serial replay "
                                   f"({len(compared) - len(mismatches)}/{len(compared)}, {2 * len(pairs)} of them in transfer pairs)")
        rows = self.stack.sql(f"SELECT status, COUNT(*) FROM billing_events WHERE provider_event_id LIKE '{self.run}-%' "
                              f"OR provider_event_id LIKE 'gpush:{self.run}-%' GROUP BY status")
        self.report["storm"]["inbox_statuses"] = {r[0]: int(r[1]) for r in rows}
        self.check(all(r[0] == "applied" for r in rows), f"storm: every storm event applied at the end ({dict(rows)})")
        recorded = ("corrected", "unchanged")
        self.report["storm"]["pulls"] = {"users": len(pulled_users), "storm": dict(pull_outcomes), "replay": dict(replay_pulls),
                                         "retried_unavailable": puller.retried, "fake_requests": puller.fake.count()}
        log(f"storm: {len(pulled_users)} RevenueCat users pulled twice during the storm {dict(pull_outcomes)}, "
            f"their shadows once after the replay {dict(replay_pulls)}; {puller.retried} calls retried after -32002")
        self.check(len(pulled_users) > 0 and sum(n for o, n in pull_outcomes.items() if o in recorded) == 2 * len(pulled_users)
                   and sum(n for o, n in replay_pulls.items() if o in recorded) == len(pulled_users),
                   f"storm: every pull racing the webhooks was recorded (storm {dict(pull_outcomes)}, replay {dict(replay_pulls)})")
        self.check(puller.fake.auth_failures == [], "storm: every pull carried the secret key")
        if play_users:
            # Acknowledgement (Google refunds what is left unacknowledged): never twice, and a
            # paid purchase Google still calls unacknowledged (a worker killed between its
            # claim and its call) is one the server knows is not, so its sweeper does it.
            tokens = {s["subscription"] for u in play_users for s in histories[u] if s["provider"] == "google"}
            tokens |= {"S" + t for t in tokens}
            paid = ("SUBSCRIPTION_STATE_ACTIVE", "SUBSCRIPTION_STATE_CANCELED", "SUBSCRIPTION_STATE_IN_GRACE_PERIOD",
                    "SUBSCRIPTION_STATE_ON_HOLD")
            left = [t for t in tokens if self.google.purchases[t]["subscriptionState"] in paid
                    and self.google.purchases[t]["acknowledgementState"] != "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED"]
            recorded = {r[0] for r in self.stack.sql(
                "SELECT purchase_token FROM billing_google_purchases WHERE acknowledged_at IS NOT NULL")}
            twice = [t for t, n in self.google.acknowledged.items() if n > 1]
            self.report["storm"]["google"] = {"users": len(play_users), "tokens": len(tokens), "left_for_the_sweeper": len(left),
                                              "acknowledged_by_the_server": sum(self.google.acknowledged.values())}
            self.check(not twice, f"storm: no Play purchase acknowledged twice ({len(twice)})")
            self.check(not [t for t in left if t in recorded],
                       f"storm: every paid Play purchase is acknowledged or known unacknowledged ({len(left)} left for the sweeper)")
        pulled = self.stack.sql("SELECT status, COUNT(*) FROM billing_events WHERE provider = 'revenuecat_pull' GROUP BY status")
        self.report["storm"]["pulled_statuses"] = {r[0]: int(r[1]) for r in pulled}
        self.check(pulled and all(r[0] == "applied" for r in pulled), f"storm: every pulled event applied at the end ({dict(pulled)})")

    def check_dispatch(self, dispatcher, kill_every):
        """Every access.changed the outbox holds reached the endpoint, each revision at least
        once, a user's in revision order; a kill -9 lost none of them."""
        left = dispatcher.drain(120)
        outbox = {int(r[0]): (r[1], int(r[2])) for r in self.stack.sql(
            f"SELECT id, user_id, revision FROM billing_outbox WHERE type = 'access.changed' AND id > {dispatcher.first_id}")}
        unfanned = int(self.stack.sql("SELECT COUNT(*) FROM billing_outbox WHERE type = 'access.changed' AND fanned_out_at IS NULL")[0][0])
        received = list(dispatcher.receiver.received)
        ids = collections.Counter(int(r["id"]) for r in received)
        missing = sorted(set(outbox) - set(ids))
        per_user = collections.defaultdict(list)
        for r in received:
            per_user[r["data"]["userId"]].append(r["data"]["revision"])
        disorder = [(u, revs) for u, revs in per_user.items() if any(b < a for a, b in zip(revs, revs[1:]))]
        # The body is the outbox row: the webhook-id's row, its user and revision.
        unlike = [r["id"] for r in received
                  if outbox.get(int(r["id"])) is not None and outbox[int(r["id"])] != (r["data"]["userId"], r["data"]["revision"])]
        again = sum(n - 1 for n in ids.values())
        self.report["dispatch"] = {"outbox_rows": len(outbox), "received": len(received), "sent_again": again, "missing": len(missing),
                                   "kills": dispatcher.kills, "kills_mid_dispatch": dispatcher.kills_mid_dispatch,
                                   "users": len(per_user), "left_pending": left, "attempts": len(dispatcher.receiver.attempts)}
        log(f"dispatch: {len(outbox)} access.changed rows, {len(received)} deliveries received ({again} sent again after a kill) "
            f"for {len(per_user)} users; dispatcher killed -9 {dispatcher.kills} times, {dispatcher.kills_mid_dispatch} of them mid-dispatch")
        self.check(left == 0 and unfanned == 0, f"dispatch: the outbox drained after the storm (pending {left}, not fanned out {unfanned})")
        self.check(len(outbox) > 0 and not missing,
                   f"dispatch: every access.changed reached the endpoint ({len(outbox) - len(missing)}/{len(outbox)}; missing {missing[:5]})")
        self.check(not disorder, f"dispatch: each user's revisions arrived in order ({len(per_user) - len(disorder)}/{len(per_user)}; "
                                 f"first out of order {disorder[:1]})")
        self.check(not unlike, f"dispatch: each delivery is its outbox row's user and revision ({unlike[:5]})")
        self.check(not dispatcher.receiver.unverified, f"dispatch: every delivery verified ({len(dispatcher.receiver.unverified)} did not)")
        self.check(kill_every <= 0 or dispatcher.kills_mid_dispatch > 0,
                   f"dispatch: billing-rpc was killed -9 mid-dispatch ({dispatcher.kills_mid_dispatch} of {dispatcher.kills} kills)")

    def race(self, group, stats, deadline):
        """Sends the deliveries of one race group at the same instant, each from its own
        connection and thread (released together by a barrier), each retried like deliver."""
        barrier = threading.Barrier(len(group), timeout=60)

        def one(spec):
            client = self.client()
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                pass
            self.deliver(client, stats, spec, deadline)
            client.close()

        threads = [threading.Thread(target=one, args=(spec,), daemon=True) for spec in group]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def load(self, stop, stats, clients=8, new_events=True, users=None, think=0.0):
        """Background load: webhooks of fresh events (each retried to 2xx until stop+30 s)
        and snapshot reads. Returns the threads."""
        users = users or [str(uuid.uuid4()) for _ in range(20)]
        counter = iter(range(10 ** 9))
        lock = threading.Lock()
        now_ms = int(time.time() * 1000)

        def run(n):
            client = self.client()
            rng = random.Random(n)
            while not stop.is_set():
                u = rng.choice(users)
                if new_events and rng.random() < 0.6:
                    with lock:
                        k = next(counter)
                    spec = {"id": f"{self.run}-L{n}-{k}", "user": u, "kind": "renewal", "at": now_ms - 86_400_000 + k,
                            "expires": now_ms + 30 * 86_400_000, "product": "app.pro.monthly", "subscription": f"{self.run}-L-{u[:8]}",
                            "provider": PROVIDERS[k % len(PROVIDERS)]}
                    with stats.lock:
                        stats.ids.add(key(spec))
                    self.deliver(client, stats, spec, time.monotonic() + 120)
                else:
                    status, _, seconds = self.get_access(client, u)
                    stats.record(status, seconds)
                if think:
                    time.sleep(think)

        threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(clients)]
        for t in threads:
            t.start()
        return threads

    def new_stats(self):
        return Stats()

    def finish_load(self, name, stats):
        self.all_ids |= stats.ids
        self.all_acked |= stats.acked
        self.bad_5xx_total += stats.bad_5xx
        for provider, statuses in stats.by_provider.items():
            self.sent_by_provider[provider].update(statuses)

    def phase_rolling(self):
        stats = self.new_stats()
        stop = threading.Event()
        threads = self.load(stop, stats, clients=8)
        time.sleep(1)
        r = subprocess.run([os.path.join(ROOT, "scripts", "workerctl"), "restart", "all"], env=self.stack.env,
                           capture_output=True, text=True, timeout=300)
        time.sleep(1)
        stop.set()
        for t in threads:
            t.join()
        self.finish_load("rolling", stats)
        failed = sum(n for s, n in stats.statuses.items() if not 200 <= s < 300)
        self.report["rolling"] = {"requests": stats.sent, "failed": failed, "statuses": {str(k): v for k, v in stats.statuses.items()}}
        self.check(r.returncode == 0, f"rolling: workerctl restart all succeeded ({r.stderr.strip()[-200:]})")
        self.check(failed == 0, f"rolling: zero failed requests during the rolling restart ({failed} of {stats.sent})")

    def phase_dbkill(self):
        pids_before = {i: self.stack.worker_pid(i) for i in range(1, self.stack.workers + 1)}
        stats = self.new_stats()
        stop = threading.Event()
        threads = self.load(stop, stats, clients=8, think=0.01)
        time.sleep(1)
        pid = self.stack.mariadb_pid()
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        down_for = self.profile["phase_seconds"] / 2
        time.sleep(down_for)
        statuses_while_down = dict(stats.statuses)
        restart = self.stack.sh("db_start", check=False, timeout=120)
        recovered = None
        probe = self.client()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status, _, _ = probe.request("GET", "/api/v1/health")
            if status == 200:
                recovered = time.monotonic() - killed_at
                break
            time.sleep(0.1)
        time.sleep(1)
        stop.set()
        for t in threads:
            t.join()
        self.finish_load("dbkill", stats)
        pids_after = {i: self.stack.worker_pid(i) for i in range(1, self.stack.workers + 1)}
        limit = 2 + 3  # database.connectTimeoutSeconds of the generated config + slack
        self.report["dbkill"] = {"requests": stats.sent, "statuses": {str(k): v for k, v in stats.statuses.items()},
                                 "statuses_while_down": {str(k): v for k, v in statuses_while_down.items()},
                                 "slowest_503_seconds": round(stats.slow_503, 2), "slowest_seconds": round(stats.slowest, 2),
                                 "recovered_after_seconds": recovered and round(recovered, 1)}
        self.check(restart.returncode == 0, "dbkill: MariaDB restarted")
        self.check(statuses_while_down.get(503, 0) > 0, f"dbkill: 503s while the database was down ({statuses_while_down})")
        self.check(stats.slow_503 <= limit, f"dbkill: every 503 came fast ({stats.slow_503:.2f}s <= {limit}s)")
        self.check(stats.slowest <= self.args.client_timeout, f"dbkill: no request hung ({stats.slowest:.2f}s)")
        self.check(recovered is not None, "dbkill: the workers answer again after the restart")
        self.check(pids_before == pids_after, "dbkill: recovered without a worker restart (same pids)")
        self.check(stats.bad_5xx == 0, f"dbkill: no 5xx other than 503 ({stats.bad_5xx})")

    def phase_lock(self):
        c = self.client()
        user = str(uuid.uuid4())
        self.get_access(c, user)
        seconds = self.args.lock_seconds
        holder = subprocess.Popen(["mariadb", "--no-defaults", "--protocol=socket", "-S", self.stack.db_socket, "-uroot",
                                   "billing", "-e", f"START TRANSACTION; SELECT revision FROM billing_access WHERE user_id = '{user}' "
                                   f"FOR UPDATE; DO SLEEP({seconds}); COMMIT;"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)
        now_ms = int(time.time() * 1000)
        spec = {"id": f"{self.run}-lock-1", "user": user, "kind": "purchase", "at": now_ms - 3_600_000,
                "expires": now_ms + 30 * 86_400_000, "product": "app.pro.monthly", "subscription": f"{self.run}-lock",
                "provider": "revenuecat"}
        path, body, headers = self.providers["revenuecat"].delivery(spec)
        status, data, first_seconds = c.request("POST", path, body=body, headers=headers)
        holder_running = holder.poll() is None
        holder.wait(timeout=seconds + 30)
        stats = Stats()
        landed = self.deliver(c, stats, spec, time.monotonic() + 60)
        count = self.stack.sql(f"SELECT COUNT(*) FROM billing_events WHERE provider_event_id = '{spec['id']}'")[0][0]
        _, snap, _ = self.get_access(c, user)
        bound = (3 + 1) * self.stack.lock_wait + 2  # EventIngestion's retries + 1 attempts, plus slack
        self.report["lock"] = {"first_status": status, "first_seconds": round(first_seconds, 2), "bound_seconds": bound,
                               "lock_held_seconds": seconds, "lockWaitTimeoutSeconds": self.stack.lock_wait,
                               "retry_landed": landed, "inbox_rows": int(count)}
        stats.record(status, first_seconds, key(spec))
        stats.ids.add(key(spec))
        self.finish_load("lock", stats)
        self.check(status == 503, f"lock: the webhook answered 503 while the row was locked ({status} {data[:120]!r})")
        self.check(first_seconds <= bound and holder_running, f"lock: after a bounded wait ({first_seconds:.1f}s <= {bound}s, lock still held)")
        self.check(landed and int(count) == 1, f"lock: the retry landed exactly once ({count} inbox rows)")
        self.check(json.loads(snap).get("tier") == "pro", "lock: the retried event is in the user's snapshot")

    def phase_overload(self):
        concurrency = 4 * self.stack.workers * self.stack.threads
        stats = self.new_stats()
        stop = threading.Event()
        threads = self.load(stop, stats, clients=concurrency)
        time.sleep(self.profile["phase_seconds"])
        stop.set()
        for t in threads:
            t.join()
        self.finish_load("overload", stats)
        other = {s: n for s, n in stats.statuses.items() if not (200 <= s < 300 or s == 503)}
        self.report["overload"] = {"clients": concurrency, "requests": stats.sent, "statuses": {str(k): v for k, v in stats.statuses.items()},
                                   "slowest_seconds": round(stats.slowest, 2)}
        self.check(not other, f"overload: only 2xx or 503 at {concurrency} concurrent clients ({other})")
        self.check(stats.slowest < self.args.client_timeout, f"overload: no request hung ({stats.slowest:.2f}s)")

    def phase_memory(self):
        user = str(uuid.uuid4())
        c = self.client()
        self.get_access(c, user)
        seconds = self.args.memory_seconds or self.profile["memory_seconds"]
        token = self.stack.tokens.for_user(user)
        url = f"http://127.0.0.1:{self.stack.http_port}/api/v1/billing/access"
        wrk = ["wrk", "-t2", "-c16", "-H", f"Authorization: Bearer {token}", url]
        subprocess.run(wrk + ["-d2s"], capture_output=True, text=True, timeout=60)  # warm-up
        before = self.stack.rss_kib()
        pids = {i: self.stack.worker_pid(i) for i in before}
        r = subprocess.run(wrk + [f"-d{seconds}s", "--latency"], capture_output=True, text=True, timeout=seconds + 60)
        after = self.stack.rss_kib()
        m = re.search(r"(\d+) requests in", r.stdout)
        non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", r.stdout)
        requests = int(m.group(1)) if m else 0
        growth = {i: (after[i] - before[i]) if before[i] and after[i] else None for i in before}
        self.report["memory"] = {"requests": requests, "seconds": seconds, "rss_kib_before": before, "rss_kib_after": after,
                                 "growth_kib": growth, "non_2xx": int(non2xx.group(1)) if non2xx else 0}
        same = pids == {i: self.stack.worker_pid(i) for i in before}
        self.check(requests > 0 and same, f"memory: {requests} requests served by the same worker processes")
        self.check(all(g is not None and g < self.args.rss_growth_kib for g in growth.values()),
                   f"memory: worker RSS growth below {self.args.rss_growth_kib} KiB ({growth})")

    def final_checks(self):
        # Per provider: the inbox holds every event id of this run at most once, and every
        # acknowledged one.
        totals = collections.Counter()
        self.report["providers"] = {}
        all_lost = []
        for name, provider in self.providers.items():
            prefix = provider.inbox_prefix
            rows = self.stack.sql(f"SELECT provider_event_id, COUNT(*) FROM billing_events WHERE provider = '{provider.inbox_provider}' "
                                  f"AND provider_event_id LIKE '{prefix}{self.run}-%' GROUP BY provider_event_id")
            present = {r[0][len(prefix):]: int(r[1]) for r in rows}
            ids = {i for p, i in self.all_ids if p == name}
            acked = {i for p, i in self.all_acked if p == name}
            lost = sorted(acked - set(present))
            all_lost += [(name, i) for i in lost[:10]]
            sent = self.sent_by_provider[name]
            figures = {"sent": sum(sent.values()), "events": len(ids), "acknowledged": len(acked), "present": len(present),
                       "duplicated": sum(1 for n in present.values() if n > 1), "lost": len(lost),
                       "bad_5xx": sum(n for st, n in sent.items() if is_bad_5xx(st)),
                       "statuses": {str(k): v for k, v in sorted(sent.items())}}
            self.report["providers"][name] = figures
            totals.update({k: v for k, v in figures.items() if k != "statuses"})
            log(f"summary {name}: deliveries sent {figures['sent']}, events {figures['events']}, acknowledged {figures['acknowledged']}, "
                f"present {figures['present']}, duplicated {figures['duplicated']}, lost {figures['lost']}, "
                f"5xx other than 503 {figures['bad_5xx']}")
        totals["bad_5xx"] = self.bad_5xx_total  # snapshot reads included
        self.report["totals"] = dict(totals)
        if all_lost:
            log(f"lost: {all_lost[:10]}")
        self.check(totals["duplicated"] == 0, f"inbox: no event id twice ({totals['duplicated']})")
        self.check(totals["lost"] == 0, f"inbox: every acknowledged event present ({totals['acknowledged'] - totals['lost']}/{totals['acknowledged']})")
        self.check(self.bad_5xx_total == 0, f"no 5xx other than 503 in any phase ({self.bad_5xx_total})")
        logs = self.scan_logs()
        self.report["worker_log_errors"] = logs
        self.check(logs.get("fatal", 0) == 0, f"no worker crashed on its own (Fatal error / trap in worker logs: {logs})")

    def scan_logs(self):
        counts = collections.Counter()
        log_dir = os.path.join(self.stack.var_dir, "log")
        for name in os.listdir(log_dir):
            if name.startswith("worker-") and name.endswith(".out"):
                with open(os.path.join(log_dir, name), errors="replace") as f:
                    text = f.read()
                counts["fatal"] += len(re.findall(r"Fatal error|Segmentation fault|AddressSanitizer|Illegal instruction", text))
        return dict(counts)


def normalized(body):
    """A snapshot without what differs between a user and his shadow or between two reads."""
    snapshot = json.loads(body)
    for key in ("userId", "revision", "serverTime", "balances"):
        snapshot.pop(key, None)
    return snapshot


def main():
    parser = argparse.ArgumentParser(prog="torture", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
    parser.add_argument("--var-dir", default=os.path.join(ROOT, "var", "torture"))
    parser.add_argument("--http-port", type=int, default=18380)
    parser.add_argument("--db-port", type=int, default=13607)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--kill-every", type=float, default=2.0, help="seconds between worker kills in the storm (0: none)")
    parser.add_argument("--dispatch-kill-every", type=float, default=1.0,
                        help="seconds between kills -9 of the storm's webhook dispatcher (0: none)")
    parser.add_argument("--lock-seconds", type=int, default=10)
    parser.add_argument("--lock-wait", type=int, default=2, help="database.lockWaitTimeoutSeconds of the stack")
    parser.add_argument("--client-timeout", type=float, default=60, help="a request slower than this is a hang")
    parser.add_argument("--storm-deadline", type=float, default=900, help="seconds senders keep retrying")
    parser.add_argument("--memory-seconds", type=int, default=0, help="length of the memory phase (default: the profile's)")
    parser.add_argument("--rss-growth-kib", type=int, default=65536)
    parser.add_argument("--skip", action="append", default=[], choices=["storm", "rolling", "dbkill", "lock", "overload", "memory"])
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-build", action="store_true", help="use the release binaries already built")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--report", help="write the JSON report here too")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()

    stack = Stack(args.var_dir, args.http_port, args.db_port, args.workers, args.threads, args.lock_wait)
    log(f"profile {args.profile}: starting a private stack in {stack.var_dir} (HTTP {args.http_port}, MariaDB {args.db_port})")
    stack.up(build=not args.no_build)
    torture = Torture(args, stack)
    started = time.monotonic()
    try:
        for name in ["storm", "rolling", "dbkill", "lock", "overload", "memory"]:
            if name in args.skip:
                continue
            log(f"phase {name}")
            phase_started = time.monotonic()
            try:
                getattr(torture, "phase_" + name)()
            except Exception as e:  # a phase that breaks is a failure, the others still run
                torture.check(False, f"{name}: {type(e).__name__}: {e}")
            log(f"phase {name} took {time.monotonic() - phase_started:.1f}s")
        torture.final_checks()
    finally:
        torture.report["seconds"] = round(time.monotonic() - started, 1)
        torture.report["failures"] = torture.failures
        text = json.dumps(torture.report, indent=2)
        print(text)
        if args.report:
            with open(args.report, "w") as f:
                f.write(text + "\n")
        if not args.keep:
            stack.down()
    log(f"{'FAILED: ' + str(len(torture.failures)) + ' check(s)' if torture.failures else 'all checks held'}")
    sys.exit(1 if torture.failures else 0)


if __name__ == "__main__":
    main()
