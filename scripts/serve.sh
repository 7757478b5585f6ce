#!/usr/bin/env bash
# Starts `lancet serve` (release build) on a fresh machine: installs protoc if missing, then
# builds and runs. Arguments go to `lancet serve` (e.g. --addr 0.0.0.0:8080 --data s3://b/p).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lancet-target}"
exec cargo run --release --locked --bin lancet -- serve "$@"
