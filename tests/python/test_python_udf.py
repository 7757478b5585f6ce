"""Python UDFs with the spec's own payload (urllib, as a plain HTTP client sends it), waited on
and read back through the lancedb client: every backfilled value equals f(row)."""
import base64
import re
import unicodedata
import urllib.error
import urllib.request

import lancedb
import pyarrow as pa
import pytest

SLUG = '''
import re, unicodedata

def slug(title: str) -> str:
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
'''


def slug(title):
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def python_column(source, name, inputs, **extra):
    return {"input_columns": inputs, "udf": base64.b64encode(source.encode()).decode(),
            "udf_name": name, "udf_version": "1", "image": "python:3.11-slim", **extra}


def test_seed_payload_backfilled_equals_f_of_each_row(lancet):
    lancet.post("/v1/namespace/test/create")
    ids = list(range(300))
    titles = [f"Crème brûlée nº {i} — Déjà vu" for i in ids]
    lancet.create_table("test$py", pa.table({"id": ids, "title": titles}))
    lancet.post("/v1/table/test$py/add_columns", {"new_columns": [
        {"name": "slug", "virtual_column": python_column(SLUG, "slug", ["title"])},
        {"name": "score", "virtual_column": python_column(
            "def score(id, title):\n    return id * 0.5 + len(title)\n", "score", ["id", "title"],
            outputs=[{"column": "score", "data_type": {"type": "float64"}, "nullable": True}])},
    ]})
    desc = lancet.post("/v1/table/test$py/describe")
    assert desc["virtual_columns"]["slug"]["udf_backend"] == "python"
    assert desc["virtual_columns"]["slug"]["python"]["requested_version"] == "3.11"

    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    for column in ("slug", "score"):
        job = db.open_job(lancet.post("/v1/table/test$py/backfill_column", {"column": column})["job_id"])
        assert job.wait() is None
        assert job.status() == "finished"
        assert job.result["rows_written"] == 300
    rows = db.open_table("py").search().select(["id", "title", "slug", "score"]).limit(1000).to_arrow().to_pylist()
    assert len(rows) == 300
    for r in rows:
        assert r["slug"] == slug(r["title"]), r
        assert r["score"] == r["id"] * 0.5 + len(r["title"]), r


def test_python_definition_errors_are_400s(lancet):
    lancet.create_table("bad", pa.table({"id": [1, 2]}))
    for source, name, expect in [
        ("def f(id):\n    return id +\n", "f", "SyntaxError"),
        ("import socket\ndef f(id) -> int:\n    return id\n", "f", "socket"),
        ("def f(id) -> int:\n    return id\n", "nope", "defines no 'nope'"),
    ]:
        with pytest.raises(urllib.error.HTTPError) as err:
            lancet.post("/v1/table/bad/add_columns", {"new_columns": [
                {"name": "c", "virtual_column": python_column(source, name, ["id"])}]})
        assert err.value.code == 400
        assert expect in err.value.read().decode()


def retired_instances(lancet):
    with urllib.request.urlopen(lancet.base + "/metrics") as r:
        text = r.read().decode()
    return int(float(re.search(r"^lancet_udf_instances_retired_total (\S+)$", text, re.M).group(1)))


def test_a_long_backfill_does_not_creep_to_the_memory_cap(lancet):
    """An interpreter's heap creeps up call after call (a function returning a 384-float list
    per row grew ~5 KB a row) and Wasm memory never shrinks: an instance past half its cap is
    retired after its call, so a 30,000-row backfill under a 64 MiB cap finishes (before, it
    failed at 6,000-8,000 rows with "exceeded its memory limit") and every value is right."""
    import hashlib
    import json
    manifest = json.dumps({"limits": {"max_memory_bytes": 64 << 20}})
    source = "def vec(id: int) -> list[float]:\n    return [id + i / 1000 for i in range(384)]\n"
    rows = 30_000
    lancet.post("/v1/namespace/test/create")
    lancet.create_table("test$creep", pa.table({"id": list(range(rows))}))
    lancet.post("/v1/table/test$creep/add_columns", {"new_columns": [{"name": "v", "virtual_column": python_column(
        source, "vec", ["id"], manifest=manifest, manifest_checksum=hashlib.sha256(manifest.encode()).hexdigest())}]})
    before = retired_instances(lancet)
    db = lancedb.connect("db://test", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    job = db.open_job(lancet.post("/v1/table/test$creep/backfill_column", {"column": "v"})["job_id"])
    assert job.wait() is None, job.status()
    got = db.open_table("creep").search().select(["id", "v"]).limit(rows).to_arrow().to_pylist()
    assert len(got) == rows
    for r in got[::997]:
        assert r["v"] == [r["id"] + i / 1000 for i in range(384)], r["id"]
    assert retired_instances(lancet) > before
