#!/usr/bin/env bash
# Python client tests against a live Lancet: creates (or reuses) a venv with pinned clients,
# starts `lancet serve` on a free loopback port, and runs pytest.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${LANCET_VENV:-$HOME/.cache/lancet-venv}"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/pytest" ] || [ "$(cat "$venv/.lancet-requirements" 2>/dev/null)" != "$want" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$here/requirements.txt"
  echo "$want" > "$venv/.lancet-requirements"
fi
target="${CARGO_TARGET_DIR:-$HOME/.cache/lancet-target}"
(cd "$root" && cargo build -q --bin lancet)
export LANCET_BIN="$target/debug/lancet"
exec "$venv/bin/pytest" -q "$here"
