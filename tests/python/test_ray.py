"""Backfills scheduled by Ray (docs/ray.md): a real Ray cluster from PyPI (a head and two
worker nodes, each its own `ray start` process tree on loopback), Lancet on an S3 root (moto on
loopback), and backfills whose `cluster` names the Ray cluster: a Wasm UDF, a native Python
(numpy) UDF and a model column, values checked row by row and the job's events naming the Ray
nodes that ran each task. Faults: a worker node killed mid-job (its tasks run again on the
other; every row written once), the Lancet node owning the job SIGKILLed mid-job (a restart
attaches to the same Ray job and finishes it), a task over its time limit, an unreachable head,
and clusters a request may not use.

Each Ray node runs in a network namespace of its own, made by the test (`ip netns`, veth pairs
on a bridge, addresses of a private /24 that exists only on those links), so everything
between Lancet, Ray's head and its workers, and the S3 endpoint crosses a network. Where the
machine does not let the test make namespaces (no CAP_NET_ADMIN), the nodes share loopback
instead, and the test says so.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import boto3
import geneva
import geneva.cloudpickle
import lancedb
import numpy as np
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client import ApiClient, Configuration
from lance_namespace_urllib3_client.api import TableApi
from lance_namespace_urllib3_client.exceptions import ApiException
from lance_namespace_urllib3_client.models import (
    AlterTableAddColumnsRequest, AlterTableBackfillColumnsRequest,
)

from conftest import Lancet
from test_jobs import virtual_column
from test_object_store import new_root
from test_model_columns import cosines, model_column
from test_models import ONNX, ORT, TOKENIZER, call, manifest, read, upload
from test_native_python import PYTHON, native_column
from test_python_udf import SLUG, python_column, slug

# Geneva's UDFs of this module travel by value, as from a notebook.
geneva.cloudpickle.register_pickle_by_value(sys.modules[__name__])

# One Ray cluster for the module, whichever pytest-xdist worker runs it (run.sh: loadgroup).
pytestmark = pytest.mark.xdist_group("ray")

BIN = os.path.dirname(sys.executable)
RAY = os.path.join(BIN, "ray")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def descendants(pid):
    """Every process under `pid`, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Network:
    """A bridge in this namespace (the host: Lancet and the S3 endpoint) and a network
    namespace per Ray node, each joined to the bridge by a veth pair; or, where namespaces
    cannot be made, loopback for all."""

    def __init__(self):
        self.tag = uuid.uuid4().hex[:5]  # interface names must fit in 15 characters
        self.subnet = f"10.213.{int(self.tag[:2], 16)}"
        self.bridge = f"lr{self.tag}br"
        self.spaces = []
        self.made = 0  # names and addresses are never reused (a deleted veth goes lazily)
        try:
            for cmd in (["link", "add", self.bridge, "type", "bridge"],
                        ["addr", "add", f"{self.subnet}.1/24", "dev", self.bridge],
                        ["link", "set", self.bridge, "up"]):
                ip(*cmd)
            self.host = f"{self.subnet}.1"
            # A first node, made and removed: where the bridge works but namespaces or veth
            # pairs do not, fall back before any Ray node starts.
            self.node()
            ip("netns", "del", self.spaces.pop())
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"no network namespaces here ({e}): the Ray nodes share loopback")
            self.close()
            self.bridge = None
            self.host = "127.0.0.1"

    def node(self):
        """A new namespace joined to the bridge: its address and the command prefix that runs
        a program in it (loopback and none without namespaces)."""
        if self.bridge is None:
            return "127.0.0.1", []
        self.made += 1
        n = self.made + 1
        ns, here, there = f"lr{self.tag}n{n}", f"lr{self.tag}h{n}", f"lr{self.tag}p{n}"
        ip("netns", "add", ns)
        self.spaces.append(ns)
        ip("link", "add", here, "type", "veth", "peer", "name", there)
        ip("link", "set", there, "netns", ns)
        ip("link", "set", here, "master", self.bridge, "up")
        ip("-n", ns, "addr", "add", f"{self.subnet}.{n}/24", "dev", there)
        ip("-n", ns, "link", "set", there, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        return f"{self.subnet}.{n}", ["ip", "netns", "exec", ns]

    def close(self):
        for ns in self.spaces:
            subprocess.run(["ip", "netns", "del", ns], check=False)
        if self.bridge:
            subprocess.run(["ip", "link", "del", self.bridge], check=False,
                           stderr=subprocess.DEVNULL)


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)


