"""Queries while upkeep compacts (issue 29 item 6): query latency on one table while an
upkeep job rewrites another table's 40 fragments (a bulk load's), against the same queries
with nothing in the background; and how long the compaction takes with and without them.
Compactions are started with `optimize {"action": "compact"}` (the job upkeep's policy runs),
so both runs rewrite exactly 40 fragments.

    python bench/upkeep_priority.py target/release/lancet [--rows 25000] [--dim 128]
        [--priority low|normal] [--query light|scan]

`--priority normal` runs background work at normal CPU priority (LANCET_BACKGROUND_PRIORITY),
the behaviour before jobs had a runtime of their own below request priority.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request

import pyarrow as pa

KEY = "bench-key"


def start(binary, root, priority):
    env = {**os.environ, "LANCET_BOOTSTRAP_KEY": KEY, "LANCET_BACKGROUND_PRIORITY": priority}
    proc = subprocess.Popen(
        [binary, "serve", "--addr", "127.0.0.1:0", "--data", root, "--upkeep", "false"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    line = proc.stdout.readline().strip()
    while line and not line.startswith("listening on "):
        line = proc.stdout.readline().strip()
    return proc, line[len("listening on "):]


def post(base, path, body=None, data=None, ctype="application/json"):
    payload = data if data is not None else json.dumps(body or {}).encode()
    req = urllib.request.Request(base + path, data=payload, method="POST", headers={
        "content-type": ctype, "authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req) as r:
        return r.read()


def arrow(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def chunk(start, n, dim):
    import numpy as np
    ids = np.arange(start, start + n, dtype=np.int64)
    vec = ((ids[:, None] * 7 + np.arange(dim)[None, :]) % 101).astype(np.float32)
    return pa.table({
        "id": pa.array(ids),
        "text": [f"row {i} of the priority bench, some words to encode" for i in ids],
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), dim),
    })


def load(base, name, chunks, rows, dim):
    post(base, f"/v1/table/{name}/create", data=arrow(chunk(0, rows, dim)),
         ctype="application/vnd.apache.arrow.stream")
    for c in range(1, chunks):
        post(base, f"/v1/table/{name}/insert", data=arrow(chunk(c * rows, rows, dim)),
             ctype="application/vnd.apache.arrow.stream")


def fragments(base, name):
    return json.loads(post(base, f"/v1/table/{name}/stats"))["fragment_stats"]["num_fragments"]


QUERIES = {
    # Stops after 20 matches: a few ms on one core.
    "light": ("/v1/table/q/query", {"filter": "id % 97 = 3", "limit": 20, "columns": ["id"]}),
    # Every row's text: lance's scan on every core.
    "scan": ("/v1/table/q/count_rows", {"predicate": "text LIKE '%99 of the%'"}),
}
KIND = "light"


def query(base):
    path, body = QUERIES[KIND]
    t = time.perf_counter()
    post(base, path, body)
    return (time.perf_counter() - t) * 1000


def compact(base, name, with_queries, deadline=600):
    """Run an upkeep compaction of `name`: its seconds (from the job's start to its end as
    the server recorded them), and query latencies meanwhile."""
    job = json.loads(post(base, f"/v1/table/{name}/optimize", {"action": "compact"}))["job_id"]
    t0 = time.perf_counter()
    lat = []
    last_check = 0.0
    while time.perf_counter() - t0 < deadline:
        if with_queries:
            lat.append(query(base))
        else:
            time.sleep(0.02)
        if time.perf_counter() - last_check > 0.1:
            last_check = time.perf_counter()
            d = json.loads(post(base, "/v1/jobs/describe", {"job_id": job}))
            if d["job_state"] != "IN_PROGRESS":
                assert d["job_state"] == "DONE", d
                assert fragments(base, name) == 1
                return (d["finish_ms"] - d["creation_ms"]) / 1000, lat
    raise RuntimeError(f"{name} was not compacted within {deadline} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rows", type=int, default=25000, help="rows per chunk (40 chunks)")
    ap.add_argument("--dim", type=int, default=128, help="vector dimensions")
    ap.add_argument("--priority", default="low", choices=["low", "normal"])
    ap.add_argument("--query", default="light", choices=sorted(QUERIES))
    args = ap.parse_args()
    global KIND
    KIND = args.query
    with tempfile.TemporaryDirectory() as root:
        proc, base = start(args.binary, root, args.priority)
        try:
            # The queried table: loaded and compacted first, then left alone.
            load(base, "q", 40, args.rows, args.dim)
            compact(base, "q", False)
            for _ in range(20):
                query(base)
            idle = [query(base) for _ in range(200 if KIND == "light" else 40)]
            load(base, "a", 40, args.rows, args.dim)
            idle_secs, _ = compact(base, "a", False)
            load(base, "b", 40, args.rows, args.dim)
            busy_secs, busy = compact(base, "b", True)
        finally:
            proc.terminate()
            proc.wait()
    p50_idle, p50_busy = statistics.median(idle), statistics.median(busy)
    print(f"priority={args.priority} query={args.query} rows={40 * args.rows} dim={args.dim}")
    print(f"query p50 idle {p50_idle:.2f} ms, during compaction {p50_busy:.2f} ms "
          f"({p50_busy / p50_idle:.2f}x; {len(busy)} queries)")
    print(f"compaction alone {idle_secs:.1f} s, under queries {busy_secs:.1f} s "
          f"({busy_secs / idle_secs:.2f}x)")


if __name__ == "__main__":
    main()
