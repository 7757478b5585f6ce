#!/usr/bin/env bash
# Builds Lancet's Python UDF runner: CPython embedded in a WebAssembly component by
# componentize-py (from PyPI, in a venv of its own), with every WASI import stubbed out, from
# udf/python/ (the runner's Python and its WIT interface). Cached by the hash of those inputs:
# a no-op when they have not changed. Prints nothing on stdout but the component's path.
#
#   LANCET_CACHE_DIR   where to build (default ~/.cache/lancet); the result is
#                      $LANCET_CACHE_DIR/python/runner.wasm, where `lancet serve` looks by default.
set -euo pipefail
cd "$(dirname "$0")/.."

COMPONENTIZE_PY_VERSION=0.25.1
cache="${LANCET_CACHE_DIR:-$HOME/.cache/lancet}/python"
mkdir -p "$cache"

key=$( (echo "componentize-py $COMPONENTIZE_PY_VERSION"; cat udf/python/wit/*.wit udf/python/runner/*.py) \
  | sha256sum | cut -c1-16)
out="$cache/runner-$key.wasm"

if [ ! -s "$out" ]; then
  venv="$cache/venv-$COMPONENTIZE_PY_VERSION"
  if [ ! -x "$venv/bin/componentize-py" ]; then
    echo "== installing componentize-py $COMPONENTIZE_PY_VERSION (builds the Python UDF runner)" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION" >&2
  fi
  echo "== building the Python UDF runner (CPython in a Wasm component)" >&2
  tmp="$out.tmp.$$"
  "$venv/bin/componentize-py" -q -d udf/python/wit -w runner componentize --stub-wasi \
    -p udf/python/runner lancet_runner -o "$tmp" >&2
  mv "$tmp" "$out"
fi
# The fixed name the server looks for; replaced atomically so a running server's file stays whole.
ln -sfn "$(basename "$out")" "$cache/runner.wasm.tmp.$$" && mv -Tf "$cache/runner.wasm.tmp.$$" "$cache/runner.wasm"
# Earlier builds (~22 MB each, one per change of udf/python/) are kept three days, for a
# checkout switched back and forth; the server prunes its compiled copies the same way.
touch "$out"
find "$cache" -maxdepth 1 -name 'runner-*.wasm' ! -name "$(basename "$out")" -mtime +3 -delete 2>/dev/null || true
echo "$cache/runner.wasm"
