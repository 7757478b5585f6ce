"""Lancet's Python UDF runner: runs inside CPython compiled to WebAssembly (componentize-py).

One instance serves one function: `load` compiles the user's source and keeps the entry point;
`call` applies it row by row. The component is built with `--stub-wasi`, so the interpreter has
no files, clock, sockets or host environment; the calls below that would reach WASI are replaced
by ones that raise a Python error naming the sandbox, so a UDF gets an exception it can read
rather than a trap.
"""

import builtins
import gc
import io
import json
import os
import sys
import traceback

# Imported now, while the component is being built (pre-initialised), so a UDF's `import` of
# them finds them in sys.modules: at run time the sandbox has no files to import from.
import array
import base64  # noqa: F401
import binascii  # noqa: F401
import bisect  # noqa: F401
import collections  # noqa: F401
import copy  # noqa: F401
import dataclasses  # noqa: F401
import datetime  # noqa: F401
import decimal  # noqa: F401
import difflib  # noqa: F401
import enum  # noqa: F401
import fractions  # noqa: F401
import functools  # noqa: F401
import hashlib  # noqa: F401
import heapq  # noqa: F401
import html  # noqa: F401
import itertools
import math  # noqa: F401
import operator
import random  # noqa: F401
import re  # noqa: F401
import statistics  # noqa: F401
import string  # noqa: F401
import struct  # noqa: F401
import textwrap  # noqa: F401
import typing  # noqa: F401
import unicodedata  # noqa: F401
import urllib.parse  # noqa: F401
import uuid  # noqa: F401
import zlib  # noqa: F401

import _strptime  # noqa: F401  (datetime.strptime imports it lazily)
import importlib.abc
import importlib.util
import pkgutil  # noqa: F401  (bundled packages read their data files with get_data)
import contextlib  # noqa: F401
import logging  # noqa: F401  (imported by many pure-Python packages)
import warnings  # noqa: F401
import csv  # noqa: F401
import pprint  # noqa: F401
import numbers  # noqa: F401
import ipaddress  # noqa: F401
import encodings.idna  # noqa: F401
import importlib.metadata

# What pure-Python packages commonly import at run time, where the build can load it (a module
# WASI lacks is simply left out: importing it stays a clear ModuleNotFoundError).
for _module in ("argparse", "ast", "calendar", "codecs", "contextvars", "copyreg",
                "email.utils", "fnmatch", "gettext", "hmac", "html.parser", "importlib.resources",
                "pathlib", "pickle", "queue", "secrets", "shlex", "threading", "tokenize",
                "weakref", "xml.etree.ElementTree", "zoneinfo"):
    try:
        importlib.import_module(_module)
    except ImportError:
        pass
import inspect  # noqa: F401
import locale  # noqa: F401

import wit_world
from componentize_py_types import Err
from wit_world.imports import host as _host
from wit_world.imports import types as t

UDF_FILE = "/lancet-sandbox/udf.py"


def _embed(model, texts):
    """`lancet.embed(model, texts)`: one vector (a list of floats) per text, by the tenant's
    registered model `model`, run by the host. Raises RuntimeError with the host's message."""
    if isinstance(texts, str):
        raise TypeError("lancet.embed takes a list of texts, not one string")
    texts = list(texts)
    if not all(isinstance(x, str) for x in texts):
        raise TypeError("lancet.embed takes texts (str)")
    try:
        dimension, values = _host.embed(str(model), texts)
    except Err as e:
        raise RuntimeError(e.value) from None
    return [values[i * dimension:(i + 1) * dimension] for i in range(len(texts))]


EMBED_CALL_TEXTS = 1024


def _embed_all(model, texts):
    """`lancet.embed` for any number of texts: host calls of at most EMBED_CALL_TEXTS (the
    server's default `--model-max-rows`), so a batch function can pass its whole column."""
    if isinstance(texts, str):
        raise TypeError("lancet.embed takes a list of texts, not one string")
    texts = list(texts)
    if len(texts) <= EMBED_CALL_TEXTS:
        return _embed(model, texts)
    out = []
    for i in range(0, len(texts), EMBED_CALL_TEXTS):
        out.extend(_embed(model, texts[i:i + EMBED_CALL_TEXTS]))
    return out


