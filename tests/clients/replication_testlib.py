"""Helpers for test_replication.py: a three-agent cluster on one embedded metastore with
short leases, Metadata asked of one named agent over the raw wire, pausing an agent with
SIGSTOP without freezing the shared SQLite file, a paced producer that numbers its records
and keeps every acknowledgement, and the read-back check of a whole topic.

Why Metadata over the raw wire: librdkafka sends a Metadata request to whichever broker it
likes, a stopped one included (the request then hangs until socket.timeout.ms), and it
merges what it learns. A check like "agent 2 shows a new leader" must ask agent 2 and
nobody else, so `Cluster.view(node, topic)` opens its own connection to that agent.

Why pausing checks the metastore's lock: every metastore transaction of the embedded
backend holds SQLite's write lock (BEGIN IMMEDIATE) until it commits. An agent stopped
inside one would keep every other agent from renewing its lease or writing anything for
as long as it is stopped, which no real deployment (FoundationDB) has and which is not
what the tests are about. `Cluster.paused` therefore stops the agent, checks that the
lock can be taken, and if not resumes it and stops it again a moment later.
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import NewTopic
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafka_wire import Reader, Wire
from strata_testlib import RDKAFKA_LOG, admin, consume_confluent, watermarks

API_PRODUCE = 0
API_METADATA = 3


# --------------------------------------------------------------------------- waiting
def wait_for(check, timeout: float, what: str, interval: float = 0.05):
    """Polls `check()`, which returns `(done, value)`, until done; returns the value. On
    the deadline fails with `what` and the last value seen (the state to explain)."""
    deadline = time.monotonic() + timeout
    while True:
        done, value = check()
        if done:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {value}")
        time.sleep(interval)


# --------------------------------------------------------------------------- metadata
@dataclass(frozen=True)
class PartitionView:
    error: int
    leader: int
    epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    def __str__(self) -> str:
        err = f" error={self.error}" if self.error else ""
        return (f"leader={self.leader} epoch={self.epoch} replicas={list(self.replicas)} "
                f"isr={list(self.isr)}{err}")


@dataclass
class TopicView:
    error: int
    partitions: dict[int, PartitionView]


@dataclass
class ClusterView:
    """One agent's Metadata answer."""

    asked: int
    brokers: dict[int, str]
    controller: int
    topics: dict[str, TopicView]

    def partition(self, topic: str, p: int) -> PartitionView | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(p)


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _int_array(r: Reader) -> tuple[int, ...]:
    n = r.take(">i")
    return tuple(r.take(">i") for _ in range(max(n, 0)))


def metadata(bootstrap: str, topics: list[str], asked: int = -1, timeout: float = 5.0) -> ClusterView:
    """Metadata (v7, or v1 if the agent offers no v7) for `topics` from the agent at
    `bootstrap` alone, without auto-creation."""
    host, port = bootstrap.rsplit(":", 1)
    w = Wire(host, int(port), timeout=timeout)
    try:
        w.versions = w.api_versions()
        v = w.pick(API_METADATA, [7, 1])
        body = struct.pack(">i", len(topics)) + b"".join(_str(t) for t in topics)
        if v >= 4:
            body += struct.pack(">?", False)  # allow_auto_topic_creation
        r = w.request(API_METADATA, v, body)
        if v >= 3:
            r.take(">i")  # throttle_time_ms
        brokers = {}
        for _ in range(max(r.take(">i"), 0)):
            node = r.take(">i")
            bhost = r.string()
            bport = r.take(">i")
            if v >= 1:
                r.string()  # rack
            brokers[node] = f"{bhost}:{bport}"
        if v >= 2:
            r.string()  # cluster_id
        controller = r.take(">i") if v >= 1 else -1
        views = {}
        for _ in range(max(r.take(">i"), 0)):
            terr = r.take(">h")
            name = r.string()
            if v >= 1:
                r.take(">?")  # is_internal
            parts = {}
            for _ in range(max(r.take(">i"), 0)):
                perr = r.take(">h")
                index = r.take(">i")
                leader = r.take(">i")
                epoch = r.take(">i") if v >= 7 else -1
                replicas = _int_array(r)
                isr = _int_array(r)
                if v >= 5:
                    _int_array(r)  # offline_replicas
                parts[index] = PartitionView(perr, leader, epoch, replicas, isr)
            views[name] = TopicView(terr, parts)
        return ClusterView(asked, brokers, controller, views)
    finally:
        w.close()


