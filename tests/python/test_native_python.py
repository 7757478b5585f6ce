"""The native Python tier (`udf_backend: "python-native"`): UDFs run by a real CPython in a
bubblewrap sandbox, with pip packages (numpy, native wheels) installed into an environment the
server builds. Defined with the spec's generated client, backfilled, computed on insert, read
back with lancedb; values checked. Also: a tenant not opted in, a Python version the server does
not have, a package pip cannot find, a missing function, and hostile functions (host files,
network, an endless loop) contained with clear errors while the server keeps answering.

Needs `bwrap` and Debian's `/usr/bin/python3` (scripts/setup.sh installs both), and pip's
package index (PyPI, or $LANCET_PACKAGE_INDEX)."""
import base64
import hashlib
import json
import math
import os
import sys
import tempfile
import urllib.error

import pyarrow as pa
import pytest
from lance_namespace_urllib3_client import ApiClient, Configuration
from lance_namespace_urllib3_client.api import TableApi
from lance_namespace_urllib3_client.exceptions import ApiException
from lance_namespace_urllib3_client.models import (
    AddColumnsEntry, AddVirtualColumnEntry, AddVirtualColumnOutputEntry,
    AlterTableAddColumnsRequest, AlterTableBackfillColumnsRequest, AlterTableDropColumnsRequest,
)

from lancedb import col, udf

from conftest import Lancet

PYTHON = os.environ.get("LANCET_NATIVE_PYTHON", "/usr/bin/python3")


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as envs:
        # Workers run as uids of their own: the environments must be readable by all.
        os.chmod(envs, 0o755)
        os.makedirs(os.path.join(d, "_auth"))
        with open(os.path.join(d, "_auth", "auth.toml"), "w") as f:
            f.write("[tenants.default]\nnative_python = true\n")
        args = ["--native-python", PYTHON, "--native-installer", sys.executable,
                "--native-dir", envs, "--native-timeout-ms", "5000"]
        if os.environ.get("LANCET_PACKAGE_INDEX"):
            args += ["--package-index", os.environ["LANCET_PACKAGE_INDEX"]]
        s = Lancet(d, args=args)
        try:
            s.post("/v1/namespace/test/create")
            yield s
        finally:
            s.stop()


def generated(server, key=None):
    return TableApi(ApiClient(Configuration(host=server.base, access_token=key or server.key)))


def native_column(name, source, entry, data_type, inputs, manifest=None, auto_backfill=None,
                  image="python:3.11-slim"):
    text = json.dumps(manifest) if manifest is not None else None
    return AddColumnsEntry(name=name, virtual_column=AddVirtualColumnEntry(
        input_columns=inputs, udf_backend="python-native", udf_name=entry,
        udf=base64.b64encode(source.encode()).decode(), udf_version="", image=image,
        manifest=text, manifest_checksum=hashlib.sha256(text.encode()).hexdigest() if text else None,
        auto_backfill=auto_backfill,
        outputs=[AddVirtualColumnOutputEntry(column=name, struct_field=name, data_type=data_type,
                                             nullable=True)]))


def add(server, table, column, key=None):
    generated(server, key).alter_table_add_columns(
        table, AlterTableAddColumnsRequest(new_columns=[column]))


def backfill(server, table, column):
    job = generated(server).alter_table_backfill_columns(
        table, AlterTableBackfillColumnsRequest(column=column))
    assert job.job_id
    return server.lancedb().open_job(job.job_id)


def rows(server, table, columns):
    tbl = server.lancedb().open_table(table)
    return {r["id"]: r for r in tbl.search().select(columns).limit(1000).to_list()}


NUMPY = """
import numpy as np
import pyarrow as pa

def norm(x):
    v = x.to_numpy(zero_copy_only=False)
    return pa.array(np.sqrt(np.abs(v)) + np.float64(np.pi), mask=np.isnan(v))
"""