def _batch(fn):
    """`@lancet.batch`: the function (or class) is called once per call with a list per
    input column (the call's rows; None where a row is null) and returns a list of as many
    results, in order. For work that is cheaper a batch at a time, e.g. `lancet.embed`."""
    if not callable(fn):
        raise TypeError("@lancet.batch decorates a function or a class")
    fn.__lancet_batch__ = True
    return fn


def _is_batch(fn):
    return bool(getattr(fn, "__lancet_batch__", False)
                or getattr(getattr(fn, "__call__", None), "__lancet_batch__", False))


# `import lancet` in a UDF finds this module (nothing is importable from files at run time).
_lancet = type(sys)("lancet")
_lancet.embed = _embed_all
_lancet.batch = _batch
_lancet.__doc__ = "What the Lancet host offers a UDF: embed(model, texts), @batch."
sys.modules["lancet"] = _lancet
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1


def _refused(what):
    def refuse(*_args, **_kwargs):
        raise PermissionError(f"{what} is not available in Lancet's UDF sandbox")

    return refuse


# No files, processes or sockets: each of these would reach a stubbed WASI call (a trap).
builtins.open = io.open = _refused("opening files")
for _name in ("open", "listdir", "scandir", "stat", "lstat", "remove", "unlink", "mkdir",
              "rmdir", "rename", "replace", "chdir", "getcwd", "system", "popen", "urandom",
              "walk", "access", "utime", "truncate"):
    if hasattr(os, _name):
        setattr(os, _name, _refused(f"os.{_name}"))
random.seed(0)
os.environ.clear()
# No clock either: a UDF's result must depend on its row alone.
import time  # noqa: E402

for _name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
              "process_time", "process_time_ns", "thread_time", "thread_time_ns", "sleep"):
    if hasattr(time, _name):
        setattr(time, _name, _refused(f"time.{_name}"))


def _exit(*_args):
    raise SystemExit("sys.exit() is not allowed in a UDF")


sys.exit = _exit


class _NoNewModules:
    """Refuses every import not done while the runner was built: at run time the sandbox has
    no files to import from (reading one would trap)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        raise ModuleNotFoundError(
            f"module '{name}' is not available in Lancet's UDF sandbox", name=name
        )


BUNDLE_ROOT = "/lancet-sandbox/bundle/"


class _Bundle(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the modules shipped with the function (`load`'s `files`) from memory, ahead of
    _NoNewModules; serves their data files to `pkgutil.get_data` (`get_data`)."""

    files = {}

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        base = name.replace(".", "/")
        for rel, package in ((base + "/__init__.py", True), (base + ".py", False)):
            if rel in cls.files:
                spec = importlib.util.spec_from_loader(
                    name, cls(), origin=BUNDLE_ROOT + rel, is_package=package
                )
                spec.has_location = True
                if package:
                    spec.submodule_search_locations = [BUNDLE_ROOT + base]
                return spec
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        rel = module.__spec__.origin[len(BUNDLE_ROOT):]
        module.__file__ = module.__spec__.origin
        code = compile(_Bundle.files[rel], module.__file__, "exec", dont_inherit=True)
        exec(code, module.__dict__)

    @classmethod
    def find_distributions(cls, context=importlib.metadata.DistributionFinder.Context()):
        """The shipped packages' metadata (`importlib.metadata.version("pkg")`)."""
        wanted = context.name and context.name.replace("-", "_").replace(".", "_").lower()
        for rel in cls.files:
            folder, _, leaf = rel.partition("/")
            if leaf != "METADATA" or not folder.endswith(".dist-info"):
                continue
            name = folder[: -len(".dist-info")].rsplit("-", 1)[0]
            if wanted is None or name.replace("-", "_").replace(".", "_").lower() == wanted:
                yield _BundledDistribution(folder)

    def get_data(self, path):
        rel = path[len(BUNDLE_ROOT):] if path.startswith(BUNDLE_ROOT) else None
        if rel is None or rel not in _Bundle.files:
            raise FileNotFoundError(path)
        return _Bundle.files[rel]


