#!/usr/bin/env bash
# Builds every example UDF and hostile guest to wasm32-unknown-unknown (release profile of
# this workspace: LTO, panic=abort). Output: $CARGO_TARGET_DIR (default plugins/target)
# /wasm32-unknown-unknown/release/*.wasm — the directory the udf tests read, also settable
# for them with LANCET_PLUGINS_DIR.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cargo build --manifest-path "$here/Cargo.toml" --target wasm32-unknown-unknown --release "$@"
out="${CARGO_TARGET_DIR:-$here/target}/wasm32-unknown-unknown/release"
ls -l "$out"/*.wasm
