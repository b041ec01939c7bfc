# shellcheck shell=bash
# The FCGIBilling local stack: Debian packages, build, private MariaDB, migrations,
# workers, billing-rpc and nginx, all under $BILLING_VAR_DIR and started by pid.
# Sourced by scripts/dev-up, dev-down, test, workerctl and bench; not run directly.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

stack_defaults() {
    BILLING_VAR_DIR=${BILLING_VAR_DIR:-$ROOT/var}
    mkdir -p "$BILLING_VAR_DIR"
    BILLING_VAR_DIR=$(cd "$BILLING_VAR_DIR" && pwd)
    BILLING_HTTP_PORT=${BILLING_HTTP_PORT:-8080}
    BILLING_DB_PORT=${BILLING_DB_PORT:-3307}
    BILLING_WORKERS=${BILLING_WORKERS:-2}
    BILLING_THREADS=${BILLING_THREADS:-4}
    BILLING_CONFIG=${BILLING_CONFIG:-$BILLING_VAR_DIR/billing.json}
    export BILLING_VAR_DIR BILLING_HTTP_PORT BILLING_DB_PORT BILLING_WORKERS BILLING_CONFIG
    RUN_DIR=$BILLING_VAR_DIR/run
    LOG_DIR=$BILLING_VAR_DIR/log
    DB_DIR=$BILLING_VAR_DIR/mariadb
    DB_SOCKET=$RUN_DIR/mariadb.sock
    DB_TLS_DIR=$BILLING_VAR_DIR/secrets/db-tls
    RPC_SOCKET=$RUN_DIR/billing-rpc.sock
    mkdir -p "$RUN_DIR" "$RUN_DIR/metrics" "$LOG_DIR" "$BILLING_VAR_DIR/secrets" "$BILLING_VAR_DIR/nginx/tmp"
    chmod 700 "$BILLING_VAR_DIR/secrets"
}

say() { printf '==> %s\n' "$*" >&2; }

