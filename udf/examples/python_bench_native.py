"""python_bench's native side: the runner's own code (udf/python/runner/lancet_runner.py) run
by the machine's CPython on the same column buffers the sandbox gets, so the ratio compares one
interpreter with the other doing the same work: buffers in, the UDF per row, buffers out.

argv: runner.py, data.json ({"columns": [[kind, values]...], "batch", "returns", "fields",
"source", "entry", "passes"}). Prints: ns/row, python version. The componentize-py bindings the
runner imports are stood in for by plain classes with the same fields.
"""

import array
import dataclasses
import enum
import json
import sys
import time
import types

perf_counter = time.perf_counter  # the runner refuses the clock once imported

runner_path, data_path = sys.argv[1], sys.argv[2]
with open(data_path) as f:
    spec = json.load(f)
with open(runner_path) as f:
    runner_source = f.read()


class Kind(enum.Enum):
    INTS = 0
    FLOATS = 1
    TEXTS = 2
    BLOBS = 3
    BOOLS = 4
    JSON = 5


@dataclasses.dataclass
class Column:
    kind: Kind
    data: bytes
    offsets: bytes
    nulls: bytes


@dataclasses.dataclass
class Param:
    name: str
    annotation: object
    has_default: bool


@dataclasses.dataclass
class Signature:
    params: list
    returns: object
    python: str


@dataclasses.dataclass
class RowError:
    row: int
    message: str


@dataclasses.dataclass
class Output:
    values: list
    nulls: bytes
    errors: list


class Err(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


class WitWorldBase:
    pass


wit_types = types.ModuleType("wit_world.imports.types")
for cls in (Kind, Column, Param, Signature, RowError, Output):
    setattr(wit_types, cls.__name__, cls)
imports = types.ModuleType("wit_world.imports")
imports.types = wit_types
wit_world = types.ModuleType("wit_world")
wit_world.WitWorld = WitWorldBase
wit_world.imports = imports
cpt = types.ModuleType("componentize_py_types")
cpt.Err = Err
sys.modules.update({"wit_world": wit_world, "wit_world.imports": imports,
                    "wit_world.imports.types": wit_types, "componentize_py_types": cpt})


def column(kind, values):
    """The buffers the host hands the sandbox (udf/src/python/columns.rs)."""
    kind = Kind[kind.upper()]
    if kind == Kind.INTS:
        return Column(kind, array.array("q", values).tobytes(), b"", b"")
    if kind == Kind.FLOATS:
        return Column(kind, array.array("d", values).tobytes(), b"", b"")
    encoded = [v.encode("utf-8") for v in values]
    offsets = [0]
    for e in encoded:
        offsets.append(offsets[-1] + len(e))
    return Column(kind, b"".join(encoded), array.array("I", offsets).tobytes(), b"")


rows = len(spec["columns"][0][1])
batch = spec["batch"]
batches = [
    ([column(kind, values[start:start + batch]) for kind, values in spec["columns"]],
     min(batch, rows - start))
    for start in range(0, rows, batch)
]
returns = Kind[spec["returns"].upper()]
fields = [(name, Kind[kind.upper()]) for name, kind in spec["fields"]]

runner = types.ModuleType("lancet_runner")
exec(compile(runner_source, runner_path, "exec"), runner.__dict__)
world = runner.WitWorld()
world.load(spec["source"], spec["entry"], [], None, [])

best = None
for _ in range(spec["passes"] + 1):
    t = perf_counter()
    for args, n in batches:
        out = world.call(args, n, returns, fields, False)
        assert not out.errors, out.errors[:3]
    dt = perf_counter() - t
    best = dt if best is None else min(best, dt)
print(best / rows * 1e9, sys.version.split()[0])
