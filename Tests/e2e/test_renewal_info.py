"""Rule: App Store renewal info is used wherever it arrives (SPEC §5).

Any notification carrying `signedRenewalInfo` sets will-renew (`autoRenewStatus`),
grace/retry (`isInBillingRetryPeriod`, `gracePeriodExpiresDate`) and the pending plan
change (`autoRenewProductId` other than the transaction's product), not only the types
whose name says so. A notification of a type the server does not know that carries a
verified transaction of a later period updates that subscription's expiry, is answered 200,
and stays in the inbox with its raw type, kind `unknown` and status `applied`."""
import unittest

from harness.entitlements import (DAY, HOUR, MINUTE, access, apple_notify, apple_renewal, apple_transaction,
                          apple_transaction_id, inbox_row, iso, known_user, now_ms)


class RenewalInfoEverywhere(unittest.TestCase):
    def subscribed(self, user, *, purchase, expires, product="com.example.plus.monthly"):
        original = apple_transaction_id()
        tx = apple_transaction(user, original, original, purchase=purchase, expires=expires, signed=purchase, product=product,
                               originalPurchaseDate=purchase)
        body, _ = apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=tx,
                               renewal=apple_renewal(original, signed=purchase, product=product), signed=purchase)
        self.assertEqual(body["status"], "applied", body)
        return original, tx

    def test_billing_retry_with_grace_in_the_renewal_info_of_any_notification_means_grace(self):
        """The period ended a day ago and its renewal failed; the DID_FAIL_TO_RENEW never came
        (or comes late), but another notification's renewal info says the store retries
        within a grace period."""
        for notification_type, subtype in (("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED"),
                                           ("PRICE_INCREASE", "ACCEPTED")):
            with self.subTest(notification=f"{notification_type}/{subtype}"):
                user = known_user()
                now = now_ms()
                original, tx = self.subscribed(user, purchase=now - 31 * DAY, expires=now - DAY)
                grace = now + 5 * DAY
                apple_notify(notification_type, subtype, transaction=dict(tx, signedDate=now - MINUTE), signed=now - MINUTE,
                             renewal=apple_renewal(original, signed=now - MINUTE, autoRenewStatus=1,
                                                   isInBillingRetryPeriod=True, gracePeriodExpiresDate=grace,
                                                   expirationIntent=2))
                got = access(user)
                self.assertEqual((got["tier"], got["phase"], got["graceExpiresAt"]), ("plus", "grace", iso(grace)))

    def test_auto_renew_product_on_a_renewal_is_the_pending_change(self):
        """A Pro subscriber downgrades for the next period: the DID_RENEW of the current Pro
        period carries autoRenewProductId = Plus."""
        user = known_user()
        now = now_ms()
        original, _ = self.subscribed(user, purchase=now - 31 * DAY, expires=now - DAY, product="com.example.pro.monthly")
        renewed = apple_transaction(user, original, apple_transaction_id(), purchase=now - DAY, expires=now + 29 * DAY,
                                    signed=now - DAY, product="com.example.pro.monthly", originalPurchaseDate=now - 31 * DAY)
        apple_notify("DID_RENEW", None, transaction=renewed, signed=now - DAY,
                     renewal=apple_renewal(original, signed=now - DAY, product="com.example.pro.monthly",
                                           auto_renew_product="com.example.plus.monthly"))
        got = access(user)
        self.assertEqual(got["tier"], "pro", "the downgrade waits for the next period")
        self.assertIsNotNone(got["pendingChange"], "autoRenewProductId differs from the renewed product")
        self.assertEqual((got["pendingChange"]["productId"], got["pendingChange"]["tier"]), ("com.example.plus.monthly", "plus"))

    def test_auto_renew_status_off_in_the_renewal_info_means_will_not_renew(self):
        for notification_type, subtype in (("DID_RENEW", None), ("PRICE_INCREASE", "PENDING")):
            with self.subTest(notification=f"{notification_type}/{subtype}"):
                user = known_user()
                now = now_ms()
                original, tx = self.subscribed(user, purchase=now - 2 * DAY, expires=now + 28 * DAY)
                apple_notify(notification_type, subtype, transaction=dict(tx, signedDate=now - MINUTE), signed=now - MINUTE,
                             renewal=apple_renewal(original, signed=now - MINUTE, autoRenewStatus=0, expirationIntent=1))
                got = access(user)
                self.assertEqual((got["tier"], got["store"]["willRenew"]), ("plus", False))

    def test_unknown_notification_type_with_a_later_period_updates_the_expiry(self):
        user = known_user()
        now = now_ms()
        original, _ = self.subscribed(user, purchase=now - 31 * DAY, expires=now - DAY)
        self.assertEqual(access(user)["tier"], "free", "the first period ended a day ago")
        later = apple_transaction(user, original, apple_transaction_id(), purchase=now - DAY, expires=now + 29 * DAY,
                                  signed=now - HOUR, originalPurchaseDate=now - 31 * DAY)
        body, notification_uuid = apple_notify("FUTURE_TYPE_X", None, transaction=later, signed=now - HOUR,
                                               renewal=apple_renewal(original, signed=now - HOUR))
        self.assertEqual(body.get("duplicate"), False, body)
        got = access(user)
        self.assertEqual((got["tier"], got["store"]["expiresAt"]), ("plus", iso(later["expiresDate"])),
                         "an unknown type's verified later transaction moves the expiry")
        self.assertEqual(inbox_row("apple_notification", notification_uuid), ("FUTURE_TYPE_X", "unknown", "applied"))


if __name__ == "__main__":
    unittest.main()
