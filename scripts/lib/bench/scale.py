"""scripts/bench --scale, its checks and timings (run by scripts/lib/bench/scale.sh).

  scale.py reproject RPC_SOCKET DB_CLIENT... -- USER...
      events.reproject of each user: the generated rows must be what the fold writes, so
      every call must report no difference and leave the access summary (tier, phase,
      subscription, product, expiry, auto-renew, last event, events applied, revision) as
      the generator wrote it. One line per user (ok / FAILED); exit status 1 on any failure.
  scale.py time RPC_SOCKET RUNS METHOD PARAMS_JSON
      the call's wall time through the admin socket, RUNS times: prints the times in ms.
  scale.py plans SLOW_LOG
      the statements of the slow log (long_query_time 0, log_slow_verbosity query_plan,
      explain), grouped by shape (literals replaced): count, rows examined per execution
      (mean, max), the EXPLAIN of the costliest, and whether any table was read by a full
      scan (type ALL or index of more than 100 rows) or examined more than 100 rows an execution.
"""
import json
import re
import subprocess
import sys
import time

from rpc import RpcError
from rpc import call as rpc


ACCESS = ("tier", "phase", "subscription_id", "product_id", "expires_at", "will_renew", "last_event_at",
          "applied_events", "revision")


def access_rows(db, users):
    ids = ",".join("'" + u + "'" for u in users)  # generated ids: hex digits and dashes only
    sql = f"SELECT user_id, {', '.join(ACCESS)} FROM billing.billing_access WHERE user_id IN ({ids})"
    out = subprocess.run(db + ["-N", "-B", "-e", sql], check=True, capture_output=True, text=True).stdout
    return {line.split("\t")[0]: line.split("\t")[1:] for line in out.splitlines()}


def reproject(argv):
    sep = argv.index("--")
    path, db, users = argv[0], argv[1:sep], argv[sep + 1:]
    for u in users:
        if not re.fullmatch(r"[0-9a-f-]{36}", u):
            raise SystemExit(f"not a generated user id: {u!r}")
    before = access_rows(db, users)
    failed = 0
    times = []
    for u in users:
        started = time.monotonic()
        result = rpc(path, "events.reproject", {"userId": u, "actor": "bench-scale"})
        times.append((time.monotonic() - started) * 1000)
        problems = []
        if result.get("differences"):
            problems.append(f"differences {json.dumps(result['differences'])}")
        if u not in before:
            problems.append("no access row before")
        after = access_rows(db, [u])
        if before.get(u) != after.get(u):
            changed = [name for name, a, b in zip(ACCESS, before.get(u, []), after.get(u, [])) if a != b]
            problems.append(f"access summary changed: {', '.join(changed) or 'row'}")
        if problems:
            failed += 1
            print(f"scale: FAILED: reproject {u}: {'; '.join(problems)}")
        else:
            print(f"scale: ok: reproject {u}: no difference, access summary unchanged ({result.get('appliedEvents')} events)")
    times.sort()
    print(f"scale: reproject of {len(users)} sampled users: {len(users) - failed} consistent, {failed} not; "
          f"median {times[len(times) // 2]:.1f} ms, max {times[-1]:.1f} ms")
    return 1 if failed else 0


def timed(argv):
    path, runs, method, params = argv[0], int(argv[1]), argv[2], json.loads(argv[3])
    out = []
    for _ in range(runs):
        started = time.monotonic()
        try:
            rpc(path, method, params)
            out.append(f"{(time.monotonic() - started) * 1000:.0f}")
        except RpcError as error:
            out.append(f"[{error.reason} after {(time.monotonic() - started) * 1000:.0f} ms]")
    print(" ".join(out))
    return 0


LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\b\d+(?:\.\d+)?\b")


def plans(argv):
    text = open(argv[0], errors="replace").read()
    entries = re.split(r"^# User@Host: .*$", text, flags=re.M)
    shapes = {}
    for entry in entries:
        m = re.search(r"Rows_examined: (\d+)", entry)
        if not m:
            continue
        examined = int(m.group(1))
        explain = [line[2:] for line in entry.splitlines() if line.startswith("# explain: ")]
        body = [line for line in entry.splitlines() if line and not line.startswith(("#", "/", "mariadbd,", "Tcp port:", "Time\t"))
                and not line.startswith("SET timestamp") and not line.startswith("use ")]
        sql = " ".join(" ".join(body).split())
        if not sql or sql.upper().startswith(("COMMIT", "START TRANSACTION", "ROLLBACK", "SET ", "SELECT 1", "BEGIN")):
            continue
        shape = LITERAL.sub("?", sql)[:240]
        s = shapes.setdefault(shape, {"count": 0, "examined": 0, "max": 0, "explain": explain, "scan": False})
        s["count"] += 1
        s["examined"] += examined
        if examined >= s["max"]:
            s["max"], s["explain"] = examined, explain
        for line in explain:
            cols = line.split("\t")
            # id select_type table type possible_keys key key_len ref rows r_rows filtered r_filtered Extra
            # a full read of a table or index is a scan unless that table is tiny (plan and
            # offering versions, flags: configuration rows)
            if len(cols) > 9 and cols[3] in ("ALL", "index") and cols[2] not in ("NULL", "") and not cols[2].startswith("<"):
                rows = max(float(c) for c in (cols[8], cols[9]) if re.fullmatch(r"[0-9.]+", c) or 0) if any(
                    re.fullmatch(r"[0-9.]+", c) for c in (cols[8], cols[9])) else 0
                if rows > 100:
                    s["scan"] = True
    scans = many = 0
    print(f"plans: {len(shapes)} statement shapes of the request paths (slow log, every statement)")
    for shape, s in sorted(shapes.items(), key=lambda kv: -kv[1]["max"]):
        mean = s["examined"] / s["count"]
        flag = "SCAN" if s["scan"] else ("MANY" if s["max"] > 100 else "ok")
        scans += flag == "SCAN"
        many += flag == "MANY"
        print(f"  [{flag}] {s['count']:>6}x rows examined mean {mean:7.1f} max {s['max']:>7}  {shape}")
        for line in s["explain"]:
            print(f"           {line}")
    print(f"plans: {scans} shape(s) reading a table of more than 100 rows in full (SCAN), "
          f"{many} more examining over 100 rows an execution through an index (MANY)")
    return 1 if scans else 0


if __name__ == "__main__":
    command, rest = sys.argv[1], sys.argv[2:]
    sys.exit({"reproject": reproject, "time": timed, "plans": plans}[command](rest))
