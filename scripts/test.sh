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

# The plugins (wasm32, release), the Python UDF runner, the plugins' native unit tests and the
# dev-profile tests of lancet-ipc and lancet-sdk are built beside the server's test build, at
# the lowest CPU priority: that build ends in a long chain of big crates compiled one after
# another (lance-index, lance, lancet, the test binaries), which leaves a core idle for most of
# its last third. Waited for before the tests.
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
  echo "== building lancet-ipc's and lancet-sdk's tests (dev profile)"
  nice -n 19 cargo test -p lancet-ipc -p lancet-sdk --locked -q --no-run
) >"$side_log" 2>&1 &
side=$!
trap 'kill "$prep" "$side" 2>/dev/null || true' EXIT

echo "== Rust tests (release profile: the build of README command 1, shared)"
# The tests build with the release profile and the server's own features, so they reuse every
# dependency README command 1 compiled (and it reuses theirs): only this workspace's crates and
# test targets are compiled on top, and the black-box tests start the very binary users run
# (docs/building.md "One build for both commands"). `lancet-ipc` and `lancet-sdk`, which parse
# hostile bytes, run their tests in the dev profile instead (debug assertions and overflow
# checks on), built beside this one at the lowest priority (above).
cargo test --release --workspace --exclude lancet-ipc --exclude lancet-sdk --locked --no-run
wait_for "$side" "$side_log" "building the plugins, the Python UDF runner or the debug-profile tests"
if [ -z "${LANCET_PYTHON_RUNNER:-}" ]; then
  LANCET_PYTHON_RUNNER="$(cat "$runner_out")"
fi
export LANCET_PYTHON_RUNNER
wait_for "$prep" "$prep_log" "installing the test clients"
cargo test --release --workspace --exclude lancet-ipc --exclude lancet-sdk --locked \
  -- --test-threads=2
echo "== lancet-ipc and lancet-sdk (dev profile: debug assertions and overflow checks)"
cargo test -p lancet-ipc -p lancet-sdk --locked -q
# The Python and TypeScript tests run the same release binary.
export LANCET_BIN="$CARGO_TARGET_DIR/release/lancet"

echo "== UDF plugins' own unit tests (native)"
(cd plugins && CARGO_TARGET_DIR="$HOME/.cache/lancet-plugins-target" cargo test --locked -q)

echo "== Python client tests"
bash tests/python/run.sh

echo "== TypeScript SDK tests (@lancedb/lancedb, remote mode)"
bash tests/ts/run.sh
