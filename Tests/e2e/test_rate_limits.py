"""nginx's rate limits on the public routes (SPEC §13; docs/operations.md, "Rate limits"),
end to end. The dev/test nginx exempts 127.0.0.1, where the load tools run; any other
loopback address is an ordinary client: these tests send from 127.0.0.2 (on Linux a client
bound to 127.0.0.2 reaches the 127.0.0.1 listener and nginx sees $remote_addr 127.0.0.2).

The zones' bursts are read from the rendered nginx.conf, and every burst sent is far beyond
(or far below) what a zone allows, so nothing depends on timing: a zone refills at its rate
while a test runs, which only ever lets a few more requests through."""
import os
import re
import select
import socket
import time
import unittest
import urllib.parse
import uuid

from harness.billing import HTTP_BASE, VAR_DIR, request, wait_until
from harness.tokens import token

LIMITED = "127.0.0.2"   # any loopback address but 127.0.0.1


def config():
    with open(os.path.join(VAR_DIR, "nginx", "nginx.conf")) as f:
        return f.read()


def burst(zone):
    """The burst of ZONE, the same in every location that uses it."""
    found = set(re.findall(r"limit_req\s+zone=%s\s+burst=(\d+)" % re.escape(zone), config()))
    assert len(found) == 1, (zone, found)
    return int(found.pop())


def send(method, path, source=None, body=None, headers=None):
    """One request on a fresh connection, from SOURCE (an address of this host) when given."""
    return request(method, path, body=body, headers=headers, source=source)


def bearer(user=None):
    return {"Authorization": "Bearer " + token(user or str(uuid.uuid4()))}


