"""Nothing the stores sold is misread (SPEC §15, issue 30), end to end through nginx.

Every App Store notification type that verifies is answered 2xx and recorded under its own
kind, whichever section the payload carries (data, summary, externalPurchaseToken, appData),
shaped as in Apple's app-store-server-library test resources and signed by the test CA;
nothing of it is quarantined. ONE_TIME_CHARGE grants what the catalog says and counts in
revenue; a family-shared purchase grants access but counts as no payer and no revenue;
RevenueCat's informational types are stored under their own kinds and answered 200."""
import json
import unittest

from harness import appstore as A
from harness.billing import request, rpc, sql, sql_string
from harness.entitlements import (APPLE_WEBHOOK, DAY, HOUR, MINUTE, access, apple_notify, apple_renewal, apple_transaction,
                          apple_transaction_id, chain, iso, known_user, now_ms, private_window, rc_deliver, rc_event,
                          rc_subscription_id, stats_counts)


def quarantined():
    return int(sql("SELECT COUNT(*) FROM billing_quarantine")[0][0])


def inbox(uuid_):
    rows = sql("SELECT event_type, kind, status, COALESCE(status_reason, '-'), environment, COALESCE(product_id, '-') "
               "FROM billing_events WHERE provider = 'apple_notification' AND provider_event_id = " + sql_string(uuid_))
    return tuple(rows[0]) if rows else None


def post(payload):
    return request("POST", APPLE_WEBHOOK, body={"signedPayload": chain().sign(payload)}, timeout=60)


def snapshot_at(at_ms, environment="production"):
    """stats.subscriptions' end snapshot of a one-hour period ending at at_ms."""
    reply = rpc("stats.subscriptions", {"from": iso(at_ms - HOUR), "to": iso(at_ms), "environment": environment, "currency": "EUR"})
    assert "result" in reply, reply
    return reply["result"]["snapshots"]["end"]