def test_a_numpy_batch_udf_is_backfilled_with_real_values(server):
    xs = [4.0, None, 2.0, 9.0]
    server.create_table("test$nums", pa.table({"id": list(range(len(xs))), "x": xs}))
    add(server, "test$nums", native_column("root", NUMPY, "norm", {"type": "double"}, ["x"],
                                           manifest={"pip": ["numpy"], "mode": "batch"}))
    assert backfill(server, "test$nums", "root").wait() is None
    got = rows(server, "nums", ["id", "root"])
    for i, x in enumerate(xs):
        want = None if x is None else math.sqrt(x) + math.pi
        assert got[i]["root"] == pytest.approx(want) if want else got[i]["root"] is None, got[i]
    # The definition records the tier, the interpreter and the packages.
    vc = server.post("/v1/table/test$nums/describe")["virtual_columns"]["root"]
    assert vc["udf_backend"] == "python-native"
    assert vc["native"]["pip"] == ["numpy"] and vc["native"]["python_version"].startswith("3.11")


STATEFUL = """
SETUPS = []

class Scale:
    def __init__(self):
        SETUPS.append(1)
        self.k = 3

    def __call__(self, x):
        return x * self.k + 100 * len(SETUPS)
"""


def test_a_stateful_udf_is_set_up_once_and_computes_on_insert(server):
    server.create_table("test$live", pa.table({"id": pa.array([], pa.int64()), "x": pa.array([], pa.int64())}))
    add(server, "test$live", native_column("scaled", STATEFUL, "Scale", {"type": "int64"}, ["x"],
                                           auto_backfill=True))
    tbl = server.lancedb().open_table("live")
    tbl.add(pa.table({"id": [1, 2], "x": [5, None]}))
    tbl.add(pa.table({"id": [3], "x": [7]}))
    got = rows(server, "live", ["id", "scaled"])
    # One setup serves both inserts (the worker is kept warm and reused).
    assert {i: r["scaled"] for i, r in got.items()} == {1: 115, 2: None, 3: 121}


STRUCT = """
def describe(name):
    return {"length": len(name), "upper": name.upper()}
"""


def test_a_struct_result_split_into_sibling_columns(server):
    # Several outputs, each naming its field of the function's struct result: one call fills
    # every sibling (on insert here, with auto_backfill).
    server.create_table("test$split", pa.table({"id": pa.array([], pa.int64()),
                                                "name": pa.array([], pa.string())}))
    column = native_column("length", STRUCT, "describe", {"type": "int64"}, ["name"],
                           auto_backfill=True)
    column.virtual_column.outputs = [
        AddVirtualColumnOutputEntry(column="length", struct_field="length",
                                    data_type={"type": "int64"}, nullable=True),
        AddVirtualColumnOutputEntry(column="upper", struct_field="upper",
                                    data_type={"type": "string"}, nullable=True)]
    add(server, "test$split", column)
    server.lancedb().open_table("split").add(pa.table({"id": [1, 2], "name": ["ada", None]}))
    got = rows(server, "split", ["id", "length", "upper"])
    assert [(got[i]["length"], got[i]["upper"]) for i in (1, 2)] == [(3, "ADA"), (None, None)]
    group = server.post("/v1/table/test$split/describe")["virtual_columns"]
    assert (group["length"]["struct_field"], group["upper"]["struct_field"]) == ("length", "upper")
    # Backfilled by a job too, each sibling on its own.
    server.create_table("test$split2", pa.table({"id": [1], "name": ["grace"]}))
    column.virtual_column.auto_backfill = None
    add(server, "test$split2", column)
    assert backfill(server, "test$split2", "upper").wait() is None
    assert rows(server, "split2", ["id", "length", "upper"])[1] == {
        "id": 1, "length": None, "upper": "GRACE"}
    # Several outputs without the field each takes: refused, nothing added.
    column.virtual_column.outputs[1].struct_field = ""
    with pytest.raises(ApiException, match="output 'upper' needs its struct_field"):
        add(server, "test$split2", column)
    # One sibling alone cannot be dropped (the other could no longer be computed); both can.
    with pytest.raises(ApiException, match="together with 'upper': drop them together") as e:
        generated(server).alter_table_drop_columns(
            "test$split2", AlterTableDropColumnsRequest(columns=["length"]))
    assert e.value.status == 400
    generated(server).alter_table_drop_columns(
        "test$split2", AlterTableDropColumnsRequest(columns=["length", "upper"]))
    assert rows(server, "split2", ["id", "name"])[1] == {"id": 1, "name": "grace"}


