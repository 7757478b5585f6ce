"""Embedding columns and text queries through the real clients: a column computed by a
registered model (defined with the spec's generated client, backfilled, and on insert with
auto_backfill), read back with lancedb; a text query embedded by the server; `embed()` in SQL
over Flight SQL (ADBC); and models called from inside UDFs: a Rust guest (`doc_embed`, through
the SDK's `embed`) and a Python UDF (`lancet.embed`). Every vector is checked against the
reference computed by Python's own onnxruntime (test_models.reference)."""
import base64
import json
import os
import re
import tempfile
import urllib.request

import adbc_driver_flightsql as flightsql
import adbc_driver_flightsql.dbapi as adbc
import numpy as np
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client import ApiClient, Configuration
from lance_namespace_urllib3_client.api import TableApi
from lance_namespace_urllib3_client.models import (
    AddColumnsEntry, AddVirtualColumnEntry, AddVirtualColumnOutputEntry,
    AlterTableAddColumnsRequest, AlterTableBackfillColumnsRequest,
)

from conftest import Lancet
from test_jobs import virtual_column
from test_models import ONNX, ORT, TOKENIZER, call, manifest, read, reference, upload

DIM = 384
VECTOR = {"type": "fixed_size_list", "length": DIM,
          "fields": [{"name": "item", "nullable": True, "type": {"type": "float32"}}]}
DOCS = ["A cat sits on the mat.", "The stock market fell sharply today.", None,
        "Kittens sleep a lot.", "Interest rates and bond yields rose.", ""]


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory() as d:
        s = Lancet(d, args=["--onnxruntime", ORT, "--flight-addr", "127.0.0.1:0"])
        try:
            upload(s, read(ONNX))
            upload(s, read(TOKENIZER))
            status, answer = call(s, "/v1/model/minilm/create", manifest())
            assert status == 200, answer
            s.post("/v1/namespace/test/create")
            yield s
        finally:
            s.stop()


def cosines(got, texts):
    want = reference(texts)
    got = np.array(got, dtype=np.float32)
    return (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))


def wait_job(server, job_id):
    job = server.lancedb().open_job(job_id)
    assert job.wait() is None, job.status()


def query(server, table, body):
    """A /query answer (Arrow IPC file) as a pyarrow Table."""
    req = urllib.request.Request(server.base + f"/v1/table/{table}/query", data=json.dumps(body).encode(),
                                 method="POST", headers={"content-type": "application/json",
                                                         "authorization": f"Bearer {server.key}"})
    with urllib.request.urlopen(req) as r:
        return pa.ipc.open_file(pa.BufferReader(r.read())).read_all()


def rows(server, table, columns):
    db = server.lancedb()
    return db.open_table(table).search().select(columns).limit(1000).to_arrow().to_pylist()


def generated(server):
    return TableApi(ApiClient(Configuration(host=server.base, access_token=server.key)))


def model_column(name, auto_backfill=None):
    return AddColumnsEntry(name=name, virtual_column=AddVirtualColumnEntry(
        input_columns=["text"], udf_backend="model", udf_name="minilm", udf_version="",
        udf="", image="", auto_backfill=auto_backfill,
        outputs=[AddVirtualColumnOutputEntry(column=name, struct_field=name, data_type=VECTOR,
                                             nullable=True)]))


@pytest.fixture(scope="module")
def docs(server):
    """`test$docs` with its embedding column `vec` filled by a backfill job: made once per
    server by the first test that asks (each pytest-xdist worker has its own server)."""
    server.create_table("test$docs", pa.table({"id": list(range(len(DOCS))), "text": DOCS}))
    api = generated(server)
    api.alter_table_add_columns("test$docs", AlterTableAddColumnsRequest(new_columns=[model_column("vec")]))
    job = api.alter_table_backfill_columns("test$docs", AlterTableBackfillColumnsRequest(column="vec"))
    assert job.job_id
    wait_job(server, job.job_id)
    return "test$docs"


