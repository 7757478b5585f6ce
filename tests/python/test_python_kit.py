"""The `lancet` module outside the sandbox (sdk/python, `pip install ./sdk/python`): a UDF's
own file imports and runs with it, and gives what the server's backfill of the same file gives:
row and batch functions, row errors worded as the sandbox words them, and `lancet.embed`
through a Lancet server's model API or a model run locally from its files."""
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pyarrow as pa
import pytest

from test_model_columns import DOCS, PY_BATCH_UDF, rows, server, wait_job  # noqa: F401
from test_models import ONNX, TOKENIZER, manifest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

ROW_UDF = textwrap.dedent('''
    import lancet

    def score(text):
        words = text.split()
        return len(words) * 10 + text.count("a")

    class Weighted:
        def __init__(self, weight):
            self.weight = weight

        def __call__(self, text):
            return len(text) * self.weight

    @lancet.batch
    def shares(texts: list[str]) -> list[float]:
        total = sum(len(t) for t in texts)
        return [len(t) / total for t in texts]

    @lancet.batch
    def boom(texts: list[str]) -> list[int]:
        raise ValueError(f"no thanks to {len(texts)} texts")
''')


@pytest.fixture(scope="module")
def kit():
    """The package as an author installs it (pip builds it from sdk/python), in a folder of
    its own; the test venv's numpy, onnxruntime and tokenizers serve its `local` extra."""
    with tempfile.TemporaryDirectory() as d:
        # From a copy: setuptools writes build/ and egg-info next to the sources it builds.
        source, target = os.path.join(d, "source"), os.path.join(d, "site")
        shutil.copytree(os.path.join(ROOT, "sdk", "python"), source)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        target, source], check=True)
        assert os.path.exists(os.path.join(target, "lancet", "__init__.py"))
        yield target