# poll SECONDS CMD...: runs CMD every 0.1 s until it succeeds (0) or SECONDS pass (1).
poll() {
    local seconds=$1 i
    shift
    for ((i = 0; i < seconds * 10; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- packages and build

STACK_PACKAGES=(pkg-config libfcgi-dev libmariadb-dev libssl-dev libjansson-dev libcurl4-openssl-dev
                mariadb-server mariadb-client nginx-light wrk curl python3 python3-venv openssl procps tzdata
                libfcgi-bin systemd faketime libnginx-mod-nchan)

ensure_packages() {
    local missing=() p
    for p in "${STACK_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    # Any nginx flavour will do.
    if [[ " ${missing[*]} " == *" nginx-light "* ]] && command -v nginx >/dev/null; then
        missing=("${missing[@]/nginx-light}")
    fi
    local wanted=()
    for p in "${missing[@]}"; do [[ -n $p ]] && wanted+=("$p"); done
    [[ ${#wanted[@]} -eq 0 ]] && return 0
    say "installing Debian packages: ${wanted[*]}"
    local sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    # Keep package scripts from starting the system's own MariaDB/nginx services.
    local policy_created=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null
        "${sudo[@]}" chmod +x /usr/sbin/policy-rc.d
        policy_created=1
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${wanted[@]}" >/dev/null
    [[ $policy_created -eq 1 ]] && "${sudo[@]}" rm -f /usr/sbin/policy-rc.d
    return 0
}

# ensure_python_module MODULE PIP_PACKAGE: installs a test-only Python package from PyPI
# when MODULE does not import (pip from Debian if missing; Debian's own python3 refuses
# system-wide installs without --break-system-packages, which is fine for a test machine).
ensure_python_module() {
    local module=$1 package=$2
    python3 -c "import $module" 2>/dev/null && return 0
    say "installing $package (pip) for the tests"
    if ! python3 -m pip --version >/dev/null 2>&1; then
        local saved=("${STACK_PACKAGES[@]}")
        STACK_PACKAGES=(python3-pip)
        ensure_packages
        STACK_PACKAGES=("${saved[@]}")
    fi
    python3 -m pip install -q "$package" >&2 2>/dev/null \
        || python3 -m pip install -q --break-system-packages "$package" >&2 \
        || die "pip install $package failed: the tests that need it cannot run"
    python3 -c "import $module" || die "$package installed but $module does not import"
}

# The Swift runtime is linked statically: the binaries the stack runs are the ones
# scripts/package ships, and they need only Debian's libraries.
build_release() {
    say "building (release)"
    (cd "$ROOT" && swift build -c release --static-swift-stdlib -Xswiftc -warnings-as-errors 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\]' >&2) \
        || die "release build failed"
    BIN_DIR=$(cd "$ROOT" && swift build -c release --show-bin-path)
    [[ -x $BIN_DIR/billing-fcgi && -x $BIN_DIR/billing-rpc ]] || die "binaries missing in $BIN_DIR"
}

bin_dir() {
    BIN_DIR=${BIN_DIR:-$(cd "$ROOT" && swift build -c release --show-bin-path)}
}

# ---------------------------------------------------------------- processes by pid file

# pid_alive FILE NAME: the pid in FILE is running and is NAME (guards against pid reuse).
pid_alive() {
    local file=$1 name=$2 pid
    [[ -f $file ]] || return 1
    pid=$(cat "$file" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$name"
}

# pid_running FILE: the pid in FILE exists and is not a zombie (no name check).
pid_running() {
    local pid state
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ -n $state && $state != Z ]]
}

# stop_pid FILE NAME [SIGNAL] [SECONDS]: signal, wait for exit, then SIGKILL.
stop_pid() {
    local file=$1 name=$2 signal=${3:-TERM} seconds=${4:-30} pid i
    if ! pid_alive "$file" "$name"; then rm -f "$file"; return 0; fi
    pid=$(cat "$file")
    kill "-$signal" "$pid" 2>/dev/null || true
    for ((i = 0; i < seconds * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$file"; return 0; }
        sleep 0.1
    done
    say "$name (pid $pid) did not stop in ${seconds}s; killing"
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$file"
}

# wait_for_socket PATH PIDFILE NAME LOG: until PATH accepts a connection.
wait_for_socket() {
    local path=$1 pidfile=$2 name=$3 logfile=$4 i
    for ((i = 0; i < 150; i++)); do
        if [[ -S $path ]] && python3 - "$path" <<'PY' 2>/dev/null
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(1)
s.connect(sys.argv[1])
PY
        then return 0; fi
        # Not pid_alive: right after `setsid … &` the child may not have exec'd yet, so its
        # cmdline is still this shell's and a name check would call a starting daemon dead.
        pid_running "$pidfile" || { tail -n 20 "$logfile" >&2 2>/dev/null; die "$name exited during start-up (log: $logfile)"; }
        sleep 0.1
    done
    tail -n 20 "$logfile" >&2 2>/dev/null
    die "$name did not listen on $path within 15s (log: $logfile)"
}

# ---------------------------------------------------------------- MariaDB

db_client() { mariadb --no-defaults --protocol=socket -S "$DB_SOCKET" -uroot "$@"; }

# db_tls_sign DIR NAME CN EXTENSIONS: DIR/NAME-key.pem and DIR/NAME-cert.pem, signed by DIR/ca.pem.
db_tls_sign() {
    local dir=$1 name=$2 cn=$3 extensions=$4
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$cn" \
            -keyout "$dir/$name-key.pem" -out "$dir/$name.csr" \
        && openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
            -set_serial "0x$(openssl rand -hex 8)" -days 3650 -extfile <(printf '%b' "$extensions") \
            -out "$dir/$name-cert.pem" \
        && rm -f "$dir/$name.csr"
}

# TLS for the private MariaDB's TCP port (docs/operations.md "Database over TLS"), made once
# under $BILLING_VAR_DIR/secrets/db-tls: a CA (ca.pem), the server's certificate signed by it
# for DNS:localhost only (so a client that verifies refuses it at 127.0.0.1: the integration
# tests check both), a client certificate of the same CA, and an unrelated CA that signed
# nothing here. EC P-256 keys, ten years. Test and development material, never production.
db_tls_files() {
    local dir=$DB_TLS_DIR f
    local all=(ca.pem ca-key.pem server-cert.pem server-key.pem client-cert.pem client-key.pem unrelated-ca.pem)
    local missing=0
    for f in "${all[@]}"; do [[ -s $dir/$f ]] || missing=1; done
    [[ $missing -eq 0 ]] && return 0
    say "creating the test database's TLS certificates in $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    chmod 700 "$dir"
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    {
        openssl req -x509 "${ec[@]}" -days 3650 -subj "/CN=FCGIBilling test database CA" \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
            -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" \
        && db_tls_sign "$dir" server "FCGIBilling test database" \
            'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost\n' \
        && db_tls_sign "$dir" client "billing test client" \
            'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' \
        && openssl req -x509 "${ec[@]}" -days 3650 -subj "/CN=FCGIBilling unrelated CA" \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
            -keyout "$dir/unrelated-ca-key.pem" -out "$dir/unrelated-ca.pem"
    } >"$LOG_DIR/db-tls.log" 2>&1 || { cat "$LOG_DIR/db-tls.log" >&2; die "could not create the database TLS certificates"; }
    rm -f "$dir/unrelated-ca-key.pem"
    chmod 600 "$dir"/*-key.pem
}

db_start() {
    if pid_alive "$RUN_DIR/mariadb.pid" mariadbd; then return 0; fi
    if [[ ! -d $DB_DIR/data/mysql ]]; then
        say "initializing MariaDB in $DB_DIR/data"
        mkdir -p "$DB_DIR/data"
        mariadb-install-db --no-defaults --user="$(id -un)" --datadir="$DB_DIR/data" \
            --auth-root-authentication-method=normal --skip-test-db >"$LOG_DIR/mariadb-install.log" 2>&1 \
            || { tail -n 20 "$LOG_DIR/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
    fi
    db_tls_files
    local tls=$DB_TLS_DIR
    say "starting MariaDB (socket $DB_SOCKET, port $BILLING_DB_PORT, TLS on TCP)"
    # --no-defaults: nothing from /etc/mysql; so charset must be said explicitly (else latin1).
    # TLS is offered, not required: the stack's own clients use the socket.
    mariadbd --no-defaults --user="$(id -un)" --datadir="$DB_DIR/data" \
        --ssl-ca="$tls/ca.pem" --ssl-cert="$tls/server-cert.pem" --ssl-key="$tls/server-key.pem" \
        --socket="$DB_SOCKET" --port="$BILLING_DB_PORT" --bind-address=127.0.0.1 \
        --pid-file="$RUN_DIR/mariadb.pid" --log-error="$LOG_DIR/mariadb.log" \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
        --skip-name-resolve --default-time-zone=+00:00 --max-connections=500 \
        --innodb-buffer-pool-size="${BILLING_DB_BUFFER_POOL:-256M}" --innodb-log-file-size="${BILLING_DB_LOG_FILE_SIZE:-96M}" \
        --innodb-flush-log-at-trx-commit=1 \
        ${BILLING_DB_PERFORMANCE_SCHEMA:+--performance-schema=ON} ${BILLING_DB_EXTRA_ARGS:-} \
        </dev/null >/dev/null 2>&1 &
    poll 30 mariadb-admin --no-defaults --protocol=socket -S "$DB_SOCKET" -uroot ping && return 0
    tail -n 30 "$LOG_DIR/mariadb.log" >&2 2>/dev/null
    die "MariaDB did not start within 30s (log: $LOG_DIR/mariadb.log)"
}

db_stop() { stop_pid "$RUN_DIR/mariadb.pid" mariadbd TERM 60; }

# The application's database and its two accounts (SPEC §13), passwords in secret files:
# billing_migrator owns the schema (DDL, triggers: `billing-rpc migrate` runs as it), billing
# is the runtime account of the workers and billing-rpc with DML only (no DDL, no DROP, no
# GRANT). docs/operations.md gives the same GRANTs for production.
db_bootstrap() {
    local secret=$BILLING_VAR_DIR/secrets/db-password migrator_secret=$BILLING_VAR_DIR/secrets/db-migrator-password
    [[ -s $secret ]] || { openssl rand -hex 24 >"$secret"; chmod 600 "$secret"; }
    [[ -s $migrator_secret ]] || { openssl rand -hex 24 >"$migrator_secret"; chmod 600 "$migrator_secret"; }
    local password migrator_password
    password=$(cat "$secret")
    migrator_password=$(cat "$migrator_secret")
    db_client <<SQL || die "could not create the billing database and its accounts"
CREATE DATABASE IF NOT EXISTS billing CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE USER IF NOT EXISTS 'billing_migrator'@'localhost' IDENTIFIED BY '$migrator_password';
CREATE USER IF NOT EXISTS 'billing_migrator'@'127.0.0.1' IDENTIFIED BY '$migrator_password';
ALTER USER 'billing_migrator'@'localhost' IDENTIFIED BY '$migrator_password';
ALTER USER 'billing_migrator'@'127.0.0.1' IDENTIFIED BY '$migrator_password';
GRANT ALL PRIVILEGES ON billing.* TO 'billing_migrator'@'localhost';
GRANT ALL PRIVILEGES ON billing.* TO 'billing_migrator'@'127.0.0.1';
CREATE USER IF NOT EXISTS 'billing'@'localhost' IDENTIFIED BY '$password';
CREATE USER IF NOT EXISTS 'billing'@'127.0.0.1' IDENTIFIED BY '$password';
ALTER USER 'billing'@'localhost' IDENTIFIED BY '$password';
ALTER USER 'billing'@'127.0.0.1' IDENTIFIED BY '$password';
-- A stack made before the split granted ALL: take it back (the GRANT makes the REVOKE
-- valid on a fresh instance, where there is no grant yet).
GRANT SELECT ON billing.* TO 'billing'@'localhost';
GRANT SELECT ON billing.* TO 'billing'@'127.0.0.1';
REVOKE ALL PRIVILEGES ON billing.* FROM 'billing'@'localhost';
REVOKE ALL PRIVILEGES ON billing.* FROM 'billing'@'127.0.0.1';
GRANT SELECT, INSERT, UPDATE, DELETE ON billing.* TO 'billing'@'localhost';
GRANT SELECT, INSERT, UPDATE, DELETE ON billing.* TO 'billing'@'127.0.0.1';
SQL
    db_time_zones
}

# Named time zones for CONVERT_TZ (stats.subscriptions timeZone, docs/stats.md): loaded
# once from the system zoneinfo into the private instance's mysql schema.
db_time_zones() {
    local loaded
    loaded=$(db_client -N -e "SELECT COUNT(*) FROM mysql.time_zone_name" 2>/dev/null || echo 0)
    [[ $loaded != 0 ]] && return 0
    [[ -d /usr/share/zoneinfo ]] || { say "no /usr/share/zoneinfo: named time zones unavailable (offsets still work)"; return 0; }
    mariadb-tzinfo-to-sql /usr/share/zoneinfo 2>/dev/null | db_client mysql \
        || die "could not load time zone tables (mariadb-tzinfo-to-sql)"
}

# ---------------------------------------------------------------- configuration

DEV_TOKEN_KID=dev-1
DEV_TOKEN_ISSUER=https://dev-token.fcgibilling.invalid
DEV_TOKEN_AUDIENCE=fcgibilling-dev

# Development secrets: the ID-token signing key (RS256, published as a {kid: PEM
# certificate} map like Firebase's) and the RevenueCat webhook secret. Never for production.
dev_secrets() {
    local dir=$BILLING_VAR_DIR/secrets
    if [[ ! -s $dir/dev-token-key.pem || ! -s $dir/dev-token-cert.pem ]]; then
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=FCGIBilling development tokens" \
            -keyout "$dir/dev-token-key.pem" -out "$dir/dev-token-cert.pem" >/dev/null 2>&1 \
            || die "could not create the development token key"
        chmod 600 "$dir/dev-token-key.pem"
    fi
    python3 - "$dir/dev-token-cert.pem" "$BILLING_VAR_DIR/dev-token-keys.json" "$DEV_TOKEN_KID" <<'PY2'
import json, sys
cert = open(sys.argv[1]).read()
with open(sys.argv[2], "w") as f:
    json.dump({sys.argv[3]: cert}, f, indent=2)
PY2
    [[ -s $dir/revenuecat-webhook-secret ]] || { echo "Bearer $(openssl rand -hex 24)" >"$dir/revenuecat-webhook-secret"; chmod 600 "$dir/revenuecat-webhook-secret"; }
}

# Writes the generated configuration (unless BILLING_CONFIG points elsewhere), deep-merging
# BILLING_CONFIG_OVERLAY over it with `billing-rpc config-merge` (of $BIN_DIR: build_release
# or bin_dir first): the daemons' own rule, where a secret and its file form are one setting.
config_generate() {
    [[ $BILLING_CONFIG == "$BILLING_VAR_DIR/billing.json" ]] || { [[ -f $BILLING_CONFIG ]] || die "BILLING_CONFIG=$BILLING_CONFIG does not exist"; return 0; }
    local merge=""
    if [[ -n ${BILLING_CONFIG_OVERLAY:-} ]]; then
        [[ -f $BILLING_CONFIG_OVERLAY ]] || die "BILLING_CONFIG_OVERLAY=$BILLING_CONFIG_OVERLAY does not exist"
        merge=${BIN_DIR:-}/billing-rpc
        [[ -x $merge ]] || die "no $merge to merge BILLING_CONFIG_OVERLAY with (build first: scripts/dev-up without --no-build)"
    fi
    python3 - "$BILLING_CONFIG" "${BILLING_CONFIG_OVERLAY:-}" "$merge" <<PY || die "could not write $BILLING_CONFIG"
import json, os, subprocess, sys
path, overlay, billing_rpc = sys.argv[1:4]
config = {
    "database": {"socket": "$DB_SOCKET", "user": "billing", "name": "billing",
                 "passwordFile": "$BILLING_VAR_DIR/secrets/db-password",
                 "connectTimeoutSeconds": 2, "readTimeoutSeconds": 10, "writeTimeoutSeconds": 10},
    # backlog: as production's socket unit (billing-fcgi@.socket, Backlog=1024), so a burst of
    # connections (2,000 apps reconnecting their live streams) waits instead of nginx's 502.
    "server": {"threadsPerWorker": $BILLING_THREADS, "maxBodyBytes": 1048576, "metricsDirectory": "$RUN_DIR/metrics",
               "backlog": 1024},
    "admin": {"socket": "$RPC_SOCKET"},
    "auth": {"keysFile": "$BILLING_VAR_DIR/dev-token-keys.json", "issuer": "$DEV_TOKEN_ISSUER",
             "audience": "$DEV_TOKEN_AUDIENCE", "leewaySeconds": 60},
    "revenuecat": {"webhookSecretFile": "$BILLING_VAR_DIR/secrets/revenuecat-webhook-secret"},
    "log": {"level": "info"},
    "users": {},
    "reporting": {"currency": "EUR"},
    "live": {"publisherSocket": "$RUN_DIR/nchan.sock"},
}
tmp = path + ".tmp"
def write(config):
    with open(tmp, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
write(config)
if overlay:
    merged = subprocess.run([billing_rpc, "config-merge", tmp, overlay], capture_output=True, text=True)
    if merged.returncode != 0:
        sys.exit(merged.stderr.strip())
    write(json.loads(merged.stdout))
os.chmod(tmp, 0o640)
os.replace(tmp, path)
PY
}

migrate() {
    say "applying migrations from $ROOT/sql"
    # As the migrator account: the runtime account cannot change the schema.
    BILLING__database__user=billing_migrator BILLING__database__passwordFile="$BILLING_VAR_DIR/secrets/db-migrator-password" \
        "$BIN_DIR/billing-rpc" migrate --config "$BILLING_CONFIG" --sql-dir "$ROOT/sql" >&2 \
        || die "migrations failed"
}

# ---------------------------------------------------------------- workers

# The first instant (ms) of the bench's next renewals to the stack's bench users: 12 days
# back, or an hour after the latest renewal an earlier run (scripts/bench, scripts/profile)
# sent them, so that each user's renewals arrive in order of time across runs, as a store
# sends them (a late renewal re-folds its user and derives its subscription's statistics
# state again whole: a different, dearer path than the one measured).
bench_renewals_base() {
    local base latest
    base=$(( $(date +%s) * 1000 - 12 * 86400000 ))
    latest=$(db_client -N -e "SELECT COALESCE(CAST(UNIX_TIMESTAMP(MAX(intrinsic_at)) * 1000 AS UNSIGNED), 0)
      FROM billing.billing_events WHERE subscription_id LIKE 'bench-sub-%'")
    (( latest + 3600000 <= base )) || base=$(( latest + 3600000 ))
    echo "$base"
}

# The bench's two limits (nginx: /_raw, /_rawingest): the smallest libfcgi responder
# (scripts/lib/bench/raw.c, built into WORK_DIR with the same libraries) doing one SELECT 1,
# and doing one prepared INSERT of a unique id and the posted body into bench_rawingest,
# THREADS threads each. Sets raw_pid and rawingest_pid; raw_responders_stop ends them.
raw_responders_start() {
    local threads=$1 work=$2
    gcc -O2 -o "$work/raw-fcgi" "$ROOT/scripts/lib/bench/raw.c" $(pkg-config --cflags --libs fcgi libmariadb) -lpthread \
        || die "could not build the raw responder (gcc, libfcgi-dev, libmariadb-dev)"
    "$work/raw-fcgi" select "$RUN_DIR/raw.sock" "$threads" "$DB_SOCKET" billing "$BILLING_VAR_DIR/secrets/db-password" \
        </dev/null >"$LOG_DIR/raw-fcgi.out" 2>&1 &
    raw_pid=$!
    db_client billing -e "CREATE TABLE IF NOT EXISTS bench_rawingest (id VARCHAR(64) NOT NULL PRIMARY KEY COMMENT 'unique per request',
      payload TEXT NOT NULL COMMENT 'the posted body') ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='scripts/bench rawingest rows (dev only)';
      TRUNCATE bench_rawingest; GRANT INSERT ON billing.bench_rawingest TO 'billing'@'localhost';" \
        || die "could not create bench_rawingest"
    "$work/raw-fcgi" insert "$RUN_DIR/rawingest.sock" "$threads" "$DB_SOCKET" billing "$BILLING_VAR_DIR/secrets/db-password" \
        </dev/null >"$LOG_DIR/rawingest-fcgi.out" 2>&1 &
    rawingest_pid=$!
    local base="http://127.0.0.1:$BILLING_HTTP_PORT"
    poll 10 curl -fsS -o /dev/null "$base/_raw" || { cat "$LOG_DIR/raw-fcgi.out" >&2; die "the raw responder does not answer on $base/_raw"; }
    poll 10 curl -fsS -o /dev/null -X POST --data x "$base/_rawingest" \
        || { cat "$LOG_DIR/rawingest-fcgi.out" >&2; die "the rawingest responder does not answer on $base/_rawingest"; }
}

raw_responders_stop() {
    kill "${raw_pid:-}" "${rawingest_pid:-}" 2>/dev/null || true
    rm -f "$RUN_DIR/raw.sock" "$RUN_DIR/rawingest.sock"
    db_client billing -e "DROP TABLE IF EXISTS bench_rawingest" 2>/dev/null || true
}

worker_socket() { echo "$RUN_DIR/worker-$1.sock"; }

worker_start() {
    local i=$1
    local pidfile=$RUN_DIR/worker-$i.pid socket
    socket=$(worker_socket "$i")
    if pid_alive "$pidfile" billing-fcgi; then return 0; fi
    setsid "$BIN_DIR/billing-fcgi" --config "$BILLING_CONFIG" --socket "$socket" \
        --log-file "$LOG_DIR/worker-$i.log" </dev/null >>"$LOG_DIR/worker-$i.out" 2>&1 &
    echo $! >"$pidfile"
    wait_for_socket "$socket" "$pidfile" billing-fcgi "$LOG_DIR/worker-$i.out"
}

# Graceful: the worker refuses new connections at once (nginx moves on to the next
# worker), finishes what it is serving and exits 0.
worker_stop() { stop_pid "$RUN_DIR/worker-$1.pid" billing-fcgi TERM 30; }

workers_start() {
    local i
    for ((i = 1; i <= BILLING_WORKERS; i++)); do worker_start "$i"; done
}

workers_stop() {
    local f i
    for f in "$RUN_DIR"/worker-*.pid; do
        [[ -e $f ]] || continue
        i=${f##*/worker-}; i=${i%.pid}
        worker_stop "$i"
    done
}

# ---------------------------------------------------------------- billing-rpc

rpc_start() {
    pid_alive "$RUN_DIR/billing-rpc.pid" billing-rpc && return 0
    setsid "$BIN_DIR/billing-rpc" --config "$BILLING_CONFIG" --log-file "$LOG_DIR/billing-rpc.log" \
        </dev/null >>"$LOG_DIR/billing-rpc.out" 2>&1 &
    echo $! >"$RUN_DIR/billing-rpc.pid"
    wait_for_socket "$RPC_SOCKET" "$RUN_DIR/billing-rpc.pid" billing-rpc "$LOG_DIR/billing-rpc.out"
}

rpc_stop() { stop_pid "$RUN_DIR/billing-rpc.pid" billing-rpc TERM 30; }

# ---------------------------------------------------------------- nginx

nginx_render() {
    local upstream="" i
    for ((i = 1; i <= BILLING_WORKERS; i++)); do
        upstream+="        server unix:$(worker_socket "$i") max_fails=0;"$'\n'
    done
    local max_body=$((1048576 + 65536))
    python3 - "$ROOT/nginx/nginx.conf.template" "$BILLING_VAR_DIR/nginx/nginx.conf" <<PY || die "could not render nginx.conf"
import sys
text = open(sys.argv[1]).read()
values = {"USER": "$(id -un)", "GROUP": "$(id -gn)", "VAR_DIR": "$BILLING_VAR_DIR", "REPO_DIR": "$ROOT",
          "HTTP_PORT": "$BILLING_HTTP_PORT", "NGINX_MAX_BODY": "$max_body", "UPSTREAM_SERVERS": """$upstream"""}
for key, value in values.items():
    text = text.replace("@" + key + "@", value.rstrip("\n") if key == "UPSTREAM_SERVERS" else value)
import re
left = re.findall(r"@[A-Z_]+@", text)
assert not left, f"unrendered placeholders: {left}"
open(sys.argv[2], "w").write(text)
PY
}

nginx_cmd() { nginx -p "$BILLING_VAR_DIR/nginx" -c "$BILLING_VAR_DIR/nginx/nginx.conf" -e "$LOG_DIR/nginx-error.log" "$@"; }

nginx_start() {
    nginx_render
    nginx_cmd -t -q 2>"$LOG_DIR/nginx-test.log" || { cat "$LOG_DIR/nginx-test.log" >&2; die "nginx configuration test failed"; }
    if pid_alive "$RUN_DIR/nginx.pid" nginx; then
        nginx_cmd -s reload
        return 0
    fi
    say "starting nginx on 127.0.0.1:$BILLING_HTTP_PORT"
    nginx_cmd || die "nginx did not start (log: $LOG_DIR/nginx-error.log)"
    poll 10 curl -fsS -o /dev/null "http://127.0.0.1:$BILLING_HTTP_PORT/_static" && return 0
    tail -n 20 "$LOG_DIR/nginx-error.log" >&2 2>/dev/null
    die "nginx is not answering on 127.0.0.1:$BILLING_HTTP_PORT"
}

nginx_stop() { stop_pid "$RUN_DIR/nginx.pid" nginx QUIT 30; }

# ---------------------------------------------------------------- the whole stack

stack_up() {
    db_start
    db_bootstrap
    dev_secrets
    config_generate
    migrate
    workers_start
    rpc_start
    nginx_start
}

stack_down() {
    nginx_stop
    rpc_stop
    workers_stop
    db_stop
}

stack_print() {
    cat <<TXT
FCGIBilling is up.
  API          http://127.0.0.1:$BILLING_HTTP_PORT/api/v1/health
  metrics      http://127.0.0.1:$BILLING_HTTP_PORT/metrics   (Prometheus text, all workers; 127.0.0.1 only)
  workers      $BILLING_WORKERS × $BILLING_THREADS threads, sockets $RUN_DIR/worker-N.sock
  admin RPC    $RPC_SOCKET   (scripts/billing-admin system.health)
  MariaDB      socket $DB_SOCKET, port $BILLING_DB_PORT, database billing
               (mariadb --no-defaults -S $DB_SOCKET -uroot billing)
  config       $BILLING_CONFIG
  dev token    scripts/dev-token USER_ID   (curl -H "Authorization: Bearer \$(scripts/dev-token ID)" …/billing/access)
  RevenueCat   webhook secret in $BILLING_VAR_DIR/secrets/revenuecat-webhook-secret
  logs         $LOG_DIR
  stop         scripts/dev-down
TXT
}

# ---------------------------------------------------------------- Galera (scripts/cluster-test)

# A three-node MariaDB Galera cluster on loopback for scripts/cluster-test (docs/scaling.md):
# node N has its data dir $BILLING_VAR_DIR/galera/nodeN, socket $RUN_DIR/node-N.sock, SQL
# port GALERA_DB_PORT+N-1, gcomm port GALERA_GCOMM_PORT+10(N-1), IST port +1, SST port +2,
# server_id N (UUID_SHORT() needs a distinct one per node). Node 1 bootstraps the cluster
# (--wsrep-new-cluster) when asked to; the others join it and receive a copy of its data
# (SST by mariabackup; rsync's daemon would run as nobody under root and cannot write the data dir) or, when they come back after a crash, the write sets they missed (IST from
# the gcache). Suspect/inactive timeouts are short so a lost node is noticed in seconds.
GALERA_NODES=${GALERA_NODES:-3}
GALERA_DB_PORT=${GALERA_DB_PORT:-26306}
GALERA_GCOMM_PORT=${GALERA_GCOMM_PORT:-26567}

galera_socket() { echo "$RUN_DIR/node-$1.sock"; }
galera_pidfile() { echo "$RUN_DIR/node-$1.pid"; }
galera_client() { local n=$1; shift; mariadb --no-defaults --protocol=socket -S "$(galera_socket "$n")" -uroot "$@"; }

galera_address() {
    local n addresses=()
    for ((n = 1; n <= GALERA_NODES; n++)); do addresses+=("127.0.0.1:$((GALERA_GCOMM_PORT + 10 * (n - 1)))"); done
    local IFS=,
    echo "gcomm://${addresses[*]}"
}

# galera_node_start N [--wsrep-new-cluster]: starts node N and waits until it is Synced.
galera_node_start() {
    local n=$1 bootstrap=${2:-}
    local datadir=$BILLING_VAR_DIR/galera/node$n pidfile socket gcomm
    pidfile=$(galera_pidfile "$n")
    socket=$(galera_socket "$n")
    gcomm=$((GALERA_GCOMM_PORT + 10 * (n - 1)))
    if pid_alive "$pidfile" mariadbd; then return 0; fi
    if [[ ! -d $datadir/mysql ]]; then
        mkdir -p "$datadir"
        mariadb-install-db --no-defaults --user="$(id -un)" --datadir="$datadir" \
            --auth-root-authentication-method=normal --skip-test-db >"$LOG_DIR/node-$n-install.log" 2>&1 \
            || { tail -n 20 "$LOG_DIR/node-$n-install.log" >&2; die "mariadb-install-db failed for node $n"; }
    fi
    # A defaults file, not --no-defaults: the SST scripts read it (and only it) for [sst].
    local cnf=$BILLING_VAR_DIR/galera/node$n.cnf
    cat >"$cnf" <<CNF
[mariadbd]
user = $(id -un)
datadir = $datadir
socket = $socket
port = $((GALERA_DB_PORT + n - 1))
bind-address = 127.0.0.1
pid-file = $pidfile
log-error = $LOG_DIR/node-$n.log
character-set-server = utf8mb4
collation-server = utf8mb4_unicode_ci
skip-name-resolve
default-time-zone = +00:00
max-connections = 300
innodb-buffer-pool-size = 96M
innodb-flush-log-at-trx-commit = 1
# Galera (docs/scaling.md)
server-id = $n
binlog-format = ROW
default-storage-engine = InnoDB
innodb-autoinc-lock-mode = 2
wsrep-on = ON
wsrep-provider = /usr/lib/galera/libgalera_smm.so
wsrep-cluster-name = fcgibilling-test
wsrep-cluster-address = $(galera_address)
wsrep-node-name = node$n
wsrep-node-address = 127.0.0.1:$gcomm
wsrep-node-incoming-address = 127.0.0.1:$((GALERA_DB_PORT + n - 1))
wsrep-sst-receive-address = 127.0.0.1:$((gcomm + 2))
wsrep-sst-method = mariabackup
wsrep-sst-auth = root:
wsrep-provider-options = gmcast.listen_addr=tcp://127.0.0.1:$gcomm;ist.recv_addr=127.0.0.1:$((gcomm + 1));gcache.size=256M;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;evs.install_timeout=PT6S;evs.keepalive_period=PT1S;evs.inactive_check_period=PT1S;cert.log_conflicts=YES
wsrep-slave-threads = 2
# Every certification failure and brute-force abort in the node log (the test reads them).
wsrep-log-conflicts = ON
wsrep-sync-wait = 1
# Triggers (sql/006, 009...) by an account without SUPER: wsrep logs like a binlog would.
log-bin-trust-function-creators = 1

[sst]
sst-syslog = -1
sst-log-archive = 0
CNF
    # After a crash grastate.dat says seqno -1: recover the position from InnoDB first, so
    # the node asks for IST (the write sets it missed) instead of a full SST (what the
    # Debian unit's galera_recovery does).
    if [[ -z $bootstrap ]] && grep -q '^seqno: *-1' "$datadir/grastate.dat" 2>/dev/null; then
        local recovered
        mariadbd --defaults-file="$cnf" --wsrep-recover --log-error="$LOG_DIR/node-$n-recover.log" >/dev/null 2>&1 || true
        recovered=$(grep -o 'Recovered position: [0-9a-f-]*:[0-9]*' "$LOG_DIR/node-$n-recover.log" 2>/dev/null | tail -n 1 | awk '{print $3}')
        if [[ -n $recovered ]] && grep -q "^uuid: *${recovered%:*}\$" "$datadir/grastate.dat"; then
            sed -i "s/^seqno: *-1\$/seqno:   ${recovered##*:}/" "$datadir/grastate.dat"
            say "Galera node $n recovered position $recovered"
        fi
    fi
    say "starting Galera node $n (port $((GALERA_DB_PORT + n - 1)), gcomm $gcomm${bootstrap:+, new cluster})"
    mariadbd --defaults-file="$cnf" $bootstrap </dev/null >/dev/null 2>&1 &
    echo $! >"$pidfile"
    local i state
    for ((i = 0; i < 1200; i++)); do
        state=$(galera_client "$n" -N -B -e "SHOW GLOBAL STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | awk '{print $2}')
        [[ $state == Synced ]] && return 0
        ((i < 20)) || pid_running "$pidfile" || break
        sleep 0.1
    done
    tail -n 30 "$LOG_DIR/node-$n.log" >&2 2>/dev/null
    die "Galera node $n is not Synced within 120s (log: $LOG_DIR/node-$n.log)"
}

galera_node_stop() { stop_pid "$(galera_pidfile "$1")" mariadbd TERM 60; }

galera_stop() {
    local n
    for ((n = GALERA_NODES; n >= 1; n--)); do galera_node_stop "$n"; done
}

# ---------------------------------------------------------------- a booted Debian 12 (systemd)

# The packages the system layer's container holds beyond debootstrap's minbase: the .deb's
# runtime dependencies (it is installed offline, with dpkg), MariaDB, nginx and the tools
# the tests drive it with. A change of this list makes a new cached root.
NSPAWN_PACKAGES=(systemd systemd-sysv dbus ca-certificates mariadb-server mariadb-client nginx-light libnginx-mod-nchan python3
                 libfcgi-bin curl openssl adduser init-system-helpers libcurl4 libfcgi0ldbl libjansson4 libmariadb3
                 libssl3 libstdc++6 logrotate procps iproute2)

# nspawn_root: prints the path of a Debian 12 root with NSPAWN_PACKAGES installed, made by
# debootstrap (about a minute and a half) the first time and kept under
# $FCGIBILLING_NSPAWN_CACHE (default /var/cache/fcgibilling-test) for the next runs, keyed by
# the package list. The root is a template: a run boots a copy of it.
nspawn_root() {
    local cache=${FCGIBILLING_NSPAWN_CACHE:-/var/cache/fcgibilling-test} key root mirror
    key=$(printf '%s\n' bookworm "${NSPAWN_PACKAGES[@]}" | sha256sum | cut -c1-12)
    root=$cache/bookworm-$key
    if [[ -f $root/.fcgibilling-root-complete ]]; then echo "$root"; return 0; fi
    mkdir -p "$cache"
    rm -rf "$root.tmp"
    mirror=$(awk '/^URIs:/ {print $2; exit} /^deb / {print $2; exit}' /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list 2>/dev/null)
    mirror=${mirror:-http://deb.debian.org/debian}
    say "debootstrap: a Debian 12 root for the system layer (cached in $root; mirror $mirror)"
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,ca-certificates bookworm "$root.tmp" "$mirror" \
        >"$cache/debootstrap.log" 2>&1 || { tail -n 20 "$cache/debootstrap.log" >&2; die "debootstrap failed (log: $cache/debootstrap.log)"; }
    # Packages installed without starting anything (policy-rc.d), then apt's cache dropped.
    chroot "$root.tmp" /bin/sh -c "export DEBIAN_FRONTEND=noninteractive
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
        apt-get update -qq && apt-get install -y -qq --no-install-recommends ${NSPAWN_PACKAGES[*]}; rc=\$?
        rm -f /usr/sbin/policy-rc.d; apt-get clean; rm -rf /var/lib/apt/lists/*; exit \$rc" \
        >>"$cache/debootstrap.log" 2>&1 || { tail -n 20 "$cache/debootstrap.log" >&2; die "installing into the root failed (log: $cache/debootstrap.log)"; }
    echo fcgibilling-test >"$root.tmp/etc/hostname"
    touch "$root.tmp/.fcgibilling-root-complete"
    rm -rf "$root"
    mv "$root.tmp" "$root"
    echo "$root"
}
