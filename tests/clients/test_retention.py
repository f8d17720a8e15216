"""Retention and DeleteRecords with real clients (issue 15): the log start moves in the
metastore; ListOffsets(earliest), Fetch (OFFSET_OUT_OF_RANGE below the start) and the
consumers' offset resets agree with it; old data leaves the local disk and the archive.

How a test drives it: brokers run with a short retention check interval and a short
grace period for archived objects (`LIFECYCLE_ARGS`); a test lowers `retention.ms` or
`retention.bytes` on a topic whose small `segment.bytes` closes segments quickly, and
waits for the log start (ListOffsets earliest) to move. Local segments are the
`<base offset>.log` files in the data dir; archived objects are listed from the store
itself (a local directory, or SeaweedFS over S3), not from the manifest.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import OffsetOutOfRangeError as KpOffsetOutOfRange
from kafka.errors import UnknownTopicOrPartitionError as KpUnknownTopicOrPartition

from strata_testlib import (
    Out,
    admin,
    consume_confluent,
    consumer_conf,
    create_topic,
    produce_confluent,
    unique_topic,
    wait_until,
    watermarks,
)
from test_tiering import OBJECT_NAME, local_bases, set_topic_config, start_tiered_broker

RETENTION_CHECK_MS = 200
GRACE_MS = 1000
LIFECYCLE_ARGS = ["--log-retention-check-interval-ms", str(RETENTION_CHECK_MS),
                  "--archive-gc-grace-ms", str(GRACE_MS)]
SEGMENT_BYTES = "3000"


def now_ms() -> int:
    return int(time.time() * 1000)


def records(partition: int, n: int, ts: int, tag: str, first: int = 0) -> list[Out]:
    """n keyed records of about 200 bytes, `tag`-i values from `first` on."""
    return [Out(partition, f"k{i % 17}".encode(), f"{tag}-{i:05d}".encode() + b"." * 180, [], ts + i)
            for i in range(first, first + n)]


def produce(bootstrap: str, topic: str, recs: list[Out]) -> None:
    # One record per batch: segments of ~3000 bytes hold a dozen batches each.
    produce_confluent(bootstrap, topic, recs, **{"linger.ms": 0, "batch.num.messages": 1})


def compaction_status(broker) -> dict:
    with urllib.request.urlopen(broker.http_url + "/v1/compaction", timeout=5) as resp:
        return json.load(resp)


def tiered_lifecycle_broker(broker_factory, kind: str = "file", weed=None, extra_args=(), extra_env=None):
    """A started broker archiving to SeaweedFS or a local dir (see start_tiered_broker),
    with the short lifecycle intervals and `extra_args`."""
    ours = LIFECYCLE_ARGS + list(extra_args)

    def factory(extra_args=None, extra_env=None):
        return broker_factory(extra_args=ours + list(extra_args or []), extra_env=extra_env)
    return start_tiered_broker(factory, kind, weed, extra_env=extra_env)


def lifecycle_broker(broker_factory, extra_args: list[str] | None = None):
    b = broker_factory(extra_args=LIFECYCLE_ARGS + list(extra_args or []))
    b.start()
    return b


def read_values(bootstrap: str, topic: str, partition: int, start: int, end: int) -> list[tuple[int, bytes]]:
    got = consume_confluent(bootstrap, topic, {partition: start}, {partition: end})
    return [(r.offset, r.value) for r in got[partition]]


def out_of_range_from(bootstrap: str, topic: str, partition: int, offset: int) -> str:
    """Fetches from `offset` with auto.offset.reset=error; returns librdkafka's error."""
    c = Consumer(consumer_conf(bootstrap, **{"enable.partition.eof": False}))
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._AUTO_OFFSET_RESET:
                    return str(m.error())
                continue
            raise AssertionError(f"read offset {m.offset()} from {offset}, below the log start")
        raise AssertionError(f"no offset-reset error fetching {topic}[{partition}] at {offset}")
    finally:
        c.close()


