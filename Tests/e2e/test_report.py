"""billing-admin report (SPEC §20, docs/stats.md "Report"): one self-contained HTML page of
inline SVG charts, rendered by Debian's headless Chromium to PNG in light and in dark, and
read back with Pillow: not blank, every chart's own colour on the page, the page's
background following the colour scheme. Beside it, the methods the page is drawn from
(stats.snapshots, stats.cohorts) and their validation. The figures' arithmetic is the Swift
fixtures' (CurrencyStatsTests, the rule tests); here: that the page carries them."""
import datetime
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest
import uuid

from harness import entitlements as E
from harness.billing import REPO, request, rpc, script, VAR_DIR

SOCKET = os.path.join(VAR_DIR, "run", "billing-rpc.sock")
PAYWALL = "/api/v1/billing/paywall-events"
# billing-admin's REPORT_COLORS: one per series, the same in light and dark.
CHART_COLORS = {
    "mrr": "#2563eb", "active": "#0d9488", "trial": "#d97706", "new": "#16a34a", "lost": "#dc2626",
    "conversion": "#7c3aed", "movement_up": "#0891b2", "movement_down": "#be123c", "cohort": "#db2777",
    "revenue": "#ea580c", "views": "#64748b", "attempts": "#4f46e5", "purchases": "#65a30d",
}
CHARTS = ["mrr", "active", "newlost", "conversion", "movement", "cohorts", "revenue", "funnel"]

# Run by the venv's Python that has Pillow (scripts/test: ensure_pillow): the size, the
# distinct colours, the pixels of each wanted colour and the top-left corner's colour.
ANALYZE = r"""
import json, sys
from PIL import Image
image = Image.open(sys.argv[1]).convert("RGB")
wanted = {k: tuple(int(v[i:i + 2], 16) for i in (1, 3, 5)) for k, v in json.loads(sys.argv[2]).items()}
counts = {c: n for n, c in image.getcolors(maxcolors=1 << 24)}
print(json.dumps({"size": image.size, "colors": len(counts), "corner": image.getpixel((3, 3)),
                  "hits": {k: counts.get(rgb, 0) for k, rgb in wanted.items()}}))
"""


def image_python():
    path = os.environ.get("BILLING_TEST_IMAGE_PYTHON")
    if not path or not os.access(path, os.X_OK):
        raise RuntimeError("BILLING_TEST_IMAGE_PYTHON (a Python with Pillow) is not set: run through scripts/test")
    return path


def chromium():
    path = shutil.which("chromium")
    if path is None:
        raise RuntimeError("Debian's chromium is not installed (scripts/test installs it)")
    return path


def render(html, png, dark):
    args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--window-size=1280,3000", f"--screenshot={png}"]
    if dark:
        args.append("--force-dark-mode")
    args.append("file://" + html)
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or not os.path.exists(png):
        raise AssertionError(f"chromium failed ({r.returncode}): {r.stderr[-2000:]}")
    out = subprocess.run([image_python(), "-c", ANALYZE, png, json.dumps(CHART_COLORS)], capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout)


def admin(*args, check=True):
    return script("billing-admin", "--socket", SOCKET, *args, check=check)


def day(offset):
    return (datetime.datetime.now(datetime.timezone.utc).date() + datetime.timedelta(days=offset)).isoformat()


