"""The lancedb SDK's remote client, unmodified, against Lancet."""
import warnings

import lancedb
import pyarrow as pa

warnings.filterwarnings("ignore", category=DeprecationWarning)


def vectors(rows):
    return pa.array(rows, pa.list_(pa.float32(), 2))


def test_lancedb_remote_table_lifecycle(lancet):
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    data = pa.table({"id": list(range(10)), "text": [f"hello {i}" for i in range(10)], "vector": vectors([[float(i), 1.0] for i in range(10)])})
    db.create_table("t", data)
    assert "t" in list(db.table_names())
    t = db.open_table("t")
    assert t.count_rows() == 10
    assert t.count_rows("id > 4") == 5
    assert t.schema.field("text").type == pa.string()

    assert t.add(pa.table({"id": [10], "text": ["new"], "vector": vectors([[10.0, 1.0]])})).version == 2
    assert t.search([3.0, 1.0]).limit(2).to_arrow()["id"].to_pylist()[0] == 3
    assert sorted(t.search().where("id < 3").to_arrow()["id"].to_pylist()) == [0, 1, 2]
    cols = t.search([3.0, 1.0]).select(["id"]).with_row_id(True).limit(1).to_arrow().column_names
    assert "id" in cols and "_rowid" in cols

    assert t.update(where="id = 1", values={"text": "one"}).rows_updated == 1
    assert t.delete("id = 2").num_deleted_rows == 1
    merged = t.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        pa.table({"id": [3, 20], "text": ["x", "y"], "vector": vectors([[3.0, 1.0], [20.0, 1.0]])})
    )
    assert (merged.num_updated_rows, merged.num_inserted_rows) == (1, 1)
    assert t.count_rows() == 11
    assert len(t.list_versions()) == t.version == 5

    t.create_scalar_index("id")
    t.create_fts_index("text")
    assert t.search("one", query_type="fts").limit(5).to_arrow()["id"].to_pylist() == [1]
    names = sorted(i.name for i in t.list_indices())
    assert names == ["id_idx", "text_idx"]
    assert t.index_stats("id_idx").num_indexed_rows == 11

    t.add_columns({"double": "id * 2"})
    t.alter_columns({"path": "double", "rename": "twice"})
    assert "twice" in t.schema.names
    t.drop_columns(["twice"])
    assert "twice" not in t.schema.names

    t.tags.create("v1", 1)
    assert t.tags.list()["v1"]["version"] == 1
    t.checkout(1)
    assert t.count_rows() == 10
    t.checkout_latest()
    t.restore(1)
    assert t.count_rows() == 10

    dev = t.branches.create("dev")
    dev.add(pa.table({"id": [99], "text": ["on dev"], "vector": vectors([[9.0, 9.0]])}))
    assert dev.count_rows() == 11
    assert t.count_rows() == 10
    assert "dev" in t.branches.list()
    t.branches.delete("dev")
    assert "dev" not in t.branches.list()

    # The database is a namespace of the tenant: a namespace client sees the same table.
    assert [x.name if hasattr(x, "name") else x for x in db.list_tables().tables] == ["t"]
    assert lancet.post("/v1/table/test$t/count_rows") == 10

    db.drop_table("t")
    assert "t" not in list(db.table_names())


