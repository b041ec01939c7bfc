"""Rule: a refund takes back what its transaction granted, nothing more (SPEC §5).

A refund of an earlier period leaves a later paid period standing; a refund of the current
period ends access at its revocation time; a reversal restores. App Store REVOKE (family
sharing) ends access like a refund but is not one: stats.subscriptions counts it under
`revocations`, never under `refunds`, and `refundedMilli` leaves it out.

Periods are relative to now: the first started 40 days ago and ended 10 days ago, the
renewal started 10 days ago and runs 20 more days, so "current" is real at read time."""
import unittest

from harness.entitlements import (DAY, HOUR, MINUTE, access, apple_notify, apple_renewal, apple_transaction,
                          apple_transaction_id, iso, known_user, now_ms, private_window, rc_deliver, rc_event,
                          rc_subscription_id, stats_counts)


def tier_phase(snapshot):
    return snapshot["tier"], snapshot["phase"]


class AppStoreRefunds(unittest.TestCase):
    def two_periods(self, user):
        """t1 (d0 → d30) then its renewal t2 (d30 → d60), d30 ten days ago."""
        now = now_ms()
        d0, d30, d60 = now - 40 * DAY, now - 10 * DAY, now + 20 * DAY
        original = apple_transaction_id()
        t1 = apple_transaction(user, original, original, purchase=d0, expires=d30, signed=d0, originalPurchaseDate=d0)
        t2 = apple_transaction(user, original, apple_transaction_id(), purchase=d30, expires=d60, signed=d30,
                               originalPurchaseDate=d0)
        subscribed = ("SUBSCRIBED", "INITIAL_BUY", t1, apple_renewal(original, signed=d0), d0)
        renewed = ("DID_RENEW", None, t2, apple_renewal(original, signed=d30), d30)
        return original, t1, t2, subscribed, renewed

    @staticmethod
    def send(notification):
        kind, subtype, transaction, renewal, signed = notification
        return apple_notify(kind, subtype, transaction=transaction, renewal=renewal, signed=signed)[0]

    @staticmethod
    def refund(transaction, revoked_at, kind="REFUND", reason=1, **extra):
        refunded = dict(transaction, revocationDate=revoked_at, revocationReason=reason, signedDate=revoked_at, **extra)
        return (kind, None, refunded, None, revoked_at)

    def test_refund_of_the_earlier_period_leaves_the_renewed_period_standing(self):
        for order in ("renewal first", "refund first"):
            with self.subTest(order=order):
                user = known_user()
                _, t1, t2, subscribed, renewed = self.two_periods(user)
                refund_t1 = self.refund(t1, now_ms() - HOUR)
                sequence = [subscribed, renewed, refund_t1] if order == "renewal first" else [subscribed, refund_t1, renewed]
                for n in sequence:
                    self.send(n)
                got = access(user)
                self.assertEqual((got["tier"], got["phase"], got["store"]["expiresAt"]),
                                 ("plus", "active", iso(t2["expiresDate"])),
                                 f"REFUND of t1 (d0→d30, revoked after d30) must leave t2 (d30→d60) standing ({order})")

    def test_refund_of_the_current_period_ends_access_and_its_reversal_restores(self):
        user = known_user()
        _, t1, t2, subscribed, renewed = self.two_periods(user)
        for n in (subscribed, renewed, self.refund(t1, now_ms() - HOUR)):
            self.send(n)
        revoked_at = now_ms() - MINUTE
        self.send(self.refund(t2, revoked_at))
        got = access(user)
        self.assertEqual(tier_phase(got), ("free", "revoked"))
        self.assertEqual(got["store"]["expiresAt"], iso(revoked_at), "access ends at the revocation time")
        reversed_at = now_ms()
        self.send(("REFUND_REVERSED", None, dict(t2, signedDate=reversed_at), None, reversed_at))
        got = access(user)
        self.assertEqual((got["tier"], got["store"]["expiresAt"]), ("plus", iso(t2["expiresDate"])))

    def test_family_sharing_revoke_ends_access(self):
        user = known_user()
        original = apple_transaction_id()
        now = now_ms()
        tx = apple_transaction(user, original, original, purchase=now - 5 * DAY, expires=now + 25 * DAY,
                               signed=now - 5 * DAY, inAppOwnershipType="FAMILY_SHARED")
        apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=tx, renewal=apple_renewal(original, signed=now - 5 * DAY),
                     signed=now - 5 * DAY)
        self.assertEqual(access(user)["tier"], "plus")
        self.send(self.refund(tx, now - MINUTE, kind="REVOKE", reason=0))
        self.assertEqual(tier_phase(access(user)), ("free", "revoked"))

    def test_revoke_counts_as_a_revocation_not_a_refund(self):
        """stats.subscriptions over an hour only this test uses: one subscription refunded,
        one revoked by family sharing."""
        window = private_window()
        w = window[0]
        refunded_user, shared_user = known_user(), known_user()
        refunded, shared = apple_transaction_id(), apple_transaction_id()
        t_refunded = apple_transaction(refunded_user, refunded, refunded, purchase=w + 2 * MINUTE, expires=w + 30 * DAY,
                                       signed=w + 2 * MINUTE, price=4990)
        t_shared = apple_transaction(shared_user, shared, shared, purchase=w + 3 * MINUTE, expires=w + 30 * DAY,
                                     signed=w + 3 * MINUTE, price=7990, inAppOwnershipType="FAMILY_SHARED")
        for tx, original in ((t_refunded, refunded), (t_shared, shared)):
            apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=tx, renewal=apple_renewal(original, signed=tx["signedDate"]),
                         signed=tx["signedDate"])
        self.send(self.refund(t_refunded, w + 30 * MINUTE))
        self.send(self.refund(t_shared, w + 40 * MINUTE, kind="REVOKE", reason=0))
        counts = stats_counts(window)
        c = counts["current"]
        self.assertEqual({k: c.get(k, "absent") for k in ("new", "refunds", "revocations", "refundedMilli", "lost")},
                         {"new": 2, "refunds": 1, "revocations": 1, "refundedMilli": 4990, "lost": 2},
                         "counts over the window of one REFUND (4.990 EUR) and one family-sharing REVOKE (7.990 EUR)")
        self.assertIn("revocations", counts["previous"])


