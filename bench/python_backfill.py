"""1M-row backfill of a Python UDF: Lancet (release server, CPython-in-Wasm) against native
CPython in-process (pylance's add_columns with the same function over the same rows), in one
run. Prints numbers, asserts nothing.

    bash scripts/venv.sh   # the test venv: pylance, pyarrow
    cargo build --release --bin lancet
    ~/.cache/lancet-venv/bin/python bench/python_backfill.py [--rows 1000000] [--runs 3]

LANCET_BIN names the server binary (default $CARGO_TARGET_DIR or ~/.cache/lancet-target,
release/lancet); the Python runner is found as `lancet serve` finds it.
"""
import argparse
import base64
import json
import os
import tempfile
import time
import urllib.request

import lance
import pyarrow as pa

import served
from served import KEY

SOURCE = "def triple(id):\n    return id * 3 + 1\n"


def triple(id):
    return id * 3 + 1


def table(rows):
    return pa.table({"id": pa.array(range(rows), pa.int64())})


def native(rows, root):
    """pylance's own add_columns, the UDF applied row by row in this process's CPython."""
    path = os.path.join(root, "native.lance")
    lance.write_dataset(table(rows), path, max_rows_per_file=rows)
    ds = lance.dataset(path)

    @lance.batch_udf(output_schema=pa.schema([pa.field("tripled", pa.int64())]))
    def udf(batch):
        return pa.record_batch([pa.array(list(map(triple, batch["id"].to_pylist())), pa.int64())],
                               ["tripled"])

    t = time.perf_counter()
    ds.add_columns(udf, read_columns=["id"])
    return time.perf_counter() - t


class Server:
    def __init__(self, binary, root):
        self.proc, self.base = served.start(binary, root)

    def post(self, path, body=None, data=None, ctype="application/json"):
        req = urllib.request.Request(
            self.base + path, data=data if data is not None else json.dumps(body or {}).encode(),
            method="POST", headers={"content-type": ctype, "authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def lancet(binary, rows, root, name):
    s = Server(binary, root)
    try:
        sink = pa.BufferOutputStream()
        t = table(rows)
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        s.post(f"/v1/table/{name}/create", data=sink.getvalue().to_pybytes(),
               ctype="application/vnd.apache.arrow.stream")
        s.post(f"/v1/table/{name}/add_columns", {"new_columns": [{"name": "tripled", "virtual_column": {
            "input_columns": ["id"], "udf": base64.b64encode(SOURCE.encode()).decode(),
            "udf_name": "triple", "image": "python:3.11",
            "outputs": [{"column": "tripled", "data_type": {"type": "int64"}, "nullable": True}]}}]})
        start = time.perf_counter()
        job = s.post(f"/v1/table/{name}/backfill_column", {"column": "tripled"})["job_id"]
        while True:
            d = s.post("/v1/jobs/describe", {"job_id": job})
            if d["job_state"] != "IN_PROGRESS":
                break
            time.sleep(0.005)
        elapsed = time.perf_counter() - start
        assert d["job_state"] == "DONE", d
        return elapsed
    finally:
        s.stop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lancet-target"))
    binary = os.environ.get("LANCET_BIN", os.path.join(target, "release", "lancet"))
    nat, lan = [], []
    with tempfile.TemporaryDirectory() as root:
        for run in range(a.runs):  # alternating, so a slow spell of the machine hits both
            nat.append(native(a.rows, os.path.join(root, f"n{run}")))
            lan.append(lancet(binary, a.rows, os.path.join(root, f"l{run}"), f"t{run}"))
    n, l = min(nat), min(lan)
    print(f"backfill of id * 3 + 1 over {a.rows} rows, best of {a.runs}:")
    print(f"  native CPython (pylance add_columns, in-process): {n:.2f} s  {a.rows / n:,.0f} rows/s")
    print(f"  Lancet backfill job (CPython in Wasm, over HTTP): {l:.2f} s  {a.rows / l:,.0f} rows/s")
    print(f"  Lancet / native rows/s: {n / l:.2f} (target >= 0.5)")


if __name__ == "__main__":
    main()
