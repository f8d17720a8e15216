#!/usr/bin/env bash
# The agent's CPU per GB consumed, and consume records/s, for one build:
#
#   bench/consume_cpu.sh BINARY LABEL [ROUNDS]
#
# A fresh agent (tiering off) on ports 19092/19644 under /tmp/consume-cpu, 2,000,000
# records of 1 KiB produced into 8 partitions, then ROUNDS (5) consumes of the whole
# topic from the page cache with `strata-bench consume`. Each round prints the agent's
# CPU seconds (from /proc/<pid>/stat) and strata-bench's throughput line. Run two
# builds alternately for an A/B (docs/BENCHMARKS.md, "Fetch answers without the
# user-space copies"). BENCH names the strata-bench binary (target/release/strata-bench).
set -euo pipefail
BIN=$1; LABEL=$2; ROUNDS=${3:-5}
BENCH=${BENCH:-target/release/strata-bench}
DIR=/tmp/consume-cpu/$LABEL; rm -rf "$DIR"; mkdir -p "$DIR"
"$BIN" agent --data-dir "$DIR/data" --kafka-listen 127.0.0.1:19092 \
  --http-listen 127.0.0.1:19644 --tiering-enabled false > "$DIR/agent.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null' EXIT
until curl -sf localhost:19644/readyz >/dev/null; do sleep 0.1; done
"$BENCH" --bootstrap 127.0.0.1:19092 produce --topic ab --partitions 8 --size 1024 \
  --records 2000000 > "$DIR/produce.txt" 2>&1
cpu() { awk '{print $14+$15}' "/proc/$PID/stat"; }
for i in $(seq "$ROUNDS"); do
  c0=$(cpu)
  out=$("$BENCH" --bootstrap 127.0.0.1:19092 consume --topic ab --idle-timeout-s 2 2>&1)
  c1=$(cpu)
  echo "$LABEL round $i: cpu_s=$(echo "($c1-$c0)/100" | bc -l | cut -c1-6) $(echo "$out" | grep throughput)"
done