class _BundledDistribution(importlib.metadata.Distribution):
    def __init__(self, folder):
        self._folder = folder

    def read_text(self, filename):
        data = _Bundle.files.get(f"{self._folder}/{filename}")
        return None if data is None else data.decode("utf-8", "replace")

    def locate_file(self, path):
        return BUNDLE_ROOT + str(path)


sys.meta_path.insert(0, _Bundle)

# Read one distribution's metadata now: importlib.metadata loads its parser (email.*, its own
# submodules) lazily, and at run time there are no files to load them from.
_Bundle.files = {"probe-1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: probe\nVersion: 1\n"}
assert importlib.metadata.version("probe") == "1"
_Bundle.files = {}

# From here on, only shipped files are importable.
sys.meta_path.remove(_Bundle)
sys.meta_path[:0] = [_Bundle, _NoNewModules]

_ALLOWED_EVENTS = {"os.putenv", "os.unsetenv"}  # os.environ's own bookkeeping, no host call
_REFUSED_PREFIXES = ("os.", "socket.", "subprocess.", "shutil.", "ctypes.", "tempfile.",
                     "glob.", "urllib.", "webbrowser.")


def _audit(event, args):
    """Refuses, as a PermissionError, what would reach the host: files (also CPython's own
    fopen when a SyntaxError looks for its source line, which then falls back to the source
    text), processes, sockets."""
    if event in _ALLOWED_EVENTS:
        return
    if event == "open" or event.startswith(_REFUSED_PREFIXES):
        raise PermissionError(f"{event} is not available in Lancet's UDF sandbox")


sys.addaudithook(_audit)
# A deep recursion should be Python's RecursionError, well before the Wasm stack runs out.
sys.setrecursionlimit(400)


def _describe(exc):
    """`Type: message (line N)`: the deepest place in the UDF's own source (`line N`) or in a
    module shipped with it (`pkg/mod.py line N`)."""
    where = None
    syntax = isinstance(exc, SyntaxError)
    if syntax and exc.filename == UDF_FILE:
        where = f"line {exc.lineno}"
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        name = frame.f_code.co_filename
        if name == UDF_FILE:
            where = f"line {lineno}"
        elif name.startswith(BUNDLE_ROOT):
            where = f"{name[len(BUNDLE_ROOT):]} line {lineno}"
    if syntax and (exc.filename or "").startswith(BUNDLE_ROOT):
        where = f"{exc.filename[len(BUNDLE_ROOT):]} line {exc.lineno}"
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"{text} ({where})" if where else text


def _type_error(value, kind):
    return TypeError(f"returned {type(value).__name__}, the column holds {kind}")


# --- columns in: Arrow-like buffers to lists of Python values ------------------------------

def _offsets(column):
    return memoryview(column.offsets).cast("I").tolist()


# Per-row work runs in C (map, array, join) or in comprehensions: since CPython 3.12 a
# comprehension is inlined, and the slices and Python calls in it make no C-level call back
# into the interpreter, which in the sandbox costs more than the loop itself (measured with
# python_bench_native.py's runner on native CPython: slicing 25-byte texts 140 -> 90 ns a row).

def _pairs(offs):
    """(start, end) of each value."""
    ends = iter(offs)
    next(ends, None)
    return zip(offs, ends)


def _texts(column):
    data, offs = column.data, _offsets(column)
    if data.isascii():
        # byte offsets are character offsets
        text = data.decode("ascii")
        return [text[a:b] for a, b in _pairs(offs)]
    return list(map(bytes.decode, [data[a:b] for a, b in _pairs(offs)]))


