#!/usr/bin/env bash
# Creates (or reuses) the test venv: the pinned Python clients (lancedb, lance-namespace,
# pylance), pytest, schemathesis, and moto's S3 server for the object-store tests. Prints
# nothing when the venv is current. Used by scripts/test.sh and tests/python/run.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
req="$here/tests/python/requirements.txt"
venv="${LANCET_VENV:-$HOME/.cache/lancet-venv}"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/pytest" ] || [ "$(cat "$venv/.lancet-requirements" 2>/dev/null)" != "$want" ]; then
  echo "== preparing the test venv in $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$req"
  echo "$want" > "$venv/.lancet-requirements"
fi
