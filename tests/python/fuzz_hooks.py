"""Schemathesis hooks for test_fuzz.py, loaded by the schemathesis CLI (SCHEMATHESIS_HOOKS).

What they add to plain schema-driven generation:
- Arrow bodies: a mix of IPC streams (the fixture tables' schema, other schemas, nulls, odd
  values), truncated streams and random bytes, instead of text;
- ids: every other case of an operation names the fixture namespace, a fixture table or index,
  so the handler gets past the 404 and reaches the catalog and the store; a generated body `id`
  (a 400 when it disagrees with the path) is kept in one case of four;
- fixtures: namespace `fz` with tables `fz$t` (rows, a BTREE index, a tag, a branch) and
  `fz$v`, re-made after any successful call that may have dropped or reshaped them;
- counts: every response's status, per operation, written to LANCET_FUZZ_STATS at exit.
"""
import atexit
import collections
import json
import os
import threading
import urllib.error
import urllib.request

import pyarrow as pa
import schemathesis
from hypothesis import strategies as st

BASE = os.environ["LANCET_FUZZ_BASE"]
KEY = os.environ["LANCET_FUZZ_KEY"]
STATS = os.environ.get("LANCET_FUZZ_STATS")
ARROW = "application/vnd.apache.arrow.stream"

NAMESPACES = ["fz", "$"]
TABLES = ["fz$t", "fz$v"]
INDEXES = ["id_idx"]
# Calls after which the fixtures may be gone or reshaped.
MUTATING = ("/drop", "/deregister", "/rename", "/register", "/create", "/insert", "/merge_insert",
            "/restore", "/drop_columns", "/alter_columns", "/add_columns", "/batch-commit",
            "/delete", "/update", "/tables/{id}")

SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("text", pa.string()),
    ("vec", pa.list_(pa.float32(), 4)),
])

_lock = threading.Lock()
_statuses = collections.Counter()
_per_operation = collections.Counter()
_dirty = True


def _request(path, body=None, data=None, content_type="application/json"):
    payload = data if data is not None else json.dumps(body or {}).encode()
    req = urllib.request.Request(BASE + path, data=payload, method="POST", headers={
        "content-type": content_type, "authorization": f"Bearer {KEY}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _stream(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _rows(n, start=0):
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "text": pa.array([f"row {i}" for i in range(start, start + n)]),
        "vec": pa.array([[float(i), 1.0, 2.0, 3.0] for i in range(start, start + n)], pa.list_(pa.float32(), 4)),
    })


def seed():
    """(Re)make the fixtures: namespace fz, fz$t and fz$v with rows, fz$t's index, tag, branch."""
    _request("/v1/namespace/fz/create")
    for name in TABLES:
        _request(f"/v1/table/{name}/create?mode=overwrite", data=_stream(_rows(20)), content_type=ARROW)
    _request("/v1/table/fz$t/create_index", {"column": "id", "index_type": "BTREE", "name": "id_idx"})
    _request("/v1/table/fz$t/tags/create", {"tag": "v1", "version": 1})
    _request("/v1/table/fz$t/branches/create", {"name": "dev"})


@schemathesis.hook
def before_call(context, case, kwargs):
    global _dirty
    with _lock:
        if _dirty:
            _dirty = False
            seed()


@schemathesis.hook
def after_call(context, case, response):
    global _dirty
    op = f"{case.operation.method.upper()} {case.operation.path}"
    with _lock:
        _statuses[response.status_code] += 1
        _per_operation[op] += 1
        if 200 <= response.status_code < 300 and case.operation.path.endswith(MUTATING):
            _dirty = True


def _write_stats():
    if STATS:
        with open(STATS, "w") as f:
            json.dump({"statuses": {str(k): v for k, v in sorted(_statuses.items())},
                       "operations": dict(sorted(_per_operation.items()))}, f, indent=1)


atexit.register(_write_stats)


# ---- Arrow bodies

def _values(type_):
    if pa.types.is_int64(type_):
        return st.none() | st.integers(-2**63, 2**63 - 1)
    if pa.types.is_string(type_):
        return st.none() | st.text(max_size=16)
    if pa.types.is_float64(type_):
        return st.none() | st.floats(allow_nan=True, allow_infinity=True)
    if pa.types.is_boolean(type_):
        return st.none() | st.booleans()
    if pa.types.is_fixed_size_list(type_):
        return st.none() | st.lists(st.floats(width=32), min_size=type_.list_size, max_size=type_.list_size)
    return st.none()


OTHER_SCHEMAS = [
    SCHEMA,
    pa.schema([("id", pa.int64())]),
    pa.schema([("id", pa.string()), ("text", pa.string())]),
    pa.schema([("x", pa.float64()), ("y", pa.bool_())]),
    pa.schema([("id", pa.int64()), ("text", pa.string()), ("vec", pa.list_(pa.float32(), 4)), ("extra", pa.bool_())]),
    pa.schema([]),
]


