"""A text query on a table the model column's backfill wrote, against vector queries, in
model_bench's interleaved rounds (`model_bench.query_p50s`), in the backfill's own server
process (`PHASE=build`) or in a server restarted on the same data (`PHASE=rounds`). With
`SHORT=1` the table's texts are one word each, so the 100,000-row backfill takes minutes, not an
hour; the queries keep model_bench's ~32-token texts. Prints p50 ms of a native one-text
embedding, a vector query with a constant vector and with the text's embedding, a text query,
and the text query's margin under the bound (same-vector query + native embedding + 1 ms).

    DATA=/tmp/d PHASE=build SHORT=1 [EXTRA="--model-threads 2"] LANCET_BIN=... python bench/text_query_backfilled.py
    DATA=/tmp/d PHASE=rounds SHORT=1 LANCET_BIN=... python bench/text_query_backfilled.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import model_bench as mb  # noqa: E402
from conftest import Lancet  # noqa: E402
from test_models import ORT  # noqa: E402

ROWS = int(os.environ.get("ROWS", "100000"))


def main():
    rows = mb.texts(ROWS)
    queries = rows[:200]
    if os.environ.get("SHORT"):
        # Short texts: a fast backfill writing the same table layout.
        rows = (mb.WORDS * (ROWS // len(mb.WORDS) + 1))[:ROWS]
    _, one = mb.native(queries)
    args = ["--onnxruntime", ORT, "--tenant-model-tokens-per-sec", "0",
            *os.environ.get("EXTRA", "").split()]
    s = Lancet(os.environ["DATA"], args=args)
    try:
        if os.environ.get("PHASE", "build") == "build":
            mb.model_table(s, rows)
            print(f"backfill {ROWS / mb.backfill(s, 'b$t', 'vec'):.0f} rows/s", flush=True)
        for _ in range(int(os.environ.get("REPEAT", "1"))):
            p = mb.query_p50s(s, "b$t", queries, one, rounds=int(os.environ.get("ROUNDS", "300")))
            p["under_bound"] = p["same"] + p["native"] + 1 - p["text"]
            print(json.dumps({k: round(v, 2) for k, v in p.items()}), flush=True)
    finally:
        s.stop()


if __name__ == "__main__":
    main()
