#!/usr/bin/env bash
# Builds every example UDF and hostile guest to wasm32-unknown-unknown (release profile of
# this workspace: LTO, panic=abort). Output: $CARGO_TARGET_DIR (default plugins/target)
# /wasm32-unknown-unknown/release/*.wasm — the directory the udf tests read, also settable
# for them with LANCET_PLUGINS_DIR.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# cargo reads .cargo/config.toml from the directory it is run in, not from the manifest's:
# run it in plugins/ so its rustflags (+simd128) apply however this script is invoked.
# A relative CARGO_TARGET_DIR keeps meaning the caller's directory.
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
  CARGO_TARGET_DIR="$(realpath -m "$CARGO_TARGET_DIR")"
  export CARGO_TARGET_DIR
fi
cd "$here"
cargo build --target wasm32-unknown-unknown --release "$@"
out="${CARGO_TARGET_DIR:-$here/target}/wasm32-unknown-unknown/release"
ls -l "$out"/*.wasm
