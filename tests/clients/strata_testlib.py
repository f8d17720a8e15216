"""Helpers shared by the client test modules: record generation, confluent-kafka
produce/consume with exact comparison, and polling with deadlines."""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

# strata runs single-node with node id 1. (Override only to point the suite at a
# stand-in broker with another id.)
NODE_ID = int(os.environ.get("STRATA_TEST_NODE_ID", "1"))

# librdkafka's own log lines go through Python logging (so pytest captures them per
# test) instead of straight to fd 2, where clients outliving a failed test's broker
# would spam the terminal.
RDKAFKA_LOG = logging.getLogger("librdkafka")

# A fixed base so that timestamps are exact and clearly not "now".
BASE_TS = 1_700_000_000_000


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_until(pred, timeout: float, what: str, interval: float = 0.05):
    """Poll pred() until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last={last!r})")
        time.sleep(interval)


def delivered(outcomes: list) -> list[str]:
    """A producer's delivery outcomes (None for a delivered record, else its KafkaError)
    as "ok" or the error's text, to compare in a test. Never compare a KafkaError with
    None: confluent-kafka's KafkaError.__eq__ leaves a TypeError set for an operand that
    is neither a KafkaError nor an int, which surfaces later, somewhere unrelated, as a
    SystemError ("returned a result with an exception set")."""
    return ["ok" if e is None else str(e) for e in outcomes]


@dataclass(frozen=True)
class Rec:
    """One record as a client sees it; all fields compared exactly."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int

    def short(self) -> str:
        return (f"p{self.partition}@{self.offset} key={self.key!r} value={_clip(self.value)} "
                f"headers={self.headers!r} ts={self.timestamp}")


def _clip(v: bytes | None, n: int = 40):
    if v is None:
        return None
    return repr(v[:n]) + (f"...(+{len(v) - n})" if len(v) > n else "")


