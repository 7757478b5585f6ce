"""The audit log under load: W writers insert one row per request for S seconds; the server is
SIGKILLed at K seconds and restarted on the same root. Afterwards every acknowledged write
must have exactly one audit record (matched by the request id the writer sent) and its row in
the table, and `lancet admin audit verify` must find every chain intact.

    python3 bench/audit_load.py [--binary target/release/lancet] [--secs 60] [--writers 8] [--kill-at 30]

Prints the counts; exits 1 when a check fails. Plain HTTP on purpose: the writers need their
own request ids, which the clients do not expose."""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

import lance
import pyarrow as pa

import served

OPERATOR = "bench-operator-key"


def start(binary, root, extra=()):
    os.environ["LANCET_OPERATOR_KEY"] = OPERATOR
    return served.start(binary, root, *extra)


def admin(binary, base, *args):
    out = subprocess.run([binary, "admin", *args], capture_output=True, text=True,
                         env={**os.environ, "LANCET_URL": base, "LANCET_OPERATOR_KEY": OPERATOR})
    return out.returncode, json.loads(out.stdout) if out.stdout.strip() else out.stderr


def ipc(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.environ.get("LANCET_BIN", "target/release/lancet"))
    ap.add_argument("--secs", type=float, default=60)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--kill-at", type=float, default=30, help="0: no kill")
    ap.add_argument("--audit", default="on", help="off: the same writes without the audit log")
    args = ap.parse_args()
    extra = ["--audit", args.audit]
    root = tempfile.mkdtemp(prefix="audit-load-")
    proc, base = start(args.binary, root, extra)
    admin(args.binary, base, "tenants", "create", "load")
    _, made = admin(args.binary, base, "keys", "create", "load", "--role", "admin")
    key = made["key"]
    state = {"base": base}
    path = "/v1/table/main$t"
    req = urllib.request.Request(base + "/v1/namespace/main/create", data=b"{}", method="POST",
                                 headers={"x-api-key": key, "content-type": "application/json"})
    urllib.request.urlopen(req).read()
    first = ipc(pa.table({"id": pa.array([-1], pa.int64()), "writer": pa.array([-1], pa.int64())}))
    req = urllib.request.Request(base + path + "/create", data=first, method="POST",
                                 headers={"x-api-key": key,
                                          "content-type": "application/vnd.apache.arrow.stream"})
    urllib.request.urlopen(req).read()

    acknowledged = []  # (request id, row id)
    unanswered = [0]
    lock = threading.Lock()
    deadline = time.time() + args.secs

    def writer(w):
        n = 0
        while time.time() < deadline:
            row = w * 10_000_000 + n
            n += 1
            rid = f"bench-{uuid.uuid4()}"
            body = ipc(pa.table({"id": pa.array([row], pa.int64()), "writer": pa.array([w], pa.int64())}))
            req = urllib.request.Request(
                state["base"] + path + "/insert", data=body, method="POST",
                headers={"x-api-key": key, "x-request-id": rid,
                         "content-type": "application/vnd.apache.arrow.stream"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    r.read()
                with lock:
                    acknowledged.append((rid, row))
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                with lock:
                    unanswered[0] += 1
                time.sleep(0.05)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(args.writers)]
    started = time.time()
    for t in threads:
        t.start()
    before_kill = restarted = 0
    if args.kill_at > 0:
        time.sleep(max(0.0, args.kill_at - (time.time() - started)))
        before_kill = len(acknowledged)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc, state["base"] = start(args.binary, root, extra)
        restarted = time.time() - started
    for t in threads:
        t.join()
    elapsed = time.time() - started
    if args.audit == "off":
        proc.terminate()
        proc.wait()
        print(f"audit off: {len(acknowledged)} acknowledged writes in {elapsed:.1f} s, "
              f"{len(acknowledged) / elapsed:.0f}/s")
        return
    code, report = admin(args.binary, state["base"], "audit", "verify")
    proc.terminate()
    proc.wait()

    log = lance.dataset(os.path.join(root, "_audit", "log.lance")).to_table(
        filter="action = 'POST /v1/table/{id}/insert'", columns=["request_id", "outcome"])
    ids = log["request_id"].to_pylist()
    counts = {}
    for rid in ids:
        counts[rid] = counts.get(rid, 0) + 1
    missing = [rid for rid, _ in acknowledged if counts.get(rid, 0) == 0]
    duplicated = [rid for rid, n in counts.items() if n > 1]
    rows = set(lance.dataset(os.path.join(root, "tenants", "load",
                                          [d for d in os.listdir(os.path.join(root, "tenants", "load"))
                                           if d.endswith("$t")][0])).to_table(columns=["id"])["id"].to_pylist())
    lost_rows = [row for _, row in acknowledged if row not in rows]
    print(f"writers {args.writers}, {elapsed:.1f} s, SIGKILL at {args.kill_at:.0f} s "
          f"(server back after {restarted - args.kill_at:.1f} s)")
    print(f"acknowledged writes: {len(acknowledged)} ({before_kill} before the kill), "
          f"{len(acknowledged) / elapsed:.0f}/s; unanswered (server down): {unanswered[0]}")
    print(f"insert records: {len(ids)}; acknowledged without a record: {len(missing)}; "
          f"records twice: {len(duplicated)}; acknowledged rows missing from the table: {len(lost_rows)}")
    print(f"verify: exit {code}, {json.dumps(report) if code else ''}".rstrip())
    if isinstance(report, dict):
        print(f"  records {report['records']}, writers {report['writers']}, ok {report['ok']}, "
              f"open chains (killed or running) {len(report['open'])}")
    ok = not missing and not duplicated and not lost_rows and code == 0
    print("OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