# --------------------------------------------------------------------------- pausing
def _all_threads_stopped(pid: int) -> bool:
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return True  # gone: nothing runs
    for t in tasks:
        try:
            stat = (t / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        state = stat[stat.rindex(")") + 2]
        if state not in "TtZX":  # stopped (or a thread that is exiting)
            return False
    return True


def metastore_lock_takeable(path: Path, within: float = 1.0) -> bool:
    """Whether SQLite's write lock on the metastore can be taken within `within` seconds
    (live agents hold it for milliseconds at a time; a stopped one holds it for good)."""
    deadline = time.monotonic() + within
    while True:
        try:
            con = sqlite3.connect(str(path), timeout=0, isolation_level=None)
            try:
                con.execute("BEGIN IMMEDIATE")
                con.execute("ROLLBACK")
                return True
            finally:
                con.close()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


# --------------------------------------------------------------------------- the cluster
class Cluster:
    """Three agents (conftest `Broker`s) sharing one embedded metastore file."""

    def __init__(self, agents: dict, metastore_path: Path):
        self.agents = agents
        self.nodes = tuple(sorted(agents))
        self.metastore_path = metastore_path
        self.stopped: set[int] = set()  # SIGSTOPped and not yet resumed

    def servers(self, only=None) -> str:
        nodes = self.nodes if only is None else only
        return ",".join(self.agents[n].bootstrap for n in nodes)

    def up(self) -> list[int]:
        """Agents whose process runs and is not stopped."""
        return [n for n in self.nodes if self.agents[n].is_running() and n not in self.stopped]

    def view(self, node: int, topic: str, timeout: float = 5.0) -> ClusterView | None:
        """Agent `node`'s Metadata for `topic`; None if it cannot be asked right now."""
        if node in self.stopped or not self.agents[node].is_running():
            return None
        try:
            return metadata(self.agents[node].bootstrap, [topic], asked=node, timeout=timeout)
        except (OSError, struct.error, IndexError):
            return None

    def views(self, topic: str, nodes=None) -> dict[int, ClusterView | None]:
        return {n: self.view(n, topic) for n in (nodes if nodes is not None else self.up())}

    # ------------------------------------------------------------- conditions
    def healthy(self, topic: str, partitions: int, nodes=None):
        """(done, state): every agent in `nodes` (default: all up) lists all of `nodes` as
        brokers and shows every partition of `topic` with a leader among `nodes`, all
        agents as replicas and in the ISR, and they agree on leaders and epochs. The value
        is {partition: PartitionView} when done, else a description."""
        nodes = list(nodes if nodes is not None else self.up())
        agreed = None
        lines = []
        ok = True
        for n in nodes:
            v = self.view(n, topic)
            if v is None:
                lines.append(f"agent {n}: no answer")
                ok = False
                continue
            t = v.topics.get(topic)
            if t is None or t.error != 0 or len(t.partitions) != partitions:
                lines.append(f"agent {n}: topic {'missing' if t is None else f'error={t.error} partitions={sorted(t.partitions)}'}")
                ok = False
                continue
            lines.append(f"agent {n}: brokers={sorted(v.brokers)} "
                         + "; ".join(f"p{p} {pm}" for p, pm in sorted(t.partitions.items())))
            if sorted(v.brokers) != sorted(nodes):
                ok = False
            for pm in t.partitions.values():
                if (pm.error != 0 or pm.leader not in nodes
                        or sorted(pm.replicas) != list(self.nodes)
                        or sorted(pm.isr) != list(self.nodes)):
                    ok = False
            leaders = {p: (pm.leader, pm.epoch) for p, pm in t.partitions.items()}
            if agreed is None:
                agreed = (leaders, t.partitions)
            elif agreed[0] != leaders:
                ok = False
        if ok and agreed is not None:
            return True, dict(agreed[1])
        return False, " | ".join(lines)

    def wait_healthy(self, topic: str, partitions: int, timeout: float, what: str, nodes=None):
        return wait_for(lambda: self.healthy(topic, partitions, nodes), timeout,
                        f"{what}: every partition of {topic} led and with all of "
                        f"{list(self.nodes)} in the ISR, on every agent", interval=0.1)

    def describe(self, topic: str, p: int, nodes=None) -> str:
        out = []
        for n, v in self.views(topic, nodes).items():
            pm = None if v is None else v.partition(topic, p)
            out.append(f"agent {n}: {'no answer' if v is None else (pm or 'no such partition')}")
        return "; ".join(out)

    # ------------------------------------------------------------- signals
    def stop(self, node: int, tries: int = 6) -> float:
        """SIGSTOP agent `node` (retrying while it would hold the metastore's write lock);
        returns the monotonic time it was stopped."""
        agent = self.agents[node]
        for _ in range(tries):
            assert agent.is_running(), f"agent {node} is not running, cannot SIGSTOP it"
            agent.proc.send_signal(signal.SIGSTOP)
            self.stopped.add(node)
            t_stop = time.monotonic()
            deadline = t_stop + 5
            while not _all_threads_stopped(agent.pid):
                assert time.monotonic() < deadline, f"agent {node} (pid {agent.pid}) not stopped 5s after SIGSTOP"
                time.sleep(0.005)
            if metastore_lock_takeable(self.metastore_path):
                return t_stop
            # Stopped inside a metastore transaction: let it finish and try again.
            self.resume(node)
            time.sleep(0.1)
        raise AssertionError(f"agent {node} held the metastore's write lock at each of {tries} SIGSTOPs")

    def resume(self, node: int) -> None:
        agent = self.agents[node]
        if agent.is_running():
            agent.proc.send_signal(signal.SIGCONT)
        self.stopped.discard(node)

    def resume_all(self) -> None:
        for n in list(self.stopped):
            try:
                self.resume(n)
            except Exception:  # teardown: the fixture kills it anyway
                pass

    @contextlib.contextmanager
    def paused(self, node: int):
        """SIGSTOP agent `node` for the block (yields the stop time); SIGCONT on exit,
        whatever happens in the block."""
        t_stop = self.stop(node)
        try:
            yield t_stop
        finally:
            self.resume(node)


def create_replicated_topic(cluster: Cluster, topic: str, partitions: int,
                            min_insync: int = 2, timeout: float = 30) -> dict[int, PartitionView]:
    """CreateTopics with replication factor 3 and min.insync.replicas; waits until every
    agent shows every partition led with the full ISR."""
    a = admin(cluster.servers())  # kept alive while its futures run
    fs = a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=3,
                                   config={"min.insync.replicas": str(min_insync)})],
                         operation_timeout=20, request_timeout=20)
    fs[topic].result(timeout=20)
    return cluster.wait_healthy(topic, partitions, timeout, f"the new topic {topic}")


