"""SQL through Arrow Flight SQL vs the same statement in-process (issue 27), in one run.

A 1M-row fact table (10 fragments) and a 1,000-row dimension table loaded through Lancet;
then each statement through Lancet's Flight SQL (ADBC's driver, answers fetched whole as
Arrow) and through DataFusion over the same lance files in this process (datafusion-python
with lance's own table provider, `lance.FFILanceTableProvider`), alternating, 10 runs each:

- filter + aggregate over the 1M rows;
- top-k join of the two tables;
- and the time to the first batch of a 10M-row scan streamed through Flight SQL (nothing
  is materialized whole: the batch arrives while the scan goes on).

Printed: median ms per side and the ratio (target <= 1.2x), first-batch ms (target < 100).

Needs datafusion-python built against the DataFusion lance uses (54), so it runs in a venv of
its own:

    python3 -m venv ~/.cache/lancet-bench-venv
    ~/.cache/lancet-bench-venv/bin/pip install -r bench/requirements-sql.txt
    ~/.cache/lancet-bench-venv/bin/python bench/sql_bench.py $CARGO_TARGET_DIR/release/lancet
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request

import adbc_driver_flightsql as flightsql
import adbc_driver_flightsql.dbapi as adbc
import datafusion
import lance
import numpy as np
import pyarrow as pa

import served

Q_AGG = ("SELECT k % 10 AS g, count(*) AS n, sum(v) AS s, avg(v) AS a FROM facts "
         "WHERE v > 0.5 GROUP BY k % 10 ORDER BY g")
Q_JOIN = ("SELECT d.name, f.id, f.v FROM facts f JOIN dims d ON f.k = d.k "
          "WHERE d.k < 500 ORDER BY f.v DESC, f.id LIMIT 10")


def arrow(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def post(base, path, data=None, body=None):
    payload = data if data is not None else json.dumps(body or {}).encode()
    ctype = "application/vnd.apache.arrow.stream" if data is not None else "application/json"
    req = urllib.request.Request(base + path, data=payload, method="POST", headers={
        "content-type": ctype, "x-api-key": served.KEY})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def facts(start, n):
    ids = np.arange(start, start + n, dtype=np.int64)
    rng = np.random.default_rng(start)
    return pa.table({"id": ids, "k": ids % 1000, "v": rng.random(n)})


def load(base, name, rows, chunks):
    step = rows // chunks
    post(base, f"/v1/table/bench${name}/create", data=arrow(facts(0, step)))
    for s in range(step, rows, step):
        post(base, f"/v1/table/bench${name}/insert", data=arrow(facts(s, step)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--scan-rows", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        proc, base = served.start(args.binary, root, "--flight-addr", "127.0.0.1:0")
        line = proc.stdout.readline().strip()
        assert line.startswith("flight sql listening on "), line
        flight = line[len("flight sql listening on "):]
        try:
            post(base, "/v1/namespace/bench/create")
            load(base, "facts", args.rows, 10)
            post(base, "/v1/table/bench$dims/create", data=arrow(pa.table({
                "k": pa.array(range(1000), pa.int64()), "name": [f"dim {i}" for i in range(1000)]})))
            t = time.perf_counter()
            load(base, "scan", args.scan_rows, 10)
            print(f"loaded {args.rows:,} + {args.scan_rows:,} rows in {time.perf_counter() - t:.1f} s")

            def location(name):
                return post(base, f"/v1/table/bench${name}/describe")["location"]

            ctx = datafusion.SessionContext()
            for name in ("facts", "dims"):
                ctx.register_table(name, lance.FFILanceTableProvider(lance.dataset(location(name))))
            conn = adbc.connect(flight, autocommit=True, db_kwargs={
                flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {served.KEY}",
                "adbc.flight.sql.rpc.call_header.x-service-database": "bench"})
            cur = conn.cursor()

            def via_flight(sql):
                cur.execute(sql)
                return cur.fetch_arrow_table()

            def in_process(sql):
                return ctx.sql(sql).to_arrow_table()

            print(f"{'statement':<22} {'flight ms':>10} {'in-process ms':>14} {'ratio':>7}")
            for label, sql in (("filter + aggregate", Q_AGG), ("top-k join", Q_JOIN)):
                assert via_flight(sql).to_pylist() == in_process(sql).to_pylist(), label
                a, b = [], []
                for _ in range(args.runs):
                    for side, out in ((via_flight, a), (in_process, b)):
                        t = time.perf_counter()
                        side(sql)
                        out.append((time.perf_counter() - t) * 1000)
                fa, fb = statistics.median(a), statistics.median(b)
                print(f"{label:<22} {fa:>10.1f} {fb:>14.1f} {fa / fb:>7.2f}")

            firsts = []
            for _ in range(5):
                t = time.perf_counter()
                cur.execute("SELECT id, k, v FROM scan")
                reader = cur.fetch_record_batch()
                batch = reader.read_next_batch()
                firsts.append((time.perf_counter() - t) * 1000)
                assert batch.num_rows > 0
                reader.close()
            print(f"first batch of a {args.scan_rows:,}-row scan: median "
                  f"{statistics.median(firsts):.1f} ms (runs: {', '.join(f'{x:.0f}' for x in firsts)})")
            cur.close()
            conn.close()
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