class AppStoreNotificationTypes(unittest.TestCase):
    def subscribed(self):
        """A user with a running subscription: (user, original, its transaction payload)."""
        user, original, now = known_user(), apple_transaction_id(), now_ms()
        tx = apple_transaction(user, original, original, purchase=now - DAY, expires=now + 29 * DAY, signed=now - DAY)
        apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=tx, renewal=apple_renewal(original, signed=now - DAY),
                     signed=now - DAY)
        return user, original, tx

    def test_every_type_that_verifies_is_answered_2xx_under_its_own_kind_and_nothing_is_quarantined(self):
        user, original, tx = self.subscribed()
        now = now_ms()
        renewal = apple_renewal(original, signed=now)
        c = chain()
        section = A.section_notification_payload
        data = lambda type_, subtype=None, renewal_info=renewal: A.notification_payload(  # noqa: E731
            c, type_, subtype, transaction=dict(tx, signedDate=now), renewal=renewal_info, signed=now)
        cases = [
            (data("CONSUMPTION_REQUEST"), "consumption_request", "applied"),
            (data("REFUND_DECLINED", renewal_info=None), "refund_declined", "applied"),
            (data("PRICE_INCREASE", "PENDING"), "price_increase", "applied"),
            (data("METADATA_UPDATE"), "metadata_update", "applied"),
            (data("MIGRATION"), "migration", "applied"),
            (data("PRICE_CHANGE"), "price_change", "applied"),
            (data("A_TYPE_APPLE_ADDS_NEXT_YEAR"), "unknown", "applied"),
            (section("RENEWAL_EXTENSION", "summary", A.summary_section(), "SUMMARY", signed=now), "renewal_extension", "ignored"),
            (section("RENEWAL_EXTENSION", "summary", A.summary_section(environment="Sandbox"), "FAILURE", signed=now),
             "renewal_extension", "ignored"),
            (section("EXTERNAL_PURCHASE_TOKEN", "externalPurchaseToken", A.external_purchase_token_section(), "UNREPORTED",
                     signed=now), "external_purchase_token", "ignored"),
            (section("EXTERNAL_PURCHASE_TOKEN", "externalPurchaseToken", A.external_purchase_token_section(sandbox=True),
                     "UNREPORTED", signed=now), "external_purchase_token", "ignored"),
            (section("RESCIND_CONSENT", "appData", A.app_data_section(), signed=now), "consent_rescinded", "ignored"),
            (section("A_TYPE_WITH_A_SECTION_OF_ITS_OWN", "laterData", {"bundleId": A.BUNDLE_ID, "environment": "Production",
                                                                     "appAppleId": A.APP_APPLE_ID}, signed=now), "unknown", "ignored"),
        ]
        before = quarantined()
        for payload, kind, status in cases:
            with self.subTest(type=payload["notificationType"], section=[k for k in payload if k not in
                                                                         ("notificationType", "notificationUUID", "version",
                                                                          "signedDate", "subtype")]):
                r = post(payload)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json()["status"], status, r)
                row = inbox(payload["notificationUUID"])
                self.assertEqual(row[1:3], (kind, status), row)
                self.assertEqual(post(payload).json(), {"duplicate": True}, "deduplicated by notificationUUID")
        self.assertEqual(quarantined(), before, "nothing that verifies and passes the settings is quarantined")
        sandbox_token = [p for p, _, _ in cases if p.get("externalPurchaseToken", {}).get("externalPurchaseId", "").startswith("SANDBOX")]
        self.assertEqual(inbox(sandbox_token[0]["notificationUUID"])[4], "sandbox", "a SANDBOX external purchase id is a sandbox token")
        summary = [p for p, _, _ in cases if "summary" in p][0]
        self.assertEqual(inbox(summary["notificationUUID"])[5], "com.example.plus.monthly", "the summary names its product")
        got = access(user)
        self.assertEqual((got["tier"], got["phase"]), ("plus", "active"), "informational types change no access")
        consistent = rpc("events.reproject", {"userId": user, "actor": "e2e-types@ops"})["result"]
        self.assertEqual(consistent["differences"], [], consistent)

    def test_a_section_naming_another_app_is_refused_by_the_setting_and_quarantined(self):
        for section_name, section in (("summary", A.summary_section(bundle="com.example.other")),
                                      ("externalPurchaseToken", A.external_purchase_token_section(bundle="com.example.other")),
                                      ("appData", A.app_data_section(bundle="com.example.other"))):
            with self.subTest(section=section_name):
                before = quarantined()
                r = post(A.section_notification_payload("RENEWAL_EXTENSION", section_name, section))
                self.assertEqual((r.status, r.json()["error"]["code"]), (422, "bundle_mismatch"), r)
                self.assertEqual(quarantined(), before + 1)

    def test_a_signed_transaction_posted_as_a_notification_is_refused_and_never_stored(self):
        user, original, tx = self.subscribed()
        before = quarantined()
        r = request("POST", APPLE_WEBHOOK, body={"signedPayload": chain().sign(tx)})
        self.assertEqual(r.status, 400, r)   # SPEC §19: verified, but no notification
        self.assertEqual(r.json()["error"]["code"], "not_a_notification", r)
        self.assertEqual(quarantined(), before, "an Apple-signed JWS that is no notification can never apply: not kept")

    def one_time_charge(self, user, product, *, purchase, transaction_type, price=9990, ownership="PURCHASED"):
        transaction_id = apple_transaction_id()
        tx = A.transaction_payload(original_id=transaction_id, transaction_id=transaction_id, product=product, purchase=purchase,
                                   expires=None, signed=purchase, appAccountToken=user, price=price, type=transaction_type,
                                   inAppOwnershipType=ownership)
        tx.pop("expiresDate", None)
        body, uuid_ = apple_notify("ONE_TIME_CHARGE", transaction=tx, signed=purchase)
        self.assertEqual(body["status"], "applied", body)
        self.assertEqual(inbox(uuid_)[1], "non_renewing_purchase")
        return tx

    def test_one_time_charge_grants_what_the_catalog_says_and_counts_in_revenue(self):
        window = private_window()
        w = window[0]
        lifetime_user, pass_user, coins_user = known_user(), known_user(), known_user()
        self.one_time_charge(lifetime_user, "com.example.pro.lifetime", purchase=w + 5 * MINUTE, transaction_type="Non-Consumable",
                             price=99990)
        self.one_time_charge(pass_user, "com.example.plus.pass30", purchase=now_ms() - 10 * DAY,
                             transaction_type="Non-Renewing Subscription", price=4990)
        self.one_time_charge(coins_user, "com.example.coins100", purchase=w + 7 * MINUTE, transaction_type="Consumable", price=1990)

        lifetime = access(lifetime_user)
        self.assertEqual((lifetime["tier"], lifetime["phase"], lifetime["store"]["expiresAt"]), ("pro", "active", None),
                         "a lifetime product: its tier with no end")
        passed = access(pass_user)
        self.assertEqual((passed["tier"], passed["store"]["willRenew"]), ("plus", False), passed)
        self.assertIsNotNone(passed["store"]["expiresAt"], "a non-renewing product lasts the catalog's duration")
        self.assertEqual(access(coins_user)["tier"], "free", "a consumable grants no access")

        counts = stats_counts(window)["current"]
        self.assertEqual((counts["oneTimePurchases"], counts["grossMilli"]), (2, 99990 + 1990), counts)
        self.assertEqual(counts["new"], 0, "a one-time purchase is no new subscription")

    def test_a_family_shared_purchase_grants_access_and_is_no_payer_nor_revenue(self):
        window = private_window()
        w = window[0]
        payer, member = known_user(), known_user()
        for user, ownership, price in ((payer, "PURCHASED", 4990), (member, "FAMILY_SHARED", 4990)):
            original = apple_transaction_id()
            tx = apple_transaction(user, original, original, purchase=w + 5 * MINUTE, expires=w + 20 * MINUTE + 30 * DAY,
                                   signed=w + 5 * MINUTE, price=price, inAppOwnershipType=ownership)
            apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=tx, renewal=apple_renewal(original, signed=w + 5 * MINUTE),
                         signed=w + 5 * MINUTE)
        counts = stats_counts(window)["current"]
        self.assertEqual((counts["new"], counts["familyShared"], counts["grossMilli"]), (2, 1, 4990), counts)
        end = snapshot_at(window[1])
        self.assertGreaterEqual(end["familyShared"], 1, end)
        self.assertEqual(end["paying"], end["active"] - end["trial"] - end["familyShared"], end)


