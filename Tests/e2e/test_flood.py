"""A flood at the public App Store webhook (SPEC §13): 10,000 deliveries of garbage and of
wrongly signed JWS from 32 connections leave the quarantine and the inbox as they were, are
each answered with a 4xx (never a 5xx), and the workers keep serving. Bounded: 10,000
requests, a few seconds to a minute on two cores; no timing assertion."""
import base64
import http.client
import json
import os
import threading
import unittest
import urllib.parse
import uuid

from harness.billing import HTTP_BASE, VAR_DIR, request, sql

WEBHOOK = "/api/v1/billing/webhooks/apple"
TOTAL = 10_000
SENDERS = 32


def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class WebhookFlood(unittest.TestCase):
    def bodies(self):
        from harness import appstore as A  # needs `cryptography` (scripts/test installs it)
        ca = os.path.join(VAR_DIR, "testca")
        a, b = A.load_chain(ca, "a"), A.load_chain(ca, "b")
        payload = A.notification_payload(a, "DID_RENEW", uuid_=str(uuid.uuid4()))
        good = a.sign(payload)
        header, body, signature = good.split(".")
        flipped = bytearray(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)))
        flipped[5] ^= 0x01
        seg = lambda value: b64u(json.dumps(value).encode())
        return [
            b"not json at all",
            json.dumps(["an", "array"]).encode(),
            json.dumps({"signedPayload": "a.b"}).encode(),
            json.dumps({"signedPayload": f"{seg({'alg': 'none'})}.{body}."}).encode(),
            json.dumps({"signedPayload": b.sign(payload)}).encode(),                      # a chain no root anchors
            json.dumps({"signedPayload": f"{header}.{body}.{b64u(bytes(flipped))}"}).encode(),  # a bad signature
            json.dumps({"signedPayload": f"{seg({'alg': 'ES256', 'x5c': ['AAAA']})}.{body}.{signature}"}).encode(),
        ]

    def test_ten_thousand_hostile_deliveries_store_nothing(self):
        bodies = self.bodies()
        quarantine = sql("SELECT COUNT(*) FROM billing_quarantine")
        inbox = sql("SELECT COUNT(*) FROM billing_events")
        url = urllib.parse.urlsplit(HTTP_BASE)
        statuses = {}
        lock = threading.Lock()
        next_index = iter(range(TOTAL))

        def sender():
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
            seen = {}
            try:
                for i in next_index:
                    try:
                        conn.request("POST", WEBHOOK, body=bodies[i % len(bodies)], headers={"Content-Type": "application/json"})
                        r = conn.getresponse()
                        data = r.read()
                        try:
                            status = (r.status, json.loads(data)["error"]["code"])
                        except (ValueError, KeyError, TypeError):
                            status = (r.status, "no error envelope")
                        if r.getheader("Connection", "").lower() == "close":
                            conn.close()
                    except (http.client.HTTPException, OSError):
                        conn.close()
                        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
                        status = "connection error"
                    seen[status] = seen.get(status, 0) + 1
            finally:
                conn.close()
                with lock:
                    for status, count in seen.items():
                        statuses[status] = statuses.get(status, 0) + count

        threads = [threading.Thread(target=sender) for _ in range(SENDERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        self.assertEqual(sum(statuses.values()), TOTAL, statuses)
        self.assertTrue(all(isinstance(s, tuple) and 400 <= s[0] < 500 for s in statuses), f"every answer a 4xx: {statuses}")
        codes = {code for _, code in statuses}
        # Each kind of body met its own refusal: the verifier really ran on the signed ones.
        self.assertTrue({"invalid_json", "invalid_payload", "malformed_jws", "untrusted_chain", "bad_signature"} <= codes, statuses)
        self.assertEqual(sql("SELECT COUNT(*) FROM billing_quarantine"), quarantine, "nothing quarantined")
        self.assertEqual(sql("SELECT COUNT(*) FROM billing_events"), inbox, "nothing in the inbox")
        self.assertEqual(request("GET", "/api/v1/health").status, 200, "the workers keep serving")


if __name__ == "__main__":
    unittest.main()