def _values(column):
    kind = column.kind
    if kind == t.Kind.INTS:
        values = memoryview(column.data).cast("q").tolist()
    elif kind == t.Kind.FLOATS:
        values = memoryview(column.data).cast("d").tolist()
    elif kind == t.Kind.BOOLS:
        values = list(map(bool, column.data))
    elif kind == t.Kind.TEXTS:
        values = _texts(column)
    elif kind == t.Kind.BLOBS:
        data = column.data
        values = [data[a:b] for a, b in _pairs(_offsets(column))]
    else:
        values = list(map(json.loads, _texts(column)))
    nulls = column.nulls
    if nulls:
        i = nulls.find(1)
        while i != -1:
            values[i] = None
            i = nulls.find(1, i + 1)
    return values


# --- results out: lists of Python values to Arrow-like buffers -----------------------------

def _to_int(v):
    if not isinstance(v, int):
        raise _type_error(v, "integers")
    if not INT_MIN <= v <= INT_MAX:
        raise OverflowError(f"{v} does not fit a 64-bit integer")
    return v


def _to_float(v):
    if not isinstance(v, (int, float)):
        raise _type_error(v, "floats")
    return float(v)


def _to_text(v):
    if not isinstance(v, str):
        raise _type_error(v, "strings")
    return v


def _to_blob(v):
    if not isinstance(v, (bytes, bytearray, memoryview)):
        raise _type_error(v, "bytes")
    return bytes(v)


def _to_bool(v):
    if not isinstance(v, bool):
        raise _type_error(v, "booleans")
    return v


def _to_json(v):
    if isinstance(v, tuple):
        v = list(v)
    return json.dumps(v, allow_nan=True)


# What a kind's values are checked and converted by, the null placeholder its buffer holds,
# and how the buffer is built (fast, in C; a TypeError/OverflowError means some value needs
# the one-by-one converter).
_CONVERT = {
    t.Kind.INTS: _to_int,
    t.Kind.FLOATS: _to_float,
    t.Kind.TEXTS: _to_text,
    t.Kind.BLOBS: _to_blob,
    t.Kind.BOOLS: _to_bool,
    t.Kind.JSON: _to_json,
}
_PLACEHOLDER = {t.Kind.INTS: 0, t.Kind.FLOATS: 0.0, t.Kind.TEXTS: "", t.Kind.BLOBS: b"",
                t.Kind.BOOLS: False, t.Kind.JSON: "null"}


def _pack(kind, values):
    """The buffers of a list holding no None; raises TypeError/OverflowError/AttributeError
    when some value is not of the kind's type. (An int column takes bools as 0/1 and a float
    column ints, as Python's own arithmetic does.)"""
    if kind == t.Kind.INTS:
        return array.array("q", values).tobytes(), b""
    if kind == t.Kind.FLOATS:
        return array.array("d", values).tobytes(), b""
    if kind == t.Kind.BOOLS:
        if set(map(type, values)) - {bool}:
            raise TypeError("not bool")
        return bytes(values), b""
    if kind == t.Kind.JSON:
        values = list(map(_to_json, values))
    if kind == t.Kind.BLOBS:
        if str in set(map(type, values)):
            raise TypeError("str")
        data = b"".join(values)
        lengths = map(len, values)
    else:
        joined = "".join(values)
        data = joined.encode("utf-8")
        lengths = map(len, values if joined.isascii() else map(str.encode, values))
    offsets = array.array("I", itertools.accumulate(lengths, initial=0))
    return data, offsets.tobytes()


