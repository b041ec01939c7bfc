# shellcheck shell=bash
# scripts/bench --scale: the same routes measured on a small and on a large database of one
# fresh private stack of its own, the large one grown by bulk SQL (scale.sql), its rows
# checked against the fold (events.reproject on a sample), then the admin timings, the plans
# of the request paths' statements and the database's size. Sourced by scripts/bench after
# its row() and to_ms(); runs scale_main.

# scale_generate LO HI: generated users [LO, HI), in chunks of 50,000 (one transaction each).
scale_generate() {
    local lo=$1 hi=$2 step=50000 a b started
    started=$(date +%s)
    for ((a = lo; a < hi; a += step)); do
        b=$((a + step < hi ? a + step : hi))
        { echo "SET @lo = $a, @hi = $b, @now = TIMESTAMP'$scale_now', @tag = '$scale_tag';"
          cat "$ROOT/scripts/lib/bench/scale.sql"; } | db_client billing \
            || die "generating users $a to $b failed"
        printf '\r==> generated users %d of %d (%d s)' "$b" "$hi" "$(($(date +%s) - started))" >&2
    done
    echo >&2
}

# The statistics' stored states of every generated subscription (sql/025): the triggers noted
# each generated event; stats.refresh derives them all (billing-rpc's own refresher would, in
# the background). Prints the milliseconds it took.
scale_refresh() {
    python3 "$ROOT/scripts/lib/bench/scale.py" time "$RPC_SOCKET" 1 stats.refresh '{}'
}

scale_user() { printf '5ca1e%s-0000-4000-8000-%012x' "$scale_tag" "$1"; }

# The users the rows use, spread over the small database's users (so present in both): 1,000
# for access (their tokens), 5,000 for distinct ingest, 100 for hot users.
scale_pick_users() {
    local small=$1 i
    for ((i = 0; i < 1000; i++)); do scale_user $((i * small / 1000 + 1)); echo; done >"$work/scale-access-users"
    for ((i = 0; i < 5000; i++)); do scale_user $((i * small / 5000 + 3)); echo; done >"$work/scale-distinct"
    for ((i = 0; i < 100; i++)); do scale_user $((i * small / 100 + 4)); echo; done >"$work/scale-distinct-ordered"
    say "tokens for the 1,000 access users"
    xargs -P "$(nproc)" -I{} "$BIN_DIR/billing-rpc" dev-token --key "$BILLING_VAR_DIR/secrets/dev-token-key.pem" \
        --kid "$DEV_TOKEN_KID" --issuer "$DEV_TOKEN_ISSUER" --audience "$DEV_TOKEN_AUDIENCE" --ttl 14400 {} \
        <"$work/scale-access-users" >"$work/scale-tokens" || die "dev-token failed"
}

# scale_rows PHASE: health, access, ingest (distinct users) and ingest (100 hot users), each
# recorded as PHASE_KEY VALUE.
scale_rows() {
    local phase=$1 before
    record() { echo "$phase $1 $2" >>"$results"; }
    say "$phase database: wrk -t$threads -c$connections -d${duration}s"
    printf '%-8s %-32s %10s %10s %10s %9s %8s\n' route path req/s p50_ms p99_ms non2xx vs_static
    static_rps=""
    # warm-up, not recorded: the workers' token and snapshot caches, MariaDB's pages
    WRK_SCRIPT_ARGS="$work/scale-tokens" wrk -t"$threads" -c"$connections" -d2s -s "$ROOT/scripts/lib/bench/access.lua" \
        "$base/api/v1/billing/access" -- "$work/scale-tokens" >/dev/null
    row static /_static
    row health /api/v1/health
    record health "$RPS"; record bad_health "$BAD"
    WRK_SCRIPT_ARGS="$work/scale-tokens" row access /api/v1/billing/access -s "$ROOT/scripts/lib/bench/access.lua"
    record access "$RPS"; record access_p99 "$P99"; record bad_access "$BAD"
    local mode tag users name
    for mode in distinct ordered; do
        name=ingest users=$work/scale-distinct tag=$phase-d
        [[ $mode == ordered ]] && name=ordered users=$work/scale-distinct-ordered tag=$phase-o
        WRK_SCRIPT_ARGS="$BILLING_VAR_DIR/secrets/revenuecat-webhook-secret $users $run-$tag $ingest_base $mode $threads" \
            row "$name" /api/v1/billing/webhooks/revenuecat -s "$ROOT/scripts/lib/bench/ingest.lua"
        ingest_base=$((ingest_base + 2 * 86400000))
        record "$name" "$(db_client -N -e "SELECT COUNT(*) FROM billing.billing_events WHERE provider_event_id LIKE 'bench-$run-$tag-%'" \
            | awk -v d="$duration" '{ printf "%.1f", $1 / d }')"
        record "${name}_p99" "$P99"; record "bad_$name" "$BAD"
    done
    echo
}