# =========================================================================== DeleteRecords
def test_delete_records_with_confluent_kafka(broker):
    """AdminClient.delete_records moves the log start (inside a segment too), never back;
    -1 means the high watermark; beyond it is OFFSET_OUT_OF_RANGE; the start survives a
    restart; reads below it are refused and reads from it see exactly what is left.
    (A partition that does not exist: librdkafka refuses it itself, so the kafka-python
    test sends it.)"""
    topic = unique_topic("delrec-ck")
    create_topic(broker.bootstrap, topic, 2)
    base = now_ms()
    produce(broker.bootstrap, topic, records(0, 50, base, "a") + records(1, 50, base, "b"))
    a = admin(broker.bootstrap)

    def delete(tps: list[TopicPartition]) -> dict:
        return {tp.partition: f for tp, f in a.delete_records(tps, request_timeout=15).items()}

    done = delete([TopicPartition(topic, 0, 20), TopicPartition(topic, 1, -1)])
    assert done[0].result(15).low_watermark == 20
    assert done[1].result(15).low_watermark == 50
    assert watermarks(broker.bootstrap, topic, 0) == (20, 50)
    assert watermarks(broker.bootstrap, topic, 1) == (50, 50)

    # Never back; beyond the high watermark is refused; so is a partition that does not exist.
    assert delete([TopicPartition(topic, 0, 5)])[0].result(15).low_watermark == 20
    with pytest.raises(KafkaException) as beyond:
        delete([TopicPartition(topic, 0, 51)])[0].result(15)
    assert beyond.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE, beyond.value

    assert "out of range" in out_of_range_from(broker.bootstrap, topic, 0, 3).lower()
    expected = [(i, f"a-{i:05d}".encode() + b"." * 180) for i in range(20, 50)]
    assert read_values(broker.bootstrap, topic, 0, 20, 50) == expected

    broker.restart()
    assert watermarks(broker.bootstrap, topic, 0) == (20, 50), "the log start survives a restart"
    assert "out of range" in out_of_range_from(broker.bootstrap, topic, 0, 0).lower()
    produce(broker.bootstrap, topic, records(0, 5, now_ms(), "a", first=50))
    assert watermarks(broker.bootstrap, topic, 0) == (20, 55)


def test_delete_records_with_kafka_python(broker):
    topic = unique_topic("delrec-kp")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, records(0, 40, now_ms(), "p"))
    ka = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="strata-retention-test")
    try:
        out = ka.delete_records({KpTopicPartition(topic, 0): 30}, timeout_ms=15000)
        (meta,) = out.values()
        assert meta["low_watermark"] == 30, out
        # Sent to the agent directly: the answer is the broker's, not the client's.
        with pytest.raises(KpUnknownTopicOrPartition):
            ka.delete_records({KpTopicPartition(topic, 7): 1}, timeout_ms=15000, partition_leader_id=1)
    finally:
        ka.close()
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                      auto_offset_reset="none", consumer_timeout_ms=10000)
    try:
        tp = KpTopicPartition(topic, 0)
        c.assign([tp])
        assert c.beginning_offsets([tp]) == {tp: 30}
        c.seek(tp, 2)
        with pytest.raises(KpOffsetOutOfRange):
            for _ in range(50):
                c.poll(timeout_ms=200)
        c.seek_to_beginning(tp)
        got = []
        while len(got) < 10:
            batch = c.poll(timeout_ms=5000)
            assert batch, f"nothing read after {got}"
            got += [r.offset for rs in batch.values() for r in rs]
        assert got == list(range(30, 40))
    finally:
        c.close()


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_a_group_whose_commit_fell_below_the_start_resets(group_broker, reset):
    """Committed offsets are kept apart from retention: a group that committed 5 before
    the start moved to 40 resumes as its auto.offset.reset says (earliest: at the new
    start; latest: at what comes next)."""
    broker = group_broker
    topic = unique_topic(f"delrec-group-{reset}")
    group = unique_topic(f"g-{reset}")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, records(0, 50, now_ms(), "g"))
    c = Consumer(consumer_conf(broker.bootstrap, **{"group.id": group}))
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    finally:
        c.close()
    a = admin(broker.bootstrap)  # alive until the future resolves
    done = a.delete_records([TopicPartition(topic, 0, 40)], request_timeout=15)
    assert next(iter(done.values())).result(15).low_watermark == 40

    c = Consumer(consumer_conf(broker.bootstrap, **{
        "group.id": group, "auto.offset.reset": reset, "enable.partition.eof": False}))
    try:
        c.subscribe([topic])
        first = None
        deadline = time.monotonic() + 30
        more = 50
        while first is None:
            assert time.monotonic() < deadline, "the group read nothing"
            m = c.poll(0.2)
            if m is not None and not m.error():
                first = m.offset()
            elif reset == "latest" and c.assignment():
                # The reset to the end may come before or after this record: either way
                # what the group reads first is new.
                produce(broker.bootstrap, topic, records(0, 1, now_ms(), "g", first=more))
                more += 1
        if reset == "earliest":
            assert first == 40
        else:
            assert first >= 50, first
    finally:
        c.close()


