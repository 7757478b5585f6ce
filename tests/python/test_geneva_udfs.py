"""Geneva 0.17's UDF columns in its remote mode, run by Lancet's native Python tier: Geneva
defines the columns with its own `add_columns` (it sends `udf_backend: "DockerUDFSpecV1"` with
its cloudpickled UDF objects), the server loads each pickle in a bubblewrap sandbox and computes
it; values are read back through Geneva. Scalar, batched (pa.Array) and stateful UDFs.

The sandbox needs Geneva importable to unpickle its UDF objects: the server gets the test venv's
packages as `--native-site` (a hard-linked copy, so workers, which run as other uids, can read
it; nothing is downloaded). The first test starts and awaits backfills with the generated client
and lancedb; the others use Geneva's own calls (blocking `backfill()`, `backfill_async()`,
`get_job`, `list_jobs`), which read the field metadata Geneva's client expects and follow the job
through the `__system/geneva_jobs` row the server keeps up to date."""
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import NamedTuple

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


@udf(data_type=pa.int64())
def broken(x: int) -> int:
    raise ValueError(f"cannot take {x}")


def test_geneva_blocking_and_async_backfills_report_through_its_job_table(server):
    server.post("/v1/namespace/jobs/create")
    db = geneva.connect("db://jobs", api_key=server.key, host_override=server.base)
    try:
        t = db.create_table("g", pa.table({"id": [1, 2, 3], "x": [5, 7, 10]}))
        t.add_columns({"doubled": doubled, "halved": halved, "broken": broken})
        md = t.schema.field("doubled").metadata
        assert md[b"virtual_column.udf_backend"] == b"DockerUDFSpecV1"
        assert md[b"virtual_column.udf_name"] == b"doubled"
        assert md[b"virtual_column.udf_inputs"] == b'["x"]'

        # Blocking: Geneva downloads the payload, checks the UDF, starts the job and polls
        # its row (the first job of this database: Geneva makes the job table itself).
        first = t.backfill("doubled", timeout=120)
        assert first.status == "DONE"
        assert first.columns["doubled"].rows_processed == 3
        # Async: the job table exists now, so the server writes the row before it answers.
        job = t.backfill_async("halved")
        second = job.result(timeout=120)
        assert second.status == "DONE"
        got = {r["id"]: r for r in db.open_table("g").to_arrow().to_pylist()}
        assert [got[i]["doubled"] for i in (1, 2, 3)] == [10, 14, 20]
        assert [got[i]["halved"] for i in (1, 2, 3)] == [2.5, 3.5, 5.0]

        # A UDF that raises: the job's row says FAILED with the UDF's error, and the
        # blocking call raises it.
        with pytest.raises(RuntimeError, match="cannot take"):
            t.backfill("broken", timeout=120)

        record = db.get_job(first.job_id)
        assert (getattr(record.status, "value", record.status), record.column_name, record.table_name) == ("DONE", "doubled", "g")
        assert record.completed_at is not None
        assert record.events[-1] == "Job completed with status DONE"
        rows = {m.name: (m.n, m.total) for m in record.metrics}
        assert rows["rows_checkpointed"] == (3, 3)
        done = db.list_jobs(table_name="g", status="DONE")
        assert sorted(j.column_name for j in done) == ["doubled", "halved"]
        failed = db.list_jobs(table_name="g", status="FAILED")
        assert [j.column_name for j in failed] == ["broken"]
        assert "cannot take" in failed[0].events[-1]
        # One row per job: Geneva found the server's row and did not add its own.
        every = db.list_jobs(table_name="g", status=None)
        assert len(every) == len({j.job_id for j in every}) == 3
    finally:
        db.close()


