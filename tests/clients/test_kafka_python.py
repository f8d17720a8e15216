"""kafka-python against strata: KafkaAdminClient topic creation, KafkaProducer
(acks=all, every codec) and KafkaConsumer (assign + seek), compared exactly; and
cross-client: records produced by confluent-kafka read by kafka-python."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient

from strata_testlib import (
    CODECS,
    HEADER_VARIANTS_NO_NULL,
    Rec,
    assert_dense_per_partition,
    assert_same_records,
    group_by_partition,
    make_records,
    produce_confluent,
    roundtrip_check,
    unique_topic,
)

# kafka-python's compression_type names
KP_CODEC = {"none": None, "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}


def kp_create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        res = a.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1}},
                              timeout_ms=15000, wait_for_metadata=True)
        assert [(t["name"], t["error_code"]) for t in res["topics"]] == [(topic, 0)], res
        assert topic in a.list_topics()
    finally:
        a.close()


def kp_produce(bootstrap: str, topic: str, records, codec: str, waves: int = 3) -> list[Rec]:
    prod = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        compression_type=KP_CODEC[codec],
        linger_ms=5,
        request_timeout_ms=15000,
        max_block_ms=15000,
    )
    out = []
    try:
        chunk = max(1, -(-len(records) // waves))
        for start in range(0, len(records), chunk):
            futs = []
            for r in records[start:start + chunk]:
                futs.append((r, prod.send(topic, value=r.value, key=r.key, headers=list(r.headers),
                                          partition=r.partition, timestamp_ms=r.timestamp)))
            prod.flush(timeout=30)
            for r, f in futs:
                md = f.get(timeout=30)
                assert (md.topic, md.partition) == (topic, r.partition), md
                out.append(r.at(md.offset))
    finally:
        prod.close(timeout=10)
    return out


def kp_consume(bootstrap: str, topic: str, start: dict[int, int], end: dict[int, int],
               timeout: float = 30) -> dict[int, list[Rec]]:
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        fetch_max_wait_ms=100,
        request_timeout_ms=15000,
    )
    got: dict[int, list[Rec]] = {p: [] for p in start}
    try:
        tps = {p: TopicPartition(topic, p) for p in start}
        c.assign(list(tps.values()))
        for p, off in start.items():
            c.seek(tps[p], off)
        pending = {p for p in start if start[p] < end[p]}
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, (
                f"kafka-python consume timed out; waiting on {sorted(pending)}; "
                f"got {[(p, len(v)) for p, v in got.items()]}")
            for tp, msgs in c.poll(timeout_ms=200).items():
                for m in msgs:
                    assert m.timestamp_type == 0, f"timestamp type {m.timestamp_type} at {m}"
                    r = Rec(m.partition, m.offset, m.key, m.value,
                            tuple((k, v) for k, v in m.headers), m.timestamp)
                    got[r.partition].append(r)
                    if r.offset >= end[r.partition] - 1:
                        pending.discard(r.partition)
        for p, tp in tps.items():
            assert c.end_offsets([tp])[tp] == end[p], f"{topic}[{p}] end offset"
            assert c.beginning_offsets([tp])[tp] == 0, f"{topic}[{p}] beginning offset"
    finally:
        c.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_roundtrip(broker, codec):
    topic = unique_topic(f"kp-{codec}")
    kp_create_topic(broker.bootstrap, topic, 3)
    records = make_records(f"kp-{codec}", partitions=3, per_partition=30,
                           header_variants=HEADER_VARIANTS_NO_NULL, allow_null_key_and_value=False)
    sent = kp_produce(broker.bootstrap, topic, records, codec)
    assert_dense_per_partition(sent)
    exp = group_by_partition(sent)
    end = {p: len(v) for p, v in exp.items()}

    got = kp_consume(broker.bootstrap, topic, {p: 0 for p in exp}, end)
    for p in exp:
        assert_same_records(got[p], exp[p], f"kafka-python read of {topic}[{p}]")

    # replay from the middle
    got = kp_consume(broker.bootstrap, topic, {p: 13 for p in exp}, end)
    for p in exp:
        assert_same_records(got[p], exp[p][13:], f"kafka-python replay of {topic}[{p}] from 13")

    # and the same bytes through librdkafka
    roundtrip_check(broker.bootstrap, topic, sent)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_confluent_produced_read_by_kafka_python(broker, codec):
    """Null header values and null key+value records are only producible with librdkafka."""
    topic = unique_topic(f"kp-x-{codec}")
    kp_create_topic(broker.bootstrap, topic, 2)
    sent = produce_confluent(broker.bootstrap, topic, make_records(f"x-{codec}", 2, 25),
                             codec=codec, waves=2)
    exp = group_by_partition(sent)
    got = kp_consume(broker.bootstrap, topic, {p: 0 for p in exp}, {p: len(v) for p, v in exp.items()})
    for p in exp:
        assert_same_records(got[p], exp[p], f"kafka-python read of confluent-produced {topic}[{p}]")
