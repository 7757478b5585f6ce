"""lancedb 0.40's Function registry and secrets against Lancet, through the unmodified client:
create_function (a build job), get/list/drop_function, secrets, Function-backed columns filled
by refresh_column_async, class Functions with initialization, named-struct results, and
function_errors. Every computed value is checked against the same Python run here."""
import tempfile

import pyarrow as pa
import pytest
from lancedb import EnvVarSecret, col, udf

from conftest import Lancet

SECRET_KEY = "python-tests-secret-key-0123456789"


@pytest.fixture()
def server():
    with tempfile.TemporaryDirectory() as d:
        s = Lancet(d, env={"LANCET_SECRET_KEY": SECRET_KEY, "LANCET_UDF_TIMEOUT_MS": "2000"})
        try:
            yield s
        finally:
            s.stop()



@udf
def triple_plus_one(x: int) -> int:
    return x * 3 + 1


@udf
def with_key(x: int) -> str:
    import os
    return f"{os.environ.get('API_KEY', 'missing')}:{x}"


@udf
def environment(x: int) -> str:
    import os
    return ",".join(sorted(os.environ))


@udf
def inverse(x: int) -> float:
    return 1 / x


@udf
class Scale:
    def __init__(self, factor: int):
        self.factor = factor

    def __call__(self, x: int) -> int:
        return x * self.factor


@udf(input_schema=pa.schema([("x", pa.int64())]),
     output_schema=pa.schema([("half", pa.float64()), ("parity", pa.string())]))
def parts(x: int) -> dict:
    return {"half": x / 2, "parity": "even" if x % 2 == 0 else "odd"}


def rows(t):
    return t.search().limit(100_000).to_arrow().sort_by("x").to_pylist()


def table(db, name, n=50):
    schema = pa.schema([pa.field("x", pa.int64(), nullable=False)])
    return db.create_table(name, pa.table({"x": list(range(n))}, schema=schema))


def more(t, xs):
    t.add(pa.table({"x": xs}, schema=pa.schema([pa.field("x", pa.int64(), nullable=False)])))


def test_refresh_recomputes_rows_whose_inputs_changed(server):
    db = server.lancedb()
    fv = db.create_function(triple_plus_one)
    t = table(db, "changing", n=20)
    t.add_columns({"y": fv(x=col("x"))})
    assert t.refresh_column_async("y").wait().rows_assigned == 20
    # Nothing changed: nothing to compute.
    assert t.refresh_column_async("y").wait().rows_assigned == 0

    t.update(where="x = 3", values={"x": 300})
    t.update(where="x >= 10 AND x < 12", values_sql={"x": "x + 1000"})
    # An upsert that changes one row and inserts another.
    (t.merge_insert("x").when_matched_update_all().when_not_matched_insert_all()
     .execute(pa.table({"x": [5, 77]}, schema=pa.schema([pa.field("x", pa.int64(), nullable=False)]))))
    stale = {r["x"]: r["y"] for r in rows(t)}
    assert stale[300] == triple_plus_one(3) and stale[77] is None, "copied by the update, not recomputed"
    # Compaction rewrites every fragment and keeps each row's last-written version.
    assert server.post("/v1/table/test$changing/describe")["stats"]["num_fragments"] > 1
    db.open_job(server.post("/v1/table/test$changing/optimize", {"action": "all"})["job_id"]).wait()
    assert server.post("/v1/table/test$changing/describe")["stats"]["num_fragments"] == 1
    result = t.refresh_column_async("y").wait()
    assert result.rows_failed == 0
    # 300, 1010, 1011, 5 (rewritten by the upsert) and 77 (new): nothing else.
    assert result.rows_assigned == 5, result
    got = rows(t)
    assert len(got) == 21
    assert [r["y"] for r in got] == [triple_plus_one(r["x"]) for r in got]
    assert t.refresh_column_async("y").wait().rows_assigned == 0