class RevenueCatTypes(unittest.TestCase):
    def test_informational_types_are_stored_under_their_own_kind_and_answered_200(self):
        user = known_user()
        sub, now = rc_subscription_id(), now_ms()
        rc_deliver(rc_event("INITIAL_PURCHASE", user, at=now - HOUR, sub=sub, expires=now + 30 * DAY))
        kinds = {"INVOICE_ISSUANCE": "invoice_issuance", "VIRTUAL_CURRENCY_TRANSACTION": "virtual_currency_transaction",
                 "EXPERIMENT_ENROLLMENT": "experiment_enrollment", "SUBSCRIBER_ALIAS": "subscriber_alias"}
        for type_, kind in kinds.items():
            with self.subTest(type=type_):
                e = rc_event(type_, user, at=now - MINUTE, sub=sub, expires=now - DAY)
                r = rc_deliver(e)
                self.assertEqual(r.json()["status"], "ignored", r)
                rows = sql("SELECT kind, status_reason FROM billing_events WHERE provider = 'revenuecat' AND provider_event_id = "
                           + sql_string(e["id"]))
                self.assertEqual(rows, [[kind, "informational"]])
        got = access(user)
        self.assertEqual((got["tier"], got["phase"]), ("plus", "active"), "an informational event never ends access")

    def test_a_family_shared_purchase_grants_access_and_counts_no_revenue(self):
        window = private_window()
        w = window[0]
        user = known_user()
        rc_deliver(rc_event("INITIAL_PURCHASE", user, at=w + 5 * MINUTE, sub=rc_subscription_id(), expires=now_ms() + 30 * DAY,
                            is_family_share=True, price=7.99))
        self.assertEqual(access(user)["tier"], "plus")
        counts = stats_counts(window)["current"]
        self.assertEqual((counts["new"], counts["familyShared"], counts["grossMilli"]), (1, 1, 0), counts)


if __name__ == "__main__":
    unittest.main()