def _column(results, kind, failed):
    """The result column; values of the wrong type become that row's error (and null)."""
    if kind != t.Kind.JSON:
        try:
            # The common case in C alone: no None (the packers refuse it) and every value of
            # the kind's type.
            data, offsets = _pack(kind, results)
            return t.Column(kind=kind, data=data, offsets=offsets, nulls=b"")
        except (TypeError, OverflowError, AttributeError, ValueError):
            pass
    is_none = list(map(operator.is_, results, itertools.repeat(None)))
    nones = list(itertools.compress(range(len(results)), is_none)) if True in is_none else []
    placeholder = _PLACEHOLDER[kind]
    for i in nones:
        results[i] = placeholder
    try:
        data, offsets = _pack(kind, results)
    except (TypeError, OverflowError, AttributeError, ValueError):
        convert, skip = _CONVERT[kind], set(nones)
        for i, v in enumerate(results):
            if i in skip:
                continue
            try:
                results[i] = convert(v)
            except BaseException as e:  # noqa: BLE001
                failed(i, e)
                results[i] = placeholder
                nones.append(i)
                is_none[i] = True
        # JSON values are text by now.
        data, offsets = _pack(t.Kind.TEXTS if kind == t.Kind.JSON else kind, results)
    nulls = bytes(is_none) if nones else b""
    return t.Column(kind=kind, data=data, offsets=offsets, nulls=nulls)


def _apply(fn, columns, rows, failed):
    """`fn` over every row. All rows go through `map` (the loop runs in C); if a row raises,
    the batch is run again row by row, recording each raising row and going on. So a function
    may be called more than once for a row: UDFs are meant to be pure (a backfill retry
    re-runs rows too)."""
    try:
        if len(columns) == 1:
            # ~12% a row faster than map in the sandbox (an inlined Python-to-Python call);
            # with more columns the tuple unpacking eats the gain.
            return [fn(a) for a in columns[0]]
        if columns:
            return list(map(fn, *columns))
        return [fn() for _ in range(rows)]
    except BaseException:  # noqa: BLE001
        pass
    results = []
    rows_iter = iter(zip(*columns) if columns else [()] * rows)
    while True:
        try:
            for row in rows_iter:
                results.append(fn(*row))
            return results
        except BaseException as e:  # noqa: BLE001 - SystemExit too is a row error
            failed(len(results), e)
            results.append(None)


def _apply_batch(fn, columns, rows, failed_all):
    """A `@lancet.batch` function over the call: one call with a list per column. If it
    raises, every row fails with its error; a result that is not `rows` values ends the
    call (the function, not a row, is wrong)."""
    try:
        results = fn(*columns)
    except BaseException as e:  # noqa: BLE001 - SystemExit too fails the rows
        failed_all(e)
        return [None] * rows
    if isinstance(results, (str, bytes, dict)):
        raise Err(f"a batch function returned {type(results).__name__}, not a list of "
                  f"{rows} values")
    try:
        results = list(results)
    except BaseException:  # noqa: BLE001
        raise Err(f"a batch function returned {type(results).__name__}, not a list of "
                  f"{rows} values") from None
    if len(results) != rows:
        raise Err(f"a batch function returned {len(results)} values for {rows} rows")
    return results


def _struct(results, fields, failed):
    """One column per field out of a dict per row; a None row is null as a whole."""
    nulls = b""
    if set(map(type, results)) != {dict}:
        # 1 where the row is not a plain dict; only those rows are looked at one by one.
        flags = bytearray(map(operator.is_not, map(type, results), itertools.repeat(dict)))
        for i in list(itertools.compress(range(len(results)), flags)):
            r = results[i]
            if isinstance(r, dict):
                flags[i] = 0
                continue
            if r is not None:
                failed(i, TypeError(f"returned {type(r).__name__}, the column holds a struct "
                                    "(a dict keyed by its fields)"))
            results[i] = {}
        nulls = bytes(flags) if any(flags) else b""

    def failed_in(name):
        return lambda row, e: failed(row, e, f"field '{name}': ")

    columns = [
        _column(list(map(dict.get, results, itertools.repeat(name))), kind, failed_in(name))
        for name, kind in fields
    ]
    return columns, nulls