def test_secrets_are_stored_rotated_listed_and_never_returned(server):
    db = server.lancedb()
    db.create_secret("openai-prod", "sk-1")
    info = db.describe_secret("openai-prod")
    assert info.name == "openai-prod" and info.created_at_millis == info.updated_at_millis
    db.alter_secret("openai-prod", "sk-2")
    assert db.describe_secret("openai-prod").updated_at_millis > info.updated_at_millis
    db.create_secret("other", "v", namespace_path=["team"])
    assert db.list_secrets() == ["openai-prod"]
    assert db.list_secrets(namespace_path=["team"]) == ["other"]
    with pytest.raises(Exception, match="already exists"):
        db.create_secret("openai-prod", "x")
    db.drop_secret("openai-prod")
    assert db.list_secrets() == []
    with pytest.raises(Exception, match="does not exist"):
        db.describe_secret("openai-prod")
    # Sealed at rest: the value is nowhere under the data root.
    import os
    for root, _, files in os.walk(server.data):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                assert b"sk-2" not in fh.read(), f


def test_a_function_is_built_listed_bound_and_refreshed(server):
    db = server.lancedb()
    fv = db.create_function(triple_plus_one)
    assert fv.name == "triple_plus_one" and fv.version == "1"
    assert fv.signature.inputs[0].name == "x"
    again = db.create_function(triple_plus_one)
    assert again.version == "1", "an identical registration answers the same version"
    got = db.get_function("triple_plus_one", version="1")
    assert got.object_id == fv.object_id and got.image.manifest_digest == fv.image.manifest_digest
    assert [(f.name, f.version) for f in db.list_functions()] == [("triple_plus_one", "1")]

    t = table(db, "numbers")
    t.add_columns({"y": fv(x=col("x"))})
    result = t.refresh_column_async("y").wait()
    assert result.rows_assigned == 50 and result.rows_failed == 0
    got = rows(t)
    assert [r["y"] for r in got] == [triple_plus_one(r["x"]) for r in got]

    # New rows are filled by the next refresh.
    more(t, [100, 101])
    assert t.refresh_column_async("y").wait().rows_assigned == 2
    assert [r["y"] for r in rows(t) if r["x"] >= 100] == [301, 304]

    assert db.drop_function("triple_plus_one", version="1") is True
    assert db.drop_function("triple_plus_one", version="1") is False
    assert db.list_functions() == []
    more(t, [7])
    with pytest.raises(Exception, match="does not exist"):
        t.refresh_column_async("y").wait()
    # Registered again it is another object: the old binding does not run it by accident.
    again = db.create_function(triple_plus_one)
    assert again.object_id != fv.object_id
    with pytest.raises(Exception, match="registered again"):
        t.refresh_column_async("y").wait()
    dropped, job = db.drop_function_async("triple_plus_one", version=again.version)
    assert dropped is True
    job.wait()
    assert db.list_functions() == []


def test_secret_bindings_reach_only_the_function_environment(server):
    db = server.lancedb()
    with pytest.raises(Exception, match="does not exist"):
        db.create_function(with_key, secrets=[EnvVarSecret("api", "API_KEY")])
    db.create_secret("api", "s3cr3t")
    fv = db.create_function(with_key, secrets=[EnvVarSecret("api", "API_KEY")])
    assert fv.secret_bindings[0].variable == "API_KEY"
    t = table(db, "keyed", 5)
    t.add_columns({"k": fv(x=col("x"))})
    t.refresh_column_async("k").wait()
    assert sorted(r["k"] for r in rows(t)) == [f"s3cr3t:{i}" for i in range(5)]
    # The Function's environment holds its bindings and nothing of the server's.
    env = db.create_function(environment, secrets=[EnvVarSecret("api", "API_KEY")])
    t.add_columns({"env": env(x=col("x"))})
    t.refresh_column_async("env").wait()
    assert {r["env"] for r in rows(t)} == {"API_KEY"}
    # A rotation reaches the next run, with no new version.
    db.alter_secret("api", "rotated")
    more(t, [9])
    t.refresh_column_async("k").wait()
    t.refresh_column_async("env").wait()
    assert "rotated:9" in [r["k"] for r in rows(t)]


