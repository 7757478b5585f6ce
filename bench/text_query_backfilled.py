"""A text query on a table the model column's backfill wrote, against vector queries, in
interleaved rounds (see bench/model_bench.py), in the backfill's own server process or in a
server restarted on the same data. The table's texts are one word each (`SHORT=1`) so the
100,000-row backfill takes minutes, not an hour; the queries' texts are model_bench's ~32-token
ones. Prints p50 ms: native one-text embedding, vector query (constant vector), text query,
vector query with the text's embedding, and the gap over the constant-vector bound.

    DATA=/tmp/d PHASE=build SHORT=1 [EXTRA="--model-threads 2"] LANCET_BIN=... python bench/text_query_backfilled.py
    DATA=/tmp/d PHASE=rounds SHORT=1 LANCET_BIN=... python bench/text_query_backfilled.py
"""
import json, os, statistics, sys, time, urllib.request
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import model_bench as mb
import pyarrow as pa
from conftest import Lancet
from test_models import ONNX, ORT, TOKENIZER, manifest, read, upload

ROWS = int(os.environ.get("ROWS", "100000"))
DATA = os.environ["DATA"]
PHASE = os.environ.get("PHASE", "build")
ROUNDS = int(os.environ.get("ROUNDS", "300"))
EXTRA = os.environ.get("EXTRA", "").split()

def rounds(s, texts, one):
    vecs = s.post("/v1/model/minilm/embed", {"texts": texts})["vectors"]
    lat = {"native": [], "vector": [], "text": [], "vector_emb": []}
    for i in range(ROUNDS):
        t = texts[i % len(texts)]
        lat["native"].append(one(t))
        lat["vector"].append(mb.query_seconds(s, "b$t", {"vector": [0.05]*384, "vector_column": "vec", "k": 10, "columns": ["id"]}))
        lat["text"].append(mb.query_seconds(s, "b$t", {"query_text": t, "vector_column": "vec", "k": 10, "columns": ["id"]}))
        lat["vector_emb"].append(mb.query_seconds(s, "b$t", {"vector": vecs[i % len(texts)], "vector_column": "vec", "k": 10, "columns": ["id"]}))
    p = {k: statistics.median(v)*1000 for k, v in lat.items()}
    p["gap"] = p["text"] - (p["vector"] + p["native"] + 1)
    print(json.dumps({k: round(v, 2) for k, v in p.items()}), flush=True)

rows = mb.texts(ROWS)
if os.environ.get("SHORT"):
    # The table's texts short (a fast backfill, the same table layout); queries keep long texts.
    queries = rows[:200]
    rows = [w for w in (mb.WORDS * (ROWS // len(mb.WORDS) + 1))[:ROWS]]
else:
    queries = rows[:200]
_, one = mb.native(rows[:640])
args = ["--onnxruntime", ORT, "--tenant-model-tokens-per-sec", "0", *EXTRA]
s = Lancet(DATA, args=args)
try:
    if PHASE == "build":
        upload(s, read(ONNX)); upload(s, read(TOKENIZER))
        s.post("/v1/model/minilm/create", manifest())
        s.post("/v1/namespace/b/create")
        s.create_table("b$t", pa.table({"id": list(range(ROWS)), "text": rows}))
        s.post("/v1/table/b$t/add_columns", {"new_columns": [{"name": "vec", "virtual_column": {
            "input_columns": ["text"], "udf_backend": "model", "udf_name": "minilm", "outputs": []}}]})
        took = mb.backfill(s, "b$t", "vec")
        print(f"backfill {ROWS/took:.0f} rows/s", flush=True)
    for _ in range(int(os.environ.get("REPEAT", "1"))):
        rounds(s, queries, one)
finally:
    s.stop()
