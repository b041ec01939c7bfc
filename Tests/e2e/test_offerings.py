"""Offerings from the server (SPEC §14), through nginx and the real processes:
GET /billing/offerings per placement and stage, the ladder stage stored per user and ladder
(dismissals walk it once each, 32 concurrent dismissals step once, capped at the last stage,
a retried event never advances twice), reset by a confirmed purchase from each provider,
trial eligibility from the trial/intro history of either provider in the product's
subscription group, the purchases.enabled switch, the funnel per offering and stage, and
offerings.publish / offerings.list.

The module publishes one test contract: version 1's ladder and placements, with the test
stack's catalog products (com.example.*) added in their own subscription group, a ladder
placement that is not eligible, and a funnel placement of its own."""
import concurrent.futures
import copy
import time
import unittest
import uuid

from harness import entitlements as E
from harness.billing import request, rpc, sql, sql_string

OFFERINGS = "/api/v1/billing/offerings"
PAYWALL = "/api/v1/billing/paywall-events"
EXAMPLE = ["com.example.plus.monthly", "com.example.pro.monthly", "com.example.plus.yearly"]
LADDER = ["default", "save50", "save65"]
VERSION = None
CONTRACT = None
FUNNEL_PLACEMENT = "e2e_funnel_" + uuid.uuid4().hex[:8]


def setUpModule():
    global VERSION, CONTRACT
    listed = rpc("offerings.list")["result"]
    contract = copy.deepcopy(listed["versions"][0]["contract"])
    contract["description"] = "e2e test_offerings"
    contract["subscriptionGroups"]["example"] = EXAMPLE
    contract["offerings"]["default"]["products"] += [{"productId": p, "introOffer": {"type": "freeTrial", "period": "P1W"}}
                                                     for p in EXAMPLE]
    for offering in ("save50", "save65"):
        contract["offerings"][offering]["products"] += [{"productId": p, "promotionalOffer": offering} for p in EXAMPLE]
    contract["placements"]["e2e_not_eligible"] = {"ladder": "acquisition", "eligible": False}
    contract["placements"][FUNNEL_PLACEMENT] = {"ladder": "acquisition", "eligible": True}
    reply = rpc("offerings.publish", {"contract": contract, "actor": E.ACTOR})
    assert "result" in reply, reply
    VERSION = reply["result"]["version"]
    CONTRACT = contract


def offerings(user, placement):
    return request("GET", OFFERINGS + "?placement=" + placement, headers={"Authorization": "Bearer " + E.token(user)})


def shown(user, placement):
    r = offerings(user, placement)
    assert r.status == 200, r
    return r.json()


def paywall(user, type_, placement, offering=None, event_id=None, **extra):
    body = {"type": type_, "placement": placement, "eventId": event_id or uuid.uuid4().hex}
    if offering is not None:
        body["offering"] = offering
    body.update(extra)
    r = request("POST", PAYWALL, body=body, headers={"Authorization": "Bearer " + E.token(user)})
    assert r.status in (200, 201), r
    return r.json()


def post_transaction(user, payload):
    """The app posting a StoreKit 2 transaction (POST /billing/apple/transactions)."""
    return request("POST", "/api/v1/billing/apple/transactions", body={"signedTransaction": E.chain().sign(payload)},
                   headers={"Authorization": "Bearer " + E.token(user)})


def dismiss(user, offering, placement="onboarding", event_id=None):
    return paywall(user, "dismiss", placement, offering, event_id)


def stage(user, placement="onboarding"):
    d = shown(user, placement)
    return d["stage"], d["offering"]["id"]


def walk_to_last(user):
    for offering in LADDER[:-1]:
        assert dismiss(user, offering)["advanced"] is True
    assert stage(user) == (2, "save65")