# --------------------------------------------------------------------------- producing
def seq_producer_conf(bootstrap: str, **extra) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,  # acks=all, retries with the same sequence numbers
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 60000,
        # librdkafka times a ProduceRequest out after socket.timeout.ms (client side;
        # request.timeout.ms is the broker's ack wait): a request stuck at a stopped
        # leader is retried, with its sequence numbers, at the new leader within ~5 s.
        "socket.timeout.ms": 5000,
        "request.timeout.ms": 4000,
        # ... and the new leader is learnt within a second even without an error.
        "topic.metadata.refresh.interval.ms": 1000,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        "queue.buffering.max.messages": 200000,
        "logger": RDKAFKA_LOG,
    }
    conf.update(extra)
    return conf


class SeqProducer:
    """Produces f"{tag}-{seq:09d}" for seq = 0, 1, 2, ... to partition seq % partitions
    at about `rate` records/s (up to `limit` records) from its own thread, and keeps every
    delivery report: per partition the seqs are in send order, so the log must hold them
    in increasing order."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, tag: str, rate: float,
                 limit: int | None = None, **conf):
        self.topic, self.partitions, self.tag, self.rate, self.limit = topic, partitions, tag, rate, limit
        self.producer = Producer(seq_producer_conf(bootstrap, error_cb=self._on_error, **conf))
        self.lock = threading.Lock()
        self.acked: dict[int, tuple[int, int]] = {}  # seq -> (partition, offset)
        self.ack_log: dict[int, list[tuple[float, int]]] = {p: [] for p in range(partitions)}
        self.acked_twice: list[int] = []
        self.failed: list[tuple[int, int, str]] = []  # (seq, error code, error)
        self.client_errors: list[tuple[float, str, bool]] = []
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"seq-producer-{tag}", daemon=True)

    # ------------------------------------------------------------- values
    def value(self, seq: int) -> bytes:
        return f"{self.tag}-{seq:09d}".encode()

    def seq_of(self, value: bytes | None) -> int | None:
        if not value:
            return None
        tag, _, num = value.decode("utf-8", "replace").rpartition("-")
        return int(num) if tag == self.tag and num.isdigit() else None

    # ------------------------------------------------------------- callbacks
    def _on_error(self, err):
        with self.lock:
            self.client_errors.append((time.monotonic(), str(err), err.fatal()))

    def _cb(self, err, msg):
        seq = self.seq_of(msg.value())
        now = time.monotonic()
        with self.lock:
            if err is not None:
                self.failed.append((seq, err.code(), str(err)))
            elif seq in self.acked:
                self.acked_twice.append(seq)
            else:
                self.acked[seq] = (msg.partition(), msg.offset())
                self.ack_log[msg.partition()].append((now, seq))

    def _run(self):
        try:
            t0 = time.monotonic()
            seq = 0
            while not self._stop.is_set():
                if self.limit is not None and seq >= self.limit:
                    self.producer.poll(0.05)
                    continue
                ahead = seq / self.rate - (time.monotonic() - t0)
                if ahead > 0:  # pacing
                    self.producer.poll(min(ahead, 0.05))
                    continue
                p = seq % self.partitions
                try:
                    self.producer.produce(self.topic, value=self.value(seq), key=f"k{p}".encode(),
                                          partition=p, on_delivery=self._cb)
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                seq += 1
                self.sent = seq
                self.producer.poll(0)
        except BaseException as e:  # surfaced by check()
            self.error = e

    # ------------------------------------------------------------- control
    def start(self) -> "SeqProducer":
        self.thread.start()
        return self

    def halt(self) -> None:
        """Stops producing (no assertion: safe in `finally`)."""
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=10)

    def finish(self, timeout: float) -> int:
        """Stops producing and waits for every delivery report; returns how many are
        still missing after `timeout`."""
        self.halt()
        assert not self.thread.is_alive(), "the producer thread did not stop"
        return self.producer.flush(timeout)

    def fatal(self) -> list:
        with self.lock:
            return [e for e in self.client_errors if e[2]]

    def check(self) -> None:
        assert self.error is None, f"the producer thread failed: {self.error!r}"
        assert not self.fatal(), f"fatal producer errors: {self.fatal()}"

    # ------------------------------------------------------------- queries
    def n_acked(self) -> int:
        with self.lock:
            return len(self.acked)

    def acked_after(self, partition: int, min_seq: int) -> tuple[float, int] | None:
        """The first acknowledgement on `partition` of a record with seq >= min_seq (that
        is, one produced after the moment `sent` was min_seq): (time, seq)."""
        with self.lock:
            return next(((t, s) for t, s in self.ack_log[partition] if s >= min_seq), None)

    def wait_acked(self, n: int, timeout: float, what: str) -> None:
        wait_for(lambda: (self.n_acked() >= n or self.error is not None or bool(self.fatal()),
                          f"acked={self.n_acked()} sent={self.sent} failed={self.failed[-3:]}"),
                 timeout, what, interval=0.05)
        self.check()

    def wait_ack_after(self, partition: int, min_seq: int, timeout: float, what: str) -> tuple[float, int]:
        def check():
            got = self.acked_after(partition, min_seq)
            if got is not None or self.error is not None or self.fatal():
                return True, got
            with self.lock:
                last = self.ack_log[partition][-1] if self.ack_log[partition] else None
                fails = self.failed[-3:]
            return False, (f"last ack on p{partition}: seq {last[1] if last else None}, "
                           f"sent={self.sent}, recent failures={fails}, "
                           f"client errors={[e[1] for e in self.client_errors[-3:]]}")
        got = wait_for(check, timeout, what, interval=0.02)
        self.check()
        return got


def produce_values(bootstrap: str, topic: str, partition: int, values: list[bytes],
                   flush_timeout: float, **conf) -> list[tuple[bytes, KafkaError | None, int]]:
    """Produces `values` to one partition with a fresh producer; returns, in order,
    (value, error or None, offset) from the delivery reports."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "logger": RDKAFKA_LOG, **conf})
    reports: dict[bytes, tuple[KafkaError | None, int]] = {}

    def cb(err, msg):
        reports[msg.value()] = (err, msg.offset())

    for v in values:
        p.produce(topic, value=v, partition=partition, on_delivery=cb)
    remaining = p.flush(flush_timeout)
    assert remaining == 0, (f"{remaining} of {len(values)} records without a delivery report "
                            f"{flush_timeout}s after producing them")
    return [(v, *reports[v]) for v in values]