class RevenueCatRefunds(unittest.TestCase):
    """RevenueCat reports a refund as CANCELLATION with cancel_reason CUSTOMER_SUPPORT,
    carrying the refunded transaction (transaction_id, purchased_at_ms, expiration_at_ms)."""

    def two_periods(self, user):
        now = now_ms()
        d0, d30, d60 = now - 40 * DAY, now - 10 * DAY, now + 20 * DAY
        sub = rc_subscription_id()
        first = rc_event("INITIAL_PURCHASE", user, at=d0, sub=sub, expires=d30, transaction=sub)
        renewal = rc_event("RENEWAL", user, at=d30, sub=sub, expires=d60, transaction=rc_subscription_id())
        return sub, first, renewal

    @staticmethod
    def refund_of(user, period, at):
        return rc_event("CANCELLATION", user, at=at, sub=period["original_transaction_id"],
                        purchased=period["purchased_at_ms"], expires=period["expiration_at_ms"],
                        transaction=period["transaction_id"], cancel_reason="CUSTOMER_SUPPORT", price=-4.99)

    def test_refund_of_an_earlier_period_leaves_the_current_period_standing(self):
        for order in ("renewal first", "refund first"):
            with self.subTest(order=order):
                user = known_user()
                _, first, renewal = self.two_periods(user)
                refund = self.refund_of(user, first, now_ms() - HOUR)
                for e in ([first, renewal, refund] if order == "renewal first" else [first, refund, renewal]):
                    rc_deliver(e)
                got = access(user)
                self.assertEqual((got["tier"], got["phase"], got["store"]["expiresAt"]),
                                 ("plus", "active", iso(renewal["expiration_at_ms"])),
                                 f"a CUSTOMER_SUPPORT refund of the first period must leave the renewal standing ({order})")

    def test_refund_of_the_current_period_ends_access(self):
        user = known_user()
        _, first, renewal = self.two_periods(user)
        for e in (first, renewal, self.refund_of(user, renewal, now_ms() - HOUR)):
            rc_deliver(e)
        self.assertEqual(tier_phase(access(user)), ("free", "revoked"))


if __name__ == "__main__":
    unittest.main()
