#!/bin/bash
# Each read, at 8 clients and at 1, served three ways in ONE process, path after path a few
# seconds apart (request_bench --alternate; the machine's speed drifts by a third over
# minutes, so only paths this close in time compare): lance in-process, the bare bound
# (the least any server over lance must do, over HTTP) and Lancet's request service; at one
# client also lance in-process idling 150 µs before each call, as a server's CPU idles
# between a client's requests. All serving on CPU 1, the clients on CPU 0.
#   bash bench/one_process.sh [ROUNDS] [fresh|compacted|both] [EXTRA request_bench ARGS...]
# Loads the 100k-row table once into ~/.cache/lancet-bench/fresh (and a compacted copy);
# later runs reuse them. Needs 2 cores and the release bench:
#   cargo build --release -p lancet --bin lancet --example request_bench
set -euo pipefail
rounds=${1:-8} tables=${2:-both}
shift $(( $# > 2 ? 2 : $# ))
bench=${REQUEST_BENCH:-${CARGO_TARGET_DIR:-target}/release/examples/request_bench}
[ -x "$bench" ] || { echo "no release request_bench at $bench: build it first (above)" >&2; exit 1; }
export LANCET_BENCH_SERVER=${LANCET_BENCH_SERVER:-$(dirname "$bench")/../lancet}
cache=${LANCET_BENCH_DATA:-$HOME/.cache/lancet-bench}
mkdir -p "$cache"

run() { # DATA READ CLIENTS ARGS...
  local data=$1 read_=$2 clients=$3; shift 3
  taskset -c 0 "$bench" --data "$data" --hold "$read_" --clients "$clients" \
    --alternate "$rounds" --phase-secs 2 "$@" 2>/dev/null | sed -n '/^path:/,$p'
}

compacted() { # a copy of the fresh table, compacted to one fragment by Lancet's optimize
  local dir=$cache/compacted
  [ -d "$dir" ] && return
  rm -rf "$dir.tmp"
  cp -r "$cache/fresh" "$dir.tmp"
  taskset -c 0 "$bench" --data "$dir.tmp" --compact > /dev/null
  mv "$dir.tmp" "$dir"
}

# The first run loads the fresh table (about 25 s); a load cut short leaves only `.tmp`.
if [ ! -d "$cache/fresh" ]; then
  rm -rf "$cache/fresh.tmp" "$cache/compacted.tmp"
  taskset -c 0 "$bench" --data "$cache/fresh.tmp" --hold count --clients 0 --secs 0 > /dev/null
  mv "$cache/fresh.tmp" "$cache/fresh"
fi
for table in fresh compacted; do
  [ "$tables" = both ] || [ "$tables" = "$table" ] || continue
  [ "$table" = compacted ] && compacted
  for read_ in count fts vector; do
    echo "== $table, $read_, 8 clients"
    run "$cache/$table" "$read_" 8 "$@"
    echo "== $table, $read_, 1 client"
    run "$cache/$table" "$read_" 1 --idle-us 150 "$@"
  done
done