def test_a_struct_output_and_row_errors_nulled_on_request(server):
    server.create_table("test$names", pa.table({"id": [1, 2], "name": ["ada", "grace"]}))
    struct = {"type": "struct", "fields": [
        {"name": "length", "nullable": True, "type": {"type": "int64"}},
        {"name": "upper", "nullable": True, "type": {"type": "string"}}]}
    add(server, "test$names", native_column("info", STRUCT, "describe", struct, ["name"]))
    assert backfill(server, "test$names", "info").wait() is None
    got = rows(server, "names", ["id", "info"])
    assert got[1]["info"] == {"length": 3, "upper": "ADA"}
    assert got[2]["info"] == {"length": 5, "upper": "GRACE"}
    src = "def inv(x):\n    return 1.0 / x\n"
    server.create_table("test$inv", pa.table({"id": [1, 2, 3], "x": [2.0, 0.0, 4.0]}))
    add(server, "test$inv", native_column("inv", src, "inv", {"type": "double"}, ["x"],
                                          manifest={"on_error": "null"}))
    assert backfill(server, "test$inv", "inv").wait() is None
    assert {i: r["inv"] for i, r in rows(server, "inv", ["id", "inv"]).items()} == {1: 0.5, 2: None, 3: 0.25}
    # Without on_error null the job fails naming the row and Python's error.
    add(server, "test$inv", native_column("inv2", src, "inv", {"type": "double"}, ["x"]))
    with pytest.raises(Exception) as err:
        backfill(server, "test$inv", "inv2").wait()
    assert "ZeroDivisionError" in str(err.value), err.value


def refused(server, column, table="test$plain", key=None):
    with pytest.raises(Exception) as err:
        add(server, table, column, key=key)
    e = err.value
    assert getattr(e, "status", None) == 400, e
    return json.loads(e.body)["error"]


def test_bad_definitions_are_refused_with_what_is_wrong(server):
    server.create_table("test$plain", pa.table({"id": [1], "x": [1.0]}))
    ok = "def f(x):\n    return x\n"
    dbl = {"type": "double"}
    assert "Python 3.12" in refused(server, native_column("c", ok, "f", dbl, ["x"], image="python:3.12"))
    assert "defines no 'g'" in refused(server, native_column("c", ok, "g", dbl, ["x"]))
    assert "SyntaxError" in refused(server, native_column("c", "def f(x) x", "f", dbl, ["x"]))
    words = refused(server, native_column("c", ok, "f", dbl, ["x"],
                                          manifest={"pip": ["lancet-no-such-package-zz9"]}))
    assert "environment failed" in words, words
    assert "options, paths and URLs are refused" in refused(
        server, native_column("c", ok, "f", dbl, ["x"], manifest={"pip": ["--index-url=http://x"]}))
    assert "ModuleNotFoundError" in refused(server, native_column("c", "import numpyy\ndef f(x):\n    return x\n", "f", dbl, ["x"]))
    assert "holds pip, mode" in refused(server, native_column("c", ok, "f", dbl, ["x"], manifest={"tier": 1}))
    # A tenant the auth file did not opt in.
    import lancedb
    other = server.new_key("other", "admin")
    server.post("/v1/namespace/test/create", key=other)
    db = lancedb.connect("db://test", api_key=other, host_override=server.base, region="us-east-1")
    db.create_table("plain", pa.table({"id": [1], "x": [1.0]}))
    assert "not enabled for tenant 'other'" in refused(
        server, native_column("c", ok, "f", dbl, ["x"]), key=other)


