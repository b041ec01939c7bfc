-- wrk script of the `rawingest` row (scripts/bench): a ~1 KB JSON body per POST, the size of
-- a RevenueCat webhook, to the raw responder's INSERT.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local fill = string.rep("x", 900)
wrk.body = '{"api_version":"1.0","event":{"type":"RENEWAL","padding":"' .. fill .. '"}}'