class Contract(unittest.TestCase):
    def test_version_1_follows_the_seeds(self):
        v1 = rpc("offerings.list")["result"]["versions"][0]
        self.assertEqual(v1["version"], 1)
        c = v1["contract"]
        self.assertEqual(sorted(c["offerings"]), ["default", "save50", "save65"])
        self.assertEqual(c["ladders"], {"acquisition": LADDER})
        self.assertEqual(c["placements"]["settings"], {"offering": "default", "eligible": False})
        acquisition = [p for p, v in c["placements"].items() if v.get("ladder") == "acquisition"]
        self.assertGreaterEqual(len(acquisition), 1)
        for p in acquisition:
            self.assertTrue(c["placements"][p]["eligible"], p)
        self.assertTrue(all(p.get("introOffer") for p in c["offerings"]["default"]["products"]), "the trial intro offer")

    def test_publish_validates_every_problem_and_is_audited(self):
        bad = copy.deepcopy(CONTRACT)
        bad["placements"]["broken"] = {"ladder": "nope", "eligible": True}
        bad["ladders"]["short"] = ["missing"]
        bad["placements"]["fixed"] = {"offering": "default", "eligible": True}
        reply = rpc("offerings.publish", {"contract": bad, "actor": E.ACTOR})
        self.assertEqual(reply["error"]["code"], -32602, reply)
        problems = "\n".join(reply["error"]["data"]["problems"])
        for expected in ["placements.broken.ladder: unknown ladder", "ladders.short: unknown offering",
                         "placements.fixed.eligible"]:
            self.assertIn(expected, problems)
        rows = sql("SELECT actor FROM audit_log WHERE action = 'offerings.publish' AND JSON_VALUE(detail, '$.version') = "
                   + str(VERSION))
        self.assertEqual(rows, [[E.ACTOR]])
        listed = rpc("offerings.list")["result"]
        self.assertEqual(listed["current"], VERSION)
        self.assertEqual(listed["versions"][-1]["contract"]["placements"][FUNNEL_PLACEMENT]["ladder"], "acquisition")


class Route(unittest.TestCase):
    def test_what_each_kind_of_placement_shows(self):
        user = E.known_user()
        d = shown(user, "onboarding")
        self.assertEqual((d["placement"], d["eligible"], d["purchasesEnabled"], d["offeringVersion"], d["ladder"], d["stage"]),
                         ("onboarding", True, True, VERSION, "acquisition", 0))
        self.assertEqual(d["stages"], LADDER)
        self.assertEqual(d["offering"]["id"], "default")
        products = {p["productId"]: p for p in d["offering"]["products"]}
        self.assertEqual((products["com.example.plus.monthly"]["tier"], products["com.example.plus.monthly"]["cadence"]),
                         ("plus", "monthly"))
        self.assertEqual((products["com.example.pro.monthly"]["tier"], products["com.example.plus.yearly"]["cadence"]),
                         ("pro", "yearly"))
        self.assertEqual(products["com.example.plus.monthly"]["introOffer"], {"type": "freeTrial", "period": "P1W"})
        self.assertTrue(all(p["trialEligible"] for p in products.values()))
        self.assertEqual(products["com.example.plus.monthly"]["subscriptionGroup"], "example")

        s = shown(user, "settings")
        self.assertEqual((s["eligible"], s["ladder"], s["stage"], s["offering"]["id"]), (False, None, None, "default"))
        n = shown(user, "e2e_not_eligible")
        self.assertEqual((n["eligible"], n["ladder"], n["stage"], n["offering"]["id"]), (False, "acquisition", None, "default"))

    def test_bad_requests(self):
        user = E.known_user()
        r = offerings(user, "no_such_placement")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.json()["error"]["code"], "unknown_placement")
        r = request("GET", OFFERINGS, headers={"Authorization": "Bearer " + E.token(user)})
        self.assertEqual(r.status, 400)
        self.assertIn("placement", r.json()["error"]["message"])
        self.assertEqual(offerings(user, "bad%20placement").status, 400)
        self.assertEqual(request("GET", OFFERINGS + "?placement=onboarding").status, 401)
        r = request("POST", PAYWALL, body={"type": "dismiss", "placement": "onboarding", "eventId": "x1"},
                    headers={"Authorization": "Bearer " + E.token(user)})
        self.assertEqual(r.status, 400, "a dismissal names the offering shown")