# The statements the request routes send, with their plans: MariaDB's slow log of every
# statement (long_query_time 0, with EXPLAIN and r_rows) over 2 s of each route; the workers
# are restarted to open sessions that log.
scale_plans() {
    local log=$LOG_DIR/scale-slow.log
    rm -f "$log"
    db_client -e "SET GLOBAL slow_query_log_file = '$log', log_slow_verbosity = 'query_plan,explain', long_query_time = 0, slow_query_log = 1"
    (workers_stop; workers_start) >/dev/null
    local d=$duration
    duration=2
    {
        WRK_SCRIPT_ARGS="$work/scale-tokens" row access /api/v1/billing/access -s "$ROOT/scripts/lib/bench/access.lua"
        WRK_SCRIPT_ARGS="$BILLING_VAR_DIR/secrets/revenuecat-webhook-secret $work/scale-distinct $run-plans $ingest_base distinct $threads" \
            row ingest /api/v1/billing/webhooks/revenuecat -s "$ROOT/scripts/lib/bench/ingest.lua"
        WRK_SCRIPT_ARGS="$work/scale-tokens $run-plans" row usage /api/v1/billing/usage -s "$ROOT/scripts/lib/bench/usage.lua"
    } >/dev/null
    duration=$d
    db_client -e "SET GLOBAL slow_query_log = 0, long_query_time = 10"
    (workers_stop; workers_start) >/dev/null
    if python3 "$ROOT/scripts/lib/bench/scale.py" plans "$log" >"$work/scale-plans"; then
        echo "scale: ok: plans: no statement of access, ingest or usage reads a table of more than 100 rows in full"
    else
        echo "scale: FAILED: plans: a statement of access, ingest or usage reads a table in full (SCAN below)"
        scale_failed=1
    fi
    grep -E '^\s+\[(SCAN|MANY)\]|^plans:' "$work/scale-plans" | cut -c1-200
    say "every shape with its EXPLAIN: $work/scale-plans"
}