HOSTILE = """
import os, socket

def probe(what):
    try:
        if what == "shadow":
            return open("/etc/shadow").read()[:5]
        if what == "data":
            return str(os.listdir(os.environ.get("DATA", "/")))
        if what == "net":
            # The server's own port: reachable from the host, not from the sandbox.
            socket.create_connection(("127.0.0.1", int(os.environ["PORT"])), timeout=1)
            return "connected"
        if what == "write":
            open("/usr/x", "w").write("x")
            return "wrote"
        if what == "loop":
            while True:
                pass
    except Exception as e:
        return type(e).__name__
"""


def test_hostile_functions_are_contained_and_the_server_keeps_answering(server):
    probes = ["shadow", "data", "net", "write"]
    server.create_table("test$hostile", pa.table({"id": list(range(len(probes))), "what": probes}))
    add(server, "test$hostile", native_column("got", HOSTILE, "probe", {"type": "string"}, ["what"],
                                              manifest={"env": {"DATA": server.data,
                                                                "PORT": server.base.rsplit(":", 1)[1]}}))
    assert backfill(server, "test$hostile", "got").wait() is None
    got = {r["id"]: r["got"] for r in rows(server, "hostile", ["id", "got"]).values()}
    assert got[0] == "FileNotFoundError"  # no /etc in the sandbox
    assert got[1] == "FileNotFoundError"  # the data root is not there
    assert got[2] == "ConnectionRefusedError", got  # its own empty loopback only
    assert got[3] in ("OSError", "PermissionError"), got  # read-only
    # An endless function: the batch is stopped at the deadline and the job fails saying so.
    server.create_table("test$loop", pa.table({"id": [1], "what": ["loop"]}))
    add(server, "test$loop", native_column("got", HOSTILE, "probe", {"type": "string"}, ["what"]))
    with pytest.raises(Exception) as err:
        backfill(server, "test$loop", "got").wait()
    assert "did not finish within" in str(err.value), err.value
    assert server.post("/v1/table/test$hostile/describe")["version"] >= 1


# lancedb 0.40 Functions whose pip packages have only native wheels: built for the native tier
# (this tenant has it), computed there with the Wasm tier's semantics.
@udf(pip=["numpy"])
def numpy_root(x: float) -> float:
    import numpy as np
    if x < 0:
        raise ValueError(f"negative: {x}")
    return float(np.sqrt(np.float64(x))) + 1.0


@udf(pip=["numpy"])
class Shift:
    def __init__(self, k: int):
        import numpy as np
        self.coef = np.array([1, k])

    def __call__(self, x: float) -> float:
        import numpy as np
        return float(np.polyval(self.coef, x))


def test_lancedb_functions_with_native_packages_run_in_the_native_tier(server):
    db = server.lancedb()
    fv = db.create_function(numpy_root)
    assert fv.image.descriptor["runtime"] == "cpython-native"
    assert fv.metadata["runtime"] == "lancet-python-native"
    assert "numpy==" in fv.metadata["pip"], fv.metadata
    xs = [4.0, None, 9.0, -1.0, 0.0]
    t = db.create_table("fn_native", pa.table({"id": list(range(len(xs))), "x": xs}))
    t.add_columns({"root": fv(x=col("x"))})
    result = t.refresh_column_async("root").wait()
    assert result.rows_failed == 1, result
    got = {r["id"]: r["root"] for r in t.search().limit(100).to_list()}
    assert got == {0: 3.0, 1: None, 2: 4.0, 3: None, 4: 1.0}
    errors = t.function_errors(column="root")
    assert len(errors.records) == 1 and "negative: -1.0" in errors.records[0].error_message

    # A class Function, set up with its initialization.
    shift = db.create_function(Shift)
    t.add_columns({"shifted": shift(x=col("x"), k=10)})
    t.refresh_column_async("shifted").wait()
    got = {r["id"]: r["shifted"] for r in t.search().limit(100).to_list()}
    assert got == {0: 14.0, 1: None, 2: 19.0, 3: 9.0, 4: 10.0}


def test_a_native_function_for_another_python_is_refused_naming_both(server):
    @udf(pip=["numpy"], python_version="3.99")
    def other(x: float) -> float:
        return x

    with pytest.raises(Exception) as err:
        server.lancedb().create_function(other)
    assert "3.99" in str(err.value) and "3.11" in str(err.value), err.value
