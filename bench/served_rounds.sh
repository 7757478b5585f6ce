#!/bin/bash
# One read served four ways, in turn, ROUNDS times (the machine's speed drifts by a third over
# minutes here, so only paths alternated round by round compare):
#   bash bench/served_rounds.sh vector|fts|count [ROUNDS] [CLIENTS]
# in-process (lance in the bench, all on CPU 1), bare (the least any server must do, served
# from the bench on CPU 1: request_bench --served-here --bare), Lancet's request service
# served the same way, and the `lancet` binary on CPU 1; clients on CPU 0. Prints CPU µs per
# call of the serving side and calls in the window. Needs 2 cores and the release bench:
#   cargo build --release -p lancet --bin lancet --example request_bench
set -euo pipefail
read_=$1 rounds=${2:-3} clients=${3:-8}
bench=${REQUEST_BENCH:-${CARGO_TARGET_DIR:-target}/release/examples/request_bench}
[ -x "$bench" ] || { echo "no release request_bench at $bench: build it first (above)" >&2; exit 1; }
export LANCET_BENCH_SERVER=${LANCET_BENCH_SERVER:-$(dirname "$bench")/../lancet}
secs=14
out=$(mktemp)
trap 'rm -f "$out"' EXIT

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# CPU per call of process PID (the bench itself, or the server it started) over 10 s.
by_process() { # ARGS...: request_bench arguments after --hold; the bench on $cpus
  local cpus=$1; shift
  taskset -c "$cpus" "$bench" --rows 100000 --hold "$read_" --clients "$clients" --secs "$secs" \
    "$@" > "$out" 2>&1 &
  local bp=$! pid
  until grep -q 'server pid' "$out" 2>/dev/null; do
    kill -0 "$bp" 2>/dev/null || { cat "$out"; exit 1; }
    sleep 0.5
  done
  pid=$(awk '/server pid/ {print $3}' "$out")
  taskset -a -cp 1 "$pid" > /dev/null
  case " $* " in *" --in-process "*) pid=$bp ;; esac
  sleep 2
  local t1 t2; t1=$(ticks "$pid"); sleep 10; t2=$(ticks "$pid")
  wait "$bp"
  local calls; calls=$(tail -1 "$out" | awk '{print $1}')
  local hz; hz=$(getconf CLK_TCK)
  awk -v t="$((t2 - t1))" -v c="$calls" -v s="$secs" -v hz="$hz" \
    'BEGIN {n = c / s * 10; printf "%.0f µs (%d calls)\n", t / hz * 1e6 / n, c}'
}

# The bench serving here reports its serving threads' CPU per call itself.
served_here() {
  taskset -c 0 "$bench" --rows 100000 --hold "$read_" --clients "$clients" --secs 12 \
    --served-here "$@" > "$out" 2>&1
  echo "$(awk '/served here/ {print $3}' "$out") µs ($(tail -1 "$out"))"
}

for round in $(seq "$rounds"); do
  echo "== round $round: $read_, $clients clients"
  echo "in-process   $(by_process 1 --in-process)"
  echo "bare         $(served_here --bare)"
  echo "served here  $(served_here)"
  echo "server       $(by_process 0)"
done
