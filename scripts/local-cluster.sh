#!/usr/bin/env bash
# Starts a local strata cluster on 127.0.0.1: N agents (default 3) as separate processes,
# each with its own data directory, sharing one embedded metastore file and one archive
# directory. Ctrl-C (or SIGTERM) stops them all cleanly.
#
#   ./scripts/local-cluster.sh                 # agents 1..3: Kafka 9092..9094, HTTP 9644..9646
#   AGENTS=5 ./scripts/local-cluster.sh        # more agents
#   STRATA_CLUSTER_DIR=/tmp/c ./scripts/local-cluster.sh
#
# Bootstrap clients with 127.0.0.1:9092 (any agent will do). New topics get three
# replicas (or one per agent, if fewer) unless they ask otherwise; kill an agent and its
# partitions move to others within the 10 s lease: see docs/cluster.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

agents=${AGENTS:-3}
dir=${STRATA_CLUSTER_DIR:-./data/cluster}
bin=${STRATA_BIN:-target/release/strata}
if [ -z "${STRATA_BIN:-}" ]; then
    cargo build --release --bin strata
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

pids=()
stop() {
    trap - INT TERM EXIT
    if [ ${#pids[@]} -gt 0 ]; then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        wait "${pids[@]}" 2>/dev/null || true
    fi
}
trap stop INT TERM EXIT

rf=$(( agents < 3 ? agents : 3 ))
for i in $(seq 1 "$agents"); do
    STRATA_DEFAULT_REPLICATION_FACTOR=${STRATA_DEFAULT_REPLICATION_FACTOR:-$rf} "$bin" agent \
        --node-id "$i" \
        --kafka-listen "127.0.0.1:$((9091 + i))" \
        --http-listen "127.0.0.1:$((9643 + i))" \
        --data-dir "$dir/agent-$i" \
        --metastore-path "$dir/metastore.sqlite" \
        --archive-url "file://$dir/archive" &
    pids+=($!)
done
echo "strata: $agents agents running (Kafka 127.0.0.1:9092..$((9091 + agents))); data in $dir; Ctrl-C stops them"
# Stop everything as soon as any agent exits on its own.
wait -n "${pids[@]}"
echo "strata: an agent exited; stopping the others" >&2