def test_class_functions_named_structs_and_row_errors(server):
    db = server.lancedb()
    scale = db.create_function(Scale)
    assert [f.name for f in scale.signature.initialization] == ["factor"]
    t = table(db, "mixed", 20)
    t.add_columns({"scaled": scale(x=col("x"), factor=10)})
    t.refresh_column_async("scaled").wait()
    got = rows(t)
    assert [r["scaled"] for r in got] == [r["x"] * 10 for r in got]

    p = db.create_function(parts)
    t.add_columns(p(x=col("x")).rename(columns={"half": "half_x"}))
    for column in ("half_x", "parity"):
        t.refresh_column_async(column).wait()
    got = rows(t)
    assert [r["half_x"] for r in got] == [r["x"] / 2 for r in got]
    assert [r["parity"] for r in got] == [parts(r["x"])["parity"] for r in got]

    inv = db.create_function(inverse)
    t.add_columns({"inv": inv(x=col("x"))})
    result = t.refresh_column_async("inv").wait()
    assert result.rows_failed == 1 and result.rows_assigned == 19
    errors = t.function_errors(column="inv")
    assert len(errors.records) == 1 and "ZeroDivisionError" in errors.records[0].error_message
    got = rows(t)
    assert got[0]["inv"] is None and got[4]["inv"] == 0.25


def test_what_the_sandbox_cannot_provide_is_refused_by_name(server):
    db = server.lancedb()

    @udf(pip=["numpy==2.2.0"])
    def needs_numpy(x: int) -> int:
        return x

    with pytest.raises(Exception, match="numpy"):
        db.create_function(needs_numpy)

    @udf
    def broken(x: int) -> int:
        raise RuntimeError(f"no value for {x}")

    fv = db.create_function(broken)
    t = table(db, "broken", 3)
    t.add_columns({"b": fv(x=col("x"))})
    result = t.refresh_column_async("b").wait()
    assert result.rows_failed == 3
    assert "RuntimeError: no value for" in t.function_errors(column="b").records[0].error_message


@udf
def spin(x: int) -> int:
    while True:
        pass


@udf
def balloon(x: int) -> str:
    return "x" * (1 << 30)


def test_hostile_functions_end_at_their_limits_and_the_server_serves_on(server):
    db = server.lancedb()
    t = table(db, "hostile", 3)
    for fn, column, needle in [(spin, "s", "time limit"), (balloon, "b", "memory limit")]:
        fv = db.create_function(fn)
        t.add_columns({column: fv(x=col("x"))})
        with pytest.raises(Exception, match=needle):
            t.refresh_column_async(column).wait()
    assert t.count_rows() == 3
    assert {f.name for f in db.list_functions()} == {"spin", "balloon"}


@udf
def loud(text: str) -> str:
    return text.upper() + "!"


def test_a_nullable_column_feeds_a_parameter_that_takes_no_null(server):
    """Every column a client makes from Python values is nullable: binding one to a plain `str`
    parameter works, rows with a null input answer null without calling the Function (no row
    error), and every other row holds f(row)."""
    db = server.lancedb()
    fv = db.create_function(loud)
    names = ["ada", None, "bob", None, "cy"]
    t = db.create_table("names", pa.table({"id": list(range(5)), "name": names}))
    assert t.schema.field("name").nullable
    t.add_columns({"shout": fv(text=col("name"))})
    result = t.refresh_column_async("shout").wait()
    assert result.rows_failed == 0, result
    got = {r["id"]: r["shout"] for r in t.search().limit(100).to_arrow().to_pylist()}
    assert got == {i: (None if n is None else loud(n)) for i, n in enumerate(names)}
    assert t.function_errors(column="shout").records == []