# --------------------------------------------------------------------------- raw produce
class ProduceProbe:
    """One connection to one agent over which a Produce (v3, no producer id; acks=all
    unless told) can be sent while the agent is stopped, and answered after it resumes."""

    def __init__(self, bootstrap: str):
        self.wire = Wire.connect(bootstrap)  # ApiVersions answered: the agent is up now
        self.version = self.wire.pick(API_PRODUCE, [3])
        self.corr = None

    def send(self, topic: str, partition: int, value: bytes, timeout_ms: int = 3000,
             acks: int = -1) -> None:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                      producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                      batch_size=1 << 20)
        b.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
        batch = bytes(b.build())
        body = (struct.pack(">h", -1) + struct.pack(">hi", acks, timeout_ms)
                + struct.pack(">i", 1) + _str(topic)
                + struct.pack(">i", 1) + struct.pack(">i", partition)
                + struct.pack(">i", len(batch)) + batch)
        self.wire.corr += 1
        self.corr = self.wire.corr
        header = struct.pack(">hhi", API_PRODUCE, self.version, self.corr) + _str("strata-replication-test")
        msg = header + body
        self.wire.sock.sendall(struct.pack(">i", len(msg)) + msg)  # the kernel buffers it

    def receive(self, timeout: float) -> tuple[int, int]:
        """(error code, base offset) of the answer."""
        self.wire.sock.settimeout(timeout)
        size = struct.unpack(">i", self.wire._recv(4))[0]
        r = Reader(self.wire._recv(size))
        assert r.take(">i") == self.corr, "answer to another request"
        assert r.take(">i") == 1
        r.string()
        assert r.take(">i") == 1
        _index, err, base_offset, _append_time = r.take(">ihqq")
        return err, base_offset

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.wire.close()


