"""Plans and quotas end to end: GET /billing/plans, POST /billing/usage through nginx,
enforcement, the snapshot's balances, plans.list / plans.publish over the admin socket."""
import json
import threading
import time
import unittest
import uuid

from harness.billing import request, rpc
from harness.tokens import token


def snapshot(tok):
    r = request("GET", "/api/v1/billing/access", headers={"Authorization": "Bearer " + tok})
    assert r.status == 200, r
    return r.json()


def set_enforcement(value, tok):
    """Flips the flag and waits (bounded) until the workers see it (cached at most 1 s)."""
    result = rpc("flags.set", {"enforcement": value, "actor": "e2e"})
    assert "error" not in result, result
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        # Each worker thread may answer; require several agreeing answers in a row.
        if all(snapshot(tok)["enforcement"] == value for _ in range(8)):
            return
        time.sleep(0.2)
    raise AssertionError(f"workers did not see enforcement={value}")


def consume(tok, key, meter="recurringGeneration", amount=1):
    return request("POST", "/api/v1/billing/usage", body={"meter": meter, "amount": amount, "idempotencyKey": key},
                   headers={"Authorization": "Bearer " + tok})


class Plans(unittest.TestCase):
    def test_plans_route_is_public_and_cacheable(self):
        r = request("GET", "/api/v1/billing/plans")
        self.assertEqual(r.status, 200, r)
        body = r.json()
        self.assertGreaterEqual(body["planVersion"], 1)
        tiers = body["contract"]["tiers"]
        self.assertEqual(sorted(tiers), ["free", "plus", "pro", "trial"])
        self.assertEqual(tiers["free"]["meters"]["recurringGeneration"]["limit"], 1)
        self.assertEqual(tiers["plus"]["meters"]["recurringGeneration"]["limit"], 2)
        self.assertEqual(tiers["pro"]["meters"]["recurringGeneration"]["limit"], 5)
        self.assertEqual(tiers["trial"]["meters"]["recurringGeneration"], {"limit": 1, "window": "trial", "placement": "trial_generation_limit"})
        self.assertEqual(tiers["free"]["meters"]["oneTimeGeneration"]["limit"], 3)
        self.assertIn("explorePlayback", tiers["free"]["capabilities"])
        self.assertIn("max-age", r.headers.get("cache-control", ""))

    def test_publish_refuses_an_invalid_contract_with_its_problems(self):
        reply = rpc("plans.publish", {"contract": {"tiers": {"free": {}}}, "actor": "e2e"})
        self.assertEqual(reply["error"]["code"], -32602)
        self.assertEqual(reply["error"]["data"]["field"], "contract")
        self.assertTrue(any("tiers.trial" in p for p in reply["error"]["data"]["problems"]))
        reply = rpc("plans.publish", {"contract": {"tiers": {}}})
        self.assertEqual(reply["error"]["code"], -32602)

    def test_publish_a_future_version_then_list(self):
        current = rpc("plans.list")["result"]
        contract = current["versions"][-1]["contract"]
        reply = rpc("plans.publish", {"contract": contract, "actor": "e2e", "effectiveAt": "2099-01-01T00:00:00Z"})
        self.assertNotIn("error", reply, reply)
        listed = rpc("plans.list")["result"]
        self.assertEqual(listed["versions"][-1]["version"], reply["result"]["version"])
        self.assertEqual(listed["current"], current["current"], "a future version is not in force yet")
        past = rpc("plans.publish", {"contract": contract, "actor": "e2e", "effectiveAt": "2001-01-01T00:00:00Z"})
        self.assertEqual(past["error"]["code"], -32602)


class Usage(unittest.TestCase):
    def setUp(self):
        self.user = str(uuid.uuid4())
        self.tok = token(self.user)

    def test_requires_a_token_and_a_valid_body(self):
        self.assertEqual(request("POST", "/api/v1/billing/usage", body={"meter": "recurringGeneration", "amount": 1,
                                                                        "idempotencyKey": "k"}).status, 401)
        for body, field in [({"amount": 1, "idempotencyKey": "k"}, "meter"),
                            ({"meter": "nope", "amount": 1, "idempotencyKey": "k"}, "meter"),
                            ({"meter": "recurringGeneration", "amount": 0, "idempotencyKey": "k"}, "amount"),
                            ({"meter": "recurringGeneration", "amount": "1", "idempotencyKey": "k"}, "amount"),
                            ({"meter": "recurringGeneration", "amount": 1}, "idempotencyKey")]:
            r = request("POST", "/api/v1/billing/usage", body=body, headers={"Authorization": "Bearer " + self.tok})
            self.assertEqual(r.status, 400, (body, r))
            self.assertIn(field, r.json()["error"]["message"])
        r = request("POST", "/api/v1/billing/usage", body=b"{not json", headers={"Authorization": "Bearer " + self.tok})
        self.assertEqual(r.status, 400)

    def test_same_key_counts_once_and_answers_the_same(self):
        first = consume(self.tok, "same")
        again = consume(self.tok, "same")
        self.assertEqual(first.status, 200, first)
        self.assertEqual(first.json(), again.json())
        self.assertEqual(snapshot(self.tok)["balances"]["recurringGeneration"]["used"], 1)
        self.assertEqual(consume(self.tok, "same", amount=2).status, 409)

    def test_observe_records_over_the_limit_and_says_so(self):
        self.assertFalse(consume(self.tok, "a").json()["overLimit"])
        over = consume(self.tok, "b")
        self.assertEqual(over.status, 200)
        self.assertTrue(over.json()["overLimit"])
        balance = snapshot(self.tok)["balances"]["recurringGeneration"]
        self.assertEqual((balance["limit"], balance["used"], balance["remaining"]), (1, 2, 0))

    def test_enforce_refuses_with_402_and_ten_concurrent_consumers_of_the_last_credit_get_one(self):
        set_enforcement("enforce", self.tok)
        try:
            results = []
            lock = threading.Lock()

            def go(i):
                r = consume(self.tok, f"c{i}")
                with lock:
                    results.append(r)

            threads = [threading.Thread(target=go, args=(i,)) for i in range(10)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(sorted(r.status for r in results), [200] + [402] * 9, results)
            refusal = next(r for r in results if r.status == 402).json()["error"]
            self.assertEqual((refusal["code"], refusal["meter"], refusal["placement"]),
                             ("quota_exceeded", "recurringGeneration", "generation_limit"))
            self.assertEqual(snapshot(self.tok)["balances"]["recurringGeneration"]["used"], 1, "402 records nothing")
        finally:
            set_enforcement("observe", self.tok)

    def test_snapshot_has_plan_capabilities_balances_enforcement(self):
        body = snapshot(self.tok)
        self.assertEqual(body["planVersion"], rpc("plans.list")["result"]["current"])
        self.assertIn("explorePlayback", body["capabilities"])
        self.assertEqual(set(body["balances"]), {"recurringGeneration", "oneTimeGeneration", "explorePlaybackMinutes", "fileUploads"})
        self.assertIn(body["enforcement"], ("observe", "enforce"))
        b = body["balances"]["oneTimeGeneration"]
        self.assertEqual((b["limit"], b["used"], b["remaining"]), (3, 0, 3))
        self.assertLess(b["windowStart"], b["resetsAt"])


if __name__ == "__main__":
    unittest.main()
