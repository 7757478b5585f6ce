#!/bin/bash
# A/B of two server binaries by server CPU per request (see bench/server_cpu.py), alternated
# ROUNDS times on the same machine, each on a freshly loaded table:
#   bash bench/server_cpu_ab.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]
# Needs the release request_bench: cargo build --release -p lancet \
#   --bin lancet --example request_bench
set -euo pipefail
before=$1 after=$2 rounds=${3:-3}
bench=${REQUEST_BENCH:-${CARGO_TARGET_DIR:-target}/release/examples/request_bench}
here=$(cd "$(dirname "$0")" && pwd)
run() {
  local out; out=$(mktemp)
  LANCET_BENCH_SERVER=$1 "$bench" --hold count --clients 0 --secs 75 > "$out" 2>&1 &
  local bp=$!
  until grep -q 'server pid' "$out" 2>/dev/null; do
    # The bench died before serving (no release build, no server binary): say why, stop.
    kill -0 "$bp" 2>/dev/null || { cat "$out"; exit 1; }
    sleep 0.5
  done
  local line; line=$(grep 'server pid' "$out")
  python3 "$here/server_cpu.py" "$(awk '{print $5}' <<<"$line")" request-bench-key 6 \
    "$(awk '{print $3}' <<<"$line")"
  kill "$bp" 2>/dev/null || true; wait "$bp" 2>/dev/null || true
  kill "$(awk '{print $3}' <<<"$line")" 2>/dev/null || true
  rm -f "$out"; sleep 1
}
for _ in $(seq "$rounds"); do
  echo "== before ($before)"; run "$before"
  echo "== after ($after)"; run "$after"
done
