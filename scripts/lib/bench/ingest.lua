-- wrk script: RevenueCat RENEWAL webhooks, every request a distinct event id
-- (run id, wrk thread, per-connection-thread counter), rotating over the seeded users.
-- Arguments (after --): SECRET_FILE USERS_FILE RUN_ID BASE_MS.
local threads = 0

function setup(thread)
    threads = threads + 1
    thread:set("tid", threads)
end

function init(args)
    local f = assert(io.open(args[1]))
    secret = f:read("*l")
    f:close()
    users = {}
    for line in io.lines(args[2]) do users[#users + 1] = line end
    run, base, n = args[3], tonumber(args[4]), 0
    headers = { ["Authorization"] = secret, ["Content-Type"] = "application/json" }
end

function request()
    n = n + 1
    local user = users[((tid or 0) * 101 + n) % #users + 1]
    local at = base + n * 1000 + (tid or 0)
    local body = string.format('{"api_version":"1.0","event":{"id":"bench-%s-%d-%d","type":"RENEWAL",'
        .. '"app_user_id":"%s","aliases":["%s"],"product_id":"app.plus.monthly","entitlement_ids":["plus"],'
        .. '"period_type":"NORMAL","purchased_at_ms":%.0f,"event_timestamp_ms":%.0f,"expiration_at_ms":%.0f,'
        .. '"environment":"PRODUCTION","store":"APP_STORE","original_transaction_id":"bench-sub-%s",'
        .. '"price_in_purchased_currency":4.99,"currency":"EUR"}}',
        run, tid or 0, n, user, user, at, at, at + 30 * 86400000, user)
    return wrk.format("POST", nil, headers, body)
end
