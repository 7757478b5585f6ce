"""LSM writes (issue 28) through the unmodified lancedb 0.40 remote client: every LSM call of
its Table, on lance's MemWAL inside Lancet."""
import datetime
import threading

import lancedb
import pyarrow as pa
from lancedb import LsmWriteSpec

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False, metadata=PK),
    pa.field("region", pa.utf8()),
    pa.field("text", pa.utf8()),
    pa.field("vec", pa.list_(pa.float32(), 8)),
])
WAIT = datetime.timedelta(seconds=120)


def rows(ids, tag):
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        # A key always has the same region: identity sharding needs that.
        "region": [f"r{i % 3}" for i in ids],
        "text": [f"{tag} word{i}" for i in ids],
        "vec": pa.array([[float(i % 50) / 50] * 8 for i in ids], pa.list_(pa.float32(), 8)),
    }, schema=SCHEMA)



def upsert(table, ids, tag):
    return table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows(ids, tag))


def texts(table, **kw):
    q = table.search()
    if "use_lsm" in kw:
        q = q.use_lsm(kw["use_lsm"])
    t = q.select(["id", "text"]).limit(100_000).to_arrow()
    return dict(zip(t["id"].to_pylist(), t["text"].to_pylist()))


def test_lsm_write_spec_upserts_reads_and_checkpoint(lancet):
    db = lancet.lancedb()
    table = db.create_table("events", rows(range(300), "base"))
    table.create_index("vec", config=lancedb.index.IvfPq(num_partitions=2, num_sub_vectors=2), wait_timeout=WAIT)
    table.create_index("text", config=lancedb.index.FTS(), wait_timeout=WAIT)
    table.wait_for_index(["vec_idx", "text_idx"], timeout=WAIT)
    assert table.get_lsm_write_spec() is None
    assert table.get_lsm_stats() is None

    table.set_lsm_write_spec(LsmWriteSpec.bucket("id", 4))
    spec = table.get_lsm_write_spec()
    assert spec.spec_type == "bucket" and spec.column == "id" and spec.num_buckets == 4
    # `None` resolved every index the table had, as the client documents.
    assert sorted(spec.maintained_indexes) == ["text_idx", "vec_idx"]
    version = table.version

    result = upsert(table, [5, 6, 500, 501], "fresh")
    assert result.num_rows == 4
    assert table.version == version, "an LSM upsert makes no version"
    want = {i: f"base word{i}" for i in range(300)}
    want.update({i: f"fresh word{i}" for i in (5, 6, 500, 501)})
    assert texts(table) == want
    assert table.count_rows() == 302
    assert table.count_rows("id >= 500") == 2
    # Vector, full-text, filtered and hybrid queries see rows still in memtables.
    near = table.search([10 / 50] * 8).limit(20).to_arrow()["id"].to_pylist()
    assert 500 in near or 10 in near
    fts = table.search("fresh", query_type="fts").limit(10).to_arrow()["id"].to_pylist()
    assert sorted(fts) == [5, 6, 500, 501]
    assert sorted(table.search().where("text LIKE 'fresh%'").to_arrow()["id"].to_pylist()) == [5, 6, 500, 501]
    hybrid = table.search(query_type="hybrid").vector([5 / 50] * 8).text("fresh").limit(5).to_arrow()
    assert 5 in hybrid["id"].to_pylist()
    # use_lsm(False) reads the base table only.
    assert texts(table, use_lsm=False) == {i: f"base word{i}" for i in range(300)}

    stats = table.get_lsm_stats()
    memtable_rows = sum(m["rows"] for b in stats["buckets"] for m in b["memtables"])
    assert memtable_rows == 4
    assert all(b["status"] == "open" for b in stats["buckets"])
    assert all(sorted(m["indexes"]) == ["text_idx", "vec_idx"] for b in stats["buckets"] for m in b["memtables"])

    table.flush_lsm()
    stats = table.get_lsm_stats(include_generation_rows=True)
    assert sum(g["rows"] for b in stats["buckets"] for g in b["generations"]) == 4
    assert texts(table) == want

    table.delete("id = 501")
    del want[501]
    assert texts(table) == want
    upsert(table, [7], "later")
    want[7] = "later word7"

    table.compact_lsm()
    table.checkpoint_lsm()
    stats = table.get_lsm_stats()
    assert all(not b["generations"] for b in stats["buckets"]), stats
    assert table.version > version, "merged into the base table"
    assert texts(table, use_lsm=False) == want
    assert texts(table) == want

    table.close_lsm_writers()
    table.unset_lsm_write_spec()
    assert table.get_lsm_write_spec() is None
    assert texts(table) == want
    # A plain table again: merge_insert counts inserts and updates.
    result = upsert(table, [1, 900], "plain")
    assert (result.num_updated_rows, result.num_inserted_rows) == (1, 1)


def test_lsm_identity_and_unsharded_specs_and_concurrent_writers(lancet):
    db = lancet.lancedb()
    table = db.create_table("feed", rows(range(30), "base"))
    table.set_lsm_write_spec(LsmWriteSpec.identity("region").with_maintained_indexes([]))
    spec = table.get_lsm_write_spec()
    assert spec.spec_type == "identity" and spec.column == "region" and spec.maintained_indexes == []

    # Eight writers at once, 20 rows each, half new keys and half updates.
    def writer(n):
        own = lancet.lancedb().open_table("feed")
        for r in range(5):
            ids = list(range(n * 10, n * 10 + 10)) + list(range(1000 + n * 100 + r * 10, 1000 + n * 100 + r * 10 + 10))
            upsert(own, ids, f"w{n}r{r}")
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = texts(table)
    assert len(got) == len(set(got)), "no key twice"
    for n in range(8):
        for i in range(n * 10, n * 10 + 10):
            assert got[i] == f"w{n}r4 word{i}"
    assert table.count_rows() == 30 + 50 + 8 * 50
    assert len(table.get_lsm_stats()["buckets"]) == 3, "one shard per region"
    table.checkpoint_lsm()
    assert texts(table, use_lsm=False) == got

    other = db.create_table("single", rows(range(3), "base"))
    other.set_lsm_write_spec(LsmWriteSpec.unsharded().with_writer_config_defaults({"max_memtable_rows": "1000"}))
    spec = other.get_lsm_write_spec()
    assert spec.spec_type == "unsharded" and spec.writer_config_defaults == {"max_memtable_rows": "1000"}
    upsert(other, [1, 2, 3], "x")
    assert other.count_rows() == 4


def test_lsm_refusals_reach_the_client_as_errors(lancet):
    db = lancet.lancedb()
    plain = db.create_table("plain", pa.table({"id": [1, 2], "v": ["a", "b"]}))
    try:
        plain.set_lsm_write_spec(LsmWriteSpec.unsharded())
        raise AssertionError("a table without a primary key took a spec")
    except Exception as e:
        assert "primary key" in str(e)
    try:
        plain.search().use_lsm(True).to_arrow()
        raise AssertionError("use_lsm(True) without a spec was answered")
    except Exception as e:
        assert "use_lsm" in str(e)
    keyed = db.create_table("keyed", rows(range(3), "base"))
    keyed.set_lsm_write_spec(LsmWriteSpec.unsharded())
    try:
        keyed.update(where="id = 1", values={"text": "x"})
        raise AssertionError("a plain update of an LSM table was answered")
    except Exception as e:
        assert "LSM write spec" in str(e)
    try:
        keyed.search().with_row_id(True).to_arrow()
        raise AssertionError("with_row_id over memtables was answered")
    except Exception as e:
        assert "does not support with_row_id" in str(e)
