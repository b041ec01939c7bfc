"""Exchange rates as data (SPEC §20, docs/stats.md "Currencies"): rates.import over JSON-RPC
and billing-admin rates.import --file with the European Central Bank's files as published
(the daily CSV, the history CSV with N/A, the XML), then a RevenueCat purchase in a foreign
currency counted in EUR at its purchase day's rate, and one with no rate reported apart.
The exact arithmetic is the Swift fixture's (CurrencyStatsTests); here: the wiring, the file
shapes, validation and the audit. Currencies other tests do not sell (ISK, THB, HUF, ZAR,
PHP) keep this module's rates from moving their figures."""
import datetime
import json
import os
import tempfile
import unittest
import uuid

from harness.billing import rpc, script, sql, sql_string, VAR_DIR
from harness.entitlements import HOUR, MINUTE, known_user, private_window, rc_deliver, rc_event, rc_subscription_id, iso

SOCKET = os.path.join(VAR_DIR, "run", "billing-rpc.sock")


def day_of(ms, shift_days=0):
    return (datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc) + datetime.timedelta(days=shift_days)).date()


def admin(*args, check=True):
    return script("billing-admin", "--socket", SOCKET, *args, check=check)


def write(text, suffix):
    f = tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False)
    f.write(text)
    f.close()
    return f.name


class RatesImport(unittest.TestCase):
    def test_the_daily_csv_as_published(self):
        # eurofxref.csv: spaced separators, an English day, a trailing separator.
        path = write("Date, ISK, THB, PHP, HUF, \n02 March 2026, 149.10, 38.250, 62.560, 395.10, \n", ".csv")
        out = admin("rates.import", "--file", path, "--actor", "rates-e2e@ops")
        self.assertIn("rates of 4 currencies from 2026-03-02 to 2026-03-02", out.stdout)
        self.assertEqual(sql(f"SELECT per_eur, source FROM billing_exchange_rates WHERE currency = 'ISK' AND rate_date = '2026-03-02'"),
                         [["149.10000000", "ecb"]])
        again = admin("--json", "rates.import", "--file", path, "--actor", "rates-e2e@ops")
        summary = json.loads(again.stdout.strip().splitlines()[-1])
        self.assertEqual((summary["rates"], summary["inserted"], summary["updated"], summary["unchanged"]), (4, 0, 0, 4), summary)

    def test_the_history_csv_skips_na_and_the_xml_is_read_by_its_cubes(self):
        history = write("Date,ISK,CYP,HUF,\n2001-03-02,N/A,0.5766,N/A,\n2001-03-01,N/A,0.5771,265.12,\n", ".csv")
        out = admin("--json", "rates.import", "--file", history, "--actor", "rates-e2e@ops")
        self.assertEqual(json.loads(out.stdout.strip().splitlines()[-1])["rates"], 3, out.stdout)
        xml = write(
            "<?xml version='1.0' encoding='UTF-8'?>\n"
            "<gesmes:Envelope xmlns:gesmes='http://www.gesmes.org/xml/2002-08-01' "
            "xmlns='http://www.ecb.int/vocabulary/2002-08-01/eurofxref'>\n"
            "\t<gesmes:subject>Reference rates</gesmes:subject>\n"
            "\t<gesmes:Sender><gesmes:name>European Central Bank</gesmes:name></gesmes:Sender>\n"
            "\t<Cube>\n"
            "\t\t<Cube time='2001-03-05'><Cube currency='PHP' rate='45.730'/><Cube currency='HUF' rate='266.01'/></Cube>\n"
            "\t\t<Cube time='2001-03-02'><Cube currency='PHP' rate='45.700'/></Cube>\n"
            "\t</Cube>\n</gesmes:Envelope>\n", ".xml")
        out = admin("--json", "rates.import", "--file", xml, "--actor", "rates-e2e@ops", "--source", "ecb-xml")
        self.assertEqual(json.loads(out.stdout.strip().splitlines()[-1])["rates"], 3, out.stdout)
        listed = rpc("rates.list", {"currency": "PHP", "from": "2001-03-01", "to": "2001-03-31"})["result"]
        self.assertEqual([(r["date"], r["perEUR"], r["source"]) for r in listed["rates"]],
                         [("2001-03-05", "45.73", "ecb-xml"), ("2001-03-02", "45.7", "ecb-xml")])
        self.assertIn("HUF", [c["currency"] for c in listed["currencies"]])

    def test_files_that_are_not_ecb_rates_are_refused_with_their_line_and_nothing_sent(self):
        before = sql("SELECT COUNT(*) FROM audit_log WHERE action = 'rates.import'")
        cases = {
            "Day,USD,\n2026-03-02,1.09,\n": "line 1",
            "Date,USD,\n2026-03-02,1.09,\n2026-03-03,-1,\n": "line 3",
            "Date,USD,\n2026-02-30,1.09,\n": "line 2",
            "Date,EUR,\n2026-03-02,1,\n": "line 1",
            "Date,USD,JPY,\n2026-03-02,1.09,\n": "line 2",
            "Date,USD,\n2026-03-02,1.0e3,\n": "line 2",
            "<Envelope><Cube/></Envelope>": "no <Cube time",
            "<gesmes:Envelope": "not well-formed XML",
        }
        for text, where in cases.items():
            r = admin("rates.import", "--file", write(text, ".txt"), "--actor", "rates-e2e@ops", check=False)
            self.assertEqual(r.returncode, 2, (text, r.stdout, r.stderr))
            self.assertIn(where, r.stderr, text)
        self.assertEqual(sql("SELECT COUNT(*) FROM audit_log WHERE action = 'rates.import'"), before)

    def test_the_method_validates_every_rate_and_audits_the_call(self):
        base = {"source": "manual", "actor": "rates-e2e@ops"}
        bad = [
            ({"rates": [{"date": "2026-03-02", "currency": "EUR", "perEUR": "1"}]}, "rates[0].currency"),
            ({"rates": [{"date": "2026-03-02", "currency": "usd", "perEUR": "1.09"}]}, "rates[0].currency"),
            ({"rates": [{"date": "2026-02-30", "currency": "THB", "perEUR": "38"}]}, "rates[0].date"),
            ({"rates": [{"date": "2026-03-02", "currency": "THB", "perEUR": "0"}]}, "rates[0].perEUR"),
            ({"rates": [{"date": "2026-03-02", "currency": "THB", "perEUR": "1.123456789"}]}, "rates[0].perEUR"),
            ({"rates": [{"date": "2026-03-02", "currency": "THB", "perEUR": True}]}, "rates[0].perEUR"),
            ({"rates": [{"date": "2026-03-02", "currency": "THB", "perEUR": "38", "x": 1}]}, "rates[0].x"),
            ({"rates": [{"date": "2026-03-02", "currency": "THB", "perEUR": "38"},
                        {"date": "2026-03-02", "currency": "THB", "perEUR": "39"}]}, "rates[1].date"),
            ({"rates": ["THB"]}, "rates[0]"),
            ({"rates": [{"date": "2026-03-02", "currency": "THB", "perEUR": "38"}] * 10001}, "rates"),
            ({"rates": []} | {"source": ""}, "source"),
        ]
        for params, field in bad:
            r = rpc("rates.import", base | params)
            self.assertEqual(r.get("error", {}).get("code"), -32602, (params if len(str(params)) < 300 else field, r))
            self.assertEqual(r["error"]["data"]["field"], field, r)
        self.assertEqual(rpc("rates.import", {"rates": [], "source": "manual"})["error"]["data"]["field"], "actor")
        actor = f"rates-{uuid.uuid4().hex[:8]}@ops"
        r = rpc("rates.import", {"rates": [{"date": "2019-07-01", "currency": "ZAR", "perEUR": 15.9716}], "source": "manual",
                                 "actor": actor})
        self.assertIn("result", r, r)
        self.assertEqual(r["result"]["received"], 1)
        detail = json.loads(sql(f"SELECT detail FROM audit_log WHERE action = 'rates.import' AND actor = {sql_string(actor)}")[0][0])
        self.assertEqual((detail["source"], detail["from"], detail["to"], detail["received"]), ("manual", "2019-07-01", "2019-07-01", 1))
        self.assertEqual(sql("SELECT per_eur FROM billing_exchange_rates WHERE currency = 'ZAR' AND rate_date = '2019-07-01'"),
                         [["15.97160000"]])


