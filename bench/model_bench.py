"""Embedding speed: Lancet's model column, a Rust guest calling `embed` and a Python UDF calling
`lancet.embed`, each backfilling the same text column, against native ONNX Runtime (Python's
`onnxruntime` with the same model, tokenizer, pooling and thread count, in this process) in the
same run; and a text query's p50 against a vector query's p50 plus one native embedding.

    ROWS=100000 LANCET_BIN=... LANCET_PLUGINS_DIR=... ~/.cache/lancet-venv/bin/python bench/model_bench.py

`PATHS` (comma-separated) picks the Lancet paths run beside native ONNX Runtime: `column` (the
model column, and the queries, which need it), `guest`, `python` (the default: all three). Each
path's figure is also printed (to stderr) as soon as it is measured.

Prints a Markdown table. Runs the server with --model-threads 1 (the default) and native ONNX
Runtime with one intra-op thread: the same CPU each."""
import base64
import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.request

import numpy as np
import onnxruntime
import pyarrow as pa
import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
from conftest import Lancet  # noqa: E402
from test_jobs import virtual_column  # noqa: E402
from test_models import MAX_TOKENS, ONNX, ORT, TOKENIZER, manifest, read, upload  # noqa: E402

ROWS = int(os.environ.get("ROWS", "100000"))
# Lancet paths beside the model column (each takes ~ROWS/100 s on one core here): guest, python.
PATHS = os.environ.get("PATHS", "column,guest,python").split(",")
BATCH = 64
WORDS = ("lance table vector search column model query index server client data row batch "
         "cat dog market bond rate river mountain city music paper code test fast slow green "
         "blue red small large early late open close").split()


def texts(n, seed=7):
    rng = random.Random(seed)
    # ~24 words: about 32 tokens with [CLS]/[SEP] and word pieces.
    return [" ".join(rng.choice(WORDS) for _ in range(24)) + "." for _ in range(n)]