class Ladder(unittest.TestCase):
    def test_dismissals_walk_the_ladder_once_each_and_stop_at_the_last(self):
        user = E.known_user()
        first = dismiss(user, "default", event_id="dismiss-1")
        self.assertEqual((first["duplicate"], first["advanced"]), (False, True))
        self.assertEqual(stage(user), (1, "save50"))
        # The same event again: recorded once, never a second step.
        again = dismiss(user, "default", event_id="dismiss-1")
        self.assertEqual((again["duplicate"], again["advanced"]), (True, False))
        # A stale dismissal (the first offering, shown before the step, by another device).
        self.assertFalse(dismiss(user, "default")["advanced"])
        self.assertEqual(stage(user), (1, "save50"))
        # The stage is the ladder's, whatever acquisition placement shows it.
        self.assertEqual(stage(user, "generation_limit"), (1, "save50"))
        self.assertTrue(dismiss(user, "save50", placement="generation_limit")["advanced"])
        self.assertEqual(stage(user), (2, "save65"))
        self.assertFalse(dismiss(user, "save65")["advanced"], "capped at the last stage")
        self.assertEqual(stage(user), (2, "save65"))
        # Placements that run no ladder for the user move nothing.
        other = E.known_user()
        self.assertFalse(dismiss(other, "default", placement="settings")["advanced"])
        self.assertFalse(dismiss(other, "default", placement="e2e_not_eligible")["advanced"])
        self.assertEqual(stage(other), (0, "default"))
        self.assertEqual(shown(user, "settings")["offering"]["id"], "default", "settings never shows a discount")

    def test_32_concurrent_dismissals_from_several_devices_step_once(self):
        user = E.known_user()
        E.token(user)
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(lambda i: dismiss(user, "default"), range(32)))
        self.assertEqual(sum(a["advanced"] for a in answers), 1, answers)
        self.assertTrue(all(not a["duplicate"] for a in answers))
        self.assertEqual(stage(user), (1, "save50"))
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(lambda i: dismiss(user, "save50", event_id=f"same-{user}"), range(32)))
        self.assertEqual(sum(a["advanced"] for a in answers), 1)
        self.assertEqual(sum(not a["duplicate"] for a in answers), 1, "one event id, recorded once")
        self.assertEqual(stage(user), (2, "save65"))


class ResetOnPurchase(unittest.TestCase):
    def purchase_by(self, provider, user, purchased):
        product = "com.example.plus.monthly"
        if provider == "revenuecat":
            E.rc_deliver(E.rc_event("INITIAL_PURCHASE", user, at=purchased, sub=E.rc_subscription_id(), product=product,
                                    expires=E.now_ms() + 30 * E.DAY))
        elif provider == "apple_notification":
            original = E.apple_transaction_id()
            t = E.apple_transaction(user, original, original, purchase=purchased, expires=E.now_ms() + 30 * E.DAY,
                                    signed=purchased, product=product)
            E.apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=t, signed=purchased)
        else:
            original = E.apple_transaction_id()
            t = E.apple_transaction(user, original, original, purchase=purchased, expires=E.now_ms() + 30 * E.DAY,
                                    signed=E.now_ms(), product=product)
            r = post_transaction(user, t)
            assert r.status == 200, r

    def test_a_confirmed_purchase_resets_the_ladder_by_each_provider(self):
        for provider in ("revenuecat", "apple_notification", "apple_transaction"):
            with self.subTest(provider=provider):
                user = E.known_user()
                walk_to_last(user)
                time.sleep(0.01)
                self.purchase_by(provider, user, E.now_ms())
                self.assertEqual(stage(user), (0, "default"))

    def test_a_late_notification_of_an_earlier_purchase_leaves_later_steps(self):
        for provider in ("revenuecat", "apple_notification"):
            with self.subTest(provider=provider):
                user = E.known_user()
                purchased = E.now_ms() - E.HOUR
                walk_to_last(user)
                self.purchase_by(provider, user, purchased)
                self.assertEqual(stage(user), (2, "save65"), "the dismissals came after that purchase")


class TrialEligibility(unittest.TestCase):
    def eligibility(self, user):
        d = shown(user, "onboarding")
        return {p["productId"]: p["trialEligible"] for p in d["offering"]["products"]}

    def assert_group_spent(self, user):
        e = self.eligibility(user)
        for product in EXAMPLE:
            self.assertFalse(e[product], product)
        for product, eligible in e.items():
            if product not in EXAMPLE:
                self.assertTrue(eligible, f"{product} is in another subscription group")

    def test_a_revenuecat_trial_spends_the_group(self):
        user = E.known_user()
        E.rc_deliver(E.rc_event("INITIAL_PURCHASE", user, at=E.now_ms(), sub=E.rc_subscription_id(),
                                product="com.example.plus.monthly", period="TRIAL", expires=E.now_ms() + 7 * E.DAY))
        self.assert_group_spent(user)

    def test_a_revenuecat_intro_price_spends_the_group(self):
        user = E.known_user()
        E.rc_deliver(E.rc_event("INITIAL_PURCHASE", user, at=E.now_ms(), sub=E.rc_subscription_id(),
                                product="com.example.plus.yearly", period="INTRO", expires=E.now_ms() + 30 * E.DAY))
        self.assert_group_spent(user)

    def test_an_app_store_free_trial_spends_the_group(self):
        user = E.known_user()
        original = E.apple_transaction_id()
        t = E.apple_transaction(user, original, original, purchase=E.now_ms(), expires=E.now_ms() + 7 * E.DAY,
                                signed=E.now_ms(), product="com.example.pro.monthly", offerType=1,
                                offerDiscountType="FREE_TRIAL")
        E.apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=t)
        self.assert_group_spent(user)

    def test_an_app_store_intro_price_posted_by_the_app_spends_the_group(self):
        user = E.known_user()
        original = E.apple_transaction_id()
        t = E.apple_transaction(user, original, original, purchase=E.now_ms(), expires=E.now_ms() + 30 * E.DAY,
                                signed=E.now_ms(), product="com.example.plus.monthly", offerType=1,
                                offerDiscountType="PAY_AS_YOU_GO")
        r = post_transaction(user, t)
        self.assertEqual(r.status, 200, r)
        self.assert_group_spent(user)

    def test_a_paid_period_without_an_offer_leaves_the_intro_offer_open(self):
        user = E.known_user()
        E.rc_deliver(E.rc_event("INITIAL_PURCHASE", user, at=E.now_ms(), sub=E.rc_subscription_id(),
                                product="com.example.plus.monthly", expires=E.now_ms() + 30 * E.DAY))
        self.assertTrue(all(self.eligibility(user).values()))


