#!/usr/bin/env python3
"""One confluent-kafka (librdkafka) group consumer, run as its own process by the group
tests (group_testlib.GroupConsumerProc) so that a test can SIGKILL it.

    group_consumer.py --bootstrap HOST:PORT --topic T --group G --out EVENTS.jsonl [options]

It subscribes to T in group G and appends one JSON object per line to EVENTS.jsonl,
each line flushed to the OS as it is written (the file is line-buffered), so that what
a SIGKILLed consumer wrote is all there:

  {"ev": "start", ...}                                  once, before subscribing
  {"ev": "assign"|"revoke"|"lost", "partitions": [..],  every rebalance callback;
   "assignment": [..], "member_id": .., "n": k}         `assignment` is the set owned
                                                        after the event, n counts events
  {"ev": "rec", "p": P, "o": O, "v": VALUE}             every record processed
  {"ev": "commit", "offsets": {P: O}, "ok": true}       every synchronous commit, or
  {"ev": "commit", "offsets": {..}, "ok": false, "error": ..}
  {"ev": "stats", "cgrp": {...}}                        librdkafka statistics (cgrp part)
  {"ev": "error", ...}                                  consumer / client errors
  {"ev": "closed"}                                      after a clean consumer.close()

Every line has "t" (time.monotonic(), system-wide on Linux so comparable with the
test's own clock) and "name".

Commit strategy: manual and synchronous, once per consume() batch, of exactly the
records of that batch, and only after their "rec" lines were written. So a committed
offset never covers a record that was not processed (nothing can be skipped, even on
SIGKILL), and what a killed consumer processed without committing is bounded by one
batch (those are the allowed duplicates). With auto-commit the window would be the
auto-commit interval, and a test could not tell which offsets were committed when.

SIGTERM (or SIGINT) stops the loop; the consumer is then closed cleanly, which for a
dynamic member sends LeaveGroup and for a static member (--instance-id) does not.
Exit code 0 unless something failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default=f"c{os.getpid()}")
    ap.add_argument("--instance-id", default=None, help="group.instance.id (static membership)")
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--heartbeat-interval-ms", type=int, default=500)
    ap.add_argument("--strategy", default="range,roundrobin",
                    help="partition.assignment.strategy")
    ap.add_argument("--stats-interval-ms", type=int, default=500)
    ap.add_argument("--batch", type=int, default=100, help="records per consume() call")
    ap.add_argument("--debug", default=None, help="librdkafka debug contexts (to stderr)")
    args = ap.parse_args()

    out = open(args.out, "a", buffering=1, encoding="utf-8")  # line-buffered

    def emit(ev: str, **fields) -> None:
        d = {"ev": ev, "t": time.monotonic(), "name": args.name}
        d.update(fields)
        out.write(json.dumps(d, separators=(",", ":")) + "\n")

    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.name,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
        "partition.assignment.strategy": args.strategy,
        "statistics.interval.ms": args.stats_interval_ms,
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": 10000,
        "reconnect.backoff.max.ms": 1000,
        "error_cb": lambda err: emit("error", where="error_cb", code=err.code(), name_=err.name(),
                                     str=err.str(), fatal=err.fatal()),
        "stats_cb": lambda s: emit("stats", cgrp=_cgrp_stats(s)),
    }
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    if args.debug:
        conf["debug"] = args.debug

    owned: set[int] = set()
    events = 0
    c = Consumer(conf)
    emit("start", pid=os.getpid(), group=args.group, topic=args.topic,
         instance_id=args.instance_id, strategy=args.strategy)

    def rebalance_event(kind: str, partitions) -> None:
        nonlocal events
        events += 1
        ps = sorted(tp.partition for tp in partitions)
        if kind == "assign":
            owned.update(ps)
        else:
            owned.difference_update(ps)
        emit(kind, partitions=ps, assignment=sorted(owned), member_id=c.memberid(), n=events)

    def on_assign(consumer, partitions):
        # An eager assign replaces the assignment; a cooperative one adds to it.
        if not _cooperative(args.strategy):
            owned.clear()
        rebalance_event("assign", partitions)

    def on_revoke(consumer, partitions):
        # Everything processed is already committed (one synchronous commit per batch,
        # before the next consume() in which callbacks run), so nothing to do here.
        rebalance_event("revoke", partitions)

    def on_lost(consumer, partitions):
        rebalance_event("lost", partitions)

    c.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    rc = 0
    try:
        while not stop:
            try:
                msgs = c.consume(num_messages=args.batch, timeout=0.2)
            except KafkaException as e:
                emit("error", where="consume", str=str(e))
                if e.args and isinstance(e.args[0], KafkaError) and e.args[0].fatal():
                    rc = 3
                    break
                continue
            done: dict[int, int] = {}
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    emit("error", where="message", code=err.code(), str=err.str(),
                         p=m.partition(), fatal=err.fatal())
                    if err.fatal():
                        rc = 3
                        stop = True
                    continue
                v = m.value()
                emit("rec", p=m.partition(), o=m.offset(),
                     v=None if v is None else v.decode("utf-8", "backslashreplace"))
                done[m.partition()] = m.offset() + 1
            if done:
                offsets = [TopicPartition(args.topic, p, o) for p, o in sorted(done.items())]
                try:
                    res = c.commit(offsets=offsets, asynchronous=False)
                    bad = {tp.partition: str(tp.error) for tp in res or [] if tp.error is not None}
                    if bad:
                        emit("commit", offsets=done, ok=False, error=bad)
                    else:
                        emit("commit", offsets=done, ok=True)
                except KafkaException as e:
                    # e.g. REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION around a rebalance:
                    # the records will be processed again by the partition's next owner.
                    emit("commit", offsets=done, ok=False, error=str(e))
    finally:
        try:
            c.close()
            emit("closed", rc=rc)
        except Exception as e:  # noqa: BLE001 - reported through the events file
            emit("error", where="close", str=repr(e))
            rc = rc or 4
        out.close()
    return rc


def _cooperative(strategy: str) -> bool:
    return "cooperative" in strategy


def _cgrp_stats(s: str) -> dict:
    try:
        cg = json.loads(s).get("cgrp") or {}
    except ValueError:
        return {"bad_stats": True}
    keep = ("state", "join_state", "rebalance_cnt", "rebalance_reason", "assignment_size",
            "rebalance_age", "stateage")
    return {k: cg[k] for k in keep if k in cg}


if __name__ == "__main__":
    sys.exit(main())