class RayCluster:
    """`ray start --block` processes, each in a namespace of `net`: a head (no CPUs: it
    schedules, runs nothing) and worker nodes of one CPU each."""

    def __init__(self, env, net):
        self.net = net
        # Ray puts Unix sockets under its temp dir: keep the path short.
        self.tmp = tempfile.mkdtemp(prefix="lr", dir="/tmp")
        self.log = open(os.path.join(self.tmp, "nodes.log"), "ab")
        self.env = {**os.environ, **env, "PATH": BIN + os.pathsep + os.environ["PATH"],
                    "RAY_USAGE_STATS_ENABLED": "0"}
        address, prefix = net.node()
        self.port = free_port()
        dashboard_port = free_port()
        self.head_address = f"{address}:{self.port}"
        self.dashboard = f"http://{address}:{dashboard_port}"
        self.head = self._start(prefix, address, [
            "--head", "--port", str(self.port), "--num-cpus", "0", "--dashboard-host", address,
            "--dashboard-port", str(dashboard_port), "--include-dashboard", "true",
            "--temp-dir", self.tmp])
        # A worker started before the head answers gives up: wait for the head first.
        self.wait_nodes(1)
        self.workers = {}
        for name in ("a", "b"):
            self.add_worker(name)

    def _start(self, prefix, address, args):
        return subprocess.Popen([*prefix, RAY, "start", "--block", "--node-ip-address", address,
                                 "--disable-usage-stats", *args],
                                env=self.env, stdout=self.log, stderr=self.log,
                                start_new_session=True)

    def add_worker(self, name):
        address, prefix = self.net.node()
        self.workers[name] = self._start(prefix, address, [
            "--address", self.head_address, "--num-cpus", "1",
            "--resources", json.dumps({f"node_{name}": 1})])
        self.wait_nodes(1 + len(self.workers))

    def alive(self):
        try:
            nodes = get_json(f"{self.dashboard}/api/v0/nodes?limit=100")["data"]["result"]["result"]
        except (OSError, ValueError, KeyError):
            return -1
        return sum(1 for n in nodes if n.get("state") == "ALIVE")

    def wait_nodes(self, n, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.alive() == n:
                return
            time.sleep(0.5)
        raise AssertionError(f"Ray has {self.alive()} live nodes, not {n}; see {self.tmp}/nodes.log")

    def node_id(self, name):
        """The Ray node id of worker `name` (its custom resource says which it is)."""
        nodes = get_json(f"{self.dashboard}/api/v0/nodes?limit=100&detail=true")["data"]["result"]["result"]
        return next(n["node_id"] for n in nodes
                    if n["state"] == "ALIVE" and f"node_{name}" in n.get("resources_total", {}))

    def tasks(self, job_id):
        """Every attempt of the Ray tasks of a Lancet job (Ray's state API)."""
        tasks = get_json(f"{self.dashboard}/api/v0/tasks?limit=10000&detail=true")["data"]["result"]["result"]
        return [t for t in tasks if t["name"].startswith(f"lancet-{job_id}-")]

    def kill(self, name):
        """SIGKILL worker node `name` as a machine crash would: `ray start`, its raylet, and
        every process under them (Ray's workers run in process groups of their own, and the
        task processes under them in sessions of their own)."""
        proc = self.workers.pop(name)
        for pid in [proc.pid, *descendants(proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()

    def stop(self):
        for proc in [*self.workers.values(), self.head]:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def net():
    network = Network()
    try:
        yield network
    finally:
        network.close()


@pytest.fixture(scope="module")
def s3(net):
    """moto's S3 on the host's side of the bridge, where Lancet and every Ray node reach it."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "..", "s3", "moto_server.py"),
         "-H", net.host, "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection((net.host, port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    cache = tempfile.mkdtemp(prefix="lancet-ray-cache-")
    machine = os.environ.get("LANCET_CACHE_DIR", os.path.expanduser("~/.cache/lancet"))
    os.makedirs(os.path.join(machine, "python"), exist_ok=True)
    os.symlink(os.path.join(machine, "python"), os.path.join(cache, "python"))
    try:
        yield {"AWS_ENDPOINT": f"http://{net.host}:{port}", "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": "lancet-test", "AWS_SECRET_ACCESS_KEY": "lancet-test-secret",
               "AWS_REGION": "us-east-1", "LANCET_CACHE_DIR": cache}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_env(s3, net):
    with tempfile.TemporaryDirectory() as shared:
        # The native tier's environments, and the test venv's packages for Geneva's pickled
        # UDFs (as test_geneva_udfs.py: hard links where the file system allows, else a copy),
        # readable by the sandbox's uids.
        os.chmod(shared, 0o755)
        site = os.path.join(shared, "site")
        if subprocess.run(["cp", "-al", sysconfig.get_paths()["purelib"], site]).returncode != 0:
            shutil.copytree(sysconfig.get_paths()["purelib"], site)
        cluster = RayCluster(s3, net)
        try:
            yield cluster, shared
        finally:
            cluster.stop()


def clusters_file(cluster, shared, path):
    lancet = os.path.abspath(os.environ.get("LANCET_BIN", shutil.which("lancet") or "lancet"))
    native = ["--onnxruntime", ORT, "--native-python", PYTHON, "--native-installer", sys.executable,
              "--native-dir", os.path.join(shared, "envs"), "--native-site", os.path.join(shared, "site")]
    if os.environ.get("LANCET_PACKAGE_INDEX"):
        native += ["--package-index", os.environ["LANCET_PACKAGE_INDEX"]]
    common = {"address": cluster.dashboard, "python": sys.executable, "lancet": lancet,
              "args": native, "num_cpus": 1, "max_retries": 3}
    clusters = {
        "workers": common,
        "tight": {**common, "task_timeout": "2s", "max_retries": 0},
        "small": {**common, "memory_mb": 800, "max_retries": 0},
        "fragile": {**common, "unreachable_after": "3s"},
        "down": {**common, "address": f"http://127.0.0.1:{free_port()}", "unreachable_after": "2s"},
        "elsewhere": {**common, "tenants": ["someone-else"]},
    }
    lines = []
    for name, c in clusters.items():
        lines.append(f"[ray.{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in c.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return native


@pytest.fixture(scope="module")
def lancet_on_ray(ray_env, s3):
    cluster, shared = ray_env
    root = new_root(s3)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "clusters.toml")
        native = clusters_file(cluster, shared, path)
        # The native tier's tenant settings live in the root's auth file (an object here).
        bucket, prefix = root[len("s3://"):].split("/", 1)
        boto3.client("s3", endpoint_url=s3["AWS_ENDPOINT"], region_name=s3["AWS_REGION"],
                     aws_access_key_id=s3["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=s3["AWS_SECRET_ACCESS_KEY"]).put_object(
            Bucket=bucket, Key=f"{prefix}/_auth/auth.toml",
            Body=b"[tenants.default]\nnative_python = true\n")
        # Geneva reads tables straight from the store with the storage options it is vended.
        args = ["--clusters", path, "--vend-storage-options", "true", *native]
        env = {**s3, "LANCET_NODE_ID": "owner"}
        server = Lancet(root, args=args, env=env)
        server.restart = lambda: Lancet(root, args=args, env=env)
        server.root, server.env = root, env
        try:
            server.post("/v1/namespace/test/create")
            upload(server, read(ONNX))
            upload(server, read(TOKENIZER))
            status, answer = call(server, "/v1/model/minilm/create", manifest())
            assert status == 200, answer
            yield server, cluster
        finally:
            server.stop()


def api(server):
    return TableApi(ApiClient(Configuration(host=server.base, access_token=server.key)))


def backfill(server, table, column, cluster, **options):
    req = AlterTableBackfillColumnsRequest(column=column, cluster=cluster, **options)
    return api(server).alter_table_backfill_columns(f"test${table}", req).job_id


def db(server):
    return lancedb.connect("db://test", api_key=server.key, host_override=server.base,
                           region="us-east-1")


def wait(server, job_id, timeout=300):
    """The job once it ended (lancedb's Job), whether it succeeded or not."""
    job = db(server).open_job(job_id)
    deadline = time.time() + timeout
    while job.status() not in ("finished", "failed", "cancelled"):
        assert time.time() < deadline, f"job {job_id} still running"
        time.sleep(0.5)
        job = db(server).open_job(job_id)
    return job


def events(server, job_id):
    """The job's events (lancedb's Job.events), as dicts."""
    return db(server).open_job(job_id).events().to_pylist()


def table_rows(server, name, columns):
    return db(server).open_table(name).search().select(columns).limit(10_000).to_arrow().to_pylist()


def fragments(server, name, n, per):
    """`test$name` with `n` fragments of `per` rows (ids 0..n*per)."""
    for f in range(n):
        ids = list(range(f * per, (f + 1) * per))
        data = pa.table({"id": ids, "text": [f"Row {i}" for i in ids]})
        (server.create_table if f == 0 else server.insert)(f"test${name}", data)


# `2 * id`, a quarter of a second per row: slow enough to kill things mid-task. (The Wasm
# `slow_double`'s spin loop is folded away by the compiler: not slow at all.)
SLOW = """
import time
import pyarrow.compute as pc

def double(x):
    time.sleep(0.25 * len(x))
    return pc.multiply(x, 2)
"""


def slow_column(server, table):
    col = native_column("dbl", SLOW, "double", {"type": "int64"}, ["id"], manifest={"mode": "batch"})
    api(server).alter_table_add_columns(f"test${table}", AlterTableAddColumnsRequest(new_columns=[col]))


def slow_job(server, table, fragment_count, cluster="workers"):
    """A backfill of `slow_column` over `fragment_count` fragments of 8 rows, one task each,
    once its Ray job is submitted."""
    fragments(server, table, fragment_count, 8)
    slow_column(server, table)
    job_id = backfill(server, table, "dbl", cluster, task_size=8, checkpoint_size=2,
                      max_checkpoint_size=2)
    until("submitted", lambda: any(e["state"] == "ray_submitted" for e in events(server, job_id)))
    return job_id


def ray_nodes(server, job_id):
    """The Ray nodes the job's task_complete events name."""
    return {e["emitted_by"] for e in events(server, job_id)
            if e["state"] == "task_complete" and e["emitted_by"].startswith("ray node ")}


def test_a_python_in_wasm_backfill_runs_on_ray(lancet_on_ray):
    server, _ = lancet_on_ray
    fragments(server, "p", 2, 30)
    server.post("/v1/table/test$p/add_columns", {"new_columns": [
        {"name": "slug", "virtual_column": python_column(SLUG, "slug", ["text"])}]})
    done = wait(server, backfill(server, "p", "slug", "workers", task_size=15))
    assert done.status() == "finished", done.failure
    got = sorted((r["id"], r["slug"]) for r in table_rows(server, "p", ["id", "text", "slug"]))
    assert got == [(i, slug(f"Row {i}")) for i in range(60)]
    assert ray_nodes(server, done.id)


@geneva.udf(data_type=pa.int64())
def tripled(id: int) -> int:
    return id * 3


def test_geneva_backfills_its_udf_on_ray(lancet_on_ray, s3, monkeypatch):
    """Geneva's remote mode names the cluster in its own `backfill(..., cluster=...)`."""
    server, _ = lancet_on_ray
    # Geneva also reads the table straight from the store: moto's endpoint and credentials.
    for k, v in s3.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    fragments(server, "g", 2, 10)
    db = geneva.connect("db://test", api_key=server.key, host_override=server.base)
    try:
        t = db.open_table("g")
        t.add_columns({"tripled": tripled})
        job = t.backfill("tripled", cluster="workers", timeout=300)
        assert job.status == "DONE"
    finally:
        db.close()
    got = {r["id"]: r["tripled"] for r in table_rows(server, "g", ["id", "tripled"])}
    assert got == {i: 3 * i for i in range(20)}
    done = [e for e in events(server, job.job_id) if e["state"] == "ray_submitted"]
    assert done, events(server, job.job_id)


def test_a_wasm_backfill_runs_on_ray_and_is_committed_here(lancet_on_ray):
    server, _ = lancet_on_ray
    fragments(server, "w", 4, 25)
    server.post("/v1/table/test$w/add_columns", {"new_columns": [
        {"name": "slug", "virtual_column": virtual_column("slugify", "slugify", ["text"])}]})
    job_id = backfill(server, "w", "slug", "workers", task_size=10)
    done = wait(server, job_id)
    assert done.status() == "finished", done.failure
    assert done.result["rows_written"] == 100
    got = sorted((r["id"], r["slug"]) for r in table_rows(server, "w", ["id", "slug"]))
    assert got == [(i, f"row-{i}") for i in range(100)]
    states = [e["state"] for e in events(server, job_id)]
    assert "ray_submitted" in states
    # 4 fragments of 25 rows in tasks of 10: 12 tasks, each computed on a Ray worker node.
    completed = [e for e in events(server, job_id) if e["state"] == "task_complete"]
    assert len(completed) == 12 and all(e["emitted_by"].startswith("ray node ") for e in completed)
    assert sum(e["rows_processed"] for e in completed) == 100


def test_a_native_numpy_udf_and_a_model_column_run_on_ray(lancet_on_ray):
    server, _ = lancet_on_ray
    fragments(server, "n", 2, 20)
    source = ("import numpy as np\nimport pyarrow as pa\n"
              "def root(x):\n    v = x.to_numpy(zero_copy_only=False).astype('float64')\n"
              "    return pa.array(np.sqrt(v + 1.0))\n")
    col = native_column("r", source, "root", {"type": "double"}, ["id"],
                        manifest={"pip": ["numpy"], "mode": "batch"})
    api(server).alter_table_add_columns("test$n", AlterTableAddColumnsRequest(new_columns=[col]))
    job_id = backfill(server, "n", "r", "workers", task_size=10)
    done = wait(server, job_id, timeout=600)
    assert done.status() == "finished", done.failure
    got = {r["id"]: r["r"] for r in table_rows(server, "n", ["id", "r"])}
    assert sorted(got) == list(range(40))
    assert all(abs(got[i] - np.sqrt(i + 1.0)) < 1e-12 for i in got), got
    assert ray_nodes(server, job_id)

    # The model column: every task calls the model on the Ray node that runs it.
    api(server).alter_table_add_columns("test$n", AlterTableAddColumnsRequest(
        new_columns=[model_column("vec")]))
    job_id = backfill(server, "n", "vec", "workers", task_size=20)
    done = wait(server, job_id, timeout=600)
    assert done.status() == "finished", done.failure
    got = {r["id"]: r["vec"] for r in table_rows(server, "n", ["id", "text", "vec"])}
    c = cosines([got[i] for i in range(40)], [f"Row {i}" for i in range(40)])
    assert c.min() >= 0.9999, c
    assert ray_nodes(server, job_id)


def test_a_worker_node_killed_mid_job_loses_nothing(lancet_on_ray):
    server, cluster = lancet_on_ray
    job_id = slow_job(server, "k", 6)
    # Kill worker node a (its raylet, workers and their task processes) while it computes a
    # task of the job.
    node_a = cluster.node_id("a")
    deadline = time.time() + 120
    while not [t for t in cluster.tasks(job_id) if t["state"] == "RUNNING" and t["node_id"] == node_a
               and t["name"] != "open_tasks"]:
        assert time.time() < deadline, cluster.tasks(job_id)
        time.sleep(0.1)
    cluster.kill("a")
    try:
        done = wait(server, job_id)
        assert done.status() == "finished", done.failure
        got = sorted((r["id"], r["dbl"]) for r in table_rows(server, "k", ["id", "dbl"]))
        assert got == [(i, 2 * i) for i in range(48)]  # every row once, with its value
        assert done.result["rows_written"] == 48
        # Ray ran what node a was computing again, on another node.
        retried = [t for t in cluster.tasks(job_id) if t["attempt_number"] > 0]
        assert retried and all(t["node_id"] != node_a for t in retried), cluster.tasks(job_id)
    finally:
        cluster.add_worker("a2")


def test_the_owner_killed_mid_job_reattaches_to_the_ray_job(lancet_on_ray):
    server, _ = lancet_on_ray
    job_id = slow_job(server, "o", 4)
    server.proc.kill()
    server.proc.wait()
    again = server.restart()
    try:
        done = wait(again, job_id)
        assert done.status() == "finished", done.failure
        states = [e["state"] for e in events(again, job_id)]
        assert states.count("ray_submitted") == 1 and "ray_attached" in states, states
        got = sorted((r["id"], r["dbl"]) for r in table_rows(again, "o", ["id", "dbl"]))
        assert got == [(i, 2 * i) for i in range(32)]
    finally:
        # The module's other tests use `server`: point it at the new process.
        server.proc, server.base = again.proc, again.base


def until(what, check, timeout=120):
    """Wait for `check()`; on timeout fail with `what` (called, when it is a function, to
    describe the state then)."""
    deadline = time.time() + timeout
    while not (found := check()):
        assert time.time() < deadline, what() if callable(what) else what
        time.sleep(0.2)
    return found


def ray_status(cluster, submission_id):
    try:
        return get_json(f"{cluster.dashboard}/api/jobs/{submission_id}")["status"]
    except urllib.error.HTTPError as e:
        return e.code


def test_pause_resume_and_cancel_follow_the_ray_job(lancet_on_ray):
    server, cluster = lancet_on_ray
    d = db(server)
    # Eight tasks of ~2 s on two nodes: the pause lands well before the last one ends.
    job_id = slow_job(server, "c", 8)

    def state():
        return (d.open_job(job_id).status(), ray_status(cluster, f"lancet-{job_id}"),
                ray_status(cluster, f"lancet-{job_id}-2"),
                [(e["state"], e["emitted_by"][:20]) for e in events(server, job_id)])

    # A pause stops the Ray job where it stands; the resumed job is the next generation.
    assert d.pause_job(job_id) == "pausing", state()
    until(state, lambda: d.open_job(job_id).status() == "PAUSED")
    until(state, lambda: ray_status(cluster, f"lancet-{job_id}") == "STOPPED")
    assert d.resume_job(job_id) == "resumed"
    done = wait(server, job_id)
    assert done.status() == "finished", done.failure
    # The job is done once the checkpoints are committed; the driver exits just after.
    until(state, lambda: ray_status(cluster, f"lancet-{job_id}-2") == "SUCCEEDED")
    got = sorted((r["id"], r["dbl"]) for r in table_rows(server, "c", ["id", "dbl"]))
    assert got == [(i, 2 * i) for i in range(64)]
    # A cancel stops the Ray job too.
    job_id = slow_job(server, "c2", 4)
    # `lancet jobs run-task` takes its range from a command line: one outside the plan is
    # refused, naming it, and computes nothing.
    for bad, says in [(["--fragment", "999", "--start", "0", "--end", "8"], "fragment 999 is not in"),
                      (["--fragment", "0", "--start", "0", "--end", "9999"], "not a range of fragment 0")]:
        out = subprocess.run([os.environ.get("LANCET_BIN", "lancet"), "jobs", "run-task", job_id,
                              *bad, "--data", server.root], capture_output=True, text=True,
                             env={**os.environ, **server.env})
        assert out.returncode == 1 and says in out.stderr, out.stderr
    d.cancel_job(job_id)
    until("cancelled", lambda: d.open_job(job_id).status() == "cancelled")
    until("Ray job stopped", lambda: ray_status(cluster, f"lancet-{job_id}") == "STOPPED")


def test_limits_and_refusals_name_the_task_and_the_cluster(lancet_on_ray):
    server, _ = lancet_on_ray
    fragments(server, "e", 1, 16)
    slow_column(server, "e")
    # A task over the cluster's time limit (2 s; it sleeps 4): the job fails naming the task
    # and the limit.
    failed = wait(server, backfill(server, "e", "dbl", "tight", task_size=16))
    assert failed.status() == "failed"
    why = failed.failure.message
    assert "task fragment" in why and "rows 0..16" in why and "time limit of 2 s" in why, why
    # A task whose processes hold more than the cluster's 800 MiB (its UDF, in the native
    # tier's sandboxed worker, a process of its own, fills 1 GiB): the job fails naming it.
    hog = ("import time\nimport pyarrow.compute as pc\n"
           "def hog(x):\n    b = bytearray(1) * (1 << 30)\n    time.sleep(3)\n"
           "    return pc.multiply(x, len(b) >> 30)\n")
    api(server).alter_table_add_columns("test$e", AlterTableAddColumnsRequest(new_columns=[
        native_column("hog", hog, "hog", {"type": "int64"}, ["id"], manifest={"mode": "batch"})]))
    failed = wait(server, backfill(server, "e", "hog", "small", task_size=16))
    assert failed.status() == "failed"
    why = failed.failure.message
    assert "task fragment 0 rows 0..16" in why and "memory limit of 800 MiB" in why, why
    # An unreachable head: a clear failure, not a hang.
    failed = wait(server, backfill(server, "e", "dbl", "down"))
    assert failed.status() == "failed"
    why = failed.failure.message
    assert "Ray cluster 'down'" in why and "cannot reach it" in why, why
    # Unknown, and not open to this tenant: 400 naming the cluster, and no job.
    for name, says in [("nope", "unknown cluster 'nope'"),
                       ("elsewhere", "cluster 'elsewhere' is not open to tenant 'default'")]:
        with pytest.raises(ApiException) as e:
            backfill(server, "e", "dbl", name)
        assert e.value.status == 400 and says in e.value.body, e.value.body


def test_the_head_lost_mid_job_fails_the_job_saying_so(lancet_on_ray):
    """Last in the module: it kills the head. A head that stays away longer than the cluster's
    `unreachable_after` (3 s here) fails the job with why; nothing was committed half-way."""
    server, cluster = lancet_on_ray
    job_id = slow_job(server, "h", 4, "fragile")
    for pid in [cluster.head.pid, *descendants(cluster.head.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    failed = wait(server, job_id)
    assert failed.status() == "failed"
    why = failed.failure.message
    assert "Ray cluster 'fragile'" in why and "did not answer for 3 s" in why, why
    # The fragments committed before the loss keep their values; none is half-written.
    rows = table_rows(server, "h", ["id", "dbl"])
    assert len(rows) == 32 and all(r["dbl"] in (None, 2 * r["id"]) for r in rows), rows
