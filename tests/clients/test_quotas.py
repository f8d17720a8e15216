"""Client quotas enforced on real clients (issue 17): a librdkafka producer whose client
id has a 1 MiB/s producer_byte_rate gets about 1 MiB/s over 30 s and is told to back off
(throttle_time_ms, librdkafka's throttle callback), while an unthrottled producer on the
same agent keeps its throughput; a consumer over its consumer_byte_rate is slowed the
same way and misses no record; an address over its connection_creation_rate has its
new connections refused. Quotas are set with AlterClientQuotas (the Java suite's
QuotasTest sets them with kafka-configs and the Admin client).

The agents run with --quota-window-num 3: rates are measured over 2-3 s, so a client's
allowance before its first throttle is small and 30 s show the steady rate.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import requests
from confluent_kafka import Consumer, Producer

from kafka_wire import Wire
from strata_testlib import create_topic, unique_topic, wait_until
from test_limits import api_versions_answered

MIB = 1024 * 1024
VALUE = b"q" * (16 * 1024)


def set_quota(bootstrap: str, entity: list[tuple[str, str | None]], ops: list[tuple[str, float | None]]):
    w = Wire.connect(bootstrap)
    try:
        code, message = w.alter_client_quotas(entity, ops)
    finally:
        w.close()
    assert code == 0, (code, message)


class Flood:
    """A librdkafka producer sending 16 KiB values, acks=1, as fast as it may or paced
    to `pace` bytes a second, counting what is acknowledged (with the time) and the
    throttle times it is told."""

    def __init__(self, bootstrap: str, topic: str, client_id: str, pace: float | None = None):
        self.topic = topic
        self.pace = pace
        self.acked: list[tuple[float, int]] = []
        self.throttles: list[float] = []
        self.errors: list = []
        self.stop = threading.Event()
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": "1",
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 4096,
            "throttle_cb": lambda e: self.throttles.append(e.throttle_time),
        })
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg):
        if err is not None:
            self.errors.append(err)
        else:
            self.acked.append((time.monotonic(), len(msg.value())))

    def _run(self):
        sent = 0
        while not self.stop.is_set():
            if self.pace is not None and sent > (time.monotonic() - self.started) * self.pace:
                # Paced: a steady client, not one that fills the disk.
                self.producer.poll(0)
                time.sleep(0.005)
                continue
            try:
                self.producer.produce(self.topic, VALUE, on_delivery=self._delivered)
                sent += len(VALUE)
            except BufferError:
                self.producer.poll(0.01)
            self.producer.poll(0)
        self.producer.flush(60)

    def start(self) -> "Flood":
        self.started = time.monotonic()
        self.thread.start()
        return self

    def finish(self):
        self.stop.set()
        self.thread.join(90)
        assert not self.errors, self.errors[:3]

    def rate(self, since: float, until: float) -> float:
        """Bytes per second acknowledged between `since` and `until` s after start."""
        lo, hi = self.started + since, self.started + until
        return sum(n for t, n in self.acked if lo <= t < hi) / (until - since)


def metric(http_url: str, name: str, **labels) -> float:
    text = requests.get(http_url + "/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_producer_over_its_byte_rate_gets_it_and_an_unthrottled_one_keeps_its_own(broker_factory):
    b = broker_factory(extra_args=["--quota-window-num", "3"])
    b.start()
    slow_topic, fast_topic = unique_topic("slow"), unique_topic("fast")
    create_topic(b.bootstrap, slow_topic, 1)
    create_topic(b.bootstrap, fast_topic, 1)
    set_quota(b.bootstrap, [("client-id", "slow")], [("producer_byte_rate", MIB)])

    # The other client wants 16 MiB/s: far above the quota, and bounded so the test
    # does not write gigabytes.
    slow = Flood(b.bootstrap, slow_topic, "slow").start()
    fast = Flood(b.bootstrap, fast_topic, "fast", pace=16 * MIB).start()
    time.sleep(36)  # a measurement period: 5 s to settle, then 30 s measured
    slow.finish()
    fast.finish()

    slow_rate = slow.rate(5, 35)
    fast_rate = fast.rate(5, 35)
    print(f"slow {slow_rate / MIB:.2f} MiB/s (quota 1), fast {fast_rate / MIB:.2f} MiB/s "
          f"(asked 16) beside it; slow told to wait {len(slow.throttles)} times, "
          f"fast {len(fast.throttles)}")
    assert 0.8 * MIB <= slow_rate <= 1.2 * MIB, slow_rate / MIB
    assert slow.throttles and max(slow.throttles) > 0
    assert not [t for t in fast.throttles if t > 0], "the unthrottled client was throttled"
    # The other client keeps its throughput: what it asked for, within 20%.
    assert fast_rate >= 0.8 * 16 * MIB, fast_rate / MIB
    assert metric(b.http_url, "strata_quota_throttled_total", quota="producer_byte_rate") > 0


def test_a_consumer_over_its_byte_rate_is_slowed_and_misses_nothing(broker_factory):
    b = broker_factory(extra_args=["--quota-window-num", "3"])
    b.start()
    topic = unique_topic("read-quota")
    create_topic(b.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    n = 256  # 4 MiB
    for i in range(n):
        p.produce(topic, VALUE, key=str(i).encode())
    assert p.flush(30) == 0
    set_quota(b.bootstrap, [("client-id", "reader")], [("consumer_byte_rate", MIB)])

    throttles: list[float] = []
    c = Consumer({
        "bootstrap.servers": b.bootstrap,
        "client.id": "reader",
        "group.id": unique_topic("g"),
        "auto.offset.reset": "earliest",
        "throttle_cb": lambda e: throttles.append(e.throttle_time),
    })
    c.subscribe([topic])
    seen: set[int] = set()
    started = time.monotonic()
    first = None
    try:
        while len(seen) < n and time.monotonic() - started < 60:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            first = first or time.monotonic()
            seen.add(int(m.key()))
    finally:
        c.close()
    took = time.monotonic() - (first or started)
    print(f"4 MiB read at {4 / took:.2f} MiB/s under a 1 MiB/s quota; told to wait {len(throttles)} times")
    assert len(seen) == n, f"{n - len(seen)} records never read"
    assert throttles and max(throttles) > 0
    # Without the quota this takes well under a second; with it, a few seconds (the
    # first 2 s of the window are the allowance).
    assert took > 1.5, took


def test_an_address_over_its_connection_creation_rate_is_refused(broker_factory):
    b = broker_factory(extra_args=["--quota-window-num", "3"])
    b.start()
    set_quota(b.bootstrap, [("ip", "127.0.0.1")], [("connection_creation_rate", 5)])
    port = int(b.bootstrap.rsplit(":", 1)[1])
    socks = []
    try:
        for _ in range(40):
            socks.append(socket.create_connection(("127.0.0.1", port)))
        answered = [api_versions_answered(s) for s in socks]
    finally:
        for s in socks:
            s.close()
    # At 5 a second over the 2 s minimum span, about 10 get in at once.
    assert 5 <= answered.count(True) <= 15, answered.count(True)
    refused = metric(b.http_url, "strata_connections_refused_total", reason="connection_creation_rate")
    assert refused == answered.count(False)
    # Other addresses are not limited.
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    s.connect(("127.0.0.1", port))
    try:
        assert api_versions_answered(s)
    finally:
        s.close()
    # The address gets in again once its rate has fallen.
    def admitted():
        with socket.create_connection(("127.0.0.1", port)) as s:
            return api_versions_answered(s)
    wait_until(admitted, 15, "a connection admitted again")


def http_read(http_url: str, topic: str, group: str, n: int) -> float:
    """Seconds an HTTP consumer of `group` takes to read `n` messages of `topic`."""
    session = requests.Session()
    read, began = 0, time.monotonic()
    while read < n and time.monotonic() - began < 120:
        r = session.post(f"{http_url}/v1/topics/{topic}/consume",
                         json={"group_id": group, "max_messages": 500, "timeout_ms": 2000},
                         timeout=60)
        assert r.status_code == 200, r.text
        read += len(r.json()["messages"])
    assert read >= n, f"{read} of {n} messages read"
    return time.monotonic() - began


def test_http_produce_and_consume_are_held_to_the_same_quotas(broker_factory):
    """The HTTP API counts against the principal's quotas as Kafka clients do (issue 34):
    a producer_byte_rate of 1 MiB/s on User:ANONYMOUS holds an HTTP producer calling as
    fast as it can to 1 MiB/s of request bodies within 30%, and a consumer_byte_rate of
    1 MiB/s slows an HTTP consumer to it (against the same read without the quota)."""
    b = broker_factory(extra_args=["--quota-window-num", "3",
                                   "--group-initial-rebalance-delay-ms", "0"])
    b.start()
    topic = unique_topic("http-quota")
    create_topic(b.bootstrap, topic, 1)
    set_quota(b.bootstrap, [("user", "ANONYMOUS")], [("producer_byte_rate", MIB)])
    body = json.dumps({"messages": [{"value": "q" * 1024} for _ in range(64)]}).encode()
    session = requests.Session()
    sent: list[float] = []
    started = time.monotonic()
    while time.monotonic() - started < 15:
        r = session.post(f"{b.http_url}/v1/topics/{topic}/produce", data=body, timeout=30)
        assert r.status_code == 200, r.text
        sent.append(time.monotonic() - started)
    measured = [t for t in sent if t >= 5]
    rate = len(measured) * len(body) / (sent[-1] - 5)
    print(f"HTTP produce at {rate / MIB:.2f} MiB/s under a 1 MiB/s quota, {len(sent)} requests")
    assert 0.7 * MIB <= rate <= 1.3 * MIB, rate / MIB
    assert metric(b.http_url, "strata_quota_throttled_total", quota="producer_byte_rate") > 0

    # 8,000 messages: about 8.4 MiB of JSON answers.
    n = 8000
    assert len(sent) * 64 >= n
    free = http_read(b.http_url, topic, "free", n)
    set_quota(b.bootstrap, [("user", "ANONYMOUS")], [("consumer_byte_rate", MIB)])
    limited = http_read(b.http_url, topic, "limited", n)
    print(f"HTTP consume of {n} messages: {free:.1f} s without a quota, {limited:.1f} s at 1 MiB/s")
    # The first windows are the allowance (about 3 MiB); the rest comes at 1 MiB/s.
    assert limited >= 3.5 and limited >= 2 * free, (free, limited)
    assert metric(b.http_url, "strata_quota_throttled_total", quota="consumer_byte_rate") > 0
