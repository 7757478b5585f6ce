"""Geneva 0.17's UDF columns in its remote mode, run by Lancet's native Python tier: Geneva
defines the columns with its own `add_columns` (it sends `udf_backend: "DockerUDFSpecV1"` with
its cloudpickled UDF objects), the server loads each pickle in a bubblewrap sandbox and computes
it; values are read back through Geneva. Scalar, batched (pa.Array) and stateful UDFs.

The sandbox needs Geneva importable to unpickle its UDF objects: the server gets the test venv's
packages as `--native-site` (a hard-linked copy, so workers, which run as other uids, can read
it; nothing is downloaded). Geneva's own job monitoring (its `__system/geneva_jobs` table) is
not served yet, so the backfill is started and awaited with the generated client and lancedb."""
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import geneva
import geneva.cloudpickle
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from geneva import udf
from lance_namespace_urllib3_client import ApiClient, Configuration
from lance_namespace_urllib3_client.api import TableApi
from lance_namespace_urllib3_client.models import AlterTableBackfillColumnsRequest

from conftest import Lancet

# Functions of this module travel by value, as they do from a notebook or a script.
geneva.cloudpickle.register_pickle_by_value(sys.modules[__name__])

PYTHON = os.environ.get("LANCET_NATIVE_PYTHON", "/usr/bin/python3")


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as shared:
        os.chmod(shared, 0o755)
        envs = os.path.join(shared, "envs")
        site = os.path.join(shared, "site")
        # Hard links where the file system allows, else a copy.
        if subprocess.run(["cp", "-al", sysconfig.get_paths()["purelib"], site]).returncode != 0:
            shutil.copytree(sysconfig.get_paths()["purelib"], site)
        os.makedirs(os.path.join(d, "_auth"))
        with open(os.path.join(d, "_auth", "auth.toml"), "w") as f:
            f.write("[tenants.default]\nnative_python = true\n")
        s = Lancet(d, args=["--native-python", PYTHON, "--native-installer", sys.executable,
                            "--native-dir", envs, "--native-site", site])
        try:
            yield s
        finally:
            s.stop()


@udf(data_type=pa.int64())
def doubled(x: int) -> int:
    return x * 2


@udf(data_type=pa.float64())
def halved(x: pa.Array) -> pa.Array:
    return pc.divide(pc.cast(x, pa.float64()), 2.0)


@udf(data_type=pa.int64())
class Offset:
    def __init__(self):
        self.setups = 0
        self.offset = None

    def __call__(self, x: int) -> int:
        if self.offset is None:  # set up once, on the first call in a worker
            self.setups += 1
            self.offset = 1000
        return x + self.offset * self.setups


def backfill(server, table, column):
    api = TableApi(ApiClient(Configuration(host=server.base, access_token=server.key)))
    job = api.alter_table_backfill_columns(table, AlterTableBackfillColumnsRequest(column=column))
    server.lancedb().open_job(job.job_id).wait()


def test_geneva_defines_scalar_batched_and_stateful_udf_columns(server):
    server.post("/v1/namespace/test/create")
    db = geneva.connect("db://test", api_key=server.key, host_override=server.base)
    try:
        t = db.create_table("g", pa.table({"id": [1, 2, 3], "x": [5, 7, 10]}))
        t.add_columns({"doubled": doubled, "halved": halved, "shifted": Offset()})
        vcs = server.post("/v1/table/test$g/describe")["virtual_columns"]
        assert {vcs[c]["udf_backend"] for c in ("doubled", "halved", "shifted")} == {"DockerUDFSpecV1"}
        for column in ("doubled", "halved", "shifted"):
            backfill(server, "test$g", column)
        got = {r["id"]: r for r in db.open_table("g").to_arrow().to_pylist()}
        assert [got[i]["doubled"] for i in (1, 2, 3)] == [10, 14, 20]
        assert [got[i]["halved"] for i in (1, 2, 3)] == [2.5, 3.5, 5.0]
        assert [got[i]["shifted"] for i in (1, 2, 3)] == [1005, 1007, 1010]
    finally:
        db.close()
