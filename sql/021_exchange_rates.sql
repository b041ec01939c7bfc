-- 021_exchange_rates (SPEC §20, every currency counts): the reference rates revenue and MRR
-- convert at, imported by rates.import (billing-admin rates.import --file: the European
-- Central Bank's daily CSV or XML as published). stats.subscriptions converts each amount at
-- the latest rate on or before its UTC purchase day; an amount with no rate is reported
-- apart by currency (docs/stats.md, "Currencies"). The euro is the base: 1, never stored.
CREATE TABLE billing_exchange_rates (
  currency CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL
    COMMENT 'ISO 4217 code (three capital letters), never EUR',
  rate_date DATE NOT NULL
    COMMENT 'The day the rate is the reference of (ECB: the TARGET working day it was set, 16:00 CET)',
  per_eur DECIMAL(20,8) NOT NULL
    COMMENT 'Units of the currency one euro buys, exactly as imported (ECB publishes up to five decimals)',
  source VARCHAR(64) NOT NULL
    COMMENT 'rates.import source of the current value, e.g. ecb',
  imported_at DATETIME(3) NOT NULL
    COMMENT 'When the current value was imported (UTC); a re-import of the same value keeps it',
  PRIMARY KEY (currency, rate_date),
  CONSTRAINT billing_exchange_rates_currency_code CHECK (currency REGEXP '^[A-Z]{3}$' AND currency <> 'EUR'),
  CONSTRAINT billing_exchange_rates_positive CHECK (per_eur > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
  COMMENT='Exchange rates as data: units of each currency per euro by day (SPEC §20)';
