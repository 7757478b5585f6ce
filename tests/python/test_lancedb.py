"""The lancedb SDK's remote client, unmodified, against Lancet."""
import warnings

import lancedb
import pyarrow as pa

warnings.filterwarnings("ignore", category=DeprecationWarning)


def vectors(rows):
    return pa.array(rows, pa.list_(pa.float32(), 2))


def test_lancedb_remote_table_lifecycle(lancet):
    db = lancedb.connect("db://test", api_key="any", host_override=lancet.base, region="us-east-1")
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

    db.drop_table("t")
    assert "t" not in list(db.table_names())
