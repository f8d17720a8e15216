"""Idempotent producer: InitProducerId, per-partition deduplication of retried batches,
OUT_OF_ORDER_SEQUENCE_NUMBER on gaps, producer state across a SIGKILL.

- librdkafka with enable.idempotence=true produces continuously while the broker is
  SIGKILLed and restarted twice; batches in flight at the crash are retried with
  their original sequence numbers, so a batch that reached the log before the crash
  must not be appended again: no value may appear twice, per partition the values
  must be in send order, and every acknowledged value must be at its acknowledged
  offset.
- kafka-python with enable_idempotence=True: a round trip.
- A raw wire client sets producer id, epoch and sequences by hand: a resent batch is
  answered with its original offset and not appended, a gap is rejected with
  OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch with INVALID_PRODUCER_EPOCH, and all of
  it holds after a SIGKILL; producer ids are never handed out twice, restart or not.
"""

from __future__ import annotations

import logging
import re
import threading
import time

from confluent_kafka import Producer
from kafka import KafkaProducer

from kafka_wire import (
    INVALID_PRODUCER_EPOCH,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    Wire,
    idempotent_batch,
)
from strata_testlib import (
    BASE_TS,
    RDKAFKA_LOG,
    consume_confluent,
    create_topic,
    unique_topic,
    wait_until,
    watermarks,
)

PARTITIONS = 3
BURST = 30000


class BatchLog(logging.Handler):
    """Receives librdkafka's `debug=msg` lines and keeps, per (partition, producer id,
    epoch, base sequence), how often a batch was sent: a batch sent twice is one that
    the producer retried (informational: whether a crash caught batches in flight)."""

    PRODUCE = re.compile(r"\[(\d+)\]: Produce MessageSet with (\d+) message\(s\) .*"
                         r"BaseSeq (-?\d+), PID\{Id:(\d+),Epoch:(\d+)\}")

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.sends: dict[tuple[int, int, int, int], int] = {}

    def emit(self, record):
        m = self.PRODUCE.search(record.getMessage())
        if m:
            p, _n, seq, pid, epoch = map(int, m.groups())
            key = (p, pid, epoch, seq)
            self.sends[key] = self.sends.get(key, 0) + 1
        elif record.levelno >= logging.INFO:
            RDKAFKA_LOG.handle(record)

    def resent(self) -> int:
        return sum(1 for n in self.sends.values() if n > 1)


class IdempotentProducer:
    """Produces values f"idem-{seq:08d}" (key and partition from seq % PARTITIONS, so a
    partition's values are in seq order iff they are in send order) at about `rate`
    records/s, plus bursts on demand, with librdkafka's idempotence on; records every
    delivery report."""

    def __init__(self, bootstrap: str, topic: str, rate: float):
        self.topic, self.rate = topic, rate
        self.batches = BatchLog()
        self.log = logging.getLogger(f"librdkafka.idempotent.{topic}")
        self.log.setLevel(logging.DEBUG)
        self.log.propagate = False
        self.log.addHandler(self.batches)
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,  # implies acks=all, max.in.flight<=5, retries
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "socket.timeout.ms": 10000,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000,
            "queue.buffering.max.messages": 200000,
            "error_cb": self._on_error,
            "debug": "msg",
            "logger": self.log,
        })
        self.lock = threading.Lock()
        self.acked: dict[int, tuple[int, int]] = {}  # seq -> (partition, offset)
        self.max_acked_seq = -1
        self.failed: list[tuple[int, str]] = []
        self.client_errors: list[tuple[float, str, bool]] = []
        self.sent = 0
        self.credit = 0  # records to produce at once, ahead of the pace
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="idempotent-producer", daemon=True)

    def _on_error(self, err):
        with self.lock:
            self.client_errors.append((time.monotonic(), str(err), err.fatal()))

    def _cb(self, err, msg):
        seq = int(msg.value()[5:])
        with self.lock:
            if err is None:
                assert seq not in self.acked, f"seq {seq} acknowledged twice"
                self.acked[seq] = (msg.partition(), msg.offset())
                self.max_acked_seq = max(self.max_acked_seq, seq)
            else:
                self.failed.append((seq, str(err)))

    def _run(self):
        try:
            t0 = time.monotonic()
            seq = 0
            while not self._stop.is_set():
                ahead = (seq - self.credit) / self.rate - (time.monotonic() - t0)
                if ahead > 0:  # pacing, not waiting for a condition
                    self.producer.poll(min(ahead, 0.05))
                    continue
                p = seq % PARTITIONS
                try:
                    self.producer.produce(self.topic, value=f"idem-{seq:08d}".encode(),
                                          key=f"key-{p}".encode(), partition=p, on_delivery=self._cb)
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                seq += 1
                self.sent = seq
                self.producer.poll(0)
        except BaseException as e:
            self.error = e

    def burst(self, n: int) -> int:
        """Produce n records at once; returns the seq of the first."""
        first = self.sent
        self.credit += n
        return first

    def n_acked(self) -> int:
        with self.lock:
            return len(self.acked)

    def fatal(self) -> list:
        with self.lock:
            return [e for e in self.client_errors if e[2]]

    def check(self) -> None:
        assert self.error is None, f"producer thread failed: {self.error!r}"
        assert not self.fatal(), f"fatal producer errors: {self.fatal()}"

    def wait_acked(self, n: int, timeout: float, what: str) -> None:
        wait_until(lambda: self.n_acked() >= n or self.error or self.fatal(), timeout, what, interval=0.1)
        self.check()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        self.check()
        remaining = self.producer.flush(timeout)
        assert remaining == 0, f"{remaining} records still undelivered {timeout}s after the last outage"


