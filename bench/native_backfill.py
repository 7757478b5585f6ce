"""1M-row backfill of a pyarrow batch UDF in the native Python tier: Lancet's backfill job
(its native column computed by sandboxed CPython workers) against the same function run
in-process by pylance's add_columns over the same rows, in one run; and, given a second
binary, that binary's backfill too (before/after a change). Prints numbers, asserts nothing
but the values.

    bash scripts/venv.sh   # the test venv: pylance, pyarrow
    cargo build --release --bin lancet
    ~/.cache/lancet-venv/bin/python bench/native_backfill.py [--rows 1000000] [--runs 3]

LANCET_BIN names the server binary (default $CARGO_TARGET_DIR or ~/.cache/lancet-target,
release/lancet); LANCET_BIN_BEFORE, if set, a second one measured alternately with it.
Needs bwrap and /usr/bin/python3 (scripts/setup.sh clients installs both).
"""
import argparse
import base64
import hashlib
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request

import lance
import pyarrow as pa
import pyarrow.compute as pc

import served
from served import KEY

FUNCTIONS = {
    # ~5-10 ns a row in-process: a process boundary's fixed cost per call shows.
    "arithmetic": "import pyarrow.compute as pc\ndef f(x):\n    return pc.add(pc.multiply(x, 2), 1)\n",
    # ~70 ns a row: string work, as most real batch UDFs do more than arithmetic.
    "string": "import pyarrow as pa\nimport pyarrow.compute as pc\ndef f(x):\n    "
              "s = pc.utf8_upper(pc.binary_join_element_wise(pc.cast(x, pa.string()), 'row-', '-'))\n    "
              "return pc.cast(pc.add(pc.utf8_length(s), pc.count_substring(s, '1')), pa.int64())\n",
}
BATCH = 16_384  # a backfill's read batches and largest calls (max_checkpoint_size)


def function(source):
    scope = {}
    exec(source, scope)
    return scope["f"]


def table(rows):
    return pa.table({"x": pa.array(range(rows), pa.int64())})


def in_process(rows, root, source):
    """pylance's own add_columns, the function applied per batch in this process."""
    f = function(source)
    path = os.path.join(root, "inproc.lance")
    lance.write_dataset(table(rows), path, max_rows_per_file=rows)
    ds = lance.dataset(path)

    @lance.batch_udf(output_schema=pa.schema([pa.field("y", pa.int64())]))
    def udf(batch):
        return pa.record_batch([f(batch["x"])], ["y"])

    t = time.perf_counter()
    ds.add_columns(udf, read_columns=["x"], batch_size=BATCH)
    return time.perf_counter() - t


def post(base, path, body=None, data=None, ctype="application/json"):
    req = urllib.request.Request(
        base + path, data=data if data is not None else json.dumps(body or {}).encode(),
        method="POST", headers={"content-type": ctype, "authorization": f"Bearer {KEY}"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{path}: {e.code} {e.read().decode()}") from None


def backfill(base, name, rows, source):
    """Seconds of a backfill job of a native column `y = f(x)` over a new table of `rows`."""
    sink = pa.BufferOutputStream()
    t = table(rows)
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    post(base, f"/v1/table/{name}/create", data=sink.getvalue().to_pybytes(),
         ctype="application/vnd.apache.arrow.stream")
    manifest = json.dumps({"mode": "batch"})
    post(base, f"/v1/table/{name}/add_columns", {"new_columns": [{"name": "y", "virtual_column": {
        "input_columns": ["x"], "udf": base64.b64encode(source.encode()).decode(),
        "udf_name": "f", "udf_backend": "python-native", "image": "python:3.11-slim",
        "manifest": manifest, "manifest_checksum": hashlib.sha256(manifest.encode()).hexdigest(),
        "outputs": [{"column": "y", "data_type": {"type": "int64"},
                                           "nullable": True}]}}]})
    start = time.perf_counter()
    job = post(base, f"/v1/table/{name}/backfill_column", {"column": "y"})["job_id"]
    while True:
        d = post(base, "/v1/jobs/describe", {"job_id": job})
        if d["job_state"] != "IN_PROGRESS":
            break
        time.sleep(0.005)
    elapsed = time.perf_counter() - start
    assert d["job_state"] == "DONE", d
    return elapsed


def check(base, name, source):
    """The column's values are the function's (read from where the server says the table is)."""
    location = post(base, f"/v1/table/{name}/describe")["location"]
    got = lance.dataset(location).to_table(columns=["x", "y"])
    want = function(source)(got["x"].combine_chunks())
    assert got["y"].combine_chunks().equals(want.cast(pa.int64())), name


def lancet(binary, root, envs, rows, source, name):
    os.makedirs(os.path.join(root, "_auth"), exist_ok=True)
    with open(os.path.join(root, "_auth", "auth.toml"), "w") as f:
        f.write("[tenants.default]\nnative_python = true\n")
    proc, base = served.start(binary, root, "--native-python", "/usr/bin/python3",
                              "--native-installer", sys.executable, "--native-dir", envs)
    try:
        backfill(base, f"{name}_warm", 1000, source)  # environment, worker start
        took = backfill(base, name, rows, source)
        check(base, name, source)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return took


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--functions", default=",".join(FUNCTIONS))
    a = p.parse_args()
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lancet-target"))
    binaries = {"after": os.environ.get("LANCET_BIN", os.path.join(target, "release", "lancet"))}
    if os.environ.get("LANCET_BIN_BEFORE"):
        binaries["before"] = os.environ["LANCET_BIN_BEFORE"]
    with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as envs:
        os.chmod(envs, 0o755)  # workers may run as uids of their own
        for fname in a.functions.split(","):
            source = FUNCTIONS[fname]
            times = {"in-process": [], **{b: [] for b in binaries}}
            for run in range(a.runs):  # alternating, so a slow spell of the machine hits all
                times["in-process"].append(in_process(a.rows, os.path.join(root, f"p{fname}{run}"), source))
                for label, binary in binaries.items():
                    d = os.path.join(root, f"{label}{fname}{run}")
                    times[label].append(lancet(binary, d, envs, a.rows, source, f"t{run}"))
            base = min(times["in-process"])
            print(f"{fname} pyarrow batch function over {a.rows:,} rows, best of {a.runs}:")
            print(f"  in-process (pylance add_columns, batch {BATCH}): {base:.2f} s  {a.rows / base:,.0f} rows/s")
            for label in binaries:
                t = min(times[label])
                print(f"  Lancet backfill job, native tier ({label}): {t:.2f} s  {a.rows / t:,.0f} rows/s"
                      f"  = {base / t:.2f}x the in-process throughput")


if __name__ == "__main__":
    main()
