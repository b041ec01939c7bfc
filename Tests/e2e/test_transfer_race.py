"""Rule: events that touch two users converge under concurrency (SPEC §5).

A RevenueCat INITIAL_PURCHASE for a sender S and the TRANSFER that moves S's purchases to
a receiver R (transferred_from [S], transferred_to [R], stamped later) are delivered at the
same instant by two concurrent senders, for several hundred pairs at once through nginx
(32 sender threads: 16 lanes of two, each lane releasing one pair's two deliveries together
through a barrier). Whatever the interleaving, the result must be the serial replay's:
every receiver has the tier, every sender is free, and `events.reproject` of every user
finds the stored projection exact (`consistent`). Both lock orders are covered: half of the
pairs have the receiver's id sorting before the sender's, half after.

Bounded: BILLING_TRANSFER_RACE_PAIRS pairs (300), no timing assertions. A delivery answered
503 (lock wait, deadlock retries exhausted) is retried like a provider does."""
import os
import threading
import time
import unittest
import uuid
from concurrent.futures import ThreadPoolExecutor

from harness.billing import rpc
from harness.entitlements import (ACTOR, DAY, MINUTE, access, now_ms, rc_deliver, rc_event, rc_subscription_id, rc_transfer)

PAIRS = int(os.environ.get("BILLING_TRANSFER_RACE_PAIRS", "300"))
LANES = 16


def ordered_pair(receiver_first):
    """(sender, receiver) with the receiver's id sorting before or after the sender's."""
    a, b = sorted([str(uuid.uuid4()), str(uuid.uuid4())])
    return (b, a) if receiver_first else (a, b)


def deliver_until_2xx(event, attempts=20):
    """Like a provider: a non-2xx delivery is sent again (bounded). Returns (status, tries)."""
    pause = 0.05
    for attempt in range(1, attempts + 1):
        r = rc_deliver(event, expect_status=None)
        if 200 <= r.status < 300 or r.status not in (0, 502, 503, 504):
            return r.status, attempt
        time.sleep(pause)
        pause = min(1.0, pause * 2)
    return r.status, attempts


class TransferRace(unittest.TestCase):
    def test_purchase_and_transfer_delivered_at_the_same_instant_converge(self):
        now = now_ms()
        pairs = []
        for i in range(PAIRS):
            sender, receiver = ordered_pair(receiver_first=i % 2 == 0)
            tier = "pro" if i % 4 < 2 else "plus"
            purchased = now - 2 * 60 * MINUTE + i
            purchase = rc_event("INITIAL_PURCHASE", sender, at=purchased, sub=rc_subscription_id(),
                                product=f"app.{tier}.monthly", entitlement=tier, expires=now + 30 * DAY)
            transfer = rc_transfer(sender, receiver, at=purchased + 30 * MINUTE)
            pairs.append({"sender": sender, "receiver": receiver, "tier": tier, "purchase": purchase, "transfer": transfer})
        users = [p[role] for p in pairs for role in ("sender", "receiver")]
        # Both users of every pair are known before their events arrive.
        with ThreadPoolExecutor(32) as pool:
            for snapshot in pool.map(access, users):
                self.assertEqual(snapshot["tier"], "free")

        statuses = {}
        lock = threading.Lock()
        lanes = [pairs[k::LANES] for k in range(LANES)]

        def side(lane, barrier, role):
            for pair in lane:
                barrier.wait()  # the two deliveries of one pair leave together
                result = deliver_until_2xx(pair[role])
                with lock:
                    statuses[(pair[role]["id"], role)] = result

        threads = []
        for lane in lanes:
            barrier = threading.Barrier(2, timeout=120)
            threads += [threading.Thread(target=side, args=(lane, barrier, role), daemon=True)
                        for role in ("purchase", "transfer")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        self.assertFalse(any(t.is_alive() for t in threads), "senders did not finish")
        failed = {k: v for k, v in statuses.items() if v[0] != 200}
        self.assertEqual(len(statuses), 2 * PAIRS)
        self.assertEqual(failed, {}, "every delivery is acknowledged 200 (after provider-like retries of 503)")

        wrong = []

        def check(pair):
            sender, receiver = access(pair["sender"]), access(pair["receiver"])
            if (receiver["tier"], sender["tier"]) != (pair["tier"], "free"):
                order = "receiver<sender" if pair["receiver"] < pair["sender"] else "sender<receiver"
                return (f"{order}: receiver {receiver['tier']} (want {pair['tier']}), sender {sender['tier']} (want free)")
            return None

        with ThreadPoolExecutor(16) as pool:
            wrong = [w for w in pool.map(check, pairs) if w]

        def reproject(user):
            reply = rpc("events.reproject", {"userId": user, "actor": ACTOR}, id=1)
            if "result" not in reply:
                return f"{user}: {reply.get('error')}"
            result = reply["result"]
            return None if result["consistent"] else f"{user}: {result['differences']}"

        with ThreadPoolExecutor(8) as pool:
            inconsistent = [r for r in pool.map(reproject, users) if r]

        if wrong or inconsistent:
            by_order = {o: sum(1 for w in wrong if w.startswith(o)) for o in ("receiver<sender", "sender<receiver")}
            self.fail(f"{len(wrong)} of {PAIRS} pairs end wrong {by_order}, first: {wrong[:1]}; events.reproject finds "
                      f"{len(inconsistent)} of {len(users)} users inconsistent, first: {inconsistent[:1]}")


if __name__ == "__main__":
    unittest.main()
