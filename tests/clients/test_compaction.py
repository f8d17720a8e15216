"""Log compaction with real clients (issue 15): a compacted topic read from offset 0 by
librdkafka and kafka-python holds exactly what the model says (the newest record of
each key in the cleaned part, everything in the active segment, offsets unchanged),
and the seeds' drill "compaction removes a required tombstone": a consumer back within
delete.retention.ms still sees the tombstone, one back later does not, and both end
with the same keys.

Brokers run with a short lifecycle interval; topics get small segments and
min.cleanable.dirty.ratio=0.01 so that a pass is due as soon as segments seal. Waits
are on what clients read (until it equals the model), never on sleeps.
"""

from __future__ import annotations

import json
import uuid
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from strata_testlib import (Out, consumer_conf, create_topic, produce_confluent, producer_conf, unique_topic,
                            wait_until)

LIFECYCLE_ARGS = ["--log-retention-check-interval-ms", "200"]
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "1200", "min.cleanable.dirty.ratio": "0.01"}


def now_ms() -> int:
    return int(time.time() * 1000)


def local_bases(broker, topic: str) -> list[int]:
    d = broker.data_dir / "logs" / f"{topic}-0"
    return sorted(int(f.stem) for f in d.glob("*.log") if f.stem.isdigit())


def read_messages(bootstrap: str, topic: str, timeout: float = 20) -> list:
    """Every message of partition 0 from offset 0 to the end, with librdkafka."""
    c = Consumer(consumer_conf(bootstrap, **{"auto.offset.reset": "earliest"}))
    out = []
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        if hi == 0:
            return out
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(str(m.error()))
            out.append(m)
            if m.offset() >= hi - 1:
                break
    finally:
        c.close()
    return out


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of everything from offset 0 to the end, with librdkafka."""
    return [(m.offset(), m.key(), m.value()) for m in read_messages(bootstrap, topic)]


def read_all_kafka_python(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    tp = KpTopicPartition(topic, 0)
    out = []
    try:
        c.assign([tp])
        end = c.end_offsets([tp])[tp]
        c.seek_to_beginning(tp)
        deadline = time.monotonic() + 20
        while c.position(tp) < end and time.monotonic() < deadline:
            for rs in c.poll(timeout_ms=500).values():
                out += [(r.offset, r.key, r.value) for r in rs]
    finally:
        c.close()
    return out


def model(sent: list[tuple[bytes, bytes | None]], cleaned_below: int) -> list[tuple[int, bytes, bytes | None]]:
    """What compaction leaves: below `cleaned_below` the newest record of each key
    (tombstones included), from there on everything."""
    newest = {}
    for o, (k, _) in enumerate(sent[:cleaned_below]):
        newest[k] = o
    return [(o, k, v) for o, (k, v) in enumerate(sent) if o >= cleaned_below or newest[k] == o]


def tiered_broker(broker_factory, extra_args=(), extra_env=None):
    """A started broker archiving to a local directory (returned beside it), with short
    tiering and lifecycle intervals and a 1 s grace period for unnamed objects."""
    b = broker_factory(extra_args=LIFECYCLE_ARGS + ["--archive-gc-grace-ms", "1000",
                                                    "--tiering-interval-ms", "200", *extra_args],
                       extra_env=extra_env)
    archive = b.root / "archive"
    b.extra_args += ["--archive-url", f"file://{archive}"]
    b.start()
    return b, archive


def history() -> list[tuple[bytes, bytes | None]]:
    """600 updates of 40 keys, every 23rd a tombstone."""
    return [(f"key-{(i * 7) % 40:02d}".encode(), None if i % 23 == 5 else f"value-{i:04d}".encode())
            for i in range(600)]


def produce_ops(bootstrap: str, topic: str, ops: list[tuple[bytes, bytes | None]]) -> None:
    produce_confluent(bootstrap, topic, [Out(0, k, v, [], now_ms()) for k, v in ops],
                      **{"linger.ms": 0, "batch.num.messages": 3})


def status(broker, topic: str) -> dict:
    with urllib.request.urlopen(broker.http_url + "/v1/compaction", timeout=5) as resp:
        entries = json.load(resp)["partitions"]
    return next((e for e in entries if e["topic"] == topic), {})


def test_a_compacted_topic_reads_as_the_model(broker_factory):
    """600 updates of 40 keys with some tombstones: once the sealed segments are
    cleaned, librdkafka and kafka-python read exactly the model from offset 0."""
    b = broker_factory(extra_args=LIFECYCLE_ARGS)
    b.start()
    topic = unique_topic("compacted")
    create_topic(b.bootstrap, topic, 1, COMPACTED)
    ops = history()
    produce_ops(b.bootstrap, topic, ops)

    def cleaned():
        active = local_bases(b, topic)[-1]
        want = model(ops, active)
        got = read_all(b.bootstrap, topic)
        return (want, active) if got == want else None

    want, active = wait_until(cleaned, 30, "librdkafka to read the compacted model")
    assert active > 300, f"only {active} of 600 records in sealed segments"
    assert len(want) < len(ops) // 2, f"compaction left {len(want)} of {len(ops)}"
    assert read_all_kafka_python(b.bootstrap, topic) == want
    st = status(b, topic)
    assert st["records_compacted_away"] == len(ops) - len(want), st
    assert st["dirty_ratio"] == 0.0 and st["last_error"] is None, st
    # The records of the active segment were not touched, and producing goes on.
    produce_ops(b.bootstrap, topic, [(b"key-00", b"after")])
    assert read_all(b.bootstrap, topic)[-1] == (600, b"key-00", b"after")


@pytest.mark.parametrize("tier", ["local", "archive"])
def test_the_cleaner_is_continuous_with_the_defaults(broker_factory, tier):
    """With the agent's defaults (a retention check every 5 minutes, Kafka's
    log.cleaner.backoff.ms of 15 s) and the topic's default min.cleanable.dirty.ratio
    (0.5), a compacted topic whose sealed segments are all dirty is cleaned within 30 s
    (issue 33; librdkafka's test 0077 waits for this): on local disk (a topic not
    tiered), and in the archive (a tiered topic keeping nothing locally, so that a
    reader from offset 0 reads the archive's copy)."""
    b = broker_factory()
    b.start()
    topic = unique_topic("continuous")
    config = {"cleanup.policy": "compact", "segment.bytes": "1200"}
    if tier == "local":
        config["remote.storage.enable"] = "false"
    else:
        config["local.retention.ms"] = "0"
    create_topic(b.bootstrap, topic, 1, config)
    ops = history()
    produce_ops(b.bootstrap, topic, ops)
    crossed = time.monotonic()

    def cleaned():
        active = local_bases(b, topic)[-1]
        want = model(ops, active)
        return want if read_all(b.bootstrap, topic) == want else None

    want = wait_until(cleaned, 30, "the cleaner to compact the topic without a lifecycle pass")
    assert len(want) < len(ops) // 2, f"compaction left {len(want)} of {len(ops)}"
    print(f"cleaned {time.monotonic() - crossed:.1f} s after the dirty ratio was crossed")


def test_a_tombstone_stays_for_delete_retention_ms_then_goes(broker_factory):
    """The seeds' drill: key-2 is deleted. A consumer that rebuilds its state from
    offset 0 within delete.retention.ms of the pass that first covered the tombstone
    sees it; one that comes later sees no record of key-2 at all; both end with the
    same key set."""
    b = broker_factory(extra_args=LIFECYCLE_ARGS)
    b.start()
    topic = unique_topic("tombstone")
    create_topic(b.bootstrap, topic, 1, {**COMPACTED, "delete.retention.ms": "3000"})
    ops = [(f"key-{i % 5}".encode(), f"v{i}".encode()) for i in range(20)]
    ops.append((b"key-2", None))
    # Filler with keys of its own, so that the tombstone's segment seals.
    ops += [(f"filler-{i:03d}".encode(), b"x" * 40) for i in range(60)]
    produce_ops(b.bootstrap, topic, ops)
    tombstone = 20

    def state(records):
        keys = {}
        for _, k, v in records:
            if v is None:
                keys.pop(k, None)
            else:
                keys[k] = v
        return keys

    def early():
        got = read_all(b.bootstrap, topic)
        compacted = [o for o, _, _ in got if o < 20] == [15, 16, 18, 19]
        return got if compacted and (tombstone, b"key-2", None) in got else None

    soon = wait_until(early, 20, "the first pass (key-2's older records gone, its tombstone kept)")
    late = wait_until(lambda: (lambda got: got if all(k != b"key-2" for _, k, _ in got) else None)(
        read_all(b.bootstrap, topic)), 30, "the tombstone to go after delete.retention.ms")
    assert state(soon) == state(late)
    assert b"key-2" not in state(late)
    assert set(state(late)) == {b"key-0", b"key-1", b"key-3", b"key-4"} | {
        f"filler-{i:03d}".encode() for i in range(60)}


def test_a_compacted_tiered_topic_reads_as_the_model_across_both_tiers(broker_factory):
    """The same history on a tiered topic whose local segments leave the disk once
    archived: the archive is compacted too (objects rewritten and swapped into the
    manifest), so librdkafka and kafka-python reading from offset 0 (the archive, then
    the active segment) see exactly the model, and DuckDB over the store sees one row
    per key."""
    import duckdb

    b, archive = tiered_broker(broker_factory)
    topic = unique_topic("compacted-tiered")
    create_topic(b.bootstrap, topic, 1, {**COMPACTED, "local.retention.ms": "0"})
    ops = history()
    produce_ops(b.bootstrap, topic, ops)

    def cleaned():
        bases = local_bases(b, topic)
        if len(bases) != 1:
            return None  # sealed segments not archived and deleted locally yet
        want = model(ops, bases[0])
        return want if read_all(b.bootstrap, topic) == want else None

    want = wait_until(cleaned, 60, "both tiers compacted, read from offset 0")
    assert read_all_kafka_python(b.bootstrap, topic) == want
    glob = str(archive / f"topic={topic}" / "partition=0" / "*.parquet")

    def one_row_per_key():
        rows, keys = duckdb.sql(f"SELECT count(*), count(DISTINCT key) FROM read_parquet('{glob}')").fetchone()
        return (rows, keys) if rows == keys else None

    rows, keys = wait_until(one_row_per_key, 30, "DuckDB to see one row per key (old objects collected)")
    assert keys == 40, (rows, keys)


@pytest.mark.parametrize("point", ["compaction.after_rewrite", "compaction.before_checkpoint",
                                   "archive_compaction.after_upload", "merge.after_upload"])
def test_a_crash_at_any_step_of_compaction_loses_nothing(broker_factory, point):
    """The agent aborts (as a SIGKILL would stop it) between two steps of compacting or
    merging: after a segment's copy was written and before it was swapped in; after the
    swaps and before the checkpoint moved; after a compacted or merged object was
    uploaded and before the manifest named it. Restarted without the crash point, it
    finishes: both tiers read exactly the model from offset 0, no copy is left beside a
    segment, and the store ends up holding only what the manifest names."""
    import duckdb

    b, archive = tiered_broker(broker_factory, ["--archive-merge-target-bytes", "20000"],
                               {"STRATA_FAILPOINT_CRASH": point})
    topic = unique_topic("compaction-crash")
    configs = {**COMPACTED, "local.retention.ms": "0"}
    if point.startswith("archive_compaction"):
        # The archive must receive the records before the local cleaner removes them
        # (tiering and the cleaner race otherwise; what wins decides nothing but whether
        # the archive has anything left to compact): they become cleanable only after
        # the tiering worker (every 200 ms) has archived them.
        configs["min.compaction.lag.ms"] = "2000"
    create_topic(b.bootstrap, topic, 1, configs)
    ops = history()
    produce_ops(b.bootstrap, topic, ops)
    wait_until(lambda: not b.is_running(), 60, f"the crash at {point}")
    assert b.proc.returncode != 0 and point in b.log_text(), b.log_tail()

    b.extra_env.pop("STRATA_FAILPOINT_CRASH")
    b.start()

    def settled():
        bases = local_bases(b, topic)
        if len(bases) != 1:
            return None
        want = model(ops, bases[0])
        return want if read_all(b.bootstrap, topic) == want else None

    want = wait_until(settled, 60, "both tiers compacted after the restart")
    assert read_all_kafka_python(b.bootstrap, topic) == want
    assert not list((b.data_dir / "logs" / f"{topic}-0").glob("*.cleaned")), "a copy left beside a segment"
    glob = str(archive / f"topic={topic}" / "partition=0" / "*.parquet")
    wait_until(lambda: (lambda r: r if r[0] == r[1] == 40 else None)(
        duckdb.sql(f"SELECT count(*), count(DISTINCT key) FROM read_parquet('{glob}')").fetchone()),
        30, "the store to hold one row per key (orphans and garbage collected)")


def produce_fill(bootstrap: str, topic: str, count: int, size: int) -> None:
    """0077's produce_compactable_msgs: `count` records of `size` bytes under one random
    key, the last a tombstone, one record per batch (so no batch outgrows a segment)."""
    p = Producer(producer_conf(bootstrap, "none", **{"batch.num.messages": 1}))
    key = uuid.uuid4().hex[:15].encode()
    errors = []

    def cb(err, _msg):
        if err is not None:
            errors.append(err)
    for i in range(count):
        p.produce(topic, key=key, value=None if i == count - 1 else b"\0" * size, partition=0,
                  on_delivery=cb)
    assert p.flush(30) == 0 and not errors, errors


@pytest.mark.parametrize("msgs_per_key,codec", [(10, "none"), (1000, "none"), (10, "snappy"),
                                                (10000, "gzip")])
def test_librdkafka_0077_compaction(broker_factory, msgs_per_key, codec):
    """librdkafka's test 0077 (tests/0077-compaction.c), step for step with librdkafka
    itself and strata's defaults: three keys (k1 with tombstones) interleaved with
    unique keys, filler before and after, then at most a 20 s wait (0077 polls the low
    watermark every 5 s for 20 s) before reading from offset 0. What must be left: every
    unique-key record and the last record of k1, k2 and k3, at their offsets."""
    b = broker_factory()
    b.start()
    topic = unique_topic("rdkafkatest_0077")
    create_topic(b.bootstrap, topic, 1, {
        "cleanup.policy": "compact", "segment.ms": "10000", "segment.bytes": "10000",
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "86400",
        "file.delete.delay.ms": "10000"})
    fillcnt = 20
    produce_fill(b.bootstrap, topic, fillcnt, 1000)

    testid = uuid.uuid4().hex
    keys = [b"k1", b"k2", b"k3", None]
    msgcnt = msgs_per_key * len(keys)
    p = Producer(producer_conf(b.bootstrap, codec, **{"message.max.bytes": 6000, "linger.ms": 10}))
    errors = []

    def cb(err, _msg):
        if err is not None:
            errors.append(err)
    correct = set()
    cnt = 0
    while cnt < msgcnt:
        for k, key in enumerate(keys):
            is_last = cnt + len(keys) >= msgcnt
            tombstone = k == 0 and (is_last or cnt % 7 == 0)
            msgid = f"testid={testid}, partition=0, msg={cnt}".encode()
            if key is None or is_last:
                correct.add((fillcnt + cnt, msgid))
            p.produce(topic, partition=0, key=key if key is not None else str(cnt).encode(),
                      value=None if tombstone else msgid, headers=[("rdk_msgid", msgid)],
                      on_delivery=cb)
            p.poll(0)
            cnt += 1
    assert p.flush(60) == 0 and not errors, errors[:3]
    produce_fill(b.bootstrap, topic, 20, 1024)
    finished = time.monotonic()

    # 0077's wait: the low watermark, every 5 s, for at most 20 s (compaction does not
    # move it, so in practice this is the whole 20 s).
    c = Consumer(consumer_conf(b.bootstrap))
    try:
        while time.monotonic() - finished < 20:
            low, _ = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
            if low > 0:
                break
            time.sleep(5)
    finally:
        c.close()

    got = set()
    for m in read_messages(b.bootstrap, topic, timeout=60):
        msgid = dict(m.headers() or []).get("rdk_msgid")
        if msgid is not None and msgid.startswith(f"testid={testid},".encode()):
            got.add((m.offset(), msgid))
    assert got == correct, (f"{len(got - correct)} records compaction should have removed, "
                            f"{len(correct - got)} missing; first extra: {sorted(got - correct)[:3]}")
