-- wrk script: GET /api/v1/billing/access rotating over the seeded users' ID tokens.
-- Arguments (after --): TOKENS_FILE (one token per line).
local threads = 0

function setup(thread)
    threads = threads + 1
    thread:set("tid", threads)
end

function init(args)
    tokens = {}
    for line in io.lines(args[1]) do tokens[#tokens + 1] = "Bearer " .. line end
    n = (tid or 0) * 37
end

function request()
    n = n + 1
    return wrk.format("GET", nil, { ["Authorization"] = tokens[(n % #tokens) + 1] })
end