class PurchaseSwitch(unittest.TestCase):
    def set_purchases(self, enabled):
        reply = rpc("flags.set", {"purchases.enabled": enabled, "actor": E.ACTOR})
        self.assertEqual(reply["result"]["purchases.enabled"], enabled, reply)

    def test_off_refuses_the_app_s_purchases_and_never_the_stores(self):
        user = E.known_user()
        self.set_purchases(False)
        try:
            self.assertIs(rpc("flags.get")["result"]["purchases.enabled"], False)
            self.assertFalse(shown(user, "onboarding")["purchasesEnabled"])
            original = E.apple_transaction_id()
            t = E.apple_transaction(user, original, original, purchase=E.now_ms(), expires=E.now_ms() + 30 * E.DAY,
                                    signed=E.now_ms())
            r = post_transaction(user, t)
            self.assertEqual(r.status, 403)
            self.assertEqual(r.json()["error"]["code"], "purchases_disabled")
            self.assertIsNone(E.inbox_row("apple_transaction", original), "nothing recorded")
            # The stores' deliveries still flow and still grant.
            E.apple_notify("SUBSCRIBED", "INITIAL_BUY", transaction=t)
            self.assertEqual(E.access(user)["tier"], "plus")
            other = E.known_user()
            E.rc_deliver(E.rc_event("INITIAL_PURCHASE", other, at=E.now_ms(), sub=E.rc_subscription_id(),
                                    product="com.example.pro.monthly", entitlement="pro", expires=E.now_ms() + 30 * E.DAY))
            self.assertEqual(E.access(other)["tier"], "pro")
        finally:
            self.set_purchases(True)
        self.assertTrue(shown(user, "onboarding")["purchasesEnabled"])
        rows = sql("SELECT JSON_VALUE(detail, '$.to') FROM audit_log WHERE action = 'flags.set' AND actor = "
                   + sql_string(E.ACTOR) + " AND JSON_VALUE(detail, '$.flag') = 'purchases.enabled' ORDER BY id DESC LIMIT 2")
        self.assertEqual(rows, [["true"], ["false"]])


class Funnel(unittest.TestCase):
    def stages(self):
        now = E.now_ms()
        reply = rpc("stats.subscriptions", {"from": E.iso(now - E.HOUR), "to": E.iso(now + E.HOUR),
                                            "environment": "production"})
        rows = reply["result"]["funnel"]["stages"]
        return {(r["offering"], r["stage"]): r for r in rows if r["placement"] == FUNNEL_PLACEMENT}

    def test_conversion_per_stage_is_one_stats_call(self):
        users = [E.known_user() for _ in range(3)]
        for user in users:
            paywall(user, "view", FUNNEL_PLACEMENT, "default")
            paywall(user, "dismiss", FUNNEL_PLACEMENT, "default")
            paywall(user, "view", FUNNEL_PLACEMENT, "save50")
        paywall(users[0], "purchase", FUNNEL_PLACEMENT, "save50", result="done")
        paywall(users[1], "purchase", FUNNEL_PLACEMENT, "save50", result="cancelled")
        rows = self.stages()
        first, second = rows[("default", 0)], rows[("save50", 1)]
        self.assertEqual((first["views"], first["dismissals"], first["attempts"], first["purchases"]), (3, 3, 0, 0))
        self.assertEqual((second["views"], second["dismissals"], second["attempts"], second["purchases"]), (3, 0, 2, 1))
        self.assertEqual(second["conversionPct"], 33.3)
        for user in users:
            self.assertEqual(stage(user, FUNNEL_PLACEMENT), (1, "save50"))


if __name__ == "__main__":
    unittest.main()