class WitWorld(wit_world.WitWorld):
    entry = None
    batched = False

    def load(self, source, entry, env, init, files):
        if WitWorld.entry is not None:
            raise Err("this instance already holds a function")
        _Bundle.files = {path: bytes(data) for path, data in files}
        # Before the module runs: a module may read its configuration at import.
        os.environ.clear()
        os.environ.update(dict(env))
        scope = {"__name__": "udf", "__builtins__": builtins}
        try:
            code = compile(source, UDF_FILE, "exec")
            exec(code, scope)
        except BaseException as e:  # noqa: BLE001 - any failure of the user's module is theirs
            raise Err(_describe(e))
        fn = scope.get(entry)
        if fn is None:
            raise Err(f"the source defines no '{entry}'")
        if not callable(fn):
            raise Err(f"'{entry}' is a {type(fn).__name__}, not a function")
        if isinstance(fn, type):
            if not callable(getattr(fn, "__call__", None)) or "__call__" not in dir(fn):
                raise Err(f"class '{entry}' defines no __call__")
            if init is None:
                # Checked only: its instances need the initialization a binding gives.
                return _signature(fn.__call__, skip_self=True, batched=_is_batch(fn))
            try:
                kwargs = json.loads(init)
                if not isinstance(kwargs, dict):
                    raise TypeError("the initialization must be a JSON object")
                fn = fn(**kwargs)
            except BaseException as e:  # noqa: BLE001
                raise Err(f"initializing '{entry}': {_describe(e)}")
        elif init not in (None, "{}"):
            raise Err(f"'{entry}' is a function: it takes no initialization")
        WitWorld.entry = fn
        WitWorld.batched = _is_batch(fn)
        return _signature(fn, batched=WitWorld.batched)

    def call(self, args, rows, returns, fields, stop_at_first_error):
        fn = WitWorld.entry
        if fn is None:
            raise Err("no function loaded")
        columns = [_values(c) for c in args]
        errors = []

        def failed(row, e, where=""):
            if stop_at_first_error:
                raise Err(f"row {row}: {where}{_describe(e)}")
            errors.append(t.RowError(row=row, message=where + _describe(e)))

        def failed_all(e):
            message = _describe(e)
            if stop_at_first_error:
                raise Err(f"the batch of {rows} rows: {message}")
            errors.extend(t.RowError(row=row, message=message) for row in range(rows))

        # No cyclic GC passes inside a batch (its values are mostly acyclic, and a pass per
        # ~700 allocations is a cost per row); collection resumes between batches.
        gc.disable()
        try:
            if WitWorld.batched:
                results = _apply_batch(fn, columns, rows, failed_all)
            else:
                results = _apply(fn, columns, rows, failed)
        finally:
            gc.enable()
        if fields:
            values, nulls = _struct(results, fields, failed)
        else:
            values, nulls = [_column(results, returns, failed)], b""
        errors.sort(key=lambda e: e.row)
        return t.Output(values=values, nulls=nulls, errors=errors)


def _element(annotation):
    """A batch function's per-row type: `str` of `list[str]`; None when not a list."""
    if annotation is None:
        return None
    text = annotation.replace(" ", "")
    for prefix in ("list[", "List["):
        if text.startswith(prefix) and text.endswith("]"):
            return text[len(prefix):-1]
    return None


def _signature(fn, skip_self=False, batched=False):
    """The parameters and result as the host reads them: for a batch function, of one row
    (its annotations' list element types)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return t.Signature(params=[], returns=None, python=sys.version)
    if skip_self:
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])

    def name(annotation):
        if annotation is inspect.Signature.empty:
            return None
        if isinstance(annotation, str):
            return annotation
        if isinstance(annotation, type):
            return annotation.__name__
        return str(annotation).replace("typing.", "")

    if batched:
        inner = name
        name = lambda annotation: _element(inner(annotation))  # noqa: E731
    params = [
        t.Param(
            name=p.name,
            annotation=name(p.annotation),
            has_default=p.default is not inspect.Parameter.empty,
        )
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return t.Signature(params=params, returns=name(sig.return_annotation), python=sys.version)