# =========================================================================== retention
@pytest.mark.parametrize("kind", ["s3", "file"])
def test_retention_ms_takes_old_data_from_both_tiers(request, broker_factory, kind):
    """Two-hour-old records on a tiered topic: once retention.ms is an hour, the segments
    and archived objects that hold only them go (on disk and in the store), the log
    start moves to the first segment with a recent record, fetches below it are
    refused, and everything from it on reads back exactly."""
    weed = request.getfixturevalue("seaweedfs") if kind == "s3" else None

    b, arch = tiered_lifecycle_broker(broker_factory, kind, weed)
    topic = unique_topic(f"retain-ms-{kind}")
    create_topic(b.bootstrap, topic, 1, {"segment.bytes": SEGMENT_BYTES})
    old = records(0, 200, now_ms() - 2 * 3_600_000, "r")
    new = records(0, 40, now_ms(), "r", first=200)
    produce(b.bootstrap, topic, old + new)
    end = len(old) + len(new)
    # Every closed segment archived before retention is lowered.
    wait_until(lambda: len(arch.objects(topic, 0)) >= 10, 30, "segments archived")
    assert watermarks(b.bootstrap, topic, 0)[0] == 0

    set_topic_config(b.bootstrap, topic, {"retention.ms": "3600000"})
    start = wait_until(lambda: (lambda lo: lo if lo > 0 else None)(watermarks(b.bootstrap, topic, 0)[0]),
                       30, "retention to move the log start")
    assert 200 - 30 < start <= 200, f"log start {start}: not the first segment with a recent record"

    # Locally: no segment below the start.
    bases = local_bases(b, topic, 0)
    assert bases and bases[0] >= start, f"local segments {bases} with the log start at {start}"

    # In the store: after the grace period, no object wholly below the start.
    def archived_below():
        names = arch.objects(topic, 0)
        return [n for n in names if int(OBJECT_NAME.match(n).group(2)) < start]
    wait_until(lambda: not archived_below(), 30, "objects below the log start deleted from the store")
    assert arch.objects(topic, 0), "the objects above the start stay"

    assert "out of range" in out_of_range_from(b.bootstrap, topic, 0, 0).lower()
    expected = [(r_i, o.value) for r_i, o in enumerate(old + new)][start:]
    assert read_values(b.bootstrap, topic, 0, start, end) == expected

    status = {(p["topic"], p["partition"]): p for p in compaction_status(b)["partitions"]}
    entry = status[(topic, 0)]
    assert entry["log_start_offset"] == start and entry["bytes_reclaimed"] > 0, entry
    assert entry["last_error"] is None, entry


