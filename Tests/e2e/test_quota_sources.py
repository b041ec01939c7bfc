"""Rule: quotas follow the highest effective access (SPEC §6, docs/plans.md).

The snapshot's `capabilities` are those of the highest tier in force, and each meter's
`balances[meter].limit` is the most generous among every source in force: a store paid
period (its tier), a store trial (the plan's `trial` tier), operator grants
(`grants.create`) and grandfather campaigns (`grandfather.applyUsers`), with the free tier
under all of them. A trial never lowers what a paid period, a grant or a campaign gives.

Store sources are RevenueCat INITIAL_PURCHASE events (period_type NORMAL or TRIAL), each
its own subscription. Expected values come from the plan contract in force
(GET /billing/plans); the three cases of the rule are also spelled out with plan v1's numbers."""
import itertools
import sys
import unittest

from harness.billing import request, rpc
from harness.entitlements import (ACTOR, DAY, HOUR, access, assert_none_wrong, known_user, limits, now_ms, rc_deliver, rc_event,
                          rc_subscription_id)

METERS = ("recurringGeneration", "oneTimeGeneration", "explorePlaybackMinutes", "fileUploads")
# (kind, tier): what a source is; its plan tier is `trial` for a store trial, else its tier.
SOURCES = [("paid", "plus"), ("paid", "pro"), ("trial", "plus"), ("trial", "pro"),
           ("grant", "plus"), ("grant", "pro"), ("campaign", "plus"), ("campaign", "pro")]
PRODUCTS = {"plus": "app.plus.monthly", "pro": "app.pro.monthly"}


def ok(method, params):
    reply = rpc(method, params)
    assert "error" not in reply, (method, reply)
    return reply["result"]


def add_source(user, kind, tier):
    """Puts one source of access in force for user, through its real channel."""
    now = now_ms()
    if kind in ("paid", "trial"):
        trial = kind == "trial"
        event = rc_event("INITIAL_PURCHASE", user, at=now - HOUR, sub=rc_subscription_id(), product=PRODUCTS[tier],
                         entitlement=tier, period="TRIAL" if trial else "NORMAL",
                         expires=now + (7 if trial else 30) * DAY, price=0 if trial else (4.99 if tier == "plus" else 9.99))
        assert rc_deliver(event).json()["status"] == "applied"
    elif kind == "grant":
        ok("grants.create", {"userId": user, "tier": tier, "reason": "e2e quota sources",
                             "idempotencyKey": f"quota-{tier}-{user}", "actor": ACTOR})
    else:
        ok("grandfather.applyUsers", {"campaign": f"q{tier}-{user[:8]}", "tier": tier, "userIds": [user],
                                      "reason": "e2e quota sources", "actor": ACTOR})


def contract():
    r = request("GET", "/api/v1/billing/plans")
    assert r.status == 200, r
    return r.json()["contract"]["tiers"]


def meter_limit(tiers, plan_tier, meter):
    m = tiers[plan_tier]["meters"].get(meter)
    return 0 if m is None else m["limit"]


def most_generous(values):
    """None is unlimited."""
    return None if any(v is None for v in values) else max(values)


def expected(tiers, sources):
    """(capabilities, {meter: limit}) that the sources must give together."""
    plan_tiers = ["free"] + ["trial" if kind == "trial" else tier for kind, tier in sources]
    top = "pro" if any(tier == "pro" for _, tier in sources) else "plus" if sources else "free"
    return (sorted(tiers[top]["capabilities"]),
            {m: most_generous([meter_limit(tiers, t, m) for t in plan_tiers]) for m in METERS})


def got(snapshot):
    return sorted(snapshot["capabilities"]), {m: limits(snapshot).get(m, "absent") for m in METERS}


class QuotaSources(unittest.TestCase):
    def user_with(self, *sources):
        user = known_user()
        for kind, tier in sources:
            add_source(user, kind, tier)
        return access(user)

    def test_plus_grant_holder_who_starts_a_plus_trial_keeps_plus_limits(self):
        snap = self.user_with(("grant", "plus"), ("trial", "plus"))
        self.assertEqual(snap["tier"], "plus")
        got_limits = limits(snap)
        self.assertEqual((got_limits["recurringGeneration"], got_limits["fileUploads"], got_limits["explorePlaybackMinutes"]),
                         (2, 20, 600), "plus grant + plus trial: (recurringGeneration, fileUploads, explorePlaybackMinutes)")

    def test_paying_plus_user_who_starts_a_pro_trial_gets_pro_capabilities_and_plus_limits(self):
        snap = self.user_with(("paid", "plus"), ("trial", "pro"))
        self.assertEqual(snap["tier"], "pro")
        self.assertIn("sourceMonitoring", snap["capabilities"], "the Pro trial's capabilities")
        got_limits = limits(snap)
        self.assertEqual((got_limits["recurringGeneration"], got_limits["fileUploads"]), (2, 20),
                         "paid plus + pro trial: (recurringGeneration, fileUploads): plus beats the trial's 1 and 5")

    def test_pro_grant_with_a_plus_trial_has_pro_limits(self):
        snap = self.user_with(("grant", "pro"), ("trial", "plus"))
        self.assertEqual(snap["tier"], "pro")
        got_limits = limits(snap)
        self.assertEqual((got_limits["recurringGeneration"], got_limits["fileUploads"], got_limits["explorePlaybackMinutes"]),
                         (5, 100, None))
        self.assertIn("sourceMonitoring", snap["capabilities"])

    def test_every_pair_of_sources_gives_the_highest_capabilities_and_each_meter_its_most_generous_limit(self):
        tiers = contract()
        wrong = []
        pairs = list(itertools.combinations(SOURCES, 2))
        for pair in pairs:
            snap = self.user_with(*pair)
            want, have = expected(tiers, pair), got(snap)
            if have != want:
                bad = {m: (have[1][m], want[1][m]) for m in METERS if have[1][m] != want[1][m]}
                caps = "" if have[0] == want[0] else f" capabilities {sorted(set(want[0]) - set(have[0]))} missing"
                wrong.append(f"{pair[0][0]} {pair[0][1]} + {pair[1][0]} {pair[1][1]}: limits (got, want) {bad}{caps}")
        if wrong:
            print("\nwrong pairs:\n  " + "\n  ".join(wrong), file=sys.stderr)
        assert_none_wrong(self, wrong, len(pairs), "of two sources not max(capabilities, limits)")

    def test_each_source_alone_gives_its_own_limits(self):
        """The control of the matrix: one source, the limits of its plan tier."""
        tiers = contract()
        wrong = []
        for source in SOURCES:
            want, have = expected(tiers, [source]), got(self.user_with(source))
            if have != want:
                bad = {m: (have[1][m], want[1][m]) for m in METERS if have[1][m] != want[1][m]}
                caps = "" if have[0] == want[0] else f" capabilities {sorted(set(want[0]) - set(have[0]))} missing"
                wrong.append(f"{source[0]} {source[1]}: limits (got, want) {bad}{caps}")
        assert_none_wrong(self, wrong, len(SOURCES), "of one source not its own capabilities and limits")


if __name__ == "__main__":
    unittest.main()
