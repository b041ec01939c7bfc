"""Rule: a billing error is not a cancellation (SPEC §5, RevenueCat and App Store).

RevenueCat reports a failed renewal charge twice: BILLING_ISSUE (with
`grace_period_expiration_at_ms` when the store gives a grace period) and a CANCELLATION
whose `cancel_reason` is BILLING_ERROR. The second is not the user leaving: it must never
end the grace period (grace, else billing retry; a RENEWAL recovers), whatever the arrival
order and whichever of the two RevenueCat stamped first, and statistics count it as a
billing issue, not a cancellation. The App Store's DID_FAIL_TO_RENEW / GRACE_PERIOD_EXPIRED
/ DID_RENEW BILLING_RECOVERY say the same with signed renewal info.

Fresh users and subscriptions per case; no timing assertions."""
import itertools
import unittest

from harness.entitlements import (DAY, HOUR, MINUTE, access, assert_none_wrong, apple_notify, apple_renewal, apple_transaction,
                          apple_transaction_id, iso, known_user, now_ms, private_window, rc_deliver, rc_event,
                          rc_subscription_id, stats_counts)


def state(snapshot):
    return snapshot["tier"], snapshot["phase"], snapshot["graceExpiresAt"]


class RevenueCatBillingErrors(unittest.TestCase):
    def failed_renewal(self, user, *, grace, cancel_offset, cancel_id_order="after"):
        """INITIAL_PURCHASE of Plus (a period that ended a day ago), the BILLING_ISSUE of its
        renewal and the CANCELLATION/BILLING_ERROR RevenueCat sends beside it, stamped
        `cancel_offset` ms from the BILLING_ISSUE (at equal stamps, `cancel_id_order` says
        whether the cancellation's event id sorts before or after the issue's)."""
        now = now_ms()
        sub = rc_subscription_id()
        start, ended = now - 31 * DAY, now - DAY
        tag = sub[-6:]
        purchase = rc_event("INITIAL_PURCHASE", user, at=start, sub=sub, expires=ended, id=f"E2E-{tag}-M-PURCHASE")
        issue_at = ended + 5 * MINUTE
        extra = {"grace_period_expiration_at_ms": grace} if grace is not None else {}
        issue = rc_event("BILLING_ISSUE", user, at=issue_at, purchased=start, sub=sub, expires=ended,
                         id=f"E2E-{tag}-M-ISSUE", **extra)
        cancel_id = f"E2E-{tag}-{'A' if cancel_id_order == 'before' else 'Z'}-CANCEL"
        cancel = rc_event("CANCELLATION", user, at=issue_at + cancel_offset, purchased=start, sub=sub, expires=ended,
                          id=cancel_id, cancel_reason="BILLING_ERROR", grace_period_expiration_at_ms=None)
        return sub, purchase, issue, cancel

    def test_billing_error_cancellation_never_ends_the_grace_period(self):
        """Every arrival order of purchase, BILLING_ISSUE and CANCELLATION/BILLING_ERROR, with
        the cancellation stamped before, at the same millisecond as (its id sorting either
        side) and after the issue: Plus in grace until the store's grace end."""
        wrong = []
        cases = [(-MINUTE, "after"), (0, "before"), (0, "after"), (MINUTE, "after")]
        count = 0
        for offset, id_order in cases:
            for order in itertools.permutations(range(3)):
                user = known_user()
                grace = now_ms() + 5 * DAY
                _, *events = self.failed_renewal(user, grace=grace, cancel_offset=offset, cancel_id_order=id_order)
                for i in order:
                    self.assertEqual(rc_deliver(events[i]).json()["status"], "applied")
                got = state(access(user))
                count += 1
                if got != ("plus", "grace", iso(grace)):
                    names = [events[i]["type"] for i in order]
                    wrong.append(f"offset {offset} ms ids {id_order}, arrival {names}: {got}")
        assert_none_wrong(self, wrong, count, "not (plus, grace, the BILLING_ISSUE's grace end)")

    def test_billing_error_without_grace_is_billing_retry_and_a_renewal_recovers(self):
        wrong = []
        orders = list(itertools.permutations(range(3)))
        for order in orders:
            user = known_user()
            sub, *events = self.failed_renewal(user, grace=None, cancel_offset=MINUTE)
            for i in order:
                rc_deliver(events[i])
            got = access(user)
            if (got["tier"], got["phase"]) != ("free", "billingRetry"):
                wrong.append(f"arrival {[events[i]['type'] for i in order]}: {(got['tier'], got['phase'])}")
                continue
            # The store's retry succeeds: a new period.
            renewed = now_ms() - HOUR
            renewal = rc_event("RENEWAL", user, at=renewed, sub=sub, expires=renewed + 30 * DAY)
            rc_deliver(renewal)
            got = access(user)
            if (got["tier"], got["phase"], got["store"]["expiresAt"]) != ("plus", "active", iso(renewal["expiration_at_ms"])):
                wrong.append(f"after RENEWAL: {(got['tier'], got['phase'], got['store']['expiresAt'])}")
        assert_none_wrong(self, wrong, len(orders), "not (free, billingRetry) then (plus, active) after a RENEWAL")

    def test_billing_error_counts_as_a_billing_issue_not_a_cancellation(self):
        """stats.subscriptions over an hour only this test uses: one subscription with a
        CANCELLATION/BILLING_ERROR, one with a CANCELLATION/UNSUBSCRIBE."""
        window = private_window()
        w = window[0]
        failing, leaving = known_user(), known_user()
        failing_sub, leaving_sub = rc_subscription_id(), rc_subscription_id()
        rc_deliver(rc_event("INITIAL_PURCHASE", failing, at=w + 5 * MINUTE, sub=failing_sub, expires=w + 30 * DAY))
        rc_deliver(rc_event("INITIAL_PURCHASE", leaving, at=w + 6 * MINUTE, sub=leaving_sub, expires=w + 30 * DAY))
        rc_deliver(rc_event("CANCELLATION", failing, at=w + 20 * MINUTE, purchased=w + 5 * MINUTE, sub=failing_sub,
                            expires=w + 30 * DAY, cancel_reason="BILLING_ERROR"))
        rc_deliver(rc_event("CANCELLATION", leaving, at=w + 25 * MINUTE, purchased=w + 6 * MINUTE, sub=leaving_sub,
                            expires=w + 30 * DAY, cancel_reason="UNSUBSCRIBE"))
        counts = stats_counts(window)
        current = counts["current"]
        self.assertEqual((current["new"], current["cancellations"], current.get("billingIssues", "absent")), (2, 1, 1),
                         "(new, cancellations, billingIssues) over the window")
        self.assertIn("billingIssues", counts["previous"])


