"""ID-token keys from the issuer's URL (`auth.keysUrl`, SPEC §3), end to end: a worker of its
own (the stack's configuration with `auth.keysUrl` instead of `auth.keysFile`) on a socket of
its own, asked over FastCGI by libfcgi's `cgi-fcgi`, against a local HTTPS key server
(fake_key_server.py) publishing keys as Firebase (a `{kid: PEM certificate}` map) and Sign in
with Apple (a JWKS) do. What must hold, with no file written and no signal sent:

- a token signed by a key first published at the URL verifies;
- a key the issuer stopped publishing is refused once the cached set lapses (max-age);
- the key server down (503, or not listening), a malformed answer (truncated JSON, an empty
  set, an unreadable certificate, HTML) or one slower than the timeout keeps the last good
  keys: no 5xx, tokens of those keys still verify, the failures are counted and the key
  set's age grows;
- a token naming an unknown kid fetches at most once per `auth.keysMinRefreshSeconds`,
  however many such tokens arrive;
- a worker that starts while the key server is down serves 401 (never 5xx) and takes the
  keys once the server is back."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import uuid

from harness.billing import REPO, VAR_DIR, wait_until
from harness.fake_key_server import FakeKeyServer, Key

BIN_DIR = os.path.dirname(os.environ.get("BILLING_RPC_BINARY", os.path.join(REPO, ".build/release/billing-rpc")))
WORKER = os.path.join(BIN_DIR, "billing-fcgi")
STACK_CONFIG = os.path.join(VAR_DIR, "billing.json")


def claims(config, subject=None, ttl=3600):
    now = int(time.time())
    return {"iss": config["auth"]["issuer"], "aud": config["auth"]["audience"], "sub": subject or str(uuid.uuid4()),
            "iat": now, "exp": now + ttl}


class Worker:
    """One billing-fcgi with `auth` pointed at `server`, on a socket of its own."""

    def __init__(self, tmp, server, min_refresh=1, default_max_age=3600):
        with open(STACK_CONFIG) as f:
            self.config = json.load(f)
        auth = self.config["auth"]
        auth.pop("keysFile", None)
        auth.update(keysUrl=server.url, caFile=server.ca_file, keysMinRefreshSeconds=min_refresh,
                    keysDefaultMaxAgeSeconds=default_max_age, keysTimeoutSeconds=2)
        self.path = os.path.join(tmp, "billing.json")
        with open(self.path, "w") as f:
            json.dump(self.config, f)
        self.socket = os.path.join(tmp, "keys-worker.sock")
        self.metrics = os.path.join(tmp, "metrics")
        self.log = os.path.join(tmp, "worker.log")
        self.out = open(os.path.join(tmp, "worker.out"), "ab")
        self.process = subprocess.Popen([WORKER, "--config", self.path, "--socket", self.socket, "--threads", "4",
                                         "--log-file", self.log, "--metrics-dir", self.metrics],
                                        stdout=self.out, stderr=self.out)
        assert wait_until(lambda: os.path.exists(self.socket) or self.process.poll() is not None, 20), "no socket"
        assert self.process.poll() is None, open(os.path.join(tmp, "worker.out")).read()

    def access(self, token):
        """GET /api/v1/billing/access with `token`: (status, JSON body)."""
        env = dict(os.environ, REQUEST_METHOD="GET", REQUEST_URI="/api/v1/billing/access",
                   DOCUMENT_URI="/api/v1/billing/access", SERVER_PROTOCOL="HTTP/1.1", REMOTE_ADDR="127.0.0.1",
                   QUERY_STRING="", HTTP_AUTHORIZATION="Bearer " + token)
        r = subprocess.run(["cgi-fcgi", "-bind", "-connect", self.socket], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr
        head, _, body = r.stdout.partition(b"\r\n\r\n")
        status = int(head.split(b"\r\n")[0].split()[1])
        return status, json.loads(body)

    def samples(self):
        """The worker's published metrics: {name or name{labels}: value}."""
        path = os.path.join(self.metrics, "keys-worker.json")
        try:
            with open(path) as f:
                snapshot = json.load(f)
        except (OSError, ValueError):
            return {}
        out = {}
        for name, labels, value in snapshot["samples"]:
            pairs = ",".join("%s=%s" % (labels[i], labels[i + 1]) for i in range(0, len(labels), 2))
            out[name + ("{%s}" % pairs if pairs else "")] = value
        return out

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)
        self.out.close()