class ForeignPurchasesCount(unittest.TestCase):
    def test_a_purchase_in_kronur_counts_in_euros_at_its_days_rate_and_one_without_a_rate_stays_apart(self):
        window = private_window()
        w = window[0]
        # The rate of the day before the purchase: the latest on or before it.
        rpc("rates.import", {"rates": [{"date": day_of(w, -1).isoformat(), "currency": "ISK", "perEUR": "149.00"}],
                             "source": "e2e", "actor": "rates-e2e@ops"})
        for currency, price in (("ISK", 1490.0), ("KES", 1300.0)):
            user, sub = known_user(), rc_subscription_id()
            # Still active at the window's end (the end snapshot), gone soon after: no other
            # run's snapshot meets it.
            event = rc_event("INITIAL_PURCHASE", user, at=w + 5 * MINUTE, sub=sub, expires=w + 3 * HOUR, price=price)
            event["currency"] = currency
            event["price"] = 9.99  # RevenueCat's USD estimate: never used when the purchased currency's price is there
            rc_deliver(event)
        reply = rpc("stats.subscriptions", {"from": iso(window[0]), "to": iso(window[1]), "environment": "production",
                                            "currency": "EUR"})
        counts = reply["result"]["counts"]["current"]
        self.assertEqual(counts["grossMilli"], 10000, counts)  # 1490 ISK ÷ 149 = 10.00 EUR
        self.assertEqual(counts["unconverted"], {"KES": {"grossMilli": 1300000, "refundedMilli": 0}}, counts)
        end = reply["result"]["snapshots"]["end"]
        self.assertEqual(end["unconverted"], {"KES": {"subscriptions": 1, "mrrMilli": 1300000}}, end)


if __name__ == "__main__":
    unittest.main()
