#!/usr/bin/env bash
# Runs every Lancet test on a fresh machine: installs protoc and the wasm32 target when missing,
# builds the example UDF plugins, runs the Rust unit and black-box tests and the plugins' own
# unit tests, then the Python client tests (lancedb, lance-namespace and its generated REST client,
# pylance, ADBC) in a venv this script creates, then the TypeScript SDK's tests (@lancedb/lancedb
# on Node.js) in tests/ts.
set -euo pipefail
cd "$(dirname "$0")/.."

# Keep build artefacts outside the clone so warm runs (and CI on a reused machine) are fast.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lancet-target}"
export LANCET_PLUGINS_DIR="${LANCET_PLUGINS_DIR:-$HOME/.cache/lancet-plugins-target/wasm32-unknown-unknown/release}"

source scripts/setup.sh plugins

# What only the tests need (chromium, Node.js, the Python venv, the TypeScript SDK, ONNX Runtime
# and the embedding model of scripts/models.sh) is network-bound: it is fetched in the background while the CPU-bound builds below run, and
# waited for before the first test that needs it. Its output goes to a log, shown if it fails.
export LANCET_VENV="${LANCET_VENV:-$HOME/.cache/lancet-venv}"
prep_log="$(mktemp)"
(
  set -e
  bash scripts/setup.sh clients
  bash scripts/models.sh >/dev/null
  bash scripts/venv.sh
  bash tests/ts/run.sh --install-only
) >"$prep_log" 2>&1 &
prep=$!
trap 'kill "$prep" 2>/dev/null || true' EXIT
# Waits for background job $1, showing its log $2; stops the run saying $3 failed if it did.
wait_for() {
  if ! wait "$1"; then
    cat "$2" >&2
    echo "== $3 failed (above)" >&2
    exit 1
  fi
  cat "$2" >&2
}

# A reused target directory keeps one incremental-compilation cache per crate and target per
# compiler session; old ones are never read again (25 GB of them filled the disk here in a week).
# Those untouched for two days go (cargo rebuilds what it needs).
if [ -d "$CARGO_TARGET_DIR/debug/incremental" ]; then
  find "$CARGO_TARGET_DIR/debug/incremental" -mindepth 1 -maxdepth 1 -type d -mtime +2 \
    -exec rm -rf {} + 2>/dev/null || true
fi

# The plugins (wasm32, release), the Python UDF runner and the plugins' native unit tests are
# built beside the server's test build, at the lowest CPU priority: that build ends in a long
# chain of big crates compiled one after another (lance-index, lance, lancet, the test
# binaries), which leaves a core idle for most of its last third. Waited for before the tests.
side_log="$(mktemp)"
runner_out="$(mktemp)"
(
  set -e
  if [ -z "${LANCET_PYTHON_RUNNER:-}" ]; then
    echo "== building the Python UDF runner"
    nice -n 19 bash scripts/build-python-runner.sh >"$runner_out"
  fi
  if [ -f plugins/build.sh ]; then
    echo "== building UDF plugins"
    CARGO_TARGET_DIR="$HOME/.cache/lancet-plugins-target" nice -n 19 bash plugins/build.sh
    echo "== building the UDF plugins' own unit tests (native)"
    (cd plugins && CARGO_TARGET_DIR="$HOME/.cache/lancet-plugins-target" \
      nice -n 19 cargo test --locked -q --no-run)
  fi
) >"$side_log" 2>&1 &
side=$!
trap 'kill "$prep" "$side" 2>/dev/null || true' EXIT

echo "== Rust tests"
# Without the gcp/azure object-store clients (nothing here can test them; see host/Cargo.toml).
# Built first, then run once the venv is there: it holds moto, the S3 server the object-store
# tests start on loopback.
cargo test --workspace --locked --no-default-features --no-run
wait_for "$side" "$side_log" "building the plugins or the Python UDF runner"
if [ -z "${LANCET_PYTHON_RUNNER:-}" ]; then
  LANCET_PYTHON_RUNNER="$(cat "$runner_out")"
fi
export LANCET_PYTHON_RUNNER
wait_for "$prep" "$prep_log" "installing the test clients"
cargo test --workspace --locked --no-default-features -- --test-threads=2
# The Python tests run the server binary the tests above built: a plain `cargo build` would
# compile the lancet crate again (dev-dependency features differ).
export LANCET_BIN="$CARGO_TARGET_DIR/debug/lancet"

echo "== UDF plugins' own unit tests (native)"
(cd plugins && CARGO_TARGET_DIR="$HOME/.cache/lancet-plugins-target" cargo test --locked -q)

echo "== Python client tests"
bash tests/python/run.sh

echo "== TypeScript SDK tests (@lancedb/lancedb, remote mode)"
bash tests/ts/run.sh