def test_embedding_column_backfilled_then_searched_by_text(server, docs):
    got = {r["id"]: r["vec"] for r in rows(server, "docs", ["id", "vec"])}
    assert got[2] is None  # a null text gives a null vector
    present = [i for i, t in enumerate(DOCS) if t is not None]
    c = cosines([got[i] for i in present], [DOCS[i] for i in present])
    assert c.min() >= 0.9999, c

    # A text query: the server embeds it with the column's model and searches.
    hits = query(server, "test$docs", {"query_text": "a small cat", "k": 2, "columns": ["id"]})
    assert hits["id"].to_pylist()[0] in (0, 3) and set(hits["id"].to_pylist()) == {0, 3}, hits
    # The same as searching with the vector computed outside Lancet.
    vector = reference(["a small cat"])[0].tolist()
    by_vector = query(server, "test$docs", {"vector": vector, "k": 2, "columns": ["id"]})
    assert by_vector["id"].to_pylist() == hits["id"].to_pylist()
    # lancedb's own vector search on the column agrees.
    tbl = server.lancedb().open_table("docs")
    ids = [r["id"] for r in tbl.search(vector, vector_column_name="vec").limit(2).to_list()]
    assert ids == hits["id"].to_pylist()


def test_text_query_errors_name_the_problem(server, docs):
    server.create_table("test$plain", pa.table({"id": [1], "text": ["x"]}))
    for path, body, words in [
        ("test$plain", {"query_text": "x", "k": 1}, "no embedding column"),
        ("test$docs", {"query_text": "x", "vector": [0.0] * DIM, "k": 1}, "not both"),
        ("test$docs", {"query_text": "x", "vector_column": "text", "k": 1}, "not an embedding column"),
        ("test$docs", {"query_text": 5, "k": 1}, "must be a string"),
    ]:
        status, answer = call(server, f"/v1/table/{path}/query", body)
        assert status == 400 and words in answer["error"], (body, answer)
    status, answer = call(server, "/v1/table/test$docs/explain_plan", {"query": {"query_text": "x"}})
    assert status == 400, answer


def test_a_text_query_of_an_old_version_needs_the_model_that_computed_it(server):
    """A version whose column a model computed, searched by text after that model was dropped
    and registered again with other settings: a 400 saying so (the text's vector and the
    column's would not compare), not an answer from the record a text query read before."""
    status, answer = call(server, "/v1/model/mini2/create", manifest())
    assert status == 200, answer
    server.create_table("test$old", pa.table({"id": [1, 2], "text": ["Cats nap.", "Bonds fell."]}))
    column = model_column("vec").virtual_column
    column.udf_name = "mini2"
    api = generated(server)
    api.alter_table_add_columns("test$old", AlterTableAddColumnsRequest(
        new_columns=[AddColumnsEntry(name="vec", virtual_column=column)]))
    wait_job(server, api.alter_table_backfill_columns(
        "test$old", AlterTableBackfillColumnsRequest(column="vec")).job_id)
    tbl = server.lancedb().open_table("old")
    version = tbl.version
    body = {"query_text": "a cat", "vector_column": "vec", "k": 1, "columns": ["id"]}
    assert query(server, "test$old", body)["id"].to_pylist() == [1]
    tbl.drop_columns(["vec"])
    assert call(server, "/v1/model/mini2/drop")[0] == 200
    status, answer = call(server, "/v1/model/mini2/create", manifest(normalize=False))
    assert status == 200, answer
    status, answer = call(server, "/v1/table/test$old/query", {**body, "version": version})
    assert status == 400 and "registered again" in answer["error"], answer


def test_auto_backfill_computes_vectors_on_insert(server):
    server.create_table("test$live", pa.table({"id": pa.array([], pa.int64()), "text": pa.array([], pa.string())}))
    generated(server).alter_table_add_columns("test$live", AlterTableAddColumnsRequest(
        new_columns=[model_column("vec", auto_backfill=True)]))
    tbl = server.lancedb().open_table("live")
    tbl.add(pa.table({"id": [1, 2], "text": ["Kittens sleep a lot.", None]}))
    got = {r["id"]: r["vec"] for r in rows(server, "live", ["id", "vec"])}
    assert got[2] is None
    assert cosines([got[1]], ["Kittens sleep a lot."]).min() >= 0.9999


