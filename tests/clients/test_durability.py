"""Durability: records acknowledged with acks=all survive a clean restart (SIGTERM)
and a crash (SIGKILL while a producer is mid-stream), at the offsets they were acked at."""

from __future__ import annotations

import threading

from confluent_kafka import Producer

from strata_testlib import (
    BASE_TS,
    Out,
    assert_dense_per_partition,
    consume_confluent,
    create_topic,
    make_records,
    produce_confluent,
    producer_conf,
    roundtrip_check,
    unique_topic,
    watermarks,
)


def test_restart_keeps_everything(broker):
    topic = unique_topic("dur-restart")
    create_topic(broker.bootstrap, topic, 2)
    records = make_records("restart", partitions=2, per_partition=500)  # 1000 records
    sent = produce_confluent(broker.bootstrap, topic, records, codec="lz4", waves=5)
    assert_dense_per_partition(sent)
    roundtrip_check(broker.bootstrap, topic, sent)

    broker.stop()  # SIGTERM, asserts exit code 0
    broker.start()

    roundtrip_check(broker.bootstrap, topic, sent)
    # the log continues where it ended
    more = produce_confluent(broker.bootstrap, topic,
                             [Out(p, b"after", f"after-restart-{p}".encode(), [], BASE_TS + 10_000 + p)
                              for p in range(2)])
    assert [(r.partition, r.offset) for r in more] == [(0, 500), (1, 500)]
    roundtrip_check(broker.bootstrap, topic, sent + more)

    # and a second restart with nothing new in between changes nothing
    broker.stop()
    broker.start()
    roundtrip_check(broker.bootstrap, topic, sent + more)


class AckRecorder:
    """Continuously produces unique values; records each successful delivery report."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.topic = topic
        self.partitions = partitions
        self.producer = Producer(producer_conf(
            bootstrap, "none", **{"linger.ms": 5, "message.timeout.ms": 20000,
                                  "queue.buffering.max.messages": 20000}))
        self.cond = threading.Condition()
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, name="ack-recorder", daemon=True)
        self.error: BaseException | None = None

    def _on_delivery(self, err, msg):
        with self.cond:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))
                self.cond.notify_all()
            else:
                self.failed.append((msg.value(), str(err)))

    def _run(self):
        try:
            seq = 0
            while not self.stop_flag.is_set():
                value = f"crash-{seq:08d}".encode()
                try:
                    self.producer.produce(self.topic, value=value, key=value[-4:],
                                          partition=seq % self.partitions, on_delivery=self._on_delivery)
                    seq += 1
                    self.sent = seq
                except BufferError:
                    self.producer.poll(0.01)
                    continue
                self.producer.poll(0)
        except BaseException as e:  # surfaced by the test
            self.error = e
            with self.cond:
                self.cond.notify_all()

    def wait_for_acks(self, n: int, timeout: float) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: len(self.acked) >= n or self.error is not None, timeout)
        assert self.error is None, f"producer thread failed: {self.error!r}"
        assert ok, f"only {len(self.acked)} acks within {timeout}s (failed so far: {self.failed[:3]})"

    def stop_and_drain(self) -> None:
        """Stop producing, then fail everything not yet acknowledged, so that the set of
        acknowledged records is final before the broker comes back."""
        self.stop_flag.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "producer thread did not stop"
        # Serve the delivery reports of responses that already arrived, then purge the rest.
        self.producer.poll(0.5)
        self.producer.purge(in_queue=True, in_flight=True, blocking=False)
        self.producer.flush(10)


def test_sigkill_loses_no_acknowledged_record(broker):
    topic = unique_topic("dur-crash")
    partitions = 2
    create_topic(broker.bootstrap, topic, partitions)

    rec = AckRecorder(broker.bootstrap, topic, partitions)
    rec.thread.start()
    try:
        rec.wait_for_acks(4000, timeout=60)
    finally:
        broker.kill()  # SIGKILL while the producer still has batches in flight
        rec.stop_and_drain()
    acked = list(rec.acked)
    sent_values = {f"crash-{i:08d}".encode() for i in range(rec.sent)}

    broker.start()
    ends = {p: watermarks(broker.bootstrap, topic, p)[1] for p in range(partitions)}
    lows = {p: watermarks(broker.bootstrap, topic, p)[0] for p in range(partitions)}
    got = consume_confluent(broker.bootstrap, topic, {p: 0 for p in range(partitions)}, ends, timeout=60)

    log: dict[tuple[int, int], bytes] = {}
    seen_count: dict[bytes, int] = {}
    for p, recs in got.items():
        offsets = [r.offset for r in recs]
        assert offsets == list(range(ends[p])), (
            f"partition {p}: offsets not dense 0..{ends[p] - 1}: first bad "
            f"{next((i, o) for i, o in enumerate(offsets + [None]) if o != i)}")
        for r in recs:
            log[(p, r.offset)] = r.value
            seen_count[r.value] = seen_count.get(r.value, 0) + 1
            assert r.value in sent_values, f"unknown value {r.value!r} at p{p}@{r.offset}"

    lost = [(p, off, v) for p, off, v in acked if log.get((p, off)) != v]
    duplicated = sorted({v for _, _, v in acked if seen_count.get(v, 0) > 1})
    acked_values = {v for _, _, v in acked}
    present = sum(1 for v in acked_values if v in seen_count)
    print(f"\nacknowledged={len(acked)} present={present} lost={len(lost)} duplicated={len(duplicated)} "
          f"sent={rec.sent} log_end={ends} unacked_in_log={sum(seen_count.values()) - present}")

    assert lows == {p: 0 for p in range(partitions)}, lows
    assert len(acked_values) == len(acked), "a value was acknowledged twice"
    assert not lost, (
        f"{len(lost)} acknowledged records lost or moved, e.g. "
        + "; ".join(f"p{p}@{o} acked {v!r} found {log.get((p, o))!r}" for p, o, v in lost[:5]))
    assert present == len(acked)

    # every partition keeps accepting writes at the recovered end
    after = produce_confluent(broker.bootstrap, topic,
                              [Out(p, b"post", b"post-crash", [], BASE_TS + p) for p in range(partitions)])
    assert [(r.partition, r.offset) for r in after] == [(p, ends[p]) for p in range(partitions)]
