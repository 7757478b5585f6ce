"""Table upkeep through real clients: the lancedb SDK's wait_for_index returns once upkeep has
folded new rows into the index, and upkeep jobs are listed and awaited like backfills."""
import lancedb
import pyarrow as pa


def rows(start, n):
    return pa.table({"id": list(range(start, start + n)), "text": [f"row {i}" for i in range(start, start + n)]})


def test_wait_for_index_after_upkeep(lancet):
    lancet.post("/v1/namespace/test/create")
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    t = db.create_table("u", rows(0, 100))
    t.create_scalar_index("id")
    for i in range(1, 6):
        t.add(rows(i * 100, 100))
    stats = t.index_stats("id_idx")
    assert (stats.num_indexed_rows, stats.num_unindexed_rows) == (100, 500)
    assert lancet.post("/v1/table/test$u/describe")["stats"]["num_fragments"] == 6

    job_id = lancet.post("/v1/table/test$u/optimize", {"action": "all"})["job_id"]
    t.wait_for_index(["id_idx"])
    stats = t.index_stats("id_idx")
    assert (stats.num_indexed_rows, stats.num_unindexed_rows) == (600, 0)

    job = db.open_job(job_id)
    assert job.wait() is None
    assert job.status() == "finished" and job.job_type == "optimize"
    assert lancet.post("/v1/table/test$u/describe")["stats"]["num_fragments"] == 1
    assert t.count_rows() == 600 and t.count_rows("id >= 550") == 50
    listed = {j.job_id: j for j in db.list_jobs()}
    assert listed[job_id].state == "finished" and listed[job_id].table == "u"