def test_retention_bytes_keeps_the_newest_bytes(broker_factory):
    """retention.bytes on a topic that is not tiered: the oldest segments go while the
    rest stays at least that large, and the log start is the first kept segment."""
    b = lifecycle_broker(broker_factory)
    topic = unique_topic("retain-bytes")
    create_topic(b.bootstrap, topic, 1, {"segment.bytes": SEGMENT_BYTES, "remote.storage.enable": "false"})
    produce(b.bootstrap, topic, records(0, 300, now_ms(), "s"))
    d = b.data_dir / "logs" / f"{topic}-0"
    wait_until(lambda: len(local_bases(b, topic, 0)) > 10, 20, "segments rolled")

    set_topic_config(b.bootstrap, topic, {"retention.bytes": "9000"})
    start = wait_until(lambda: (lambda lo: lo if lo > 0 else None)(watermarks(b.bootstrap, topic, 0)[0]),
                       30, "retention.bytes to move the log start")
    wait_until(lambda: local_bases(b, topic, 0)[0] == start, 10, "segments below the start deleted")
    sizes = [(d / f"{base:020d}.log").stat().st_size for base in local_bases(b, topic, 0)]
    assert sum(sizes) >= 9000, f"kept {sum(sizes)} bytes ({sizes}), below retention.bytes"
    assert sum(sizes) - sizes[0] < 9000, f"kept {sizes}: the oldest could have gone too"
    assert read_values(b.bootstrap, topic, 0, start, 300)[0][0] == start


# =========================================================================== crashes
@pytest.mark.parametrize("point", ["lifecycle.after_retire", "lifecycle.after_local_delete",
                                   "gc.after_object_delete"])
def test_a_crash_at_any_step_of_retention_loses_and_duplicates_nothing(broker_factory, point):
    """The agent crashes (aborts, as a SIGKILL would stop it) between two steps of
    retention: after the metastore moved the log start and retired the archived
    objects below it, after the local segments below it went, or after an object was
    deleted from the store and before the garbage list forgot it. Restarted without the
    crash point, it finishes the work: the log start is where retention put it, every
    record from there on is read exactly once, and nothing below it is left on disk or
    in the store."""
    b, arch = tiered_lifecycle_broker(broker_factory, extra_env={"STRATA_FAILPOINT_CRASH": point})
    topic = unique_topic("retain-crash")
    create_topic(b.bootstrap, topic, 1, {"segment.bytes": SEGMENT_BYTES})
    old = records(0, 120, now_ms() - 2 * 3_600_000, "c")
    new = records(0, 30, now_ms(), "c", first=120)
    produce(b.bootstrap, topic, old + new)
    wait_until(lambda: len(arch.objects(topic, 0)) >= 8, 30, "segments archived")

    set_topic_config(b.bootstrap, topic, {"retention.ms": "3600000"})
    wait_until(lambda: not b.is_running(), 30, f"the crash at {point}")
    assert b.proc.returncode != 0, f"exited with {b.proc.returncode}"
    assert "failpoint: crashing here" in b.log_text() and point in b.log_text(), b.log_tail()

    b.extra_env.pop("STRATA_FAILPOINT_CRASH")
    b.start()
    start = wait_until(lambda: (lambda lo: lo if lo > 0 else None)(watermarks(b.bootstrap, topic, 0)[0]),
                       30, "the log start after the restart")
    assert 120 - 30 < start <= 120, start
    wait_until(lambda: local_bases(b, topic, 0)[0] >= start, 20, "local segments below the start deleted")

    def archived_below():
        return [n for n in arch.objects(topic, 0) if int(OBJECT_NAME.match(n).group(2)) < start]
    wait_until(lambda: not archived_below(), 30, "objects below the start deleted from the store")

    end = len(old) + len(new)
    got = read_values(b.bootstrap, topic, 0, start, end)
    assert [o for o, _ in got] == list(range(start, end)), "every record from the start, once, in order"
    assert got == [(i, r.value) for i, r in enumerate(old + new)][start:]