def test_idempotent_producer_through_broker_crashes(broker):
    topic = unique_topic("idem")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    prod = IdempotentProducer(broker.bootstrap, topic, rate=1000)
    prod.thread.start()
    outages = []
    try:
        prod.wait_acked(2000, 30, "2000 acknowledged records before the first crash")
        for round_ in (1, 2):
            # A burst, and the SIGKILL as soon as its first record is acknowledged: the
            # broker is then most likely still writing and answering the rest of it, so
            # that batches which reached the log unacknowledged are retried after the
            # restart (reported below as resent_batches).
            first = prod.burst(BURST)
            wait_until(lambda: prod.max_acked_seq >= first or prod.error or prod.fatal(), 30,
                       f"the first acknowledgement of burst {round_}", interval=0.001)
            prod.check()
            acked_before, sent_before = prod.n_acked(), prod.sent
            t_kill = time.monotonic()
            broker.kill()
            # the producer keeps accepting records while the broker is down
            wait_until(lambda: prod.sent >= sent_before + 1000, 20,
                       "the producer queueing 1000 records during the outage")
            broker.start()
            down = time.monotonic() - t_kill
            # the backlog drains and production goes on
            prod.wait_acked(prod.sent + 1000, 60,
                            f"the producer recovering after restart {round_}")
            outages.append((round(down, 1), acked_before, prod.n_acked()))
    finally:
        prod.stop(60)

    with prod.lock:
        acked = dict(prod.acked)
        failed = list(prod.failed)
        client_errors = list(prod.client_errors)
    sent = prod.sent

    ends = {p: watermarks(broker.bootstrap, topic, p)[1] for p in range(PARTITIONS)}
    got = consume_confluent(broker.bootstrap, topic, {p: 0 for p in range(PARTITIONS)}, ends, timeout=60)
    where: dict[int, list[tuple[int, int]]] = {}  # seq -> [(partition, offset)]
    out_of_order = []
    wrong_partition = []
    for p, recs in got.items():
        assert [r.offset for r in recs] == list(range(ends[p])), f"partition {p}: offsets not dense"
        prev = -1
        for r in recs:
            seq = int(r.value[5:])
            where.setdefault(seq, []).append((p, r.offset))
            if seq % PARTITIONS != p:
                wrong_partition.append((seq, p, r.offset))
            if seq <= prev:
                out_of_order.append((p, r.offset, prev, seq))
            prev = max(prev, seq)
    duplicated = {s: w for s, w in where.items() if len(w) > 1}
    present = sum(1 for s, po in acked.items() if where.get(s) == [po])
    misplaced = [(s, po, where.get(s)) for s, po in acked.items() if where.get(s) != [po]]
    missing_unacked = sorted(set(range(sent)) - set(acked) - set(where))

    print(f"\nacknowledged={len(acked)} present={present} duplicated={len(duplicated)} "
          f"out_of_order={len(out_of_order)} sent={sent} failed={len(failed)} log_end={ends} "
          f"resent_batches={prod.batches.resent()} outages(down_s, acked_before, acked_after)={outages}")
    if client_errors:
        print(f"client errors ({len(client_errors)}): {sorted({e[1] for e in client_errors})[:8]}")

    assert not duplicated, (
        f"{len(duplicated)} values appear more than once, e.g. "
        + "; ".join(f"seq {s} at {w}" for s, w in sorted(duplicated.items())[:5]))
    assert not out_of_order, f"values out of send order (partition, offset, previous, seq): {out_of_order[:5]}"
    assert not wrong_partition, wrong_partition[:5]
    assert not misplaced, (
        f"{len(misplaced)} acknowledged values not (only) at their acknowledged offset, e.g. "
        f"(seq, acked at, found at) {misplaced[:5]}")
    assert present == len(acked)
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:3]}"
    assert len(acked) == sent and not missing_unacked, (sent, len(acked), missing_unacked[:5])


