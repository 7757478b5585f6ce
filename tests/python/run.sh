#!/usr/bin/env bash
# Python client tests against a live Lancet: creates (or reuses) a venv with pinned clients,
# starts `lancet serve` on a free loopback port, and runs pytest.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${LANCET_VENV:-$HOME/.cache/lancet-venv}"
bash "$root/scripts/venv.sh"
target="${CARGO_TARGET_DIR:-$HOME/.cache/lancet-target}"
# scripts/test.sh hands over the binary its Rust tests built; run alone, this builds one.
if [ -z "${LANCET_BIN:-}" ] || [ ! -x "$LANCET_BIN" ]; then
  (cd "$root" && cargo build -q --release --locked --bin lancet)
  export LANCET_BIN="$target/release/lancet"
fi
# Every test starts its own server on a free port, so tests run in two processes at once
# (LANCET_PYTEST_WORKERS to change; 0 runs them in this one).
exec "$venv/bin/pytest" -q -n "${LANCET_PYTEST_WORKERS:-2}" --dist loadgroup "$here"
