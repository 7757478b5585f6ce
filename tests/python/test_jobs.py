"""The lancedb SDK waits on, lists and cancels Lancet's backfill jobs through /v1/jobs/*."""
import base64
import hashlib
import json
import os
import urllib.error

import lancedb
import pyarrow as pa
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGINS = os.environ.get(
    "LANCET_PLUGINS_DIR",
    os.path.join(HERE, "..", "..", "plugins", "target", "wasm32-unknown-unknown", "release"),
)


def virtual_column(plugin, entry, inputs):
    with open(os.path.join(PLUGINS, plugin + ".wasm"), "rb") as f:
        wasm = f.read()
    manifest = json.dumps({"abi": "lancet-udf/1", "module_sha256": hashlib.sha256(wasm).hexdigest(),
                           "module_size": len(wasm), "entry": entry})
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