def test_kafka_python_idempotent_roundtrip(broker):
    topic = unique_topic("idem-kp")
    create_topic(broker.bootstrap, topic, 2)
    prod = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all",
                         linger_ms=5, request_timeout_ms=15000, max_block_ms=15000)
    try:
        futs = []
        for wave in range(3):
            for i in range(50):
                p = i % 2
                futs.append((p, f"kp-idem-{wave}-{i}".encode(),
                             prod.send(topic, key=f"k{p}".encode(), value=f"kp-idem-{wave}-{i}".encode(),
                                       partition=p, timestamp_ms=BASE_TS + wave * 100 + i)))
            prod.flush(timeout=30)
        pid = prod._transaction_manager.producer_id_and_epoch.producer_id
        assert pid >= 0, f"kafka-python has no producer id (InitProducerId failed?): {pid}"
        acked = [(p, f.get(timeout=5).offset, v) for p, v, f in futs]
    finally:
        prod.close()
    for p in (0, 1):
        assert [o for q, o, _ in acked if q == p] == list(range(75)), f"partition {p} offsets"
    got = consume_confluent(broker.bootstrap, topic, {0: 0, 1: 0}, {0: 75, 1: 75})
    for p in (0, 1):
        assert [(r.offset, r.value) for r in got[p]] == [(o, v) for q, o, v in acked if q == p]


def test_sequence_dedup_gaps_and_epochs_on_the_wire(broker):
    topic = unique_topic("idem-wire")
    create_topic(broker.bootstrap, topic, 1)
    w = Wire.connect(broker.bootstrap)
    log: list[bytes] = []  # what the partition must hold, in order

    def send(pid, epoch, seq, values, expect_err, expect_offset=None, what=""):
        # Current timestamps: a producer's state expires by its batches' timestamps
        # (Kafka's producer.id.expiration.ms counts from a batch's max timestamp), so
        # batches dated in the past would lose their state on the restart.
        now = int(time.time() * 1000)
        err, off = w.produce(topic, 0, idempotent_batch(pid, epoch, seq, values, now))
        assert err == expect_err, f"{what}: error {err}, expected {expect_err} (offset {off})"
        if expect_offset is not None:
            assert off == expect_offset, f"{what}: base offset {off}, expected {expect_offset}"
        return off

    try:
        err, pid, epoch = w.init_producer_id()
        assert err == NONE and pid >= 0 and epoch >= 0, (err, pid, epoch)
        err2, pid2, _ = w.init_producer_id()
        assert err2 == NONE and pid2 != pid, f"InitProducerId handed out {pid} twice"
        b0 = [b"a0", b"a1", b"a2"]
        send(pid, epoch, 0, b0, NONE, 0, "first batch")
        log += b0
        send(pid, epoch, 0, b0, NONE, 0, "the same batch again (a retry)")
        send(pid, epoch, 3, [b"b3", b"b4"], NONE, 3, "next batch")
        log += [b"b3", b"b4"]
        send(pid, epoch, 10, [b"gap"], OUT_OF_ORDER_SEQUENCE_NUMBER, what="a batch after a gap")
        send(pid, epoch, 3, [b"b3", b"b4"], NONE, 3, "a retry of the previous batch")
        send(pid, epoch, 5, [b"c5"], NONE, 5, "the batch after the rejected gap")
        log += [b"c5"]
        send(pid2, 0, 1, [b"x"], OUT_OF_ORDER_SEQUENCE_NUMBER, what="a new producer not starting at 0")
        send(pid2, 0, 0, [b"p2-0"], NONE, 6, "the second producer's first batch")
        log += [b"p2-0"]
        assert watermarks(broker.bootstrap, topic, 0) == (0, len(log))
    finally:
        w.close()

    broker.kill()
    broker.start()
    w = Wire.connect(broker.bootstrap)
    try:
        send(pid, epoch, 5, [b"c5"], NONE, 5, "after a SIGKILL, a retry of the last batch")
        send(pid, epoch, 3, [b"b3", b"b4"], NONE, 3, "after a SIGKILL, a retry of an older batch")
        send(pid, epoch, 8, [b"gap"], OUT_OF_ORDER_SEQUENCE_NUMBER, what="after a SIGKILL, a gap")
        send(pid, epoch, 6, [b"d6", b"d7"], NONE, 7, "after a SIGKILL, the next batch")
        log += [b"d6", b"d7"]
        send(pid2, 0, 1, [b"p2-1"], NONE, 9, "the second producer goes on after the SIGKILL")
        log += [b"p2-1"]
        # a bumped epoch starts its sequences again at 0; the old epoch is fenced
        send(pid, epoch + 1, 5, [b"e"], OUT_OF_ORDER_SEQUENCE_NUMBER, what="new epoch not at 0")
        send(pid, epoch + 1, 0, [b"e0"], NONE, 10, "new epoch at sequence 0")
        log += [b"e0"]
        send(pid, epoch, 8, [b"old"], INVALID_PRODUCER_EPOCH, what="the old epoch after a bump")
        # producer ids handed out after the restart are new ones
        err3, pid3, _ = w.init_producer_id()
        assert err3 == NONE and pid3 not in (pid, pid2), (
            f"after a restart InitProducerId handed out {pid3} again (before: {pid}, {pid2})")
        send(pid3, 0, 0, [b"p3-0"], NONE, 11, "a producer id handed out after the restart")
        log += [b"p3-0"]
    finally:
        w.close()

    assert watermarks(broker.bootstrap, topic, 0) == (0, len(log))
    got = consume_confluent(broker.bootstrap, topic, {0: 0}, {0: len(log)})
    assert [r.value for r in got[0]] == log