class Report(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Something of everything in the last days: purchases in two currencies (one with
        # a rate), a trial, a refund, and a paywall ladder stage with views, an attempt and
        # a purchase. Other modules' production events are on the page too.
        now = int(time.time() * 1000)
        rpc("rates.import", {"rates": [{"date": day(-3), "currency": "THB", "perEUR": "38.00"}], "source": "e2e",
                             "actor": "report-e2e@ops"})
        for n, (currency, price, period) in enumerate(
                [("THB", 190.0, "NORMAL"), ("EUR", 4.99, "NORMAL"), ("EUR", 0.0, "TRIAL"), ("THB", 380.0, "NORMAL")]):
            user, sub = E.known_user(), E.rc_subscription_id()
            at = now - (2 * 24 - n) * E.HOUR
            event = E.rc_event("INITIAL_PURCHASE", user, at=at, sub=sub, expires=at + 30 * 24 * E.HOUR, price=price,
                               period=period)
            event["currency"] = currency
            E.rc_deliver(event)
            if n == 3:
                refund = E.rc_event("CANCELLATION", user, at=at + E.HOUR, sub=sub, purchased=at, expires=at + E.HOUR,
                                    price=-price, cancel_reason="CUSTOMER_SUPPORT")
                refund["currency"] = currency
                E.rc_deliver(refund)
        placement = "e2e_report_" + uuid.uuid4().hex[:6]
        user = E.known_user()
        for n, (kind, extra) in enumerate([("view", {}), ("view", {}), ("purchase", {"result": "done"})]):
            body = {"type": kind, "placement": placement, "eventId": f"rep-{uuid.uuid4().hex}", "offering": "default"} | extra
            r = request("POST", PAYWALL, body=body, headers={"Authorization": "Bearer " + E.token(user)})
            assert r.status in (200, 201), r
        cls.placement = placement
        cls.dir = tempfile.mkdtemp(prefix="billing-report-")
        cls.html = os.path.join(cls.dir, "report.html")
        cls.out = admin("report", "--from", day(-30), "--to", day(1), "--environment", "production", "--out", cls.html)
        with open(cls.html, encoding="utf-8") as f:
            cls.page = f.read()

    def test_the_page_is_self_contained_and_carries_every_chart_with_its_numbers(self):
        self.assertIn("8 charts", self.out.stdout)
        self.assertNotIn("<script", self.page.lower())
        self.assertEqual([u for u in re.findall(r"(?:https?:)?//[^\s\"'<>)]+", self.page) if "www.w3.org/2000/svg" not in u], [],
                         "no request to anything outside the file")
        self.assertNotRegex(self.page, r"(?i)(src|href)\s*=", "no resource to load")
        for chart in CHARTS:
            section = re.search(rf'<section class="chart" id="chart-{chart}">(.*?)</section>', self.page, re.S)
            self.assertIsNotNone(section, chart)
            self.assertIn("<svg", section.group(1), chart)
            self.assertIn("<title>", section.group(1), f"{chart}: numbers on hover")
        # The figures of the methods it was drawn from are on the page, as written beside
        # the charts.
        stats = rpc("stats.subscriptions", {"from": day(-30), "to": day(1), "environment": "production"})["result"]
        mrr = stats["snapshots"]["end"]["mrrMilli"]
        self.assertIn(f"{mrr / 1000:,.2f} EUR", self.page)
        self.assertIn(f'{stats["counts"]["current"]["revenueMilli"] / 1000:,.2f} EUR', self.page)
        self.assertIn("THB", re.search(r'id="chart-revenue">(.*?)</section>', self.page, re.S).group(1))
        self.assertIn(self.placement, re.search(r'id="chart-funnel">(.*?)</section>', self.page, re.S).group(1))
        movement = stats["mrrMovement"]
        self.assertIn(f'new: {movement["new"] / 1000:,.2f} EUR', self.page)

    def test_it_renders_in_headless_chromium_in_light_and_in_dark(self):
        light = render(self.html, os.path.join(self.dir, "light.png"), dark=False)
        dark = render(self.html, os.path.join(self.dir, "dark.png"), dark=True)
        for name, shot in (("light", light), ("dark", dark)):
            self.assertEqual(shot["size"], [1280, 3000], name)
            self.assertGreater(shot["colors"], 200, f"{name}: not blank")
            missing = [k for k, n in shot["hits"].items() if n < 20]
            self.assertEqual(missing, [], f"{name}: every chart's colour is drawn ({shot['hits']})")
        self.assertGreater(sum(light["corner"]), 700, f"light background {light['corner']}")
        self.assertLess(sum(dark["corner"]), 150, f"dark background {dark['corner']}")


class ReportMethods(unittest.TestCase):
    def test_snapshots_at_each_instant_and_their_validation(self):
        at = [day(-2), day(-1), day(0)]
        r = rpc("stats.snapshots", {"at": at, "environment": "production", "currency": "USD"})["result"]
        self.assertEqual([s["at"][:10] for s in r["snapshots"]], at)
        self.assertEqual(r["currency"], "USD")
        one = rpc("stats.subscriptions", {"from": day(-3), "to": day(-1), "environment": "production", "currency": "USD"})
        self.assertEqual(r["snapshots"][1]["mrrMilli"], one["result"]["snapshots"]["end"]["mrrMilli"])
        for params, field in (({"at": [], "environment": "production"}, "at"),
                              ({"at": ["2026-02-30"], "environment": "production"}, "at"),
                              ({"at": [day(0)] * 101, "environment": "production"}, "at"),
                              ({"at": [day(0)], "environment": "prod"}, "environment"),
                              ({"at": [day(0)], "environment": "production", "x": 1}, "x")):
            reply = rpc("stats.snapshots", params)
            self.assertEqual(reply.get("error", {}).get("code"), -32602, (params, reply))
            self.assertEqual(reply["error"]["data"]["field"], field, reply)

    def test_cohorts_are_months_and_refuse_what_they_cannot_answer(self):
        r = rpc("stats.cohorts", {"from": "2026-01-01", "to": "2026-04-01", "environment": "sandbox", "by": "month"})["result"]
        self.assertEqual([c["month"] for c in r["cohorts"]], ["2026-01", "2026-02", "2026-03"])
        for c in r["cohorts"]:
            self.assertEqual(c["retention"][0]["index"], 0)
            self.assertEqual(c["retention"][0]["paying"], c["subscribers"])
        for params, message in (({"by": "week"}, "month"), ({"to": "2025-12-01"}, "after"), ({"from": "2020-01-01"}, "1100")):
            reply = rpc("stats.cohorts", {"from": "2026-01-01", "to": "2026-04-01", "environment": "sandbox"} | params)
            self.assertEqual(reply.get("error", {}).get("code"), -32602, (params, reply))
            self.assertIn(message, reply["error"]["message"])
        text = admin("stats.cohorts", json.dumps({"from": "2026-01-01", "to": "2026-04-01", "environment": "sandbox"}))
        self.assertIn("Cohorts by month of the first paid period", text.stdout)

    def test_report_refuses_a_bad_period_before_calling_anything(self):
        r = admin("report", "--from", "2026-03-01", "--to", "2026-02-01", "--out", os.devnull, check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--to must be after --from", r.stderr)
        r = admin("report", "--from", "March", "--to", "2026-02-01", "--out", os.devnull, check=False)
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