# --------------------------------------------------------------------------- reading back
def read_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 60):
    """Every record of every partition from offset 0 to the high watermark: (lows, ends,
    {partition: [Rec]})."""
    marks = {p: watermarks(bootstrap, topic, p) for p in range(partitions)}
    lows = {p: m[0] for p, m in marks.items()}
    ends = {p: m[1] for p, m in marks.items()}
    got = consume_confluent(bootstrap, topic, {p: 0 for p in range(partitions)}, ends, timeout=timeout)
    return lows, ends, got


@dataclass
class LogCheck:
    """What a topic's log says about a SeqProducer's acknowledgements."""

    acknowledged: int
    sent: int
    records: int
    present: int = 0
    lost: list = field(default_factory=list)          # acked seq found nowhere
    misplaced: list = field(default_factory=list)     # acked seq not (only) at its acked offset
    duplicated: dict = field(default_factory=dict)    # seq -> [(p, offset)], more than one
    out_of_order: list = field(default_factory=list)  # (p, offset, previous seq, seq)
    wrong_partition: list = field(default_factory=list)
    unknown: list = field(default_factory=list)       # (p, offset, value) not produced by us
    offset_gaps: list = field(default_factory=list)   # (p, first offsets) not dense from 0
    acked_twice: list = field(default_factory=list)   # seqs with two success reports
    unacked_in_log: int = 0
    # acked with no offset: librdkafka acknowledges a batch whose own answer was lost
    # when a later batch of the same producer succeeds ("implicitly acked"); its
    # delivery report carries no offset, so only its partition can be checked.
    acked_without_offset: int = 0

    def summary(self) -> str:
        return (f"acknowledged={self.acknowledged} lost={len(self.lost)} "
                f"duplicated={len(self.duplicated)} misplaced={len(self.misplaced)} "
                f"out_of_order={len(self.out_of_order)} sent={self.sent} records={self.records} "
                f"unacked_in_log={self.unacked_in_log} "
                f"acked_without_offset={self.acked_without_offset}")

    def assert_clean(self) -> None:
        s = self.summary()
        assert not self.lost, (
            f"{len(self.lost)} acknowledged records are not in the log, e.g. (seq, acked at) "
            f"{self.lost[:5]} [{s}]")
        assert not self.duplicated, (
            f"{len(self.duplicated)} records appear more than once, e.g. "
            + "; ".join(f"seq {q} at {w}" for q, w in sorted(self.duplicated.items())[:5]) + f" [{s}]")
        assert not self.misplaced, (
            f"{len(self.misplaced)} acknowledged records are not at the offset they were "
            f"acknowledged at, e.g. (seq, acked at, found at) {self.misplaced[:5]} [{s}]")
        assert not self.out_of_order, (
            f"records out of send order, e.g. (partition, offset, previous seq, seq) "
            f"{self.out_of_order[:5]} [{s}]")
        assert not self.wrong_partition, f"records in the wrong partition: {self.wrong_partition[:5]} [{s}]"
        assert not self.offset_gaps, f"offsets not dense from 0: {self.offset_gaps[:3]} [{s}]"
        assert not self.unknown, f"records nobody produced: {self.unknown[:5]} [{s}]"
        assert not self.acked_twice, f"records acknowledged twice: {self.acked_twice[:5]} [{s}]"


