#!/usr/bin/env bash
# Alternating full-speed produce runs on two strata binaries, a fresh broker each time:
#   bench/ab.sh BEFORE_STRATA AFTER_STRATA [SIZE] [ROUNDS]
# (8 partitions, acks=all, 5 s per run; strata-bench from target/release). Prints
# records/s per run; docs/BENCHMARKS.md quotes the medians.
set -euo pipefail
before=$1 after=$2 size=${3:-1024} rounds=${4:-5}
bench=$(dirname "$0")/../target/release/strata-bench
for round in $(seq 1 "$rounds"); do
  for which in before after; do
    bin=$before; [ "$which" = after ] && bin=$after
    dir=$(mktemp -d)
    "$bin" agent --data-dir "$dir/data" --kafka-listen 127.0.0.1:19092 \
      --http-listen 127.0.0.1:19644 --tiering-enabled false > "$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
      curl -sf http://127.0.0.1:19644/readyz > /dev/null && break
      sleep 0.1
    done
    rate=$("$bench" --bootstrap 127.0.0.1:19092 produce --partitions 8 --size "$size" \
      --acks all --duration-s 5 2>&1 | grep -oE '[0-9]+ records/s' | head -1)
    echo "round $round $which $rate"
    kill "$pid"; wait "$pid" 2> /dev/null || true
    rm -rf "$dir"
  done
done
