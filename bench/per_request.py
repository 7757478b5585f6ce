"""Per-request cost over in-process lance (issue 29 item 2), in one run.

A 100k-row table loaded through Lancet in 40 chunks (40 fragments) with an IVF_PQ vector
index, an FTS index and a BTREE index on `category`; then, on the fresh table and again after
compaction (`optimize`), the same three reads through Lancet (HTTP, Arrow IPC answers, one
keep-alive urllib3 connection per client) and through pylance opened in this process on the
same files:

- vector: k=10 nearest to a stored row's vector, `id` only;
- fts: a full-text match, k=10, `id` only;
- count: `count_rows` with a predicate on the indexed `category`.

Printed: p50/p99 ms at 1 client (and Lancet minus in-process against the HTTP floor,
`GET /healthz` on the same client), and served throughput at 8 clients (threads; pylance
releases the GIL while it queries). Server-side time per route comes from `/metrics`, to split
what the server spends from what HTTP and decoding cost the client.

    python bench/per_request.py $CARGO_TARGET_DIR/release/lancet [--rows 100000] [--secs 5]
"""
import argparse
import json
import os
import statistics
import tempfile
import threading
import time

os.environ.setdefault("LANCE_LOG", "error")  # pylance warns on every FTS query otherwise
import lance  # noqa: E402
import numpy as np
import pyarrow as pa
import urllib3

import served

DIM = 32
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"]


def chunk(start, n):
    ids = np.arange(start, start + n, dtype=np.int64)
    rng = np.random.default_rng(start)
    vec = rng.standard_normal((n, DIM), dtype=np.float32)
    text = [f"{WORDS[i % 16]} {WORDS[(i // 16) % 16]} row {i}" for i in ids]
    return pa.table({
        "id": pa.array(ids),
        "category": pa.array((ids % 50).astype(np.int64)),
        "text": text,
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), DIM),
    })


def arrow(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


class Client:
    """One keep-alive connection."""

    def __init__(self, base):
        self.pool = urllib3.HTTPConnectionPool(base.split("//")[1].split(":")[0],
                                               int(base.rsplit(":", 1)[1]), maxsize=1)
        self.headers = {"authorization": f"Bearer {served.KEY}",
                        "accept": "application/vnd.apache.arrow.stream"}

    def post(self, path, body=None, data=None, ctype="application/json"):
        payload = data if data is not None else json.dumps(body or {}).encode()
        r = self.pool.request("POST", path, body=payload,
                              headers={**self.headers, "content-type": ctype})
        if r.status != 200:
            raise RuntimeError(f"{path}: {r.status} {r.data[:300]!r}")
        return r.data

    def get(self, path):
        return self.pool.request("GET", path, headers=self.headers).data


def lancet_reads(c, q, word):
    def vector():
        body = {"vector": q, "k": 10, "columns": ["id"], "nprobes": 8}
        return pa.ipc.open_stream(c.post("/v1/table/t/query", body)).read_all()

    def fts():
        body = {"full_text_query": {"string_query": {"query": word}}, "k": 10, "vector": {},
                "columns": ["id"]}
        return pa.ipc.open_stream(c.post("/v1/table/t/query", body)).read_all()

    def count():
        return json.loads(c.post("/v1/table/t/count_rows", {"predicate": "category = 7"}))

    return {"vector": vector, "fts": fts, "count": count}


def local_reads(ds, q, word):
    return {
        "vector": lambda: ds.to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 8},
                                      columns=["id"]),
        "fts": lambda: ds.to_table(full_text_query=word, columns=["id"], limit=10),
        "count": lambda: ds.count_rows(filter="category = 7"),
    }