def test_geneva_materialized_views_are_created_and_refreshed_with_its_defaults(server):
    server.post("/v1/namespace/views/create")
    db = geneva.connect("db://views", api_key=server.key, host_override=server.base)
    try:
        src = db.create_table("src", pa.table({"id": [1, 2, 3, 4], "x": [5, 7, 10, 1]}))
        # Geneva sends its own query JSON and an output schema with its bookkeeping columns.
        q = src.search(None).where("x > 5").select({"id": "id", "x2": "x * 2"})
        view = db.create_materialized_view("big", q)
        assert view.schema.names == ["id", "x2"]
        assert db.open_table("big").count_rows() == 0
        # refresh() with Geneva's default knobs (concurrency 8, intra_applier_concurrency 1),
        # followed through the job table.
        result = view.refresh()
        assert (result.status, result.rows_refreshed) == ("DONE", 2)
        rows = sorted(db.open_table("big").to_arrow().to_pylist(), key=lambda r: r["id"])
        assert rows == [{"id": 2, "x2": 14}, {"id": 3, "x2": 20}]
        src.add(pa.table({"id": [5], "x": [50]}))
        assert view.refresh().status == "DONE"
        assert sorted(r["x2"] for r in db.open_table("big").to_arrow().to_pylist()) == [14, 20, 100]
        limited = db.create_materialized_view(
            "first", src.search(None).select(["id", "x"]).limit(2))
        limited.refresh()
        assert db.open_table("first").count_rows() == 2
        # A UDF column inside a view is not maintained: refused by name, nothing created.
        with pytest.raises(Exception, match="column_udfs"):
            db.create_materialized_view("udf_view", src.search(None).select({"id": "id", "d": doubled}))
        assert "udf_view" not in db.table_names()
    finally:
        db.close()


@udf(data_type=pa.struct([("sum", pa.int64()), ("label", pa.string())]))
def summary(id: int, x: int) -> dict:
    return {"sum": id + x, "label": f"row {id}"}


def test_geneva_struct_outputs_and_where_filters(server):
    server.post("/v1/namespace/shapes/create")
    db = geneva.connect("db://shapes", api_key=server.key, host_override=server.base)
    try:
        t = db.create_table("g", pa.table({"id": [1, 2, 3], "x": [5, 7, 10]}))
        t.add_columns({"summary": summary, "doubled": doubled})
        t.backfill("summary", timeout=120)
        # Only the rows the filter selects are computed; the others stay null.
        t.backfill("doubled", where="x > 5", timeout=120)
        got = sorted(db.open_table("g").to_arrow().to_pylist(), key=lambda r: r["id"])
        assert [r["summary"] for r in got] == [
            {"sum": 6, "label": "row 1"}, {"sum": 9, "label": "row 2"}, {"sum": 13, "label": "row 3"}]
        assert [r["doubled"] for r in got] == [None, 14, 20]
    finally:
        db.close()


@udf(data_type=pa.int64())
def tripled(x: int) -> int:
    return x * 3


def test_geneva_alters_a_udf_column_and_backfills_it_again(server):
    server.post("/v1/namespace/alters/create")
    db = geneva.connect("db://alters", api_key=server.key, host_override=server.base)
    try:
        t = db.create_table("g", pa.table({"id": [1, 2, 3], "x": [5, 7, 10]}))
        t.add_columns({"c": doubled})
        t.backfill("c", timeout=120)
        t.alter_columns({"path": "c", "udf": tripled})
        d = server.post("/v1/table/alters$g/describe")["virtual_columns"]["c"]
        assert (d["udf_name"], d["udf_backend"]) == ("tripled", "DockerUDFSpecV1")
        md = db.open_table("g").schema.field("c").metadata
        assert md[b"virtual_column.udf_name"] == b"tripled"
        # Geneva pins the job to the version it last saw (before the alter): the job still
        # computes with the column's definition as it was when the job was asked for.
        t.backfill("c", where="1=1", timeout=120)
        got = sorted(db.open_table("g").to_arrow().to_pylist(), key=lambda r: r["id"])
        assert [r["c"] for r in got] == [15, 21, 30]
        # A UDF returning another type than the column's is refused, and the column kept.
        with pytest.raises(Exception, match="returns double, but the column holds int64"):
            t.alter_columns({"path": "c", "udf": halved})
        d = server.post("/v1/table/alters$g/describe")["virtual_columns"]["c"]
        assert d["udf_name"] == "tripled"
    finally:
        db.close()


class Dimensions(NamedTuple):
    height: int
    width: int


@udf
def dimensions(x: int) -> geneva.Columns[Dimensions]:
    return Dimensions(x + 10, x * 2)


class Bounds(NamedTuple):
    low: int
    high: int


@udf
class Spread:
    def __init__(self):
        self.width = None

    def __call__(self, x: int) -> geneva.Columns[Bounds]:
        if self.width is None:  # set up once per worker
            self.width = 1
        return Bounds(x - self.width, x + self.width)