class RateLimits(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.api_burst = burst("billing_api")
        cls.webhook_burst = burst("billing_webhooks")
        cls.health_burst = burst("billing_health")
        cls.auth = bearer()
        # The user exists before any burst (his first request registers him).
        assert request("GET", "/api/v1/billing/access", headers=cls.auth).status == 200

    def until_limited(self, method, path, source=LIMITED, bound=None, **kwargs):
        """Sends until the first 429; returns (statuses before it, the 429). Fails if BOUND
        requests (25 bursts by default) never met one."""
        bound = bound or 25 * self.api_burst
        statuses = []
        for _ in range(bound):
            r = send(method, path, source=source, **kwargs)
            if r.status == 429:
                return statuses, r
            statuses.append(r.status)
        self.fail(f"{method} {path}: no 429 in {bound} requests from {source}: {sorted(set(statuses))}")

    def assertRateLimitedEnvelope(self, r):
        self.assertEqual(r.status, 429, r)
        self.assertTrue(r.headers.get("content-type", "").startswith("application/json"), r.headers)
        body = r.json()
        self.assertEqual(set(body), {"error"}, body)
        self.assertEqual(set(body["error"]), {"code", "message"}, body)
        self.assertEqual(body["error"]["code"], "rate_limited", body)
        self.assertIsInstance(body["error"]["message"], str)
        self.assertTrue(body["error"]["message"])
        self.assertRegex(r.headers.get("retry-after", ""), r"^[1-9][0-9]*$", r.headers)

    def test_a_burst_on_the_access_route_ends_in_429_in_the_error_envelope(self):
        before, limited = self.until_limited("GET", "/api/v1/billing/access", headers=self.auth)
        # Served until the limit, then refused (an earlier test may have left little allowance).
        self.assertLessEqual(set(before), {200}, before)
        self.assertRateLimitedEnvelope(limited)

    def test_every_other_app_route_is_limited_per_client_too(self):
        for method, path in [("GET", "/api/v1/billing/plans"),
                             ("POST", "/api/v1/billing/usage"),
                             ("POST", "/api/v1/billing/apple/transactions"),
                             ("POST", "/api/v1/billing/paywall-events"),
                             ("GET", "/api/v1/no/such/route")]:
            with self.subTest(path=path):
                body = {} if method == "POST" else None
                before, limited = self.until_limited(method, path, body=body)
                self.assertNotIn(429, before)
                self.assertRateLimitedEnvelope(limited)

    def test_webhooks_take_a_burst_far_beyond_the_app_routes_burst(self):
        sent = 3 * self.api_burst
        self.assertGreater(self.webhook_burst, sent, "the webhook zone's burst must dwarf the app routes' burst")
        # This address's app allowance is spent: the webhooks do not share it.
        self.until_limited("GET", "/api/v1/billing/access", headers=self.auth)
        statuses = []
        for i in range(sent):
            if i % 2:
                r = send("POST", "/api/v1/billing/webhooks/revenuecat", source=LIMITED, body={},
                         headers={"Authorization": "Bearer not-the-secret"})
            else:
                r = send("POST", "/api/v1/billing/webhooks/apple", source=LIMITED, body={})
            statuses.append(r.status)
        self.assertNotIn(429, statuses)
        # Every one was the worker's own answer (refused: wrong secret, empty payload or
        # App Store not configured here), none nginx's.
        self.assertTrue(all(400 <= s < 500 or s == 501 for s in statuses), sorted(set(statuses)))

    def test_health_is_probed_freely_and_spends_no_app_allowance(self):
        sent = 50
        self.assertGreaterEqual(self.health_burst, 2 * sent)
        self.until_limited("GET", "/api/v1/billing/access", headers=self.auth)
        statuses = [send("GET", "/api/v1/health" if i % 2 else "/api/v1/ping", source=LIMITED).status
                    for i in range(sent)]
        self.assertEqual(set(statuses), {200}, statuses)

    def test_127_0_0_1_is_exempt_in_the_dev_stack(self):
        sent = 5 * self.api_burst
        statuses = [send("GET", "/api/v1/billing/access", headers=self.auth).status for _ in range(sent)]
        self.assertEqual(set(statuses), {200}, sorted(set(statuses)))
        # The same burst from another address is cut short.
        before, limited = self.until_limited("GET", "/api/v1/billing/access", headers=self.auth, bound=sent)
        self.assertRateLimitedEnvelope(limited)


def conn_limit(zone):
    """The per-address connection limit of ZONE, the same in every location that uses it."""
    found = set(re.findall(r"limit_conn\s+%s\s+(\d+)" % re.escape(zone), config()))
    assert len(found) == 1, (zone, found)
    return int(found.pop())


class ConnectionLimits(unittest.TestCase):
    """SPEC §19: slow clients from one address cannot hold all of nginx's connections. Each
    slow client sends a POST's headers and never its body: nginx counts it in the location's
    connection zone while it waits. The next request from that address is 429 in the error
    envelope; another address is served; the webhooks keep their own allowance; and once the
    slow clients go, the address is served again."""
    SLOW = "127.0.0.4"
    OTHER = "127.0.0.5"

    def slow_client(self, path):
        url = urllib.parse.urlsplit(HTTP_BASE)
        s = socket.create_connection((url.hostname, url.port), timeout=10, source_address=(self.SLOW, 0))
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                   "Content-Length: 1000\r\n\r\n{").encode())
        return s

    def hold(self, limit):
        """LIMIT slow clients, each counted in the address's allowance. nginx reads their
        headers in its own time: a probe sent meanwhile may be counted in place of one of
        them, which is then refused (answered 429 at once) and replaced, until a probe from
        the address is refused because LIMIT held connections fill its allowance."""
        held = []
        deadline = time.monotonic() + 8
        while True:
            answered = set(select.select(held, [], [], 0)[0]) if held else set()
            for s in answered:
                s.close()
            held = [s for s in held if s not in answered]
            held += [self.slow_client("/api/v1/billing/paywall-events") for _ in range(limit - len(held))]
            if send("GET", "/api/v1/ping", source=self.SLOW).status == 429:
                return held
            if time.monotonic() > deadline:
                for s in held:
                    s.close()
                self.fail("no 429 with every connection held")
            time.sleep(0.1)

    def test_one_address_holding_its_connections_is_refused_while_another_is_served(self):
        limit = conn_limit("billing_conn_api")
        self.assertGreater(conn_limit("billing_conn_webhooks"), limit)
        held = self.hold(limit)
        try:
            refused = send("GET", "/api/v1/billing/plans", source=self.SLOW)
            self.assertEqual(refused.status, 429, refused)
            self.assertEqual(refused.json()["error"]["code"], "rate_limited", refused)
            self.assertEqual(send("GET", "/api/v1/ping", source=self.OTHER).status, 200)
            hook = send("POST", "/api/v1/billing/webhooks/revenuecat", source=self.SLOW, body={"event": {}})
            self.assertEqual(hook.status, 401, hook)   # the webhooks' own allowance: reached the worker
        finally:
            for s in held:
                s.close()
        self.assertTrue(wait_until(lambda: send("GET", "/api/v1/ping", source=self.SLOW).status == 200, 5))


if __name__ == "__main__":
    unittest.main()