def native(rows):
    tok = tokenizers.Tokenizer.from_file(TOKENIZER)
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding()
    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(ONNX, opts, providers=["CPUExecutionProvider"])
    start = time.perf_counter()
    for i in range(0, len(rows), BATCH):
        encs = tok.encode_batch(rows[i:i + BATCH])
        ids = np.array([e.ids for e in encs], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
        hidden = session.run(["last_hidden_state"], {
            "input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        m = mask[:, :, None].astype(np.float32)
        v = (hidden * m).sum(1) / m.sum(1)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
    took = time.perf_counter() - start

    def one(text):
        """Seconds to embed one text (tokenise, run, pool), as a text query needs."""
        s = time.perf_counter()
        e = tok.encode_batch([text])
        ids = np.array([e[0].ids], dtype=np.int64)
        mask = np.ones_like(ids)
        hidden = session.run(["last_hidden_state"], {
            "input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        v = hidden.mean(1)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        return time.perf_counter() - s

    return len(rows) / took, one


def backfill(server, table, column):
    job = server.post(f"/v1/table/{table}/backfill_column", {"column": column})["job_id"]
    start = time.perf_counter()
    db = server.lancedb()
    db.open_job(job).wait()
    return time.perf_counter() - start


def model_table(server, rows):
    """Registers minilm and makes table `b$t` of `rows` (id, text) with a model column `vec`
    of the text, not yet computed."""
    upload(server, read(ONNX))
    upload(server, read(TOKENIZER))
    server.post("/v1/model/minilm/create", manifest())
    server.post("/v1/namespace/b/create")
    server.create_table("b$t", pa.table({"id": list(range(len(rows))), "text": rows}))
    server.post("/v1/table/b$t/add_columns", {"new_columns": [{"name": "vec", "virtual_column": {
        "input_columns": ["text"], "udf_backend": "model", "udf_name": "minilm", "outputs": []}}]})


def query_seconds(server, table, body):
    req = urllib.request.Request(server.base + f"/v1/table/{table}/query", data=json.dumps(body).encode(),
                                 method="POST", headers={"content-type": "application/json",
                                                         "authorization": f"Bearer {server.key}"})
    s = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        r.read()
    return time.perf_counter() - s


def query_p50s(server, table, texts, one, rounds=300):
    """p50 ms of a native one-text embedding, a text query, and two vector queries, measured in
    interleaved rounds (each round one of each, the same text for both embeddings), so that
    the machine's drift over the run touches all alike. The text query is compared with a
    vector query searching the same vector (the text's embedding, fetched beforehand): top-k
    over real embeddings costs the search ~5% more than over the constant vector also shown."""
    constant = [0.05] * 384
    same = server.post("/v1/model/minilm/embed", {"texts": texts})["vectors"]
    lat = {"vector": [], "same": [], "text": [], "native": []}
    for i in range(rounds):
        text = texts[i % len(texts)]
        lat["native"].append(one(text))
        lat["vector"].append(query_seconds(server, table, {
            "vector": constant, "vector_column": "vec", "k": 10, "columns": ["id"]}))
        lat["same"].append(query_seconds(server, table, {
            "vector": same[i % len(texts)], "vector_column": "vec", "k": 10, "columns": ["id"]}))
        lat["text"].append(query_seconds(server, table, {
            "query_text": text, "vector_column": "vec", "k": 10, "columns": ["id"]}))
    return {k: statistics.median(v) * 1000 for k, v in lat.items()}


PY_UDF = """
import lancet

@lancet.batch
def emb(texts: list[str]) -> list[list[float]]:
    return lancet.embed("minilm", texts)
"""
VECTOR = {"type": "fixed_size_list", "length": 384,
          "fields": [{"name": "item", "nullable": True, "type": {"type": "float32"}}]}


def main():
    rows = texts(ROWS)
    native_rps, one = native(rows)
    out = [("native ONNX Runtime (Python onnxruntime, 1 thread, batches of 64)", native_rps, 1.0)]
    print(f"native: {native_rps:.0f} rows/s", file=sys.stderr, flush=True)

    def measured(name, rps):
        out.append((name, rps, rps / native_rps))
        print(f"{name}: {rps:.0f} rows/s, {rps / native_rps:.2f}x", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as d:
        s = Lancet(d, args=["--onnxruntime", ORT, "--tenant-model-tokens-per-sec", "0"])
        try:
            model_table(s, rows)
            if "column" in PATHS:
                took = backfill(s, "b$t", "vec")
                measured("Lancet model column (backfill job)", ROWS / took)
            if "guest" in PATHS:
                col = virtual_column("doc_embed", "doc_embed", ["text"], config={"model": "minilm", "dimension": "384"})
                s.post("/v1/table/b$t/add_columns", {"new_columns": [{"name": "guest", "virtual_column": col}]})
                took = backfill(s, "b$t", "guest")
                measured("Rust guest calling embed (doc_embed)", ROWS / took)
            if "python" in PATHS:
                s.post("/v1/table/b$t/add_columns", {"new_columns": [{"name": "py", "virtual_column": {
                    "input_columns": ["text"], "udf_name": "emb", "image": "python:3.11-slim",
                    "udf": base64.b64encode(PY_UDF.encode()).decode(),
                    "outputs": [{"column": "py", "struct_field": "py", "data_type": VECTOR}]}}]})
                took = backfill(s, "b$t", "py")
                measured("Python UDF calling lancet.embed (@lancet.batch, the vectors)", ROWS / took)
            if "column" in PATHS:
                p50 = query_p50s(s, "b$t", rows[:200], one)
        finally:
            s.stop()
    print(f"{ROWS} rows of ~32 tokens; all-MiniLM-L6-v2 int8\n")
    print("| path | rows/s | vs native |\n|---|---:|---:|")
    for name, rps, ratio in out:
        print(f"| {name} | {rps:.0f} | {ratio:.2f}x |")
    if "column" not in PATHS:
        return
    bound = p50["same"] + p50["native"] + 1
    print(f"\n| query (300 interleaved rounds) | p50 ms |\n|---|---:|\n"
          f"| native one-text embedding (in this process) | {p50['native']:.2f} |\n"
          f"| vector (k=10, exact), a constant vector | {p50['vector']:.2f} |\n"
          f"| vector (k=10, exact), the text's embedding | {p50['same']:.2f} |\n"
          f"| text (k=10, embedded by the server) | {p50['text']:.2f} |\n"
          f"| bound: vector p50 (same vector) + native embedding + 1 ms | {bound:.2f} |")


if __name__ == "__main__":
    main()
