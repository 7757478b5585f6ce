"""The web console's calls at scale (issue 26: 1M rows, 1,000 tables, paging and listing under
300 ms of server time), in one run against a release `lancet serve`.

Builds a namespace of 1,000 small tables and a 1M-row table (10 fragments, a 32-dim vector,
text), then times each call the console makes to list tables and to page the data grid, as
the page makes it (JSON answers, `Accept: application/json`), over one keep-alive loopback
connection. Printed: p50 / p95 / max wall time per call in ms. Wall time includes the HTTP
round trip, so it is an upper bound of the server's time.

    python bench/console_scale.py $CARGO_TARGET_DIR/release/lancet [--tables 1000] [--rows 1000000]
"""
import argparse
import json
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
import urllib3

import served

DIM = 32


def arrow(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def chunk(start, n):
    ids = np.arange(start, start + n, dtype=np.int64)
    rng = np.random.default_rng(start)
    return pa.table({
        "id": pa.array(ids),
        "text": [f"row {i} of the big table" for i in ids],
        "vector": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(n * DIM, dtype=np.float32)), DIM),
    })


class Client:
    def __init__(self, base):
        host, port = base.split("//")[1].rsplit(":", 1)
        self.pool = urllib3.HTTPConnectionPool(host, int(port), maxsize=1)
        self.headers = {"x-api-key": served.KEY, "accept": "application/json"}

    def call(self, method, path, body=None, data=None, ctype="application/json"):
        payload = None if method == "GET" else (data if data is not None else json.dumps(body or {}).encode())
        headers = dict(self.headers)
        if payload is not None:
            headers["content-type"] = ctype
        r = self.pool.request(method, path, body=payload, headers=headers)
        if r.status != 200:
            raise RuntimeError(f"{path}: {r.status} {r.data[:300]!r}")
        return json.loads(r.data)


def timed(client, label, method, path, body=None, reps=20, check=None):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = client.call(method, path, body)
        times.append((time.perf_counter() - t) * 1000)
        if check:
            check(out)
    times.sort()
    p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
    print(f"  {label:<52} p50 {statistics.median(times):7.1f}  p95 {p95:7.1f}  max {times[-1]:7.1f}")
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--tables", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        proc, base = served.start(args.binary, root)
        try:
            c = Client(base)
            c.call("POST", "/v1/namespace/many/create")
            c.call("POST", "/v1/namespace/big/create")
            t = time.perf_counter()
            small = arrow(chunk(0, 10))
            for i in range(args.tables):
                c.call("POST", f"/v1/table/many$t{i:04d}/create", data=small,
                       ctype="application/vnd.apache.arrow.stream")
            print(f"created {args.tables} tables in {time.perf_counter() - t:.1f} s")
            t = time.perf_counter()
            step = args.rows // 10
            c.call("POST", "/v1/table/big$rows/create", data=arrow(chunk(0, step)),
                   ctype="application/vnd.apache.arrow.stream")
            for s in range(step, args.rows, step):
                c.call("POST", "/v1/table/big$rows/insert", data=arrow(chunk(s, step)),
                       ctype="application/vnd.apache.arrow.stream")
            print(f"loaded {args.rows:,} rows in {time.perf_counter() - t:.1f} s")
            n = args.rows

            def page_of(first):
                def check(out):
                    assert out["num_rows"] == 50 and out["rows"][0]["id"] == first, out["rows"][:1]
                return check

            print("Tables page (ms):")
            timed(c, f"table/list of {args.tables} tables (one page)", "GET",
                  "/v1/namespace/many/table/list?limit=1000",
                  check=lambda o: len(o["tables"]) == args.tables or 1 / 0)
            timed(c, "stats of a small table (per row shown)", "POST", "/v1/table/many$t0500/stats")
            timed(c, "whoami", "GET", "/v1/whoami")
            print(f"A {n:,}-row table (ms):")
            timed(c, "describe", "POST", "/v1/table/big$rows/describe")
            timed(c, "stats", "POST", "/v1/table/big$rows/stats",
                  check=lambda o: o["num_rows"] == n or 1 / 0)
            timed(c, "version/list, 50 newest, with operations", "POST",
                  "/v1/table/big$rows/version/list?descending=true&limit=50", {"with_operations": True})
            timed(c, "count_rows", "POST", "/v1/table/big$rows/count_rows")
            grid = {"k": 50, "with_row_id": True}
            timed(c, "grid page 1 (k=50)", "POST", "/v1/table/big$rows/query", {**grid, "offset": 0},
                  check=page_of(0))
            timed(c, "grid page at the middle (offset n/2)", "POST", "/v1/table/big$rows/query",
                  {**grid, "offset": n // 2}, check=page_of(n // 2))
            timed(c, "grid last page (offset n-50)", "POST", "/v1/table/big$rows/query",
                  {**grid, "offset": n - 50}, check=page_of(n - 50))
            timed(c, "count_rows, filtered (id % 3 = 0)", "POST", "/v1/table/big$rows/count_rows",
                  {"predicate": "id % 3 = 0"})
            timed(c, "grid filtered page 1 (id % 3 = 0)", "POST", "/v1/table/big$rows/query",
                  {**grid, "offset": 0, "filter": "id % 3 = 0"}, check=page_of(0))
            timed(c, "grid filtered, middle (id % 3 = 0, offset n/6)", "POST",
                  "/v1/table/big$rows/query", {**grid, "offset": n // 6, "filter": "id % 3 = 0"},
                  check=page_of((n // 6) * 3))
            vec = c.call("POST", "/v1/table/big$rows/query", {"k": 1, "columns": ["vector"]})["rows"][0]["vector"]
            timed(c, "search: 10 nearest, no index (not paging: for scale)", "POST",
                  "/v1/table/big$rows/query", {"vector": vec, "k": 10, "columns": ["id"]}, reps=5)
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
