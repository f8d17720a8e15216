"""confluent-kafka (librdkafka) against strata: produce/consume round trip in every
codec, replay from a middle offset, ListOffsets (timestamps, watermarks), admin APIs."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from strata_testlib import (
    BASE_TS,
    CODECS,
    NODE_ID,
    RDKAFKA_LOG,
    Out,
    admin,
    assert_dense_per_partition,
    assert_same_records,
    consume_confluent,
    consumer_conf,
    create_topic,
    group_by_partition,
    make_records,
    produce_confluent,
    roundtrip_check,
    unique_topic,
    wait_for_partitions,
    wait_until,
    watermarks,
)

KAFKA_DEFAULT_RETENTION_MS = "604800000"


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_all_fields_and_replay(broker, codec):
    topic = unique_topic(f"ck-{codec}")
    create_topic(broker.bootstrap, topic, 3)
    records = make_records(f"ck-{codec}", partitions=3, per_partition=40)
    # 4 flushed waves -> several (compressed) batches per partition
    sent = produce_confluent(broker.bootstrap, topic, records, codec=codec, waves=4)
    assert_dense_per_partition(sent)

    roundtrip_check(broker.bootstrap, topic, sent)

    # Replay from offsets in the middle of the log (inside batches, not at batch starts)
    exp = group_by_partition(sent)
    for start in (1, 17, 39):
        got = consume_confluent(broker.bootstrap, topic, {p: start for p in exp},
                                {p: len(v) for p, v in exp.items()})
        for p in exp:
            assert_same_records(got[p], exp[p][start:], f"{topic}[{p}] replay from {start}")


def test_auto_create_topic_on_produce(broker):
    topic = unique_topic("ck-auto")
    recs = [Out(0, f"k{i}".encode(), f"v{i}".encode(), [], BASE_TS + i) for i in range(5)]
    sent = produce_confluent(broker.bootstrap, topic, recs)
    assert [r.offset for r in sent] == [0, 1, 2, 3, 4]
    md = admin(broker.bootstrap).list_topics(timeout=10)
    assert topic in md.topics
    assert sorted(md.topics[topic].partitions) == [0], "auto-created topics have 1 partition"
    roundtrip_check(broker.bootstrap, topic, sent)


def test_offsets_for_times_and_watermarks(broker):
    topic = unique_topic("ck-times")
    create_topic(broker.bootstrap, topic, 2)
    # distinct timestamps, not monotonic in offset order, over several batches
    ts_list = [1000, 3000, 2000, 5000, 4000, 9000, 6000, 7000, 8000, 12000, 10000, 11000]
    records = []
    for p in range(2):
        for i, ts in enumerate(ts_list):
            records.append(Out(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), [("i", str(i).encode())],
                               BASE_TS + ts + p))
    sent = produce_confluent(broker.bootstrap, topic, records, waves=3)
    assert_dense_per_partition(sent)
    roundtrip_check(broker.bootstrap, topic, sent)

    part_ts = {p: [BASE_TS + ts + p for ts in ts_list] for p in range(2)}
    queries = sorted({t + d for ts in part_ts.values() for t in ts for d in (-1, 0, 1)}
                     | {BASE_TS - 10_000, BASE_TS + 50_000})

    def first_at_or_after(p, q):
        return next((off for off, t in enumerate(part_ts[p]) if t >= q), -1)

    c = Consumer(consumer_conf(broker.bootstrap))
    try:
        for p in range(2):
            assert c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False) == (0, len(ts_list))
        mismatches = []
        for q in queries:
            res = c.offsets_for_times([TopicPartition(topic, 0, q), TopicPartition(topic, 1, q)], timeout=10)
            for tp in res:
                assert tp.error is None, f"offsets_for_times({q}) on partition {tp.partition}: {tp.error}"
                want = first_at_or_after(tp.partition, q)
                if tp.offset != want:
                    mismatches.append((tp.partition, q - BASE_TS, tp.offset, want))
        assert not mismatches, (
            "ListOffsets by timestamp (partition, query-BASE_TS, got, expected): %r" % mismatches)
    finally:
        c.close()

    # empty partition watermarks
    empty = unique_topic("ck-empty")
    create_topic(broker.bootstrap, empty, 1)
    assert watermarks(broker.bootstrap, empty, 0) == (0, 0)
    c = Consumer(consumer_conf(broker.bootstrap))
    try:
        (tp,) = c.offsets_for_times([TopicPartition(empty, 0, BASE_TS)], timeout=10)
        assert tp.error is None and tp.offset == -1, f"empty partition by timestamp: {tp}"
    finally:
        c.close()


def _src(entry) -> int:
    return getattr(entry.source, "value", entry.source)


def _describe(a, topic: str) -> dict:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return a.describe_configs([res], request_timeout=15)[res].result(timeout=15)


def test_admin_describe_alter_incremental_configs(broker):
    a = admin(broker.bootstrap)
    plain = unique_topic("ck-cfg-default")
    topic = unique_topic("ck-cfg")
    create_topic(broker.bootstrap, plain, 1)
    create_topic(broker.bootstrap, topic, 1, config={"retention.ms": "3600000"})

    d = _describe(a, plain)
    e = d["retention.ms"]
    assert (e.value, e.is_default, _src(e)) == (
        KAFKA_DEFAULT_RETENTION_MS, True, ConfigSource.DEFAULT_CONFIG.value), e

    d = _describe(a, topic)
    e = d["retention.ms"]
    assert (e.value, e.is_default, _src(e)) == (
        "3600000", False, ConfigSource.DYNAMIC_TOPIC_CONFIG.value), e

    # legacy AlterConfigs
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.ms": "7200000"})
    a.alter_configs([res], request_timeout=15)[res].result(timeout=15)
    assert _describe(a, topic)["retention.ms"].value == "7200000"

    # IncrementalAlterConfigs SET
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res], request_timeout=15)[res].result(timeout=15)
    e = _describe(a, topic)["retention.ms"]
    assert (e.value, e.is_default) == ("86400000", False), e

    # invalid value -> INVALID_CONFIG, config unchanged
    for bad in ("not-a-number", "12abc"):
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", bad, incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as ei:
            a.incremental_alter_configs([res], request_timeout=15)[res].result(timeout=15)
        assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG, ei.value
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.ms": bad})
        with pytest.raises(KafkaException) as ei:
            a.alter_configs([res], request_timeout=15)[res].result(timeout=15)
        assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG, ei.value
    assert _describe(a, topic)["retention.ms"].value == "86400000"

    # IncrementalAlterConfigs DELETE -> back to the default
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    a.incremental_alter_configs([res], request_timeout=15)[res].result(timeout=15)
    e = _describe(a, topic)["retention.ms"]
    assert (e.value, e.is_default) == (KAFKA_DEFAULT_RETENTION_MS, True), e

    # config of a missing topic
    missing = ConfigResource(ConfigResource.Type.TOPIC, unique_topic("ck-missing"))
    with pytest.raises(KafkaException) as ei:
        a.describe_configs([missing], request_timeout=15)[missing].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, ei.value


def test_admin_create_invalid(broker):
    a = admin(broker.bootstrap)
    # invalid config value at creation
    t = unique_topic("ck-badcfg")
    fs = a.create_topics([NewTopic(t, 1, 1, config={"retention.ms": "forever"})], request_timeout=15)
    with pytest.raises(KafkaException) as ei:
        fs[t].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG, ei.value
    # invalid names
    for name in ("bad name", "slash/topic", "..", "x" * 250, "star*"):
        fs = a.create_topics([NewTopic(name, 1, 1)], request_timeout=15)
        with pytest.raises(KafkaException) as ei:
            fs[name].result(timeout=15)
        assert ei.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, (name, ei.value)
    # neither exists afterwards
    topics = a.list_topics(timeout=10).topics
    assert t not in topics
    assert not {"bad name", "slash/topic", "..", "x" * 250, "star*"} & set(topics)
    # duplicate creation
    dup = unique_topic("ck-dup")
    create_topic(broker.bootstrap, dup, 1)
    fs = a.create_topics([NewTopic(dup, 2, 1)], request_timeout=15)
    with pytest.raises(KafkaException) as ei:
        fs[dup].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, ei.value
    assert len(a.list_topics(timeout=10).topics[dup].partitions) == 1


def test_admin_create_partitions_and_delete_topics(broker):
    a = admin(broker.bootstrap)
    topic = unique_topic("ck-parts")
    create_topic(broker.bootstrap, topic, 1)
    before = produce_confluent(broker.bootstrap, topic,
                               [Out(0, b"k0", b"before", [], BASE_TS)])

    a.create_partitions([NewPartitions(topic, 4)], request_timeout=15)[topic].result(timeout=15)
    wait_for_partitions(a, topic, 4)

    # shrinking is an error
    with pytest.raises(KafkaException) as ei:
        a.create_partitions([NewPartitions(topic, 2)], request_timeout=15)[topic].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.INVALID_PARTITIONS, ei.value

    recs = [Out(p, f"k{p}".encode(), f"after-{p}".encode(), [("p", str(p).encode())], BASE_TS + 10 + p)
            for p in range(4)]
    after = produce_confluent(broker.bootstrap, topic, recs)
    assert [(r.partition, r.offset) for r in after] == [(0, 1), (1, 0), (2, 0), (3, 0)]
    roundtrip_check(broker.bootstrap, topic, before + after)

    # delete
    other = unique_topic("ck-keep")
    create_topic(broker.bootstrap, other, 1)
    a.delete_topics([topic], request_timeout=15)[topic].result(timeout=15)
    wait_until(lambda: topic not in a.list_topics(timeout=5).topics, 15, f"{topic} to disappear")
    assert other in a.list_topics(timeout=10).topics

    # deleting it again -> UNKNOWN_TOPIC_OR_PART
    with pytest.raises(KafkaException) as ei:
        a.delete_topics([topic], request_timeout=15)[topic].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, ei.value

    # re-creating the name gives an empty topic
    create_topic(broker.bootstrap, topic, 1)
    assert watermarks(broker.bootstrap, topic, 0) == (0, 0)


def test_describe_cluster_and_metadata(broker):
    a = admin(broker.bootstrap)
    desc = a.describe_cluster(request_timeout=15).result(timeout=15)
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(NODE_ID, "127.0.0.1", broker.kafka_port)]
    assert desc.controller is not None and desc.controller.id == NODE_ID
    assert desc.cluster_id

    md = a.list_topics(timeout=10)
    assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {NODE_ID: ("127.0.0.1", broker.kafka_port)}
    assert md.cluster_id == desc.cluster_id
    assert md.controller_id == NODE_ID


def test_authorized_operations_without_an_authorizer_are_every_supported_one(group_broker):
    """KIP-430 as Kafka answers it with no authorizer configured: a client that asks is
    told every operation the resource type supports (librdkafka's admin tests expect 8
    for a topic, 7 for the cluster, 3 for a group); one that does not ask is told none."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    b = group_broker
    a = admin(b.bootstrap)
    topic = unique_topic("authops")
    create_topic(b.bootstrap, topic, 1)
    topics = a.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                               request_timeout=15)
    described = topics[topic].result(timeout=15)
    assert set(described.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS}
    cluster = a.describe_cluster(include_authorized_operations=True, request_timeout=15)
    assert set(cluster.result(timeout=15).authorized_operations) == {
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE}
    not_asked = a.describe_topics(TopicCollection([topic]), request_timeout=15)
    assert not not_asked[topic].result(timeout=15).authorized_operations

    group = unique_topic("authops-g")
    c = Consumer(consumer_conf(b.bootstrap, **{"group.id": group}))
    try:
        c.subscribe([topic])
        wait_until(lambda: c.poll(0.2) is None and c.assignment(), 30, "the group to form")
        groups = a.describe_consumer_groups([group], include_authorized_operations=True,
                                            request_timeout=15)
        described = groups[group].result(timeout=15)
    finally:
        c.close()
    assert set(described.authorized_operations) == {
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}


def test_compacted_topic_refuses_keyless_records(broker):
    """librdkafka's test 0011 expectation: on a compacted topic a record without a key
    fails with INVALID_RECORD (and is not stored); keyed records go in."""
    topic = unique_topic("ck-compact")
    create_topic(broker.bootstrap, topic, 1, config={"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                  "logger": RDKAFKA_LOG})
    reports = []
    p.produce(topic, value=b"no key", partition=0,
              on_delivery=lambda err, msg: reports.append(("keyless", err, msg.offset())))
    p.flush(20)
    p.produce(topic, key=b"k", value=b"keyed", partition=0,
              on_delivery=lambda err, msg: reports.append(("keyed", err, msg.offset())))
    assert p.flush(20) == 0
    (_, err, _), (_, ok, offset) = reports
    assert err is not None and err.code() == KafkaError.INVALID_RECORD, err
    assert ok is None and offset == 0, (ok, offset)
