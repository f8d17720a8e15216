#!/usr/bin/env bash
# A local strata cluster on 127.0.0.1: N agents (default 3) as separate processes, each
# with its own data directory, sharing one embedded metastore file and one archive
# directory. Agents are cattle here too: when one dies the others keep running, and any
# one can be killed, restarted, or given an empty disk by number from another terminal.
#
#   ./scripts/local-cluster.sh                 # agents 1..3: Kafka 9092..9094, HTTP 9644..9646
#   AGENTS=5 ./scripts/local-cluster.sh        # more agents
#   ./scripts/local-cluster.sh kill 2          # SIGKILL agent 2 (the others go on)
#   ./scripts/local-cluster.sh restart 2       # stop agent 2 (if running) and start it again
#   ./scripts/local-cluster.sh wipe 2          # SIGKILL agent 2, delete its data, start it again
#   ./scripts/local-cluster.sh status          # which agents run
#
# Ctrl-C (or SIGTERM) in the first terminal stops them all cleanly. The binary is
# $STRATA_BIN, or target/release/strata; this script never builds it (build it first:
# `cargo build --release --bin strata`). Logs: $STRATA_CLUSTER_DIR/agent-N.log.
#
# Bootstrap clients with 127.0.0.1:9092 (any agent will do). New topics get three
# replicas (or one per agent, if fewer) unless they ask otherwise; kill an agent and its
# partitions move to others within the 10 s lease: see docs/cluster.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

agents=${AGENTS:-3}
dir=${STRATA_CLUSTER_DIR:-./data/cluster}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# The binary: $STRATA_BIN, else the one the running cluster was started with, else the
# release build.
bin=${STRATA_BIN:-$(cat "$dir/strata.bin" 2>/dev/null || echo target/release/strata)}
need_binary() {
    if [ ! -x "$bin" ]; then
        echo "local-cluster.sh: no strata binary at $bin; build it first:" >&2
        echo "    cargo build --release --bin strata      (or set STRATA_BIN to one)" >&2
        exit 1
    fi
    bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
}
rf=$(( agents < 3 ? agents : 3 ))

pidfile() { echo "$dir/agent-$1.pid"; }
running() {
    local f pid
    f=$(pidfile "$1")
    [ -f "$f" ] && pid=$(cat "$f") && kill -0 "$pid" 2>/dev/null
}

start_agent() {
    local i=$1
    STRATA_DEFAULT_REPLICATION_FACTOR=${STRATA_DEFAULT_REPLICATION_FACTOR:-$rf} nohup "$bin" agent \
        --node-id "$i" \
        --kafka-listen "127.0.0.1:$((9091 + i))" \
        --http-listen "127.0.0.1:$((9643 + i))" \
        --data-dir "$dir/agent-$i" \
        --metastore-path "$dir/metastore.sqlite" \
        --archive-url "file://$dir/archive" \
        >>"$dir/agent-$i.log" 2>&1 </dev/null &
    echo $! >"$(pidfile "$i")"
    disown $!
    echo "strata: agent $i started (pid $!, Kafka 127.0.0.1:$((9091 + i)), log $dir/agent-$i.log)"
}

stop_agent() {  # $1: agent, $2: signal
    local pid
    running "$1" || return 0
    pid=$(cat "$(pidfile "$1")")
    kill "-$2" "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    echo "strata: agent $1 (pid $pid) did not stop within 30 s of SIG$2; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
}

check_number() {
    case "${1:-}" in
        '' | *[!0-9]*) echo "local-cluster.sh: $2 needs an agent number (1..$agents)" >&2; exit 2 ;;
    esac
}

case "${1:-run}" in
    run) ;;
    kill)
        check_number "${2:-}" kill
        stop_agent "$2" KILL
        echo "strata: agent $2 killed; the others keep running"
        exit 0 ;;
    restart)
        check_number "${2:-}" restart
        need_binary
        stop_agent "$2" TERM
        start_agent "$2"
        exit 0 ;;
    wipe)
        check_number "${2:-}" wipe
        need_binary
        stop_agent "$2" KILL
        rm -rf "${dir:?}/agent-$2"
        echo "strata: agent $2 killed and its data directory deleted; it comes back on an empty disk"
        echo "        (the metastore lets it take its node id back once its lease ran out, up to 10 s)"
        for _ in $(seq 1 30); do
            start_agent "$2"
            sleep 2
            running "$2" && exit 0
            tail -n 1 "$dir/agent-$2.log" >&2
        done
        exit 1 ;;
    status)
        for i in $(seq 1 "$agents"); do
            if running "$i"; then echo "agent $i: running (pid $(cat "$(pidfile "$i")"))"; else echo "agent $i: stopped"; fi
        done
        exit 0 ;;
    *)
        echo "usage: local-cluster.sh [run | kill N | restart N | wipe N | status]" >&2
        exit 2 ;;
esac

need_binary
echo "$bin" >"$dir/strata.bin"
for i in $(seq 1 "$agents"); do
    if running "$i"; then
        echo "local-cluster.sh: agent $i already runs (pid $(cat "$(pidfile "$i")")); stop that cluster first" >&2
        exit 1
    fi
done

stop_all() {
    trap - INT TERM EXIT
    echo "strata: stopping every agent"
    for i in $(seq 1 "$agents"); do stop_agent "$i" TERM & done
    wait
    rm -f "$dir"/agent-*.pid
}
trap 'stop_all; exit 0' INT TERM
trap stop_all EXIT

for i in $(seq 1 "$agents"); do start_agent "$i"; done
echo "strata: $agents agents running (Kafka 127.0.0.1:9092..$((9091 + agents))); data in $dir; Ctrl-C stops them"
echo "        from another terminal: $0 kill|restart|wipe N, or status"
# Report agents that exit on their own; the others keep running.
declare -A reported=()
while true; do
    for i in $(seq 1 "$agents"); do
        if running "$i"; then
            reported[$i]=""
        elif [ -z "${reported[$i]:-}" ]; then
            reported[$i]=1
            echo "strata: agent $i is not running (see $dir/agent-$i.log); the others keep running;" \
                "start it again with: $0 restart $i" >&2
        fi
    done
    sleep 1
done
