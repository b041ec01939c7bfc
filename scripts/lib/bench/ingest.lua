-- wrk script: RevenueCat RENEWAL webhooks, every request a distinct event id (run id, wrk
-- thread, per-thread counter).
-- Arguments (after --): SECRET_FILE USERS_FILE RUN_ID BASE_MS MODE [WRK_THREADS]
--   distinct  every request another user of USERS_FILE (concurrent requests never share one)
--   ordered   the first 100 users of USERS_FILE, each receiving renewals in order of time:
--             wrk thread t sends to its share of them (users t, t+T, ...), one after the
--             other over all its connections, each renewal later than that user's previous
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
    run, base, mode, n = args[3], tonumber(args[4]), args[5] or "distinct", 0
    if mode == "ordered" then
        local count = tonumber(args[6] or "1")
        local mine = {}
        for i = 1, math.min(#users, 100) do
            if (i - 1) % count == ((tid or 1) - 1) % count then mine[#mine + 1] = users[i] end
        end
        users = mine
    end
    headers = { ["Authorization"] = secret, ["Content-Type"] = "application/json" }
end

function request()
    n = n + 1
    local t = tid or 0
    local user, at
    if mode == "ordered" then
        -- This thread's users in turn; each one's renewals a second apart, in order.
        user = users[n % #users + 1]
        at = base + n * 1000
    else
        -- Thread t (< 64) walks its own residue class of the users: no two requests in
        -- flight share a user.
        user = users[((n * 64) + t) % #users + 1]
        at = base + n * 1000 + t
    end
    local body = string.format('{"api_version":"1.0","event":{"id":"bench-%s-%d-%d","type":"RENEWAL",'
        .. '"app_user_id":"%s","aliases":["%s"],"product_id":"app.plus.monthly","entitlement_ids":["plus"],'
        .. '"period_type":"NORMAL","purchased_at_ms":%.0f,"event_timestamp_ms":%.0f,"expiration_at_ms":%.0f,'
        .. '"environment":"PRODUCTION","store":"APP_STORE","original_transaction_id":"bench-sub-%s",'
        .. '"price_in_purchased_currency":4.99,"currency":"EUR"}}',
        run, t, n, user, user, at, at, at + 30 * 86400000, user)
    return wrk.format("POST", nil, headers, body)
end
