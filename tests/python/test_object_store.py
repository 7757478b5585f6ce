"""Real clients against Lancet replicas whose root is on an S3-compatible store (moto on
loopback): the lancedb SDK through one replica and the lance-namespace client through another,
and pylance reading the table straight from the store with the storage options the server
vends (`--vend-storage-options`)."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import lance
import lance_namespace
import lancedb
import pyarrow as pa
import pytest
from lance_namespace import DescribeTableRequest

from conftest import Lancet


@pytest.fixture(scope="module")
def s3():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        # moto with atomic conditional writes, as S3 has (see tests/s3/moto_server.py).
        [sys.executable, os.path.join(os.path.dirname(__file__), "..", "s3", "moto_server.py"),
         "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    env = {
        "AWS_ENDPOINT": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "lancet-test",
        "AWS_SECRET_ACCESS_KEY": "lancet-test-secret",
        "AWS_REGION": "us-east-1",
    }
    # Each root gets a cache folder on the node (cached modules): keep them out of the user's
    # ~/.cache, sharing only the compiled Python runner.
    cache = tempfile.mkdtemp(prefix="lancet-s3-cache-")
    machine = os.environ.get("LANCET_CACHE_DIR", os.path.expanduser("~/.cache/lancet"))
    os.makedirs(os.path.join(machine, "python"), exist_ok=True)
    os.symlink(os.path.join(machine, "python"), os.path.join(cache, "python"))
    env["LANCET_CACHE_DIR"] = cache
    try:
        yield env
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(cache, ignore_errors=True)


def new_root(env):
    bucket = f"lancet-py-{uuid.uuid4().hex[:10]}"
    urllib.request.urlopen(urllib.request.Request(f"{env['AWS_ENDPOINT']}/{bucket}", method="PUT")).read()
    return f"s3://{bucket}/root"


def test_lancedb_and_pylance_through_replicas_on_s3(s3):
    root = new_root(s3)
    a = Lancet(root, args=["--vend-storage-options", "true"], env={**s3, "LANCET_NODE_ID": "py-a"})
    b = Lancet(root, args=["--vend-storage-options", "true"], env={**s3, "LANCET_NODE_ID": "py-b"})
    try:
        db = lancedb.connect("db://store", api_key=a.key, host_override=a.base, region="us-east-1")
        data = pa.table({
            "id": pa.array(range(100), pa.int64()),
            "vec": pa.array([[float(i), 1.0] for i in range(100)], pa.list_(pa.float32(), 2)),
        })
        table = db.create_table("items", data)
        table.add(pa.table({
            "id": pa.array(range(100, 120), pa.int64()),
            "vec": pa.array([[float(i), 1.0] for i in range(100, 120)], pa.list_(pa.float32(), 2)),
        }))
        assert table.count_rows() == 120
        hits = table.search([5.0, 1.0]).limit(3).to_arrow()
        assert hits["id"].to_pylist()[0] == 5

        # The other replica serves the same table to the namespace client...
        ns = lance_namespace.connect("rest", {"uri": b.base, "header.Authorization": f"Bearer {b.key}"})
        described = ns.describe_table(DescribeTableRequest(id=["store", "items"], vend_credentials=True))
        assert described.version == 2
        assert described.location.startswith(root)
        options = described.storage_options
        assert options["aws_endpoint"] == s3["AWS_ENDPOINT"]

        # ...and pylance reads it straight from the store with the vended options.
        ds = lance.dataset(described.location, storage_options=options)
        assert ds.count_rows() == 120
        assert sorted(ds.to_table(columns=["id"])["id"].to_pylist()) == list(range(120))
    finally:
        a.stop()
        b.stop()


def test_storage_options_are_not_vended_by_default(s3):
    root = new_root(s3)
    a = Lancet(root, env={**s3, "LANCET_NODE_ID": "py-c"})
    try:
        db = lancedb.connect("db://store", api_key=a.key, host_override=a.base, region="us-east-1")
        db.create_table("t", pa.table({"id": pa.array([1, 2], pa.int64())}))
        ns = lance_namespace.connect("rest", {"uri": a.base, "header.Authorization": f"Bearer {a.key}"})
        plain = ns.describe_table(DescribeTableRequest(id=["store", "t"]))
        assert not plain.storage_options
        with pytest.raises(Exception) as err:
            ns.describe_table(DescribeTableRequest(id=["store", "t"], vend_credentials=True))
        assert "vend_credentials" in str(err.value)
    finally:
        a.stop()


def test_lsm_writes_on_s3_are_read_by_every_replica(s3):
    """LSM upserts (lance's MemWAL: a WAL of conditional PUTs on the store) through one replica
    are read by another, which claims the shards; the first claims them back on its next write."""
    from lancedb import LsmWriteSpec
    root = new_root(s3)
    a = Lancet(root, env={**s3, "LANCET_NODE_ID": "py-lsm-a"})
    b = Lancet(root, env={**s3, "LANCET_NODE_ID": "py-lsm-b"})
    try:
        schema = pa.schema([
            pa.field("id", pa.int64(), nullable=False, metadata={"lance-schema:unenforced-primary-key": "true"}),
            pa.field("v", pa.utf8()),
        ])
        def rows(ids, tag):
            return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]}, schema=schema)
        def upsert(t, ids, tag):
            t.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows(ids, tag))
        def values(t):
            got = t.search().limit(1000).to_arrow()
            return dict(zip(got["id"].to_pylist(), got["v"].to_pylist()))
        ta = lancedb.connect("db://store", api_key=a.key, host_override=a.base, region="us-east-1").create_table("events", rows(range(5), "base"))
        ta.set_lsm_write_spec(LsmWriteSpec.bucket("id", 2))
        upsert(ta, [1, 10], "a")
        tb = lancedb.connect("db://store", api_key=b.key, host_override=b.base, region="us-east-1").open_table("events")
        want = {0: "base0", 1: "a1", 2: "base2", 3: "base3", 4: "base4", 10: "a10"}
        assert values(tb) == want
        upsert(ta, [2, 11], "b")
        want.update({2: "b2", 11: "b11"})
        assert values(tb) == want
        assert values(ta) == want
        tb.checkpoint_lsm()
        assert values(ta) == want
        # Everything is in the base table now.
        base = ta.search().use_lsm(False).limit(1000).to_arrow()
        assert dict(zip(base["id"].to_pylist(), base["v"].to_pylist())) == want
    finally:
        a.stop()
        b.stop()
