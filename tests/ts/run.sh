#!/usr/bin/env bash
# The TypeScript SDK's tests (`@lancedb/lancedb`, remote mode) against live Lancet servers:
# installs the pinned SDK into tests/ts/node_modules (from the lock; when npm refuses the lock,
# as it may where a release's platform packages are not all served, from package.json's exact
# pins), then runs node's test runner over tests/ts/*.test.mjs. LANCET_BIN names the server.
# `--install-only`: install and stop (scripts/test.sh does so while the build runs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
want="$(cat package.json package-lock.json 2>/dev/null | sha256sum | cut -d' ' -f1)"
if [ "$(cat node_modules/.lancet-installed 2>/dev/null)" != "$want" ]; then
  echo "== installing the TypeScript SDK's test dependencies" >&2
  if ! npm ci --no-audit --no-fund --loglevel=error >&2; then
    echo "== npm ci refused the lock; installing the exact pins of package.json" >&2
    npm install --no-audit --no-fund --no-save --loglevel=error >&2
  fi
  echo "$want" > node_modules/.lancet-installed
fi
[ "${1:-}" != --install-only ] || exit 0
exec node --test --test-concurrency=2 ./*.test.mjs