def check_log(prod: SeqProducer, lows: dict, ends: dict, got: dict, also_allowed=()) -> LogCheck:
    """Compares the log read back (`read_topic`) with the producer's acknowledgements.
    `also_allowed`: values produced by other means that may be in the log."""
    with prod.lock:
        acked = dict(prod.acked)
        acked_twice = list(prod.acked_twice)
    allowed = set(also_allowed)
    where: dict[int, list[tuple[int, int]]] = {}
    c = LogCheck(acknowledged=len(acked), sent=prod.sent,
                 records=sum(len(v) for v in got.values()), acked_twice=acked_twice)
    for p, recs in sorted(got.items()):
        offsets = [r.offset for r in recs]
        if lows[p] != 0 or offsets != list(range(ends[p])):
            bad = next((i for i, o in enumerate(offsets) if o != i), len(offsets))
            c.offset_gaps.append((p, f"low={lows[p]} end={ends[p]} read {len(offsets)}, "
                                     f"first unexpected at index {bad}: {offsets[bad:bad + 3]}"))
        prev = -1
        for r in recs:
            seq = prod.seq_of(r.value)
            if seq is None or seq >= prod.sent:
                if r.value not in allowed:
                    c.unknown.append((p, r.offset, r.value))
                continue
            where.setdefault(seq, []).append((p, r.offset))
            if seq % prod.partitions != p:
                c.wrong_partition.append((seq, p, r.offset))
            if seq <= prev:
                c.out_of_order.append((p, r.offset, prev, seq))
            prev = max(prev, seq)
    c.duplicated = {q: w for q, w in where.items() if len(w) > 1}
    for q, at in sorted(acked.items()):
        found = where.get(q)
        if not found:
            c.lost.append((q, at))
        elif at[1] is None and len(found) == 1 and found[0][0] == at[0]:
            c.acked_without_offset += 1
            c.present += 1
        elif found != [at]:
            c.misplaced.append((q, at, found))
        else:
            c.present += 1
    c.unacked_in_log = sum(1 for q in where if q not in acked)
    return c
