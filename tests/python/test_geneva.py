"""Geneva 0.17 in its remote mode (`geneva.connect("db://<db>", api_key, host_override)`: a
lance-namespace REST client plus lancedb's namespace connection) against Lancet: its table and
read paths, through its own calls. Geneva's UDF columns and jobs (its Docker UDF backend) are
issue 55's, not tested here."""
import geneva
import pyarrow as pa
import pytest


def rows(n, start=0):
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "text": [f"row {i}" for i in ids],
        "vec": pa.array([[float(i), 1.0] for i in ids], pa.list_(pa.float32(), 2)),
    })


@pytest.fixture()
def db(lancet):
    conn = geneva.connect("db://test", api_key=lancet.key, host_override=lancet.base)
    try:
        yield conn
    finally:
        conn.close()


def test_geneva_creates_lists_and_opens_tables(db):
    t = db.create_table("g", rows(6))
    assert "g" in list(db.table_names())
    assert "g" in db.list_tables().tables
    opened = db.open_table("g")
    assert opened.count_rows() == 6
    assert opened.schema.names == ["id", "text", "vec"]
    # overwrite replaces it. (exist_ok is refused by the client itself in remote mode: Geneva
    # turns it into mode "exist_ok", which lancedb's namespace connection does not take.)
    assert db.create_table("g", rows(3, start=10), mode="overwrite").count_rows() == 3
    assert t.name == "g"


def test_geneva_reads_what_it_wrote(db):
    t = db.create_table("r", rows(8))
    got = t.to_arrow()
    assert sorted(got["id"].to_pylist()) == list(range(8))
    assert t.count_rows("id >= 5") == 3
    # Its plain reads go out as queries with an empty single_vector: a scan.
    filtered = t.search().where("id < 3").select(["id", "text"]).to_arrow()
    assert sorted(zip(filtered["id"].to_pylist(), filtered["text"].to_pylist())) == [
        (0, "row 0"), (1, "row 1"), (2, "row 2")]
    nearest = t.search([5.0, 1.0]).limit(2).to_arrow()["id"].to_pylist()
    assert nearest[0] == 5 and set(nearest) <= {4, 5, 6}
    batches = list(t.to_batches())
    assert sum(b.num_rows for b in batches) == 8


def test_geneva_writes_and_versions(db):
    t = db.create_table("w", rows(4))
    v = t.version
    t.add(rows(2, start=4))
    assert t.count_rows() == 6
    t.delete("id = 0")
    assert t.count_rows() == 5
    t.update(where="id = 1", values={"text": "one"})
    assert t.search().where("id = 1").to_arrow()["text"].to_pylist() == ["one"]
    versions = t.list_versions()
    assert len(versions) >= 4 and t.version > v
    t.checkout(v)
    assert t.count_rows() == 4
    t.checkout_latest()
    assert t.count_rows() == 5