def test_geneva_multi_column_udfs_fill_their_sibling_columns(server):
    server.post("/v1/namespace/multi/create")
    db = geneva.connect("db://multi", api_key=server.key, host_override=server.base)
    try:
        t = db.create_table("g", pa.table({"id": [1, 2, 3], "x": [5, 7, 10]}))
        t.add_columns(dimensions)  # one struct, unpacked into two sibling columns
        vcs = server.post("/v1/table/multi$g/describe")["virtual_columns"]
        assert {vcs[c]["udf_backend"] for c in ("height", "width")} == {"DockerUDFSpecV1"}
        schema = db.open_table("g").schema
        assert (schema.field("height").type, schema.field("width").type) == (pa.int64(), pa.int64())
        # What Geneva's client reads to treat the siblings as one group.
        assert schema.field("width").metadata[b"virtual_column.unpack"] == b"true"
        t.backfill("height", timeout=120)
        got = sorted(db.open_table("g").to_arrow().to_pylist(), key=lambda r: r["id"])
        assert [r["height"] for r in got] == [15, 17, 20]
        t.backfill("width", timeout=120)
        got = sorted(db.open_table("g").to_arrow().to_pylist(), key=lambda r: r["id"])
        assert [(r["height"], r["width"]) for r in got] == [(15, 10), (17, 14), (20, 20)]
        # A stateful one.
        t.add_columns(Spread())
        t.backfill("high", timeout=120)
        t.backfill("low", timeout=120)
        got = sorted(db.open_table("g").to_arrow().to_pylist(), key=lambda r: r["id"])
        assert [(r["low"], r["high"]) for r in got] == [(4, 6), (6, 8), (9, 11)]
        t.drop_columns(["height", "width"])
        assert "height" not in db.open_table("g").schema.names
    finally:
        db.close()


def test_geneva_backfills_columns_it_did_not_define(server):
    """Columns defined through the REST API (the seed's Python payload, `udf_backend: "python"`,
    and a native-tier one) carry the field metadata Geneva's blocking `backfill()` reads first:
    it finds a payload, skips its client-side check (the UDF is the server's), and the server
    computes the column. The database's first job, so Geneva makes the job table itself."""
    import base64
    from lance_namespace_urllib3_client.models import (
        AddColumnsEntry, AddVirtualColumnEntry, AddVirtualColumnOutputEntry,
        AlterTableAddColumnsRequest,
    )
    server.post("/v1/namespace/seedcols/create")
    db = geneva.connect("db://seedcols", api_key=server.key, host_override=server.base)
    try:
        t = db.create_table("t", pa.table({"id": [1, 2, 3], "x": [5, 7, 10]}))
        api = TableApi(ApiClient(Configuration(host=server.base, access_token=server.key)))

        def define(name, backend, source, entry):
            api.alter_table_add_columns("seedcols$t", AlterTableAddColumnsRequest(new_columns=[
                AddColumnsEntry(name=name, virtual_column=AddVirtualColumnEntry(
                    input_columns=["x"], image="python:3.11-slim", udf_name=entry,
                    udf_version="1", udf_backend=backend,
                    udf=base64.b64encode(source.encode()).decode(),
                    outputs=[AddVirtualColumnOutputEntry(column=name, struct_field=name,
                                                         data_type={"type": "int64"},
                                                         nullable=True)]))]))

        define("plus", "python", "def plus(x):\n    return x + 1\n", "plus")
        define("cubed", "python-native", "def cubed(x):\n    return x ** 3\n", "cubed")
        t = db.open_table("t")
        for column in ("plus", "cubed"):
            md = t.schema.field(column).metadata
            assert md[b"virtual_column.udf"].startswith(b"_udfs/"), md
            assert md[b"virtual_column.udf_inputs"] == b'["x"]'
            done = t.backfill(column, timeout=120)
            assert done.status == "DONE", done
            assert done.columns[column].rows_processed == 3
        got = {r["id"]: r for r in db.open_table("t").to_arrow().to_pylist()}
        assert [got[i]["plus"] for i in (1, 2, 3)] == [6, 8, 11]
        assert [got[i]["cubed"] for i in (1, 2, 3)] == [125, 343, 1000]
        # Lancet's own view of the columns is unchanged: it still runs them itself.
        vcs = server.post("/v1/table/seedcols$t/describe")["virtual_columns"]
        assert (vcs["plus"]["udf_backend"], vcs["cubed"]["udf_backend"]) == ("python", "python-native")
    finally:
        db.close()