def latency(fn, n):
    for _ in range(20):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    out.sort()
    return out[len(out) // 2], out[int(len(out) * 0.99)]


def throughput(make, clients, secs):
    done = [0] * clients
    stop = time.perf_counter() + secs

    def run(k):
        fn = make(k)
        while time.perf_counter() < stop:
            fn()
            done[k] += 1

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / secs


def server_ms(c):
    """route -> (sum seconds, count) of lancet_http_request_duration_seconds."""
    out = {}
    for line in c.get("/metrics").decode().splitlines():
        if line.startswith("lancet_http_request_duration_seconds_sum") or \
                line.startswith("lancet_http_request_duration_seconds_count"):
            name, value = line.rsplit(" ", 1)
            route = name.split('route="')[1].split('"')[0] if 'route="' in name else "?"
            kind = 0 if "_sum" in name else 1
            cur = out.setdefault(route, [0.0, 0])
            cur[kind] += float(value)
    return out


def measure(base, ds, label, n, secs):
    c = Client(base)
    q = chunk(1234, 1)["vec"][0].as_py()
    word = "charlie"
    floor = latency(lambda: c.get("/healthz"), n)
    print(f"\n== {label}: HTTP floor (GET /healthz, same client) p50 {floor[0]:.3f} ms")
    print(f"{'read':<8} {'lancet p50/p99':>16} {'in-proc p50/p99':>16} {'diff':>7} "
          f"{'diff-floor':>10} {'server':>7} {'lancet c=8/s':>13} {'in-proc c=8/s':>14} {'ratio':>6}")
    ours = lancet_reads(c, q, word)
    theirs = local_reads(ds, q, word)
    for read in ["vector", "fts", "count"]:
        before = server_ms(c)
        a = latency(ours[read], n)
        after = server_ms(c)
        route = "/v1/table/{id}/query" if read != "count" else "/v1/table/{id}/count_rows"
        s_sum = after.get(route, [0, 0])[0] - before.get(route, [0, 0])[0]
        s_cnt = after.get(route, [0, 0])[1] - before.get(route, [0, 0])[1]
        server = s_sum / s_cnt * 1e3 if s_cnt else float("nan")
        b = latency(theirs[read], n)
        ta = throughput(lambda k: lancet_reads(Client(base), q, word)[read], 8, secs)
        tb = throughput(lambda k: theirs[read], 8, secs)
        diff = a[0] - b[0]
        print(f"{read:<8} {a[0]:>7.3f}/{a[1]:<8.3f} {b[0]:>7.3f}/{b[1]:<8.3f} {diff:>7.3f} "
              f"{diff - floor[0]:>10.3f} {server:>7.3f} {ta:>13.0f} {tb:>14.0f} {ta / tb:>6.2f}")
    # Is the client the bottleneck at 8 clients? Its ceiling on the cheapest request:
    hz = throughput(lambda k: (lambda cc: (lambda: cc.get("/healthz")))(Client(base)), 8, secs)
    print(f"client ceiling: GET /healthz at 8 clients {hz:.0f}/s")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--secs", type=float, default=4)
    p.add_argument("-n", type=int, default=300)
    p.add_argument("--server-arg", action="append", default=[],
                   help="passed to `lancet serve` (repeatable), e.g. --server-arg=--max-running=4")
    a = p.parse_args()
    root = tempfile.mkdtemp(prefix="lancet-per-request-")
    proc, base = served.start(a.binary, root, *a.server_arg)
    try:
        c = Client(base)
        per = a.rows // 40
        c.post("/v1/table/t/create", data=arrow(chunk(0, per)), ctype="application/vnd.apache.arrow.stream")
        for k in range(1, 40):
            c.post("/v1/table/t/insert", data=arrow(chunk(k * per, per)),
                   ctype="application/vnd.apache.arrow.stream")
        c.post("/v1/table/t/create_index", {"column": "vec", "index_type": "IVF_PQ",
                                             "num_partitions": 16, "num_sub_vectors": 8})
        c.post("/v1/table/t/create_index", {"column": "text", "index_type": "FTS"})
        c.post("/v1/table/t/create_index", {"column": "category", "index_type": "BTREE"})
        location = json.loads(c.post("/v1/table/t/describe"))["location"]
        stats = json.loads(c.post("/v1/table/t/stats"))
        print(f"{a.rows} rows, {stats['fragment_stats']['num_fragments']} fragments, dim {DIM}; "
              f"{a.n} sequential requests per figure, {a.secs} s per throughput")
        measure(base, lance.dataset(location), "fresh (40 fragments)", a.n, a.secs)
        if os.environ.get("BENCH_FRESH_ONLY"):
            return
        c.post("/v1/table/t/optimize", {})
        deadline = time.time() + 300
        while json.loads(c.post("/v1/table/t/stats"))["fragment_stats"]["num_fragments"] > 1:
            if time.time() > deadline:
                raise RuntimeError("optimize did not compact")
            time.sleep(0.5)
        stats = json.loads(c.post("/v1/table/t/stats"))
        print(f"\nafter optimize: {stats['fragment_stats']['num_fragments']} fragment(s)")
        measure(base, lance.dataset(location), "compacted", a.n, a.secs)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