def test_lancedb_credentials_and_databases(lancet):
    bad = lancedb.connect("db://test", api_key="lk_wrong", host_override=lancet.base, region="us-east-1")
    try:
        list(bad.table_names())
        raise AssertionError("a wrong key was accepted")
    except Exception as e:  # the SDK raises its own error type for 401
        assert "401" in str(e) or "unauthor" in str(e).lower(), e

    db = lancedb.connect("db://alpha", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    db.create_table("a", pa.table({"id": [1, 2, 3]}))
    other_db = lancedb.connect("db://beta", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    assert list(other_db.table_names()) == []
    assert list(db.table_names()) == ["a"]

    # Another tenant's key with the same database name sees an empty database.
    key = lancet.new_key("other", "write")
    theirs = lancedb.connect("db://alpha", api_key=key, host_override=lancet.base, region="us-east-1")
    assert list(theirs.table_names()) == []
    try:
        theirs.open_table("a").count_rows()
        raise AssertionError("another tenant opened our table")
    except Exception as e:
        assert "not found" in str(e).lower() or "404" in str(e), e
    assert db.open_table("a").count_rows() == 3


def test_lancedb_prewarm(lancet):
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    t = db.create_table("pw", pa.table({"id": list(range(50)), "text": [f"w{i}" for i in range(50)]}))
    t.create_scalar_index("id")
    t.prewarm_index("id_idx")
    t.prewarm_data(["text"])
    t.prewarm_data()
    try:
        t.prewarm_index("missing_idx")
        raise AssertionError("prewarming a missing index succeeded")
    except Exception as e:
        assert "missing_idx" in str(e)
    assert t.count_rows("id < 10") == 10


def test_lancedb_multipart_add_commits_once(lancet):
    """`add` with write_parallelism > 1 sends its rows in parts (multipart_write/*, gated on
    phalanx-version 0.4): every row lands, in one new version."""
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    t = db.create_table("mp", pa.table({"id": [0], "text": ["zero"]}))
    v = t.version
    n = 4000
    result = t.add(pa.table({"id": list(range(1, n + 1)), "text": [f"r{i}" for i in range(1, n + 1)]}), write_parallelism=4)
    assert result.version == v + 1
    assert t.count_rows() == n + 1
    assert sorted(t.search().where("id > 3990").to_arrow()["id"].to_pylist()) == list(range(3991, n + 1))
    t.add(pa.table({"id": [-1, -2], "text": ["a", "b"]}), mode="overwrite", write_parallelism=2)
    assert t.count_rows() == 2


def test_lancedb_take_offsets_and_row_ids(lancet):
    """take_offsets / take_row_ids go through `query` with `_rowoffset` / `_rowid` filters."""
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    t = db.create_table("tk", pa.table({"id": list(range(20)), "text": [f"t{i}" for i in range(20)]}))
    # The client restores repeated offsets from the `_rowoffset` column the server returns
    # (in no particular order for an unordered take).
    got = t.take_offsets([5, 1, 5, 17]).select(["id"]).to_arrow()
    assert sorted(got["id"].to_pylist()) == [1, 5, 5, 17]
    assert got.column_names == ["id"]
    ids = t.search().where("id IN (3, 7)").with_row_id(True).to_arrow()
    row_ids = ids["_rowid"].to_pylist()
    taken = t.take_row_ids(row_ids).to_arrow()
    assert sorted(taken["id"].to_pylist()) == [3, 7]


def test_lancedb_clone_table(lancet):
    """clone_table: a shallow clone at a version or tag is a table of its own."""
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    src = db.create_table("cl_src", pa.table({"id": [1, 2, 3]}))
    src.add(pa.table({"id": [4, 5]}))
    src.tags.create("v1", 1)
    at1 = db.clone_table("cl_at1", "cl_src", source_version=1)
    assert at1.count_rows() == 3
    assert db.clone_table("cl_tag", "cl_src", source_tag="v1").count_rows() == 3
    latest = db.clone_table("cl_latest", "cl_src")
    assert latest.count_rows() == 5
    latest.add(pa.table({"id": [6]}))
    assert latest.count_rows() == 6 and src.count_rows() == 5
    try:
        db.clone_table("cl_bad", "cl_src", source_version=42)
        raise AssertionError("a clone of a missing version succeeded")
    except Exception as e:
        assert "42" in str(e), e
    assert "cl_bad" not in db.table_names()


def test_lancedb_null_and_computed_columns(lancet):
    """add_columns(pa.field) adds all-null columns (an Arrow schema body); add_columns(computed=)
    declares a SQL computed column that refresh_column_async (a backfill job) fills."""
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    t = db.create_table("cc", pa.table({"x": [1, 2, 3]}))
    t.add_columns(pa.field("n", pa.int64()))
    t.add_columns([pa.field("s", pa.string()), pa.field("f", pa.float32())])
    assert t.schema.field("n").type == pa.int64() and t.schema.field("s").type == pa.string()
    t.add_columns(computed={"doubled": "x * 2"})
    meta = t.schema.field("doubled").metadata
    assert meta[b"computed_column.expression"] == b"x * 2"
    t.add(pa.table({"x": [10]}))
    rows = lambda: sorted(t.search().limit(100).to_arrow().to_pylist(), key=lambda r: r["x"])
    assert [r["doubled"] for r in rows()] == [None] * 4
    assert all(r["n"] is None and r["s"] is None for r in rows())
    job = t.refresh_column_async("doubled")
    job.wait()
    assert [(r["x"], r["doubled"]) for r in rows()] == [(1, 2), (2, 4), (3, 6), (10, 20)]
    # An input changed: the next refresh recomputes that row (and only it).
    t.update(where="x = 2", values={"x": 5})
    assert t.refresh_column_async("doubled").wait().rows_assigned == 1
    assert [(r["x"], r["doubled"]) for r in rows()] == [(1, 2), (3, 6), (5, 10), (10, 20)]
    try:
        t.add_columns(computed={"bad": "no_such_column + 1"})
        raise AssertionError("a computed column over a missing column was added")
    except Exception as e:
        assert "no_such_column" in str(e), e


def test_lancedb_branch_diff_and_cherry_pick(lancet):
    """A column computed on a branch, diffed against main and picked into it."""
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    t = db.create_table("br", pa.table({"id": [1, 2, 3]}))
    feat = t.branches.create("feat")
    feat.add_columns({"dbl": "id * 2"})
    diff = t.branches.diff("feat")
    assert [c["name"] for c in diff["addedColumns"]] == ["dbl"], diff
    assert diff["errors"] == [] and diff["rowCountMain"] == 3
    dry = t.branches.cherry_pick("feat", dry_run=True)
    assert dry["status"] == "ready" and dry["preview"]["promotedColumns"] == ["dbl"]
    assert "dbl" not in t.schema.names
    done = t.branches.cherry_pick("feat")
    assert done["status"] == "cherryPicked", done
    rows = sorted(db.open_table("br").search().limit(10).to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["dbl"]) for r in rows] == [(1, 2), (2, 4), (3, 6)]
    t = db.open_table("br")
    t.add(pa.table({"id": [4], "dbl": [8]}))
    late = t.branches.create("late")
    t.add(pa.table({"id": [5], "dbl": [10]}))
    late.add_columns({"sq": "id * id"})
    failed = t.branches.cherry_pick("late")
    assert failed["status"] == "failed"
    assert "baseMoved" in [e["code"] for e in failed["diff"]["errors"]]


def test_lancedb_blobs_whole_split_and_by_range(lancet):
    """fetch_blobs / fetch_blob_files (gated on phalanx-version 0.5): whole values, the 64 MiB
    cap the client splits around (a single larger blob is read through the range route), and
    seekable handles pinned to the version they were opened at."""
    from lance.blob import blob_array, blob_field

    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    big = bytes(range(256)) * (40 << 12)  # 40 MiB: two of them pass the 64 MiB cap
    huge = b"\x07" * (70 << 20)  # over the cap alone
    schema = pa.schema([pa.field("id", pa.int64()), blob_field("img")])
    data = pa.table({"id": [0, 1, 2, 3, 4], "img": blob_array([b"hello", None, b"", big, huge])}, schema=schema)
    t = db.create_table("blobs", data)
    assert t.blob_columns() == ["img"]
    rows = t.search().with_row_id(True).select(["id"]).to_arrow().sort_by("id")
    ids = rows["_rowid"].to_pylist()

    small = t.fetch_blobs("img", [ids[2], ids[0], ids[1], ids[0]]).to_pylist()
    assert small == [b"", b"hello", None, b"hello"]
    # 40 + 40 + 70 MiB: refused whole, split by the client, the 70 MiB one read by ranges.
    got = t.fetch_blobs("img", [ids[3], ids[0], ids[3], ids[4]]).to_pylist()
    assert got[1] == b"hello" and got[0] == big and got[2] == big and got[3] == huge

    files = t.fetch_blob_files("img", ids[:4])
    assert files[1] is None and files[2].read() == b""
    handle = files[3]
    t.add(pa.table({"id": [9], "img": blob_array([b"later"])}, schema=schema), mode="overwrite")
    handle.seek(1000)
    assert handle.read(16) == big[1000:1016]
    assert files[0].read() == b"hello"


def test_lancedb_materialized_view_create_refresh_list_drop(lancet):
    """create_materialized_view (the SQL the client writes from select/where/limit), its first
    refresh as a job, refresh after the source changed, the definition read back, list, drop."""
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    src = db.create_table("people", pa.table({"id": list(range(10)), "age": [10 * i for i in range(10)], "name": [f"p{i}" for i in range(10)]}))
    view = db.create_materialized_view("adults", "people", select={"id": "id", "age2": "age * 2"}, where="age >= 30", limit=100)
    assert view.definition.query == "SELECT id, age * 2 AS age2 FROM people WHERE age >= 30 LIMIT 100"
    rows = view.table.search().to_arrow().sort_by("id").to_pydict()
    assert rows == {"id": [3, 4, 5, 6, 7, 8, 9], "age2": [60, 80, 100, 120, 140, 160, 180]}

    src.add(pa.table({"id": [100, 1000], "age": [99, 5], "name": ["x", "y"]}))
    result = view.refresh()
    assert (result.rows_written, result.source_version) == (8, 2)
    assert result.version == view.table.version
    assert sorted(view.table.search().to_arrow()["id"].to_pylist()) == [3, 4, 5, 6, 7, 8, 9, 100]
    # A refresh at an older source version recomputes from it.
    assert view.refresh(source_version=1).rows_written == 7

    empty = db.create_materialized_view("later", "people", select=["id", "name"], with_no_data=True)
    assert empty.table.count_rows() == 0
    assert empty.refresh().rows_written == 12
    assert sorted(db.list_materialized_views()) == ["adults", "later"]
    assert db.open_materialized_view("later").definition.query == "SELECT id, name FROM people"
    db.drop_materialized_view("adults")
    assert db.list_materialized_views() == ["later"]
    assert sorted(db.list_tables().tables) == ["later", "people"]


def test_lancedb_views_are_named_queries_with_their_schema(lancet):
    """create_view / describe_view / list_views / drop_view: the query is planned against the
    tables it reads (a join and an aggregate here) and its schema recorded."""
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    db.create_table("orders", pa.table({"id": [1, 2, 3], "customer": [7, 7, 8], "total": [1.5, 2.5, 4.0]}))
    db.create_table("customers", pa.table({"id": [7, 8], "name": ["ann", "bo"]}))
    made = db.create_view("spend", "SELECT c.name, sum(o.total) AS spent FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.name")
    assert made.name == "spend"
    assert [f.name for f in made.schema] == ["name", "spent"]
    assert made.schema.field("spent").type == pa.float64()
    assert db.describe_view("spend").query.startswith("SELECT c.name")
    assert db.list_views() == ["spend"]
    db.drop_view("spend")
    assert db.list_views() == []
    for bad in ["SELECT * FROM missing", "DROP TABLE orders", "SELECT nope FROM orders"]:
        try:
            db.create_view("bad", bad)
        except Exception:
            continue
        raise AssertionError(f"{bad} was accepted")


def test_lancedb_create_table_from_a_schema_alone(lancet):
    """create_table(name, schema=...) sends a stream with a schema and no batch: an empty table
    (lance-namespace refused it as a 500 before)."""
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("vector", pa.list_(pa.float32(), 2))])
    t = db.create_table("empty", schema=schema)
    assert t.count_rows() == 0 and t.schema == schema
    t.add(pa.table({"id": [1], "vector": vectors([[1.0, 2.0]])}, schema=schema))
    assert t.count_rows() == 1


