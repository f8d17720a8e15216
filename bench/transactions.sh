#!/usr/bin/env bash
# Transactional produce beside idempotent produce, on one fresh broker, in one run:
#   bench/transactions.sh [STRATA] [SECONDS] [ROUNDS]
# (release binaries by default; 8 partitions, 100-byte values, acks=all, one producer;
# transactions of 1, 10 and 100 records). Prints one line per run with records/s,
# transactions/s and the commit latency; docs/BENCHMARKS.md quotes the medians as
# ratios to the idempotent run of the same round.
set -euo pipefail
here=$(dirname "$0")
strata=${1:-$here/../target/release/strata} seconds=${2:-10} rounds=${3:-3}
bench=$here/../target/release/strata-bench
dir=$(mktemp -d)
"$strata" agent --data-dir "$dir/data" --kafka-listen 127.0.0.1:19092 \
  --http-listen 127.0.0.1:19644 --tiering-enabled false > "$dir/log" 2>&1 &
pid=$!
trap 'kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 100); do
  curl -sf http://127.0.0.1:19644/readyz > /dev/null && break
  sleep 0.1
done
run() {
  "$bench" --bootstrap 127.0.0.1:19092 produce --partitions 8 --size 100 --acks all \
    --duration-s "$seconds" --no-verify "$@" 2>&1
}
for round in $(seq 1 "$rounds"); do
  out=$(run --idempotence)
  echo "round $round idempotent: $(grep -oE '[0-9]+ records/s' <<< "$out" | head -1)"
  for n in 1 10 100; do
    out=$(run --transaction-records "$n")
    echo "round $round transactions of $n: $(grep -oE '[0-9]+ records/s' <<< "$out" | head -1)," \
      "$(grep -oE '[0-9]+/s$' <<< "$(grep transactions <<< "$out")" | head -1) transactions," \
      "commit $(grep 'commit ms' <<< "$out" | sed 's/ *commit ms *//')"
  done
done
