"""Catalog calls against the number of tables: server-side time per call (from /metrics, sum /
count of the route's histogram) and client p50, for namespace exists/describe/list and table
exists/describe/list, plus listing every table by pages. Prints numbers, asserts nothing.

    cargo build --release --bin lancet
    python3 bench/catalog_bench.py [--tables 10,1000,10000] [--bin A --bin B ...]

Each binary (default: the release build) gets a fresh data root per size: 100 namespaces,
the tables declared across them (one real table with rows for describe/exists). Several
`--bin`s are measured in the same run, sizes alternating, for before/after comparisons.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import tempfile
import time

import served
from served import KEY
NAMESPACES = 100


class Server:
    def __init__(self, binary, root):
        self.proc, base = served.start(binary, root)
        host, port = base[len("http://"):].split(":")
        self.conn = http.client.HTTPConnection(host, int(port))

    def call(self, method, path, body=None, ctype="application/json"):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        headers = {"authorization": f"Bearer {KEY}", "content-type": ctype}
        self.conn.request(method, path, body=data, headers=headers)
        r = self.conn.getresponse()
        out = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {out[:300]!r}")
        return out

    def route_seconds(self):
        text = self.call("GET", "/metrics").decode()
        sums, counts = {}, {}
        for m in re.finditer(r'^lancet_http_request_duration_seconds_(sum|count)\{(.*)\} (\S+)$', text, re.M):
            route = re.search(r'route="([^"]*)"', m.group(2)).group(1)
            d = sums if m.group(1) == "sum" else counts
            d[route] = d.get(route, 0) + float(m.group(3))
        return sums, counts

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def real_table():
    import pyarrow as pa
    t = pa.table({"id": pa.array(range(100), pa.int64())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


OPS = [
    ("namespace exists", "POST", "/v1/namespace/ns5/exists", {}, "/v1/namespace/{id}/exists"),
    ("namespace describe", "POST", "/v1/namespace/ns5/describe", {}, "/v1/namespace/{id}/describe"),
    ("namespace list", "GET", "/v1/namespace/%24/list", None, "/v1/namespace/{id}/list"),
    ("table exists", "POST", "/v1/table/ns0%24real/exists", {}, "/v1/table/{id}/exists"),
    ("table describe", "POST", "/v1/table/ns0%24real/describe", {}, "/v1/table/{id}/describe"),
    ("table list (1 ns)", "GET", "/v1/namespace/ns5/table/list", None, "/v1/namespace/{id}/table/list"),
]


def measure(binary, tables, calls):
    with tempfile.TemporaryDirectory() as root:
        s = Server(binary, root)
        try:
            for i in range(NAMESPACES):
                s.call("POST", f"/v1/namespace/ns{i}/create", {})
            for j in range(tables):
                s.call("POST", f"/v1/table/ns{j % NAMESPACES}%24t{j}/declare", {})
            s.call("POST", "/v1/table/ns0%24real/create", real_table(),
                   "application/vnd.apache.arrow.stream")
            time.sleep(0.3)  # past the snapshot's grace for fresh catalog writes
            out = {}
            for name, method, path, body, route in OPS:
                for _ in range(20):
                    s.call(method, path, body)
                sums0, counts0 = s.route_seconds()
                lat = []
                for _ in range(calls):
                    t = time.perf_counter()
                    s.call(method, path, body)
                    lat.append(time.perf_counter() - t)
                sums1, counts1 = s.route_seconds()
                n = counts1.get(route, 0) - counts0.get(route, 0)
                server = (sums1.get(route, 0) - sums0.get(route, 0)) / max(n, 1)
                out[name] = (server * 1e3, statistics.median(lat) * 1e3)
            # Every table, by pages of 1,000 (ListAllTables).
            best = None
            for _ in range(5):
                t = time.perf_counter()
                token, seen = None, 0
                while True:
                    q = "/v1/table?limit=1000" + (f"&page_token={token}" if token else "")
                    page = json.loads(s.call("GET", q))
                    seen += len(page["tables"])
                    token = page.get("page_token")
                    if not token:
                        break
                dt = time.perf_counter() - t
                best = dt if best is None else min(best, dt)
            out[f"list all {seen} tables by pages of 1000"] = (None, best * 1e3)
            return out
        finally:
            s.stop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tables", default="10,1000,10000")
    p.add_argument("--bin", action="append")
    p.add_argument("--calls", type=int, default=300)
    a = p.parse_args()
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lancet-target"))
    bins = a.bin or [os.path.join(target, "release", "lancet")]
    for n in [int(x) for x in a.tables.split(",")]:
        for b in bins:
            res = measure(b, n, a.calls)
            print(f"\n{n} tables in {NAMESPACES} namespaces, {os.path.basename(os.path.dirname(b)) or b}/{os.path.basename(b)}")
            print(f"  {'call':<40} {'server ms':>10} {'client p50 ms':>14}")
            for name, (server, client) in res.items():
                print(f"  {name:<40} {'-' if server is None else f'{server:.3f}':>10} {client:>14.3f}")


if __name__ == "__main__":
    main()
