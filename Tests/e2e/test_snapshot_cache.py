"""The workers' snapshot cache through nginx and the real processes: after a user's snapshot
has been read (and cached by every worker thread that served it), a change made anywhere
else — the admin daemon, a consumption on another worker, a DBA's hand edit — shows on the
very next request, whichever worker answers it."""
import re
import time
import unittest
import uuid

from harness.billing import request, rpc, wait_until
from test_admin import mariadb
from test_quota import consume, snapshot, token

READS = 12  # enough for both worker processes (and several threads) to answer and cache


def all_reads(tok):
    return [snapshot(tok) for _ in range(READS)]


def hits():
    text = request("GET", "/metrics").body.decode()
    return sum(float(m) for m in re.findall(r'^billing_snapshot_cache_total\{[^}]*result="hit"[^}]*\} (\S+)$', text, re.M))


class SnapshotCache(unittest.TestCase):
    def test_changes_from_anywhere_show_on_the_next_request(self):
        user = str(uuid.uuid4())
        tok = token(user)
        before = hits()
        self.assertEqual({s["tier"] for s in all_reads(tok)}, {"free"})

        grant = rpc("grants.create", {"userId": user, "tier": "pro", "reason": "cache e2e", "actor": "e2e",
                                      "idempotencyKey": "cache-" + user})
        self.assertNotIn("error", grant, grant)
        self.assertEqual({s["tier"] for s in all_reads(tok)}, {"pro"}, "a grant made by billing-rpc")

        used = {s["balances"]["recurringGeneration"]["used"] for s in all_reads(tok)}
        self.assertEqual(used, {0})
        self.assertEqual(consume(tok, "cache-" + user).status, 200)
        used = {s["balances"]["recurringGeneration"]["used"] for s in all_reads(tok)}
        self.assertEqual(used, {1}, "a consumption served by either worker")

        mariadb("UPDATE billing_grants SET expires_at = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND, "
                "starts_at = UTC_TIMESTAMP(3) - INTERVAL 1 HOUR WHERE user_id = '%s'" % user)
        self.assertEqual({s["tier"] for s in all_reads(tok)}, {"free"}, "a DBA's hand edit")

        # Most of those reads were served from the cache (published once a second per worker).
        self.assertTrue(wait_until(lambda: hits() - before >= READS, 5), (before, hits()))


if __name__ == "__main__":
    unittest.main()