def run_here(kit, udf_source, script):
    """Runs `script` in a new Python process that imports the kit and the UDF's file as the
    module `udf`; returns what it prints as JSON."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "udf.py"), "w") as f:
            f.write(udf_source)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([kit, d])}
        env.pop("LANCET_URL", None)
        out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                             capture_output=True, text=True)
        return json.loads(out.stdout)


def python_column(name, entry, source, data_type, **extra):
    return {"name": name, "virtual_column": {
        "input_columns": ["text"], "udf_name": entry, "image": "python:3.11-slim",
        "udf": base64.b64encode(source.encode()).decode(),
        "outputs": [{"column": name, "struct_field": name, "data_type": data_type}], **extra}}


# Failed rows are nulled and recorded (table/{id}/errors) instead of failing the job.
ON_ERROR_NULL = json.dumps({"on_error": "null"})
NULLED = {"manifest": ON_ERROR_NULL,
          "manifest_checksum": hashlib.sha256(ON_ERROR_NULL.encode()).hexdigest()}


def test_row_and_batch_functions_give_the_servers_values(server, kit):  # noqa: F811
    texts = ["a banana", "lance is columnar", "x", "an apple a day"]
    server.create_table("test$kit_rows", pa.table({"id": list(range(len(texts))), "text": texts}))
    server.post("/v1/table/test$kit_rows/add_columns", {"new_columns": [
        python_column("score", "score", ROW_UDF, {"type": "int64"}),
        python_column("shares", "shares", ROW_UDF, {"type": "double"}),
    ]})
    for column in ("score", "shares"):
        job = server.post("/v1/table/test$kit_rows/backfill_column", {"column": column})
        wait_job(server, job["job_id"])
    served = {r["id"]: r for r in rows(server, "kit_rows", ["id", "score", "shares"])}

    here = run_here(kit, ROW_UDF, textwrap.dedent(f'''
        import json, lancet, udf
        texts = {texts!r}
        out = {{name: lancet.call(getattr(udf, name), texts).__dict__
                for name in ("score", "shares")}}
        out["weighted"] = lancet.call(udf.Weighted, texts, init={{"weight": 3}}).__dict__
        print(json.dumps(out))
    '''))
    assert here["score"]["errors"] == {} and here["shares"]["errors"] == {}
    assert here["score"]["values"] == [served[i]["score"] for i in range(len(texts))]
    assert here["shares"]["values"] == pytest.approx([served[i]["shares"] for i in range(len(texts))])
    assert here["weighted"]["values"] == [3 * len(t) for t in texts]


def test_row_errors_are_the_servers_row_errors(server, kit):  # noqa: F811
    texts = ["two words", None, "three more words"]
    server.create_table("test$kit_err", pa.table({"id": [0, 1, 2], "text": texts}))
    server.post("/v1/table/test$kit_err/add_columns", {"new_columns": [
        python_column("score", "score", ROW_UDF, {"type": "int64"}, **NULLED),
        python_column("boom", "boom", ROW_UDF, {"type": "int64"}, **NULLED),
    ]})
    for column in ("score", "boom"):
        job = server.post("/v1/table/test$kit_err/backfill_column", {"column": column})
        wait_job(server, job["job_id"])
    table = server.lancedb().open_table("kit_err")
    served = {column: {str(r.row_offset): r.error_message
                       for r in table.function_errors(column=column).records}
              for column in ("score", "boom")}
    values = {r["id"]: r["score"] for r in rows(server, "kit_err", ["id", "score"])}

    here = run_here(kit, ROW_UDF, textwrap.dedent(f'''
        import json, lancet, udf
        texts = {texts!r}
        out = {{name: lancet.call(getattr(udf, name), texts).__dict__
                for name in ("score", "boom")}}
        try:
            lancet.call(lancet.batch(lambda texts: texts[1:]), texts)
        except ValueError as e:
            out["short"] = str(e)
        try:
            lancet.embed("minilm", ["a"])
        except RuntimeError as e:
            out["no_model"] = str(e)
        print(json.dumps(out))
    '''))
    assert here["score"]["values"] == [values[0], None, values[2]] == [20, None, 30]
    # The sandbox's wording: type, message and the line of the UDF's own file.
    assert here["score"]["errors"] == served["score"] == {
        "1": "AttributeError: 'NoneType' object has no attribute 'split' (line 5)"}
    assert here["boom"]["values"] == [None, None, None]
    assert here["boom"]["errors"] == served["boom"]
    assert set(served["boom"].values()) == {"ValueError: no thanks to 3 texts (line 22)"}
    assert here["short"] == "a batch function returned 2 values for 3 rows"
    assert "lancet.connect" in here["no_model"] and "use_model" in here["no_model"]


def test_embed_through_the_server_and_locally_gives_the_servers_vectors(server, kit):  # noqa: F811
    server.create_table("test$kit_vec", pa.table({"id": list(range(len(DOCS))), "text": DOCS}))
    vector = {"type": "fixed_size_list", "length": 384,
              "fields": [{"name": "item", "nullable": True, "type": {"type": "float32"}}]}
    server.post("/v1/table/test$kit_vec/add_columns", {"new_columns": [
        python_column("vec", "embed_docs", PY_BATCH_UDF, vector)]})
    job = server.post("/v1/table/test$kit_vec/backfill_column", {"column": "vec"})
    wait_job(server, job["job_id"])
    served = [r["vec"] for r in sorted(rows(server, "kit_vec", ["id", "vec"]),
                                       key=lambda r: r["id"])]

    here = run_here(kit, PY_BATCH_UDF, textwrap.dedent(f'''
        import json, lancet, udf
        docs = {DOCS!r}
        lancet.connect({server.base!r}, api_key={server.key!r})
        remote = lancet.call(udf.embed_docs, docs)
        try:
            lancet.embed("nope", ["x"])
            refused = None
        except RuntimeError as e:
            refused = str(e)
        lancet.use_model("minilm", lancet.LocalModel({ONNX!r}, {TOKENIZER!r}, {manifest()!r}))
        local = lancet.call(udf.embed_docs, docs)
        print(json.dumps({{"remote": remote.__dict__, "local": local.__dict__,
                           "refused": refused}}))
    '''))
    assert here["remote"]["errors"] == {} and here["local"]["errors"] == {}
    for got, want in zip(here["remote"]["values"], served):
        assert (got is None) == (want is None)
        if want is not None:
            assert np.allclose(got, want, atol=1e-6)
    for got, want in zip(here["local"]["values"], served):
        assert (got is None) == (want is None)
        if want is not None:
            got, want = np.array(got), np.array(want)
            assert got @ want / (np.linalg.norm(got) * np.linalg.norm(want)) >= 0.9999
    assert "404" in here["refused"] and "nope" in here["refused"]
