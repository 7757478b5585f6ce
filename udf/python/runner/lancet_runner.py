"""Lancet's Python UDF runner: runs inside CPython compiled to WebAssembly (componentize-py).

One instance serves one function: `load` compiles the user's source and keeps the entry point;
`call` applies it row by row. The component is built with `--stub-wasi`, so the interpreter has
no files, clock, sockets or host environment; the calls below that would reach WASI are replaced
by ones that raise a Python error naming the sandbox, so a UDF gets an exception it can read
rather than a trap.
"""

import builtins
import io
import json
import os
import sys
import traceback

# Imported now, while the component is being built (pre-initialised), so a UDF's `import` of
# them finds them in sys.modules: at run time the sandbox has no files to import from.
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
import itertools  # noqa: F401
import math  # noqa: F401
import operator  # noqa: F401
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
import encodings.idna  # noqa: F401
import inspect  # noqa: F401
import locale  # noqa: F401

import wit_world
from componentize_py_types import Err
from wit_world.imports import types as t

UDF_FILE = "/lancet-sandbox/udf.py"
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


sys.meta_path.insert(0, _NoNewModules)

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
    """`Type: message (line N)`, the line being the deepest one in the UDF's own source."""
    line = None
    if isinstance(exc, SyntaxError) and exc.filename == UDF_FILE:
        line = exc.lineno
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == UDF_FILE:
            line = lineno
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"{text} (line {line})" if line else text


def _type_error(value, kind):
    return TypeError(f"returned {type(value).__name__}, the column holds {kind}")


def _to_int(v):
    if isinstance(v, bool) or not isinstance(v, int):
        raise _type_error(v, "integers")
    if not INT_MIN <= v <= INT_MAX:
        raise OverflowError(f"{v} does not fit a 64-bit integer")
    return v


def _to_float(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
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


_CONVERT = {
    t.Kind.INTS: (_to_int, t.Column_Ints),
    t.Kind.FLOATS: (_to_float, t.Column_Floats),
    t.Kind.TEXTS: (_to_text, t.Column_Texts),
    t.Kind.BLOBS: (_to_blob, t.Column_Blobs),
    t.Kind.BOOLS: (_to_bool, t.Column_Bools),
    t.Kind.JSON: (_to_json, t.Column_Json),
}


def _values(column):
    if isinstance(column, t.Column_Json):
        return [None if v is None else json.loads(v) for v in column.value]
    return column.value


class WitWorld(wit_world.WitWorld):
    entry = None

    def load(self, source, entry, env):
        if WitWorld.entry is not None:
            raise Err("this instance already holds a function")
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
        os.environ.clear()
        os.environ.update(dict(env))
        WitWorld.entry = fn
        return _signature(fn)

    def call(self, args, rows, returns, stop_at_first_error):
        fn = WitWorld.entry
        if fn is None:
            raise Err("no function loaded")
        convert, make = _CONVERT[returns]
        columns = [_values(c) for c in args]
        out = [None] * rows
        errors = []
        for i, row in enumerate(zip(*columns) if columns else ((),) * rows):
            try:
                value = fn(*row)
                if value is not None:
                    out[i] = convert(value)
            except BaseException as e:  # noqa: BLE001 - SystemExit and friends are row errors too
                if stop_at_first_error:
                    raise Err(f"row {i}: {_describe(e)}")
                errors.append(t.RowError(row=i, message=_describe(e)))
        return t.Output(values=make(value=out), errors=errors)


def _signature(fn):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return t.Signature(params=[], returns=None, python=sys.version)

    def name(annotation):
        if annotation is inspect.Signature.empty:
            return None
        if isinstance(annotation, str):
            return annotation
        if isinstance(annotation, type):
            return annotation.__name__
        return str(annotation).replace("typing.", "")

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


