-- wrk script: POST /api/v1/billing/usage, every request a distinct idempotency key,
-- rotating over the seeded users' ID tokens (meter explorePlaybackMinutes, 1 unit).
-- Arguments (after --): TOKENS_FILE RUN_ID.
local threads = 0

function setup(thread)
    threads = threads + 1
    thread:set("tid", threads)
end

function init(args)
    tokens = {}
    for line in io.lines(args[1]) do tokens[#tokens + 1] = "Bearer " .. line end
    run, n = args[2], 0
end

function request()
    n = n + 1
    local headers = { ["Authorization"] = tokens[((tid or 0) * 53 + n) % #tokens + 1], ["Content-Type"] = "application/json" }
    local body = string.format('{"meter":"explorePlaybackMinutes","amount":1,"idempotencyKey":"bench-%s-%d-%d"}', run, tid or 0, n)
    return wrk.format("POST", nil, headers, body)
end
