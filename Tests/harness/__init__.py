"""The Python test harness the e2e, package, system, torture and cluster tests share.

Import it with Tests/ on the path (scripts/test, scripts/system-test, scripts/torture and
scripts/cluster-test set PYTHONPATH=Tests; by hand: `PYTHONPATH=Tests python3 -m unittest ...`):

  billing            the stack's environment (BILLING_*), HTTP through nginx, JSON-RPC over the
                     admin socket, root's SQL on the private MariaDB, polling (standard library)
  tokens             development ID tokens: what scripts/dev-token prints, signed here (one
                     signer, `cryptography`), and tokens with any header, claims or signature
  appstore           the App Store test CA shaped like Apple's and its signed data; also run as
                     `python3 Tests/harness/appstore.py generate DIR` (the stack's overlay)
  entitlements       provider-shaped deliveries (RevenueCat, App Store) and snapshots
  fake_appstore_api, fake_revenuecat_api, fake_key_server
                     local HTTPS fakes of Apple's Server API, RevenueCat's REST API and an ID-token
                     issuer's published keys
  debtools           the built Debian package's version and a repack with a broken migration
"""