scale_main() {
    local users=$scale_users small
    small=$((users / 100))
    ((small >= 10000)) || small=10000
    ((small <= users)) || small=$users
    scale_tag=$(printf '%03x' $((RANDOM % 4096)))
    scale_now=$(date -u '+%Y-%m-%d %H:%M:%S.000')
    scale_failed=0
    say "scale: a fresh stack under $BILLING_VAR_DIR (HTTP $BILLING_HTTP_PORT, MariaDB $BILLING_DB_PORT;" \
        "buffer pool ${BILLING_DB_BUFFER_POOL}, redo log ${BILLING_DB_LOG_FILE_SIZE})"
    stack_down >/dev/null 2>&1 || true
    rm -rf "$DB_DIR"
    # ~2 GiB a million events (docs/operations.md, "Sizing MariaDB"), with room to spare
    local need_kib=$((users * 10 * 25 / 10)) free_kib
    mkdir -p "$DB_DIR"
    free_kib=$(df -Pk "$DB_DIR" | awk 'NR == 2 {print $4}')
    [[ $free_kib -ge $need_kib ]] \
        || die "scale: $((users * 10)) events need ~$((need_kib / 1048576)) GiB free under $DB_DIR; $((free_kib / 1048576)) GiB are"
    stack_up >/dev/null
    command -v wrk >/dev/null || ensure_packages
    results=$work/scale-results-$run
    : >"$results"
    ingest_base=$(( $(date +%s) * 1000 - 12 * 86400000 ))

    local started took_small took_large
    started=$(date +%s)
    scale_generate 0 "$small"
    took_small=$(($(date +%s) - started))
    local refresh_small refresh_large
    refresh_small=$(scale_refresh)
    scale_pick_users "$small"
    scale_rows small

    say "growing to $users users ($((users * 10)) events), plus one user of 1,000 events"
    started=$(date +%s)
    scale_generate "$small" "$users"
    local heavy
    heavy=$(printf '5ca1e%s-0000-4000-9000-000000000000' "$scale_tag")
    { echo "SET @now = TIMESTAMP'$scale_now', @tag = '$scale_tag', @heavy = '$heavy';"
      cat "$ROOT/scripts/lib/bench/scale-heavy.sql"; } | db_client billing || die "the heavy user failed"
    db_client billing -e "ANALYZE TABLE billing_events, billing_event_parties, billing_users, billing_access, billing_subscriptions, billing_grants, usage_ledger" >/dev/null
    took_large=$(($(date +%s) - started))
    refresh_large=$(scale_refresh)
    db_client -N billing -e "SELECT 'rows:', (SELECT COUNT(*) FROM billing_users) users, (SELECT COUNT(*) FROM billing_events) events,
      (SELECT COUNT(*) FROM usage_ledger) usage_rows, (SELECT COUNT(*) FROM billing_grants) grants" | sed 's/^/==> /' >&2
    scale_rows large

    say "the rows against the fold: events.reproject of 100 users spread over the $users, and the heavy one"
    local sample=() i
    for ((i = 0; i < 100; i++)); do sample+=("$(scale_user $((i * (users / 100) + i % 20)))"); done
    python3 "$ROOT/scripts/lib/bench/scale.py" reproject "$RPC_SOCKET" mariadb --no-defaults --protocol=socket -S "$DB_SOCKET" -uroot \
        -- "${sample[@]}" "$heavy" >"$work/scale-reproject" || scale_failed=1
    grep -E 'FAILED|sampled' "$work/scale-reproject"
    local reproject_ms
    reproject_ms=$(python3 "$ROOT/scripts/lib/bench/scale.py" time "$RPC_SOCKET" 3 events.reproject "{\"userId\": \"$heavy\", \"actor\": \"bench-scale\"}")

    say "stats.subscriptions cold: MariaDB restarted with an empty buffer pool, billing-rpc restarted"
    rpc_stop; db_stop
    rm -f "$DB_DIR/data/ib_buffer_pool"
    sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
    db_start >/dev/null; rpc_start >/dev/null
    local to from365 from30 stats365 stats30
    to=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    from365=$(date -u -d '365 days ago' +%Y-%m-%dT%H:%M:%SZ)
    from30=$(date -u -d '30 days ago' +%Y-%m-%dT%H:%M:%SZ)
    stats365=$(python3 "$ROOT/scripts/lib/bench/scale.py" time "$RPC_SOCKET" 2 stats.subscriptions \
        "{\"from\": \"$from365\", \"to\": \"$to\", \"environment\": \"production\"}")
    stats30=$(python3 "$ROOT/scripts/lib/bench/scale.py" time "$RPC_SOCKET" 2 stats.subscriptions \
        "{\"from\": \"$from30\", \"to\": \"$to\", \"environment\": \"production\"}")
    # The twelve cohorts up to now, from a month's first instant (the cohorts' sums, sql/028-029).
    local cohorts
    cohorts=$(python3 "$ROOT/scripts/lib/bench/scale.py" time "$RPC_SOCKET" 2 stats.cohorts \
        "{\"from\": \"$(date -u -d '365 days ago' +%Y-%m-01)\", \"to\": \"$to\", \"environment\": \"production\"}")
    workers_stop >/dev/null; workers_start >/dev/null

    scale_plans

    echo
    db_client -N billing -e "SELECT table_name, table_rows, ROUND(data_length / 1048576), ROUND(index_length / 1048576)
      FROM information_schema.tables WHERE table_schema = 'billing' AND data_length + index_length > 16 * 1048576
      ORDER BY data_length + index_length DESC" \
        | awk 'BEGIN { print "size: table, rows (estimate), data MiB, index MiB" } { printf "  %-28s %12s %8s %8s\n", $1, $2, $3, $4 }'
    local events total
    events=$(db_client -N billing -e "SELECT COUNT(*) FROM billing_events")
    total=$(db_client -N billing -e "SELECT SUM(data_length + index_length) FROM information_schema.tables WHERE table_schema = 'billing'")
    awk -v t="$total" -v e="$events" 'BEGIN { printf "size: %.1f GiB in all for %d events = %.2f GiB per million events (every table)\n", t / 1073741824, e, t / 1073741824 / (e / 1000000) }'
    echo "generated: $small users in ${took_small} s, then $((users - small)) more in ${took_large} s (with ANALYZE TABLE)"
    echo "stats.refresh after generating (ms): $refresh_small for the first $small users, $refresh_large for the rest"
    echo "events.reproject of the user with 1,000 events (ms, 3 calls): $reproject_ms"
    echo "stats.subscriptions, cold then warm (ms): 365 days $stats365; 30 days $stats30"
    echo "stats.cohorts, 12 months from the 1st, after them (ms): $cohorts"
    python3 - "$results" <<'PY'
import sys
r = {}
for line in open(sys.argv[1]):
    phase, key, value = line.split()
    r[(phase, key)] = float(value)
def ratio(key):
    return r[("large", key)] / r[("small", key)]
rows = [("access", "access", ">=", 0.85), ("access p99", "access_p99", "<=", 1.5),
        ("ingest (distinct users)", "ingest", ">=", 0.85), ("ingest (100 hot users)", "ordered", ">=", 0.85),
        ("health", "health", None, None)]
print("large / small (same users, same routes):")
for name, key, op, goal in rows:
    v = ratio(key)
    verdict = "" if op is None else f"(goal {op} {goal}): " + ("met" if (v >= goal if op == ">=" else v <= goal) else "NOT met")
    print(f"  {name:28s} {r[('small', key)]:9.1f} -> {r[('large', key)]:9.1f}  {v:5.2f} x  {verdict}")
bad = sum(v for (p, k), v in r.items() if k.startswith("bad_"))
print(f"  non-2xx answers: {bad:.0f}")
PY
    # The grown stack holds its buffer pool's memory: stopped; its data stays for a look
    # (BILLING_VAR_DIR=$BILLING_VAR_DIR BILLING_HTTP_PORT=... scripts/dev-up starts it again).
    stack_down >/dev/null 2>&1 || true
    echo "the grown stack is stopped; its database stays in $DB_DIR until the next --scale"
    [[ $scale_failed -eq 0 ]] || die "scale: a check failed (reproject: $work/scale-reproject, plans: $work/scale-plans)"
}
