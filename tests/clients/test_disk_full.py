"""A full disk: the agent's data directory (its logs and the embedded metastore) fills up
under acks=all produce.

What must hold: the writes it cannot store are refused with KAFKA_STORAGE_ERROR, which
clients retry (librdkafka until its message timeout), never acknowledged; the agent keeps
running and serving reads; everything it acknowledged is read back intact at its offset;
and once space is freed it takes writes again by itself, with no restart. (Kafka takes a
full log directory offline until the broker restarts.)

The data directory is a small ext4 filesystem on a loop device (so the test needs root,
as CI has), with a ballast file that is deleted to free space.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from replication_testlib import wait_for
from strata_testlib import RDKAFKA_LOG, create_topic, unique_topic

DISK_BYTES = 64 * 1024 * 1024
BALLAST_BYTES = 16 * 1024 * 1024
VALUE_BYTES = 1000


@pytest.fixture
def small_disk():
    """A mounted 64 MiB ext4 filesystem; unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a loop device needs root")
    root = Path(tempfile.mkdtemp(prefix="strata-disk-full-"))
    image, mnt = root / "disk.img", root / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(DISK_BYTES)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(root, ignore_errors=True)


class Sent:
    """Delivery reports of one producer: acknowledged value -> offset, and errors."""

    def __init__(self):
        self.acked: dict[bytes, int] = {}
        self.errors: list[KafkaError] = []

    def report(self, err, msg):
        if err is None:
            self.acked[msg.value()] = msg.offset()
        else:
            self.errors.append(err)


def value(tag: str, n: int) -> bytes:
    return f"{tag}-{n:08d}-".encode().ljust(VALUE_BYTES, b".")


def produce(bootstrap: str, topic: str, tag: str, count: int, timeout_ms: int, **conf) -> Sent:
    sent = Sent()
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": timeout_ms, "logger": RDKAFKA_LOG, **conf})
    for n in range(count):
        while True:
            try:
                p.produce(topic, value(tag, n), on_delivery=sent.report)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(timeout_ms / 1000 + 30) == 0, "every message got a delivery report"
    return sent


def read_all(bootstrap: str, topic: str, end: int) -> dict[int, bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"),
                  "enable.auto.commit": False, "logger": RDKAFKA_LOG})
    c.assign([TopicPartition(topic, 0, 0)])
    got: dict[int, bytes] = {}

    def more():
        for m in c.consume(1000, timeout=1):
            assert m.error() is None, m.error()
            got[m.offset()] = m.value()
        return len(got) >= end, len(got)

    try:
        wait_for(more, 60, f"{end} records read back")
    finally:
        c.close()
    return got


def fill(path: Path) -> None:
    """Writes `path` until the filesystem has no byte left."""
    with open(path, "wb", buffering=0) as f:
        chunk = 1024 * 1024
        while chunk:
            try:
                f.write(b"\0" * chunk)
            except OSError:
                chunk //= 2


def ready(http_url: str) -> bool:
    with urllib.request.urlopen(http_url + "/readyz", timeout=5) as r:
        return r.status == 200


@pytest.mark.timeout(300)
def test_a_full_disk_refuses_writes_loses_nothing_and_recovers_when_space_is_freed(
        broker_factory, small_disk):
    ballast = small_disk / "ballast"
    with open(ballast, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, BALLAST_BYTES)
    b = broker_factory()
    b.data_dir = small_disk / "data"
    b.data_dir.mkdir()
    b.start()
    topic = unique_topic("full")
    create_topic(b.bootstrap, topic, 1)

    # More than the disk holds: the first part is acknowledged, the rest times out.
    first = produce(b.bootstrap, topic, "first", 60_000, timeout_ms=10_000)
    assert first.acked, "the writes that fitted were acknowledged"
    assert first.errors, "the disk filled up"
    assert {e.code() for e in first.errors} == {KafkaError._MSG_TIMED_OUT}, \
        "retried until the message timeout, refused with a retriable error"
    assert shutil.disk_usage(small_disk).free < 2 * 1024 * 1024
    assert b.is_running() and ready(b.http_url)

    # Without retries the refusal itself shows: KAFKA_STORAGE_ERROR. (A small record may
    # still fit where a large batch did not: fill what is left first.)
    filler = small_disk / "filler"
    fill(filler)
    refused = produce(b.bootstrap, topic, "refused", 1, timeout_ms=10_000,
                      **{"enable.idempotence": False, "retries": 0})
    assert not refused.acked
    assert [e.code() for e in refused.errors] == [KafkaError.KAFKA_STORAGE_ERROR], refused.errors

    got = read_all(b.bootstrap, topic, len(first.acked))
    assert {got.get(offset) for offset in first.acked.values()} == set(first.acked), \
        "every acknowledged record at its offset"
    assert set(got.values()) == set(first.acked), "and nothing else in the log"

    # Freed space: the agent takes writes again by itself.
    ballast.unlink()
    filler.unlink()
    second = produce(b.bootstrap, topic, "second", 5_000, timeout_ms=30_000)
    assert len(second.acked) == 5_000 and not second.errors, second.errors[:3]
    end = len(first.acked) + len(second.acked)
    got = read_all(b.bootstrap, topic, end)
    acked = {**first.acked, **second.acked}
    assert {got.get(offset) for offset in acked.values()} == set(acked)
    assert len(got) == end, "nothing but what was acknowledged"