class IssuerKeys(unittest.TestCase):
    form = "certificates"
    make_key = staticmethod(Key.rsa)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="token-keys-", dir=os.path.join(VAR_DIR, "tmp") if os.path.isdir(os.path.join(VAR_DIR, "tmp")) else None)
        self.server = FakeKeyServer(self.tmp, form=self.form)
        self.workers = []

    def tearDown(self):
        for worker in self.workers:
            worker.stop()
        self.server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, **options):
        worker = Worker(self.tmp, self.server, **options)
        self.workers.append(worker)
        return worker

    def assertServes(self, worker, key, message=""):
        status, body = worker.access(key.token(claims(worker.config)))
        self.assertEqual(status, 200, "%s: %s" % (message, body))

    def assertRefused(self, worker, key, code="unknown_key"):
        status, body = worker.access(key.token(claims(worker.config)))
        self.assertEqual((status, body["error"]["code"]), (401, code), body)

    def test_a_key_first_published_at_the_url_verifies_without_file_or_signal(self):
        first, second = self.make_key("issuer-1"), self.make_key("issuer-2")
        self.server.publish(first, max_age=3600)
        worker = self.start()
        self.assertServes(worker, first, "the key published at start")
        # The issuer publishes a new key (its set is cached for an hour): the first token
        # naming it makes the worker look again.
        self.assertRefused(worker, second)      # not published yet
        self.server.publish(first, second)
        time.sleep(1.1)                          # auth.keysMinRefreshSeconds since that look
        self.assertServes(worker, second, "a key first published after the worker started")
        self.assertServes(worker, first)

    def test_a_rotated_out_key_is_refused_once_the_cache_lapses(self):
        old, new = self.make_key("old"), self.make_key("new")
        self.server.publish(old, new, max_age=3)
        worker = self.start()
        self.assertServes(worker, old)
        self.server.publish(new)
        fetched = self.server.count()
        # Refreshed ahead of expiry (at four fifths of max-age), with no request needed.
        self.assertTrue(wait_until(lambda: self.server.count() > fetched, 10), "no refresh before the cache lapsed")
        self.assertTrue(wait_until(lambda: worker.access(old.token(claims(worker.config)))[0] == 401, 10),
                        "the rotated-out key still verifies after its cache lapsed")
        self.assertRefused(worker, old)
        self.assertServes(worker, new)

    def test_the_key_server_down_keeps_the_last_good_keys(self):
        key = self.make_key("kept")
        self.server.publish(key, max_age=1)
        worker = self.start()
        self.assertServes(worker, key)
        self.server.down = True
        failed = lambda: worker.samples().get("billing_auth_keys_fetches_total{outcome=error}", 0)
        self.assertTrue(wait_until(lambda: failed() >= 2, 15), worker.samples())
        # Long past max-age, with every refresh failing: the last good key still verifies.
        self.assertServes(worker, key, "with the key server answering 503")
        self.assertRefused(worker, self.make_key("never-published"))
        samples = worker.samples()
        self.assertGreaterEqual(samples["billing_auth_keys_consecutive_fetch_errors"], 1, samples)
        self.assertEqual(samples["billing_auth_keys"], 1, samples)
        self.assertGreater(samples["billing_auth_keys_age_seconds"], 1, samples)
        # Not even listening.
        self.server.stop()
        self.assertServes(worker, key, "with nothing listening at the key URL")
        with open(worker.log) as f:
            warnings = [json.loads(line) for line in f if '"token keys not fetched' in line]
        self.assertTrue(warnings, "the failed fetches are logged")
        self.assertTrue(all("BEGIN CERTIFICATE" not in json.dumps(w) for w in warnings))

    def test_a_malformed_or_slow_answer_keeps_the_last_good_keys(self):
        key = self.make_key("kept")
        self.server.publish(key, max_age=1)
        worker = self.start()
        self.assertServes(worker, key)
        failed = lambda: worker.samples().get("billing_auth_keys_fetches_total{outcome=error}", 0)
        for broken in [b'{"keys": [', b'{"keys": []}', b'{"k1": "not a certificate"}', b"<html>503</html>"]:
            before = failed()
            self.server.body = broken
            self.assertTrue(wait_until(lambda: failed() > before, 15), broken)
            self.assertServes(worker, key, "after the answer %r" % broken)
        self.server.body = None
        # An answer slower than auth.keysTimeoutSeconds (2 s here): a timeout, keys kept.
        self.server.hang_seconds = 4
        before = failed()
        self.assertTrue(wait_until(lambda: failed() > before, 20))
        self.assertServes(worker, key, "after a timed-out fetch")
        self.assertEqual(worker.samples()["billing_auth_keys"], 1)
        self.server.hang_seconds = 0

    def test_unknown_kids_fetch_at_most_once_per_interval(self):
        key = self.make_key("steady")
        self.server.publish(key, max_age=3600)
        worker = self.start(min_refresh=30)
        self.assertServes(worker, key)
        before = self.server.count()
        for i in range(15):
            self.assertRefused(worker, self.make_key("probe-%d" % i))
        # The first unknown kid after the start-up fetch may fetch once more; not the others.
        self.assertLessEqual(self.server.count() - before, 1)
        self.assertServes(worker, key)

    def test_a_worker_started_while_the_key_server_is_down_answers_401_then_serves(self):
        key = self.make_key("late")
        self.server.publish(key, max_age=3600)
        self.server.down = True
        worker = self.start()
        status, body = worker.access(key.token(claims(worker.config)))
        self.assertEqual((status, body["error"]["code"]), (401, "unknown_key"), body)
        self.server.down = False
        # The refresher retries (from keysMinRefreshSeconds up, doubling): the key arrives.
        self.assertTrue(wait_until(lambda: worker.access(key.token(claims(worker.config)))[0] == 200, 15))


class IssuerKeysJWKS(IssuerKeys):
    """The same rules with a JWKS of P-256 keys (ES256), as Sign in with Apple publishes RSA
    ones and Google its OAuth certificates."""
    form = "jwks"
    make_key = staticmethod(Key.ec)


if __name__ == "__main__":
    unittest.main()