# =========================================================================== merging
def test_small_archived_objects_are_merged(broker_factory):
    """A low-traffic partition's many small objects are merged into objects of at most
    the target size, swapped into the manifest in one step; the old ones leave the
    store after the grace period; everything reads back exactly from the archive, and
    DuckDB over the store sees each record once."""
    import duckdb

    b, arch = tiered_lifecycle_broker(broker_factory, extra_args=["--archive-merge-target-bytes", "20000"])
    topic = unique_topic("merge")
    create_topic(b.bootstrap, topic, 1, {"segment.bytes": SEGMENT_BYTES})
    sent = records(0, 300, now_ms(), "m")
    produce(b.bootstrap, topic, sent)

    def spans():
        return sorted((int(m.group(1)), int(m.group(2))) for m in map(OBJECT_NAME.match, arch.objects(topic, 0)))

    def merged():
        s = spans()
        # Several objects merged, the store listing contiguous (the old objects gone),
        # and everything but the active segment archived.
        contiguous = bool(s) and s[0][0] == 0 and all(b_[0] == a[1] + 1 for a, b_ in zip(s, s[1:]))
        return s if contiguous and s[-1][1] >= 250 and max(last - first for first, last in s) > 30 else None

    s = wait_until(merged, 60, f"small objects merged (store: {spans()})")
    set_topic_config(b.bootstrap, topic, {"local.retention.ms": "0"})
    wait_until(lambda: local_bases(b, topic, 0)[0] > s[-1][1] - 20, 20, "local segments deleted")
    archived_end = spans()[-1][1] + 1
    assert read_values(b.bootstrap, topic, 0, 0, 300) == [(i, r.value) for i, r in enumerate(sent)]

    glob = str(arch.dir / f"topic={topic}" / "partition=0" / "*.parquet")
    rows, distinct, lo, hi = duckdb.sql(
        f"SELECT count(*), count(DISTINCT \"offset\"), min(\"offset\"), max(\"offset\") FROM read_parquet('{glob}')"
    ).fetchone()
    assert (rows, distinct, lo) == (archived_end, archived_end, 0), (rows, distinct, lo, hi)
    st = {(p["topic"], p["partition"]): p for p in compaction_status(b)["partitions"]}[(topic, 0)]
    assert st["objects_merged"] >= 4, st


def test_strata_compactor_works_on_the_archive_from_its_own_process(broker_factory, tmp_path):
    """`strata compactor` beside an agent that runs with --compactor-enabled false: the
    process merges the agent's small archived objects (it needs the metastore and the
    archive, not the agent's disk), the agent does not, and everything reads back
    exactly."""
    import subprocess

    from conftest import strata_bin

    b, arch = tiered_lifecycle_broker(broker_factory, extra_args=[
        "--compactor-enabled", "false", "--archive-merge-target-bytes", "20000"])
    topic = unique_topic("compactor-process")
    create_topic(b.bootstrap, topic, 1, {"segment.bytes": SEGMENT_BYTES})
    sent = records(0, 300, now_ms(), "p")
    produce(b.bootstrap, topic, sent)
    wait_until(lambda: len(arch.objects(topic, 0)) >= 15, 30, "segments archived")
    log = open(tmp_path / "compactor.log", "w")
    compactor = subprocess.Popen(
        [str(strata_bin()), "compactor", "--data-dir", str(b.data_dir), "--archive-url", arch.url,
         "--log-retention-check-interval-ms", "200", "--archive-gc-grace-ms", "1000",
         "--archive-merge-target-bytes", "20000"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        def merged():
            spans = sorted((int(m.group(1)), int(m.group(2))) for m in map(OBJECT_NAME.match, arch.objects(topic, 0)))
            contiguous = bool(spans) and spans[0][0] == 0 and all(
                b_[0] == a[1] + 1 for a, b_ in zip(spans, spans[1:]))
            return spans if contiguous and len(spans) <= 8 else None

        wait_until(merged, 60, "the compactor process to merge the small objects",)
        assert compactor.poll() is None, (tmp_path / "compactor.log").read_text()
        st = {(p["topic"], p["partition"]): p for p in compaction_status(b)["partitions"]}[(topic, 0)]
        assert st["objects_merged"] == 0, f"the agent merged although --compactor-enabled false: {st}"
        assert read_values(b.bootstrap, topic, 0, 0, 300) == [(i, r.value) for i, r in enumerate(sent)]
    finally:
        compactor.terminate()
        assert compactor.wait(30) == 0, (tmp_path / "compactor.log").read_text()
        log.close()
    assert "worked on the archive" in (tmp_path / "compactor.log").read_text()