@dataclass
class Out:
    """A record to produce (no offset yet)."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = 0

    def at(self, offset: int) -> Rec:
        return Rec(self.partition, offset, self.key, self.value, tuple(self.headers), self.timestamp)


HEADER_VARIANTS: list[list[tuple[str, bytes | None]]] = [
    [],
    [("trace-id", b"abc-123")],
    # duplicate keys (order must be kept) and a null-valued header
    [("dup", b"first"), ("dup", b"second"), ("null-header", None)],
    [("a", b""), ("dup", b"x"), ("bin", bytes([0, 255, 1, 254])), ("dup", b"y"), ("dup", None)],
]


# For clients that cannot send a null header value (kafka-python, kafkajs).
HEADER_VARIANTS_NO_NULL: list[list[tuple[str, bytes | None]]] = [
    [(k, b"<null>" if v is None else v) for k, v in variant] for variant in HEADER_VARIANTS
]


def make_records(tag: str, partitions: int, per_partition: int, ts_base: int = BASE_TS,
                 header_variants=HEADER_VARIANTS, allow_null_key_and_value: bool = True) -> list[Out]:
    """Records with a mix of: keys, null keys, empty keys, null values, empty values,
    binary values, headers (incl. duplicate keys and null header values), compressible
    payloads, explicit distinct timestamps. Interleaved over partitions."""
    out = []
    n = 0
    for i in range(per_partition):
        for p in range(partitions):
            n += 1
            if i % 5 == 1:
                key = None
            elif i % 11 == 4:
                key = b""
            else:
                key = f"{tag}-key-{p}-{i}".encode()
            if i % 7 == 3:
                value = None
            elif i % 13 == 6:
                value = b""
            elif i % 9 == 2:
                value = bytes(range(256)) + f"|{tag}|{p}|{i}".encode()
            else:
                value = f"{tag} p{p} i{i} ".encode() + b"compressible payload " * 12
            if key is None and value is None and not allow_null_key_and_value:
                key = f"{tag}-both-null-{p}-{i}".encode()
            headers = list(header_variants[(i + p) % len(header_variants)])
            out.append(Out(p, key, value, headers, ts_base + n))
    return out


# --------------------------------------------------------------------------- admin
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, "logger": RDKAFKA_LOG})


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict | None = None,
                 timeout: float = 20, any_leader: bool = False) -> None:
    """Creates the topic and waits until every partition has a leader: the single test
    broker (NODE_ID), or any agent (`any_leader`, for clusters)."""
    a = admin(bootstrap)
    fs = a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                   config=config or {})], operation_timeout=timeout,
                         request_timeout=timeout)
    fs[topic].result(timeout=timeout)
    wait_for_partitions(a, topic, partitions, timeout, any_leader)


def wait_for_partitions(a: AdminClient, topic: str, partitions: int, timeout: float = 20,
                        any_leader: bool = False):
    def ok():
        md = a.list_topics(timeout=5)
        t = md.topics.get(topic)
        if t is None or t.error is not None or len(t.partitions) != partitions:
            return False
        return all((pm.leader >= 0 if any_leader else pm.leader == NODE_ID) and pm.error is None
                   for pm in t.partitions.values())
    wait_until(ok, timeout, f"metadata for {topic} with {partitions} partitions and leaders")


# --------------------------------------------------------------------------- produce
def producer_conf(bootstrap: str, codec: str = "none", **extra) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": False,
        "acks": "all",
        "compression.type": codec,
        "linger.ms": 5,
        "message.timeout.ms": 30000,
        "socket.timeout.ms": 10000,
        "logger": RDKAFKA_LOG,
    }
    conf.update(extra)
    return conf


def produce_confluent(bootstrap: str, topic: str, records: list[Out], codec: str = "none",
                      waves: int = 1, timeout: float = 30, **extra) -> list[Rec]:
    """Produce records (in `waves` flushed chunks, so partitions get several batches);
    return them as Recs with the offsets from the delivery reports, in input order."""
    p = Producer(producer_conf(bootstrap, codec, **extra))
    results: list = [None] * len(records)

    def cb_for(idx):
        def cb(err, msg):
            results[idx] = err if err is not None else (msg.partition(), msg.offset(), msg.timestamp())
        return cb

    chunk = max(1, -(-len(records) // waves))
    for start in range(0, len(records), chunk):
        for idx in range(start, min(start + chunk, len(records))):
            r = records[idx]
            kwargs = dict(partition=r.partition, timestamp=r.timestamp, on_delivery=cb_for(idx))
            if r.headers:
                kwargs["headers"] = list(r.headers)
            p.produce(topic, value=r.value, key=r.key, **kwargs)
        remaining = p.flush(timeout)
        assert remaining == 0, f"{remaining} messages not delivered within {timeout}s"
    out = []
    for r, res in zip(records, results):
        assert res is not None, f"no delivery report for {r}"
        assert not isinstance(res, KafkaError), f"delivery failed: {res} for {r}"
        part, off, (ts_type, ts) = res
        assert part == r.partition, f"delivered to partition {part}, asked for {r.partition}"
        assert off >= 0, f"delivery report without offset: {res}"
        out.append(r.at(off))
    return out


def assert_dense_per_partition(recs: list[Rec], start: int = 0) -> None:
    """Offsets of records produced in order to a partition are start, start+1, ... in order."""
    by_p: dict[int, list[int]] = {}
    for r in recs:
        by_p.setdefault(r.partition, []).append(r.offset)
    for p, offs in by_p.items():
        assert offs == list(range(start, start + len(offs))), (
            f"partition {p}: offsets in produce order are {offs[:20]}..., expected dense from {start}")


# --------------------------------------------------------------------------- consume
def consumer_conf(bootstrap: str, **extra) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        # Required by confluent-kafka; never used: no subscribe(), no commit.
        "group.id": "strata-client-tests-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": 10000,
        "logger": RDKAFKA_LOG,
    }
    conf.update(extra)
    return conf


def msg_to_rec(m) -> Rec:
    ts_type, ts = m.timestamp()
    assert ts_type == TIMESTAMP_CREATE_TIME, f"timestamp type {ts_type} at p{m.partition()}@{m.offset()}"
    return Rec(m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts)


def consume_confluent(bootstrap: str, topic: str, start: dict[int, int], end: dict[int, int],
                      timeout: float = 30, **extra) -> dict[int, list[Rec]]:
    """Assign topic partitions at start[p], read until offset end[p]-1 was seen on every
    partition; returns records per partition in the order received. Fails on any
    partition-level error or on the deadline."""
    c = Consumer(consumer_conf(bootstrap, **extra))
    got: dict[int, list[Rec]] = {p: [] for p in start}
    try:
        c.assign([TopicPartition(topic, p, off) for p, off in start.items()])
        pending = {p for p in start if start[p] < end[p]}
        global_errors = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"consume timed out after {timeout}s; still waiting on partitions {sorted(pending)}; "
                    f"got {[(p, len(v), v[-1].offset if v else None) for p, v in got.items()]}; "
                    f"client errors: {global_errors[-5:]}")
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                err = m.error()
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if m.topic() is None:
                    global_errors.append(str(err))
                    if err.fatal():
                        raise KafkaException(err)
                    continue
                raise AssertionError(f"consume error on {m.topic()}[{m.partition()}]: {err}")
            r = msg_to_rec(m)
            got[r.partition].append(r)
            if r.offset >= end[r.partition] - 1:
                pending.discard(r.partition)
    finally:
        c.close()
    return got


RETRIED_BY_CLIENTS = (KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                      KafkaError.LEADER_NOT_AVAILABLE)


def watermarks(bootstrap: str, topic: str, partition: int, timeout: float = 10) -> tuple[int, int]:
    """The partition's (low, high) watermarks. Retriable answers are retried, as Kafka
    clients retry them, until `timeout`: OFFSET_NOT_AVAILABLE (a new leader whose high
    watermark has not caught up yet, KIP-207), and NOT_LEADER_FOR_PARTITION or
    LEADER_NOT_AVAILABLE (the leadership moved since the client's metadata, which the
    error makes it refresh; a self-healing cluster moves leaders back after a repair)."""
    c = Consumer(consumer_conf(bootstrap))
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return tuple(c.get_watermark_offsets(TopicPartition(topic, partition),
                                                     timeout=timeout, cached=False))
            except KafkaException as e:
                if (e.args[0].code() not in RETRIED_BY_CLIENTS
                        or time.monotonic() > deadline):
                    raise
                time.sleep(0.1)
    finally:
        c.close()


def group_by_partition(recs: list[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {}
    for r in recs:
        out.setdefault(r.partition, []).append(r)
    for v in out.values():
        v.sort(key=lambda r: r.offset)
    return out


def assert_same_records(got: list[Rec], expected: list[Rec], what: str) -> None:
    """Exact list equality with a readable first difference."""
    if got == expected:
        return
    lines = [f"{what}: got {len(got)} records, expected {len(expected)}"]
    for i, (g, e) in enumerate(zip(got, expected)):
        if g != e:
            lines.append(f"first difference at index {i}:\n  got      {g.short()}\n  expected {e.short()}")
            break
    else:
        longer, name = (got, "got") if len(got) > len(expected) else (expected, "expected")
        n = min(len(got), len(expected))
        lines.append(f"extra records in {name} from index {n}: "
                     + "; ".join(r.short() for r in longer[n:n + 3]))
    raise AssertionError("\n".join(lines))


def roundtrip_check(bootstrap: str, topic: str, expected: list[Rec], timeout: float = 30) -> None:
    """Consume every partition of `expected` from 0 and compare exactly; also check
    watermarks are exactly (0, n)."""
    exp = group_by_partition(expected)
    end = {p: len(v) for p, v in exp.items()}
    got = consume_confluent(bootstrap, topic, {p: 0 for p in exp}, end, timeout=timeout)
    for p in sorted(exp):
        assert_same_records(got[p], exp[p], f"{topic}[{p}] read back from offset 0")
        wm = watermarks(bootstrap, topic, p)
        assert wm == (0, end[p]), f"{topic}[{p}] watermarks (low, high) = {wm}, expected {(0, end[p])}"