@st.composite
def _tables(draw):
    schema = draw(st.sampled_from(OTHER_SCHEMAS))
    n = draw(st.integers(0, 12))
    columns = [pa.array([draw(_values(f.type)) for _ in range(n)], f.type) for f in schema]
    return _stream(pa.Table.from_arrays(columns, schema=schema) if len(schema) else pa.table({}))


def _truncated(data):
    return st.integers(0, max(len(data) - 1, 0)).map(lambda n: data[:n])


ARROW_BODIES = st.one_of(
    _tables(),
    _tables().flatmap(_truncated),
    st.binary(max_size=512),
)


@schemathesis.serializer(ARROW)
def arrow_serializer(ctx, value):
    if isinstance(value, (bytes, bytearray)):
        return {"data": bytes(value)}
    return {"data": str(value).encode()}


def _takes_arrow(operation):
    return any(getattr(b, "media_type", None) == ARROW for b in operation.body)


@schemathesis.hook
def flatmap_body(context, body):
    if context.operation is not None and _takes_arrow(context.operation):
        return ARROW_BODIES
    return st.just(body)


# ---- ids

_case_counter = collections.Counter()


def _fixed_streams():
    """Arrow bodies for the cases schemathesis makes without hypothesis (its coverage phase)."""
    good = _stream(_rows(5, 100))
    return [
        good,
        _stream(_rows(0)),
        _stream(pa.table({"id": pa.array([1, 2], pa.int64())})),
        _stream(pa.table({"other": pa.array(["a", None])})),
        good[: len(good) // 2],
        b"",
    ]


FIXED_STREAMS = _fixed_streams()


@schemathesis.hook
def map_case(context, case):
    """Every other case of an operation aims at a fixture (so it gets past the 404), every third
    Arrow body is a fixed stream, and a generated body `id` (nearly always a 400 for disagreeing
    with the path) is kept in one case of four. Deterministic for a seed: counts per operation."""
    op = case.operation
    key = f"{op.method} {op.path}"
    with _lock:
        n = _case_counter[key]
        _case_counter[key] += 1
    params = case.path_parameters
    if params and "id" in params and n % 2 == 1:
        if op.path.startswith("/v1/namespace/"):
            known = NAMESPACES
        elif op.path.startswith("/v1/tables/"):
            known = ["fz$new", "fresh"]
        else:
            known = TABLES
        params = dict(params)
        params["id"] = known[(n // 2) % len(known)]
        if "index_name" in params:
            params["index_name"] = INDEXES[(n // 2) % len(INDEXES)]
        case.path_parameters = params
    if _takes_arrow(op) and n % 3 == 1:
        case.body = FIXED_STREAMS[(n // 3) % len(FIXED_STREAMS)]
    body = case.body
    if isinstance(body, dict) and "id" in body and n % 4:
        body = {k: v for k, v in body.items() if k != "id"}
    if isinstance(body, dict) and n % 3 == 2:
        body = _with_vocabulary(body, n)
    case.body = body
    return case


# Values that mean something to the fixtures, swapped into generated JSON bodies now and then
# so more cases get past "no such column" to the code behind it.
VOCABULARY = {
    "column": ["id", "text", "vec"],
    "vector_column": ["vec"],
    "predicate": ["id > 3", "text = 'row 1'", "id IS NULL", "vec IS NOT NULL", "id % 2 = 0"],
    "filter": ["id < 10", "text LIKE 'row%'", "id IN (1, 2, 3)"],
    "where": ["id > 5"],
    "path": ["id", "text", "vec"],
    "columns": [["id"], ["text", "vec"], {"column_names": ["id", "text"]}],
    "vector": [[1.0, 2.0, 3.0, 4.0], {"single_vector": [0.0, 0.5, 1.0, 1.5]}, [[1.0, 2.0, 3.0, 4.0]]],
    "tag": ["v1"],
    "name": ["dev", "id_idx"],
    "index_type": ["BTREE", "BITMAP", "IVF_FLAT", "INVERTED", "ZONEMAP"],
    "version": [1, 2],
    "k": [1, 5],
    "updates": [[["text", "upper(text)"]], [["id", "id + 1"]]],
    "new_columns": [[{"name": "doubled", "expression": "id * 2"}]],
    "alterations": [[{"path": "text", "rename": "body"}], [{"path": "id", "nullable": True}]],
}


def _with_vocabulary(body, n):
    out = dict(body)
    for i, key in enumerate(sorted(out)):
        words = VOCABULARY.get(key)
        if words and (n + i) % 2 == 0:
            out[key] = words[(n // 2 + i) % len(words)]
    return out