def test_lancedb_explain_and_analyze_plans(lancet):
    """explain_plan / analyze_plan: the SDK reads the answer as one JSON string."""
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    t = db.create_table("plans", pa.table({"id": list(range(50)), "vector": vectors([[float(i), 1.0] for i in range(50)])}))
    plan = t.search([1.0, 1.0]).where("id > 3").limit(2).explain_plan(verbose=True)
    assert "KNN" in plan or "knn" in plan.lower(), plan
    analysis = t.search([1.0, 1.0]).limit(2).analyze_plan()
    assert "metrics" in analysis.lower() or "output_rows" in analysis, analysis


def test_lancedb_lists_indexes_of_every_type(lancet):
    """FM, NGRAM, ZONEMAP, BLOOMFILTER and MINHASH_LSH indexes made through the REST API; the
    SDK fails a whole listing on a type it does not know (MinHashLsh), so it is shown that one
    as Unknown."""
    lancet.post("/v1/namespace/test/create")
    lancet.create_table("test$ix", pa.table({"id": list(range(50)), "text": [f"w{i}" for i in range(50)]}))
    for column, kind in [("text", "FM"), ("text", "MINHASH_LSH"), ("id", "ZONEMAP"), ("id", "BLOOMFILTER"), ("text", "NGRAM")]:
        lancet.post("/v1/table/test$ix/create_index", {"column": column, "index_type": kind, "name": kind.lower()})
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    t = db.open_table("ix")
    kinds = {i.name: str(i.index_type) for i in t.list_indices()}
    assert set(kinds) == {"fm", "minhash_lsh", "zonemap", "bloomfilter", "ngram"}, kinds
    assert "Unknown" in kinds["minhash_lsh"], kinds
    assert t.index_stats("fm").num_indexed_rows == 50
    assert t.index_stats("minhash_lsh").num_indexed_rows == 50