def test_bad_embedding_columns_are_refused(server, docs):
    api = generated(server)
    cases = [
        (dict(udf_name="nope"), "not registered"),
        (dict(input_columns=["id"]), "must be text"),
        (dict(input_columns=["text", "id"]), "exactly one"),
        (dict(udf="ZGVm"), "udf does not apply"),
        (dict(udf_version="abc"), "not the digest"),
    ]
    for over, words in cases:
        entry = model_column("bad").virtual_column.to_dict()
        entry.update(over)
        status, answer = call(server, "/v1/table/test$docs/add_columns",
                              {"new_columns": [{"name": "bad", "virtual_column": entry}]})
        assert status in (400, 404) and words in answer["error"], (over, answer)
    wrong = {**VECTOR, "length": 8}
    entry = model_column("bad").virtual_column.to_dict()
    entry["outputs"][0]["data_type"] = wrong
    status, answer = call(server, "/v1/table/test$docs/add_columns",
                          {"new_columns": [{"name": "bad", "virtual_column": entry}]})
    assert status == 400 and "384-dimensional" in answer["error"], answer
    # A model a column computes with cannot be dropped.
    status, answer = call(server, "/v1/model/minilm/drop")
    assert status == 409 and "test.docs.vec" in answer["error"], answer


def test_sql_embed_over_flight_sql(server, docs):
    with adbc.connect(server.flight, db_kwargs={
            flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {server.key}"},
            autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("SELECT embed('minilm', 'a small cat') AS v")
        v = cur.fetch_arrow_table()["v"].to_pylist()[0]
        assert cosines([v], ["a small cat"]).min() >= 0.9999
        cur.execute("SELECT id FROM test.docs WHERE vec IS NOT NULL "
                    "ORDER BY array_distance(vec, embed('minilm', 'a small cat')) LIMIT 2")
        assert set(cur.fetch_arrow_table()["id"].to_pylist()) == {0, 3}
        with pytest.raises(Exception) as err:
            cur.execute("SELECT embed('nope', 'x')")
        assert "not registered" in str(err.value)


def test_a_rust_guest_calls_embed(server):
    server.create_table("test$guest", pa.table({
        "id": [1, 2, 3], "title": ["Cats", None, None], "body": ["  sleep   a lot ", "Bond yields rose.", None]}))
    column = virtual_column("doc_embed", "doc_embed", ["title", "body"],
                            config={"model": "minilm", "dimension": str(DIM)})
    server.post("/v1/table/test$guest/add_columns", {"new_columns": [{"name": "vec", "virtual_column": column}]})
    wait_job(server, server.post("/v1/table/test$guest/backfill_column", {"column": "vec"})["job_id"])
    got = {r["id"]: r["vec"] for r in rows(server, "guest", ["id", "vec"])}
    assert got[3] is None
    # The guest's own text preparation: parts joined with ". ", whitespace collapsed.
    c = cosines([got[1], got[2]], ["Cats. sleep a lot", "Bond yields rose."])
    assert c.min() >= 0.9999, c


PY_UDF = '''
import lancet

def vec_norm_and_first(text):
    [v] = lancet.embed("minilm", [text.strip().lower()])
    return sum(x * x for x in v) ** 0.5 * 1000 + v[0]
'''


def test_a_python_udf_calls_embed(server):
    server.create_table("test$py", pa.table({"id": [1, 2], "text": ["  A Cat  ", "Bonds"]}))
    server.post("/v1/table/test$py/add_columns", {"new_columns": [{"name": "score", "virtual_column": {
        "input_columns": ["text"], "udf_name": "vec_norm_and_first", "image": "python:3.11-slim",
        "udf": base64.b64encode(PY_UDF.encode()).decode(),
        "outputs": [{"column": "score", "struct_field": "score", "data_type": {"type": "double"}}]}}]})
    wait_job(server, server.post("/v1/table/test$py/backfill_column", {"column": "score"})["job_id"])
    got = {r["id"]: r["score"] for r in rows(server, "py", ["id", "score"])}
    want = reference(["a cat", "bonds"])
    for i, w in zip((1, 2), want):
        assert abs(got[i] - (1000 * np.linalg.norm(w) + w[0])) < 1e-3, (got, w[0])
    # An unknown model is the host's message, raised in Python: the job fails naming it.
    server.create_table("test$py2", pa.table({"id": [1], "text": ["x"]}))
    server.post("/v1/table/test$py2/add_columns", {"new_columns": [{"name": "score", "virtual_column": {
        "input_columns": ["text"], "udf_name": "f", "image": "python:3.11-slim",
        "udf": base64.b64encode(b"import lancet\ndef f(text):\n    return float(len(lancet.embed('nope', [text])))\n").decode(),
        "outputs": [{"column": "score", "struct_field": "score", "data_type": {"type": "double"}}]}}]})
    job = server.lancedb().open_job(server.post("/v1/table/test$py2/backfill_column", {"column": "score"})["job_id"])
    with pytest.raises(Exception) as err:
        job.wait()
    assert "not registered" in str(err.value), err.value


PY_BATCH_UDF = '''
import lancet

@lancet.batch
def embed_docs(texts: list[str]) -> list[list[float]]:
    # The user's own preparation: blank and null rows get no vector; one host call for the rest.
    keep = [t.strip() for t in texts if t and t.strip()]
    vectors = iter(lancet.embed("minilm", keep) if keep else [])
    return [next(vectors) if t and t.strip() else None for t in texts]

@lancet.batch
def rows_in_call(texts: list[str]) -> list[int]:
    return [len(texts)] * len(texts)

@lancet.batch
def too_few(texts):
    return texts[1:]

@lancet.batch
def raises(texts):
    raise ValueError(f"no thanks to {len(texts)} texts")
'''


def python_column(name, entry, data_type, auto_backfill=None):
    return AddColumnsEntry(name=name, virtual_column=AddVirtualColumnEntry(
        input_columns=["text"], udf_name=entry, udf_version="", image="python:3.11-slim",
        udf=base64.b64encode(PY_BATCH_UDF.encode()).decode(), auto_backfill=auto_backfill,
        outputs=[AddVirtualColumnOutputEntry(column=name, struct_field=name, data_type=data_type,
                                             nullable=True)]))


def test_a_python_batch_udf_embeds_a_whole_call_at_once(server):
    """`@lancet.batch`: the function gets the call's rows as lists and calls `lancet.embed`
    once for all of them; a column of its vectors, backfilled and on insert, equals the
    reference. A batch function returning the wrong number of values, or raising, fails the
    job naming why."""
    server.create_table("test$pybatch", pa.table({"id": list(range(len(DOCS))), "text": DOCS}))
    api = generated(server)
    api.alter_table_add_columns("test$pybatch", AlterTableAddColumnsRequest(new_columns=[
        python_column("vec", "embed_docs", VECTOR, auto_backfill=True),
        python_column("calls", "rows_in_call", {"type": "int64"})]))
    for column in ("vec", "calls"):
        job = api.alter_table_backfill_columns("test$pybatch", AlterTableBackfillColumnsRequest(column=column))
        wait_job(server, job.job_id)
    got = {r["id"]: r for r in rows(server, "pybatch", ["id", "vec", "calls"])}
    assert got[2]["vec"] is None and got[5]["vec"] is None  # null and blank texts
    present = [0, 1, 3, 4]
    c = cosines([got[i]["vec"] for i in present], [DOCS[i].strip() for i in present])
    assert c.min() >= 0.9999, c
    # Called with several rows at once, not row by row.
    assert all(got[i]["calls"] > 1 for i in got), got

    # On insert (auto_backfill), through lancedb.
    server.lancedb().open_table("pybatch").add(
        pa.table({"id": [10, 11], "text": ["Kittens sleep a lot.", None]}))
    got = {r["id"]: r["vec"] for r in rows(server, "pybatch", ["id", "vec"])}
    assert got[11] is None
    assert cosines([got[10]], ["Kittens sleep a lot."]).min() >= 0.9999

    # (The numbers depend on the call's size, which the job chooses.)
    for entry, why in (("too_few", r"a batch function returned (\d+) values for (\d+) rows"),
                       ("raises", r"ValueError: no thanks to \d+ texts \(line 21\)")):
        api.alter_table_add_columns("test$pybatch", AlterTableAddColumnsRequest(new_columns=[
            python_column(entry, entry, {"type": "utf8"})]))
        job = api.alter_table_backfill_columns("test$pybatch", AlterTableBackfillColumnsRequest(column=entry))
        with pytest.raises(Exception) as err:
            server.lancedb().open_job(job.job_id).wait()
        found = re.search(why, str(err.value))
        assert found, err.value
        if entry == "too_few":
            assert int(found.group(1)) + 1 == int(found.group(2)), err.value


def test_the_readme_embedding_example_runs_as_written():
    """README's "Embedding columns" block, as written (only the address and, when the suite
    keeps models elsewhere, their folder replaced), on the tour's table."""
    import pathlib
    import re
    import subprocess
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Embedding columns"):]
    block = re.search(r"```sh\n(.*?)\n```", section, re.S).group(1)
    with tempfile.TemporaryDirectory() as d:
        s = Lancet(d, args=["--onnxruntime", ORT], env={"LANCET_BOOTSTRAP_KEY": "dev-key"})
        try:
            s.key = "dev-key"
            s.post("/v1/namespace/tour/create")
            s.create_table("tour$docs", pa.table({"id": [1, 2, 3], "text": [
                "lance is a columnar format for machine learning",
                "lancet serves lance tables over http", "a recipe for tomato soup"]}))
            body = block.replace("http://127.0.0.1:8080", s.base).replace(
                "~/.cache/lancet/models", os.path.dirname(os.path.dirname(ONNX)))
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", body], capture_output=True,
                                  text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            answer = json.loads(done.stdout[done.stdout.rindex('{"context"'):])
            assert [r["id"] for r in answer["rows"]] == [3], answer
        finally:
            s.stop()


def test_the_console_searches_an_embedding_column_by_meaning(server):
    """The console's Search tab offers "Meaning" for a column a model computes: the text goes
    to the server as `query_text`, and the rows come back in the model's order."""
    from playwright.sync_api import expect, sync_playwright
    from test_console import CHROMIUM, CHROMIUM_ARGS, Console
    server.create_table("test$console", pa.table({"id": list(range(len(DOCS))), "text": DOCS}))
    generated(server).alter_table_add_columns("test$console", AlterTableAddColumnsRequest(
        new_columns=[model_column("vec")]))
    wait_job(server, server.post("/v1/table/test$console/backfill_column", {"column": "vec"})["job_id"])
    server.create_table("test$console_plain", pa.table({"id": [1], "text": ["x"]}))
    with tempfile.TemporaryDirectory() as shots, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        c = Console(browser, server.base, shots)
        page = c.page
        try:
            c.open()
            c.sign_in(server.key)
            c.open("#/table/test%24console/search")
            page.click("#tab-search")
            page.select_option("#search-mode", "meaning")
            expect(page.locator("#embedding-column")).to_contain_text("vec (model minilm)")
            page.fill("#query-text", "money and markets")
            page.fill("#k", "2")
            page.click("#run-search")
            expect(page.locator("#search-status")).to_contain_text("2 rows")
            ids = page.locator("#search-results tbody tr td:first-child").all_inner_texts()
            assert sorted(ids) == ["1", "4"], ids
            expect(page.locator("#as-curl")).to_contain_text('"query_text":"money and markets"')
            expect(page.locator("#as-python")).to_contain_text("query_text")
            # A table with no model column offers no such search.
            c.open("#/table/test%24console_plain/search")
            page.click("#tab-search")
            expect(page.locator("#search-mode option[value=meaning]")).to_have_count(0)
        finally:
            c.close()
            browser.close()
