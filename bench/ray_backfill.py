"""The same backfill on the default executor and on a local Ray cluster, in one run (issue 71):
a CPU-bound Python UDF (CPython in Wasm) over a local root, computed by the server's own nodes
(`cluster: "default"`, 2 tasks at once) and by Ray with 1 and with 2 worker nodes of one CPU
each (`ray start` processes on loopback, a head with no CPUs). Also the fixed cost of one Ray
task (a trivial UDF, one row per task), and the owner's stage + commit time per fragment (the
committer's bound). Prints numbers, asserts nothing.

    bash scripts/venv.sh   # the test venv: ray[default], pyarrow
    cargo build --release --bin lancet
    ~/.cache/lancet-venv/bin/python bench/ray_backfill.py [--rows 24000] [--work 40000]

LANCET_BIN names the server binary (default $CARGO_TARGET_DIR or ~/.cache/lancet-target,
release/lancet). Run it with nothing else busy: Ray's nodes and the server share the cores.
"""
import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pyarrow as pa

import served
from served import KEY

RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def source(work):
    return (f"def work(id):\n    s = 0\n    for i in range({work}):\n"
            f"        s = (s + i * id) % 1000003\n    return s\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ray:
    """A head and `workers` worker nodes of one CPU each."""

    def __init__(self, workers):
        self.tmp = tempfile.mkdtemp(prefix="lrb", dir="/tmp")
        self.log = open(os.path.join(self.tmp, "nodes.log"), "ab")
        self.port, dash = free_port(), free_port()
        self.dashboard = f"http://127.0.0.1:{dash}"
        env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
               "RAY_USAGE_STATS_ENABLED": "0"}
        common = ["--block", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
        self.procs = [subprocess.Popen(
            [RAY, "start", *common, "--head", "--port", str(self.port), "--num-cpus", "0",
             "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash), "--temp-dir", self.tmp],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)]
        # A worker started before the head answers gives up: wait for the head first.
        self.wait(1)
        # One at a time: two raylets of one address starting at once time out looking
        # each other up.
        for n in range(workers):
            self.procs.append(subprocess.Popen(
                [RAY, "start", *common, "--address", f"127.0.0.1:{self.port}", "--num-cpus", "1"],
                env=env, stdout=self.log, stderr=self.log, start_new_session=True))
            self.wait(n + 2)

    def wait(self, n):
        deadline = time.time() + 120
        while self.alive() != n:
            if time.time() > deadline:
                raise RuntimeError(f"{n} Ray nodes did not come up")
            time.sleep(0.5)

    def alive(self):
        try:
            with urllib.request.urlopen(f"{self.dashboard}/api/v0/nodes?limit=100") as r:
                nodes = json.loads(r.read())["data"]["result"]["result"]
        except (OSError, ValueError, KeyError):
            return -1
        return sum(1 for n in nodes if n["state"] == "ALIVE")

    def stop(self):
        for p in self.procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        subprocess.run(["pkill", "-9", "-f", self.tmp], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


class Server:
    def __init__(self, binary, root, clusters):
        self.proc, self.base = served.start(binary, root, "--clusters", clusters)

    def post(self, path, body=None, data=None, ctype="application/json"):
        req = urllib.request.Request(
            self.base + path, data=data if data is not None else json.dumps(body or {}).encode(),
            method="POST", headers={"content-type": ctype, "authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(req, timeout=900) as r:
            return r.read()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def backfill(server, name, rows, fragments, work, cluster, task_size):
    """Wall seconds of one backfill job, and the owner's stage+commit seconds per fragment."""
    per = rows // fragments
    for f in range(fragments):
        t = pa.table({"id": pa.array(range(f * per, (f + 1) * per), pa.int64())})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        server.post(f"/v1/table/{name}/{'create' if f == 0 else 'insert'}",
                    data=sink.getvalue().to_pybytes(), ctype="application/vnd.apache.arrow.stream")
    server.post(f"/v1/table/{name}/add_columns", {"new_columns": [{"name": "w", "virtual_column": {
        "input_columns": ["id"], "udf": base64.b64encode(source(work).encode()).decode(),
        "udf_name": "work", "image": "python:3.11",
        "outputs": [{"column": "w", "data_type": {"type": "int64"}, "nullable": True}]}}]})
    start = time.perf_counter()
    job = json.loads(server.post(f"/v1/table/{name}/backfill_column", {
        "column": "w", "cluster": cluster, "task_size": task_size, "concurrency": 2,
        "commit_granularity": 1}))["job_id"]
    while True:
        d = json.loads(server.post("/v1/jobs/describe", {"job_id": job}))
        if d["job_state"] != "IN_PROGRESS":
            break
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    if d["job_state"] != "DONE":
        raise RuntimeError(d)
    return elapsed, owner_seconds(server, job)


def owner_seconds(server, job):
    """Seconds from each fragment's `staged`'s start (its last task_complete) to its commit."""
    body = server.post("/v1/jobs/query_events", {"job_id": job})
    events = pa.ipc.open_stream(pa.BufferReader(body)).read_all().to_pylist()
    time_key = next(k for k in ("at_ms", "timestamp", "time") if k in events[0])
    last_task, spans = {}, []

    def ms(e):
        v = e[time_key]
        return v.timestamp() * 1000 if hasattr(v, "timestamp") else v

    for e in events:
        entity = e.get("claim_entity") or ""
        if e["state"] == "task_complete":
            last_task[entity.split(" rows")[0]] = ms(e)
        elif e["state"] == "claim_complete" and entity in last_task:
            spans.append((ms(e) - last_task[entity]) / 1000)
    return sum(spans) / len(spans) if spans else float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=24_000)
    p.add_argument("--fragments", type=int, default=8)
    p.add_argument("--tasks", type=int, default=16, help="tasks per job")
    p.add_argument("--work", type=int, default=40_000, help="loop iterations per row")
    a = p.parse_args()
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lancet-target"))
    binary = os.path.abspath(os.environ.get("LANCET_BIN", os.path.join(target, "release", "lancet")))
    task_size = a.rows // a.tasks
    results = {}
    with tempfile.TemporaryDirectory() as d:
        for workers in (0, 2, 1):  # 0: the default executor (no Ray running)
            ray = Ray(workers) if workers else None
            clusters = os.path.join(d, f"clusters{workers}.toml")
            with open(clusters, "w") as f:
                if ray:
                    f.write(f'[ray.local]\naddress = "{ray.dashboard}"\npython = "{sys.executable}"\n'
                            f'lancet = "{binary}"\nnum_cpus = 1\n')
            server = Server(binary, os.path.join(d, f"root{workers}"), clusters)
            try:
                cluster = "local" if ray else "default"
                results[workers] = backfill(server, "t", a.rows, a.fragments, a.work, cluster, task_size)
                if ray and workers == 1:
                    # Fixed costs, with a trivial UDF on one node: a job of one one-row task
                    # (submission, driver start, listing, one task), and of 17 (16 more tasks).
                    one, _ = backfill(server, "one", 1, 1, 1, cluster, 1)
                    many, _ = backfill(server, "many", 17, 17, 1, cluster, 1)
                    results["fixed"] = ((many - one) / 16, one)
            finally:
                server.stop()
                if ray:
                    ray.stop()
    base, _ = results[0]
    print(f"backfill of a CPU-bound Python UDF ({a.work} loop iterations a row) over {a.rows} rows, "
          f"{a.fragments} fragments, {a.tasks} tasks; local root, one run each:")
    print(f"  default executor (the server, 2 tasks at once): {base:7.1f} s  {a.rows / base:8.1f} rows/s")
    for workers in (1, 2):
        wall, _ = results[workers]
        print(f"  Ray, {workers} worker node(s) of 1 CPU:              {wall:7.1f} s  "
              f"{a.rows / wall:8.1f} rows/s  ({wall / base:.2f}x the default's time)")
    print(f"  Ray with 2 nodes vs 1: {results[1][0] / results[2][0]:.2f}x the rows/s")
    per_task, one = results["fixed"]
    print(f"  fixed cost of one more Ray task (lancet process start, runtime load, checkpoint; "
          f"1 row): {per_task:.2f} s")
    print(f"  a job of a single one-row task on Ray (submission, driver start, listing, the task, "
          f"commit): {one:.2f} s")
    print(f"  owner's stage + commit per fragment on Ray (last task_complete to commit): "
          f"{results[2][1]:.3f} s")


if __name__ == "__main__":
    main()
