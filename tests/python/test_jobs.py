"""The lancedb SDK waits on, lists and cancels Lancet's backfill jobs through /v1/jobs/*."""
import base64
import hashlib
import json
import os
import time
import urllib.error

import lancedb
import pyarrow as pa
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGINS = os.environ.get(
    "LANCET_PLUGINS_DIR",
    os.path.join(HERE, "..", "..", "plugins", "target", "wasm32-unknown-unknown", "release"),
)


def virtual_column(plugin, entry, inputs, config=None):
    with open(os.path.join(PLUGINS, plugin + ".wasm"), "rb") as f:
        wasm = f.read()
    manifest = {"abi": "lancet-udf/1", "module_sha256": hashlib.sha256(wasm).hexdigest(),
                "module_size": len(wasm), "entry": entry}
    if config:
        manifest["config"] = config
    manifest = json.dumps(manifest)
    return {"input_columns": inputs, "udf": base64.b64encode(wasm).decode(), "manifest": manifest,
            "manifest_checksum": hashlib.sha256(manifest.encode()).hexdigest()}


def test_lancedb_waits_on_backfill_jobs(lancet):
    ids = list(range(-2, 8))
    # Database "test" of the lancedb client is namespace "test" of the tenant.
    lancet.post("/v1/namespace/test/create")
    lancet.create_table("test$j", pa.table({"id": ids, "text": [f"Row {i}" for i in ids]}))
    lancet.post("/v1/table/test$j/add_columns", {"new_columns": [
        {"name": "slug", "virtual_column": virtual_column("slugify", "slugify", ["text"])},
        {"name": "checked", "virtual_column": virtual_column("misbehave", "fail_negative", ["id"])},
    ]})
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")

    job_id = lancet.post("/v1/table/test$j/backfill_column", {"column": "slug"})["job_id"]
    job = db.open_job(job_id)
    assert job.wait() is None
    assert job.status() == "finished"
    assert job.job_type == "backfill"
    assert job.result["rows_written"] == 10
    rows = db.open_table("j").search().select(["id", "slug"]).limit(100).to_arrow().to_pylist()
    assert sorted((r["id"], r["slug"]) for r in rows) == [(i, f"row-{abs(i)}") for i in ids]  # slugs drop the sign

    failing = db.open_job(lancet.post("/v1/table/test$j/backfill_column", {"column": "checked"})["job_id"])
    with pytest.raises(Exception) as err:
        failing.wait()
    assert "fail_negative" in str(err.value)
    assert failing.status() == "failed"

    listed = {j.job_id: j for j in db.list_jobs()}
    assert listed[job_id].state == "finished" and listed[job_id].table == "j"
    assert listed[failing.id].state == "failed"
    with pytest.raises(Exception):
        db.cancel_job(job_id)  # finished: 409


def test_lancedb_pauses_resumes_and_reads_job_events(lancet):
    """pause_job / resume_job / Job.events: a paused backfill stops where it stands and
    finishes after a resume; its history comes back as an Arrow table."""
    lancet.post("/v1/namespace/test/create")
    ids = list(range(120))
    lancet.create_table("test$pj", pa.table({"id": ids[:20], "text": [f"r{i}" for i in ids[:20]]}))
    for start in range(20, 120, 20):
        lancet.insert("test$pj", pa.table({"id": ids[start:start + 20], "text": [f"r{i}" for i in ids[start:start + 20]]}))
    spin = virtual_column("misbehave", "slow_double", ["id"], {"spin": "300000"})
    lancet.post("/v1/table/test$pj/add_columns", {"new_columns": [{"name": "dbl", "virtual_column": spin}]})
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    job_id = lancet.post("/v1/table/test$pj/backfill_column", {
        "column": "dbl", "commit_granularity": 1, "checkpoint_size": 2, "max_checkpoint_size": 2,
        "concurrency": 1})["job_id"]
    assert db.pause_job(job_id) == "pausing"
    assert db.pause_job(job_id) == "already_paused"
    job = db.open_job(job_id)
    for _ in range(300):
        if job.status() == "PAUSED":
            break
        time.sleep(0.1)
        job = db.open_job(job_id)
    assert job.status() == "PAUSED"
    assert db.resume_job(job_id) == "resumed"
    assert db.open_job(job_id).wait() is None
    events = db.open_job(job_id).events()
    assert isinstance(events, pa.Table)
    states = events["state"].to_pylist()
    for want in ["created", "pause_requested", "paused", "resumed", "done"]:
        assert want in states, (want, states)
    done = db.open_job(job_id).events(filter="state = 'claim_complete'")
    assert sum(done["rows_processed"].to_pylist()) == 120
    with pytest.raises(Exception) as err:
        db.resume_job(job_id)  # finished: 409
    assert "409" in str(err.value)


def test_lancedb_reads_the_rows_a_backfill_nulled(lancet):
    """Table.function_errors (`table/{id}/errors`): each row a UDF failed on under
    `on_error: null`, with its job, fragment offset and error."""
    lancet.post("/v1/namespace/test/create")
    ids = list(range(-3, 5))
    lancet.create_table("test$e", pa.table({"id": ids}))
    column = virtual_column("misbehave", "fail_negative", ["id"])
    manifest = json.loads(column["manifest"])
    manifest["on_error"] = "null"
    lancet.post("/v1/table/test$e/add_columns", {"new_columns": [{"name": "checked", "virtual_column": column}]})
    job_id = lancet.post("/v1/table/test$e/backfill_column", {"column": "checked", "manifest": json.dumps(manifest)})["job_id"]
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    db.open_job(job_id).wait()
    errors = db.open_table("e").function_errors()
    assert sorted(r.row_offset for r in errors.records) == [0, 1, 2]
    assert {(r.job_id, r.column, r.fragment_id, r.error_type) for r in errors.records} == {(job_id, "checked", 0, "guest_error")}
    assert errors.truncated is False and errors.fragments == []
    assert db.open_table("e").function_errors(column="other").records == []
