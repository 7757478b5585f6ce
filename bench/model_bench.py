"""Embedding speed: Lancet's model column, a Rust guest calling `embed` and a Python UDF calling
`lancet.embed`, each backfilling the same text column, against native ONNX Runtime (Python's
`onnxruntime` with the same model, tokenizer, pooling and thread count, in this process) in the
same run; and a text query's p50 against a vector query's p50 plus one native embedding.

    ROWS=100000 LANCET_BIN=... LANCET_PLUGINS_DIR=... ~/.cache/lancet-venv/bin/python bench/model_bench.py

`PATHS=column` runs only the model column (always run: the queries need it) beside native ONNX
Runtime; add `guest` and `python` (comma-separated) for those paths (the default: all three).

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
    one = []
    for t in rows[:200]:
        s = time.perf_counter()
        e = tok.encode_batch([t])
        ids = np.array([e[0].ids], dtype=np.int64)
        session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                            "token_type_ids": np.zeros_like(ids)})
        one.append(time.perf_counter() - s)
    return len(rows) / took, statistics.median(one) * 1000


def backfill(server, table, column):
    job = server.post(f"/v1/table/{table}/backfill_column", {"column": column})["job_id"]
    start = time.perf_counter()
    db = server.lancedb()
    db.open_job(job).wait()
    return time.perf_counter() - start


def query_p50(server, table, body, n=200):
    data = json.dumps(body).encode()
    lat = []
    for _ in range(n):
        req = urllib.request.Request(server.base + f"/v1/table/{table}/query", data=data, method="POST",
                                     headers={"content-type": "application/json",
                                              "authorization": f"Bearer {server.key}"})
        s = time.perf_counter()
        with urllib.request.urlopen(req) as r:
            r.read()
        lat.append(time.perf_counter() - s)
    return statistics.median(lat) * 1000


PY_UDF = """
import lancet
def emb(text):
    return lancet.embed("minilm", [text])[0][0]
"""


def main():
    rows = texts(ROWS)
    native_rps, native_one_ms = native(rows)
    out = [("native ONNX Runtime (Python onnxruntime, 1 thread, batches of 64)", native_rps, 1.0)]
    with tempfile.TemporaryDirectory() as d:
        s = Lancet(d, args=["--onnxruntime", ORT, "--tenant-model-tokens-per-sec", "0"])
        try:
            upload(s, read(ONNX))
            upload(s, read(TOKENIZER))
            s.post("/v1/model/minilm/create", manifest())
            s.post("/v1/namespace/b/create")
            s.create_table("b$t", pa.table({"id": list(range(ROWS)), "text": rows}))
            s.post("/v1/table/b$t/add_columns", {"new_columns": [{"name": "vec", "virtual_column": {
                "input_columns": ["text"], "udf_backend": "model", "udf_name": "minilm", "outputs": []}}]})
            took = backfill(s, "b$t", "vec")
            out.append(("Lancet model column (backfill job)", ROWS / took, ROWS / took / native_rps))
            if "guest" in PATHS:
                col = virtual_column("doc_embed", "doc_embed", ["text"], config={"model": "minilm", "dimension": "384"})
                s.post("/v1/table/b$t/add_columns", {"new_columns": [{"name": "guest", "virtual_column": col}]})
                took = backfill(s, "b$t", "guest")
                out.append(("Rust guest calling embed (doc_embed)", ROWS / took, ROWS / took / native_rps))
            if "python" in PATHS:
                s.post("/v1/table/b$t/add_columns", {"new_columns": [{"name": "py", "virtual_column": {
                    "input_columns": ["text"], "udf_name": "emb", "image": "python:3.11-slim",
                    "udf": base64.b64encode(PY_UDF.encode()).decode(),
                    "outputs": [{"column": "py", "struct_field": "py", "data_type": {"type": "double"}}]}}]})
                took = backfill(s, "b$t", "py")
                out.append(("Python UDF calling lancet.embed (one text per call)", ROWS / took, ROWS / took / native_rps))
            vector = [0.05] * 384
            vq = query_p50(s, "b$t", {"vector": vector, "vector_column": "vec", "k": 10, "columns": ["id"]})
            tq = query_p50(s, "b$t", {"query_text": rows[0], "vector_column": "vec", "k": 10, "columns": ["id"]})
        finally:
            s.stop()
    print(f"{ROWS} rows of ~32 tokens; all-MiniLM-L6-v2 int8; native single-text embed p50 {native_one_ms:.2f} ms\n")
    print("| path | rows/s | vs native |\n|---|---:|---:|")
    for name, rps, ratio in out:
        print(f"| {name} | {rps:.0f} | {ratio:.2f}x |")
    print(f"\n| query | p50 ms |\n|---|---:|\n| vector (k=10, exact) | {vq:.2f} |\n"
          f"| text (k=10, embedded by the server) | {tq:.2f} |\n"
          f"| bound: vector p50 + native embed + 1 ms | {vq + native_one_ms + 1:.2f} |")


if __name__ == "__main__":
    main()