class AppStoreBillingErrors(unittest.TestCase):
    def subscribed(self, user, product="com.example.plus.monthly"):
        """SUBSCRIBED for a period that ended a day ago (the renewal that should follow failed)."""
        now = now_ms()
        original = apple_transaction_id()
        tx = apple_transaction(user, original, original, purchase=now - 31 * DAY, expires=now - DAY,
                               signed=now - 31 * DAY, product=product)
        body, _ = apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=tx,
                               renewal=apple_renewal(original, signed=now - 31 * DAY, product=product), signed=now - 31 * DAY)
        self.assertEqual(body["status"], "applied", body)
        return original, tx

    def test_grace_period_then_grace_expired_then_billing_recovery(self):
        user = known_user()
        original, tx = self.subscribed(user)
        now = now_ms()
        grace = now + 6 * DAY
        apple_notify("DID_FAIL_TO_RENEW", "GRACE_PERIOD", transaction=tx, signed=now - DAY + MINUTE,
                     renewal=apple_renewal(original, signed=now - DAY + MINUTE, gracePeriodExpiresDate=grace,
                                           isInBillingRetryPeriod=True, expirationIntent=2))
        self.assertEqual(state(access(user)), ("plus", "grace", iso(grace)))

        apple_notify("GRACE_PERIOD_EXPIRED", None, transaction=tx, signed=now - HOUR,
                     renewal=apple_renewal(original, signed=now - HOUR, isInBillingRetryPeriod=True, expirationIntent=2))
        got = access(user)
        self.assertEqual((got["tier"], got["phase"]), ("free", "billingRetry"))

        renewed = apple_transaction(user, original, apple_transaction_id(), purchase=now - 10 * MINUTE,
                                    expires=now + 30 * DAY, signed=now - 10 * MINUTE)
        apple_notify("DID_RENEW", "BILLING_RECOVERY", transaction=renewed, signed=now - 10 * MINUTE,
                     renewal=apple_renewal(original, signed=now - 10 * MINUTE))
        got = access(user)
        self.assertEqual((got["tier"], got["phase"], got["graceExpiresAt"]), ("plus", "active", None))
        self.assertEqual(got["store"]["expiresAt"], iso(renewed["expiresDate"]))

    def test_fail_to_renew_without_grace_is_billing_retry(self):
        user = known_user()
        original, tx = self.subscribed(user)
        now = now_ms()
        apple_notify("DID_FAIL_TO_RENEW", None, transaction=tx, signed=now - HOUR,
                     renewal=apple_renewal(original, signed=now - HOUR, isInBillingRetryPeriod=True, expirationIntent=2))
        got = access(user)
        self.assertEqual((got["tier"], got["phase"], got["graceExpiresAt"]), ("free", "billingRetry", None))


if __name__ == "__main__":
    unittest.main()