def test_lancedb_pages_orders_and_ranges_as_it_asks(lancet):
    """offset on a vector search (the k + offset nearest, less the first offset), order_by,
    distance ranges and postfilter: each honoured, with values computed here."""
    db = lancet.lancedb()
    points = [[float(i % 7), float(i // 7)] for i in range(30)]
    t = db.create_table("paged", pa.table({"id": list(range(30)), "vector": vectors(points)}))
    q = [2.0, 1.5]
    dist = sorted((sum((a - b) ** 2 for a, b in zip(p, q)), i) for i, p in enumerate(points))
    first = t.search(q).limit(5).to_arrow()["id"].to_pylist()
    page = t.search(q).limit(5).offset(5).to_arrow()
    assert first == [i for _, i in dist[:5]]
    assert page["id"].to_pylist() == [i for _, i in dist[5:10]]
    assert [round(d, 4) for d in page["_distance"].to_pylist()] == [round(d, 4) for d, _ in dist[5:10]]

    from lancedb.query import ColumnOrdering
    desc = [ColumnOrdering(column_name="id", ascending=False)]
    assert t.search().order_by(desc).limit(4).to_arrow()["id"].to_pylist() == [29, 28, 27, 26]
    assert t.search().order_by(desc).limit(3).offset(4).to_arrow()["id"].to_pylist() == [25, 24, 23]

    ranged = t.search(q).distance_range(1.0, 4.0).limit(100).to_arrow()["id"].to_pylist()
    assert sorted(ranged) == sorted(i for d, i in dist if 1.0 <= d < 4.0)
    post = t.search(q).where("id >= 10", prefilter=False).limit(4).to_arrow()["id"].to_pylist()
    assert post == [i for _, i in dist[:4] if i >= 10]


def test_lancedb_error_kinds(lancet):
    """A table that exists is the SDK's own error; an unknown column is a 400 (not 'table not
    found'); a namespace is dropped with cascade."""
    db = lancet.lancedb()
    db.create_table("dup", pa.table({"id": [1]}))
    try:
        db.create_table("dup", pa.table({"id": [1]}))
        raise AssertionError("created twice")
    except Exception as e:
        assert "already exists" in str(e), e
        assert "not found" not in str(e).lower(), e
    assert db.create_table("dup", pa.table({"id": [2]}), exist_ok=True).count_rows() == 1
    t = db.open_table("dup")
    for call in (lambda: t.search().where("nosuch = 1").to_arrow(),
                 lambda: t.drop_columns(["nosuch"]),
                 lambda: t.update(where="id = 1", values_sql={"nosuch": "1"})):
        try:
            call()
            raise AssertionError("accepted an unknown column")
        except Exception as e:
            assert "nosuch" in str(e), e
            assert "was not found" not in str(e) and "Schema { fields" not in str(e), e
    assert t.version == 1


def test_lancedb_namespaces_drop_restrict_and_cascade(lancet):
    """A namespace with a table: restrict refuses it (and says it is not empty), cascade drops
    it with its table; an unknown behavior is refused by name."""
    db = lancet.lancedb()
    db.create_namespace(["team"])
    assert "team" in db.list_namespaces().namespaces
    db.create_table("inner", pa.table({"id": [1, 2]}), namespace_path=["team"])
    assert list(db.table_names(namespace_path=["team"])) == ["inner"]
    try:
        db.drop_namespace(["team"])
        raise AssertionError("dropped a namespace that holds a table")
    except Exception as e:
        assert "not empty" in str(e).lower() or "child" in str(e).lower(), e
    assert "team" in db.list_namespaces().namespaces
    try:
        db.drop_namespace(["team"], behavior="sideways")
        raise AssertionError("took an unknown behavior")
    except Exception as e:
        assert "sideways" in str(e).lower() or "behavior" in str(e).lower(), e
    db.drop_namespace(["team"], behavior="cascade")
    assert "team" not in db.list_namespaces().namespaces
