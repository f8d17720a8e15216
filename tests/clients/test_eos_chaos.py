"""Exactly-once under SIGKILL: the transactions acceptance test (three agents, RF 3).

An input topic (3 partitions, RF 3, min.insync.replicas 2) holds N records with unique
values. A consume-transform-produce app (librdkafka) runs as a real EOS application
does, in its own process (this file run as a script, restarted by the test if it ever
dies, as a supervisor would): a group consumer with isolation.level=read_committed and
no auto commit, a transactional producer; per poll batch it begins a transaction, writes
one output record per input record to the same partition of the output topic (3
partitions, RF 3) with the value "<input value>|<txn seq>|<records in txn>", sends the
batch's offsets with send_offsets_to_transaction and commits. Retriable errors of
send_offsets/commit/abort are retried as librdkafka documents; on an abortable error it
aborts and rewinds the consumer to the committed offsets; on a fatal one (fenced, or an
abort that cannot complete) it builds a new producer with the same transactional.id
(whose init_transactions fences the old one) and rewinds.

While it runs, twice over, three agents are SIGKILLed in turn: the leader of an output
partition, the leader of an input partition and the transaction coordinator of the
transactional.id (FindCoordinator key_type=1). Each stays down until its partitions and
coordinator roles failed over to the other agents, then is restarted; the app must make
progress, and the agent rejoins the ISRs. Then the app process itself is SIGKILLed (and
restarted). The app paces itself inside its transactions, so that the kills land in
open ones. A sampler reads the group's committed offsets (raw OffsetFetch with
require_stable) every 0.3 s.

Then the whole output is read with read_committed and read_uncommitted and checked as
Jepsen's Kafka queue workload does:
  lost             input values missing from the committed output
  duplicates       input values more than once in the committed output
  aborted_reads    committed-output records of a transaction the app aborted
  torn             transactions visible in read_committed with records missing
  unknown          committed-output records that no input record maps to
  reordered        output partitions whose committed records are not their input
                   partition's records in input order
  lost_commits     transactions whose commit succeeded but are not (fully) visible
  offsets_wrong    partitions whose final committed offset is not the input end offset
  offsets_back     sampled committed offsets that went backwards
All must be 0; the counts are printed either way.

A second test looks at what the end-of-run reads cannot see, a dirty read lasting only
while a failover is in progress: a transaction open when its partition's leader is
SIGKILLed must hold the new leader's LSO at its first offset, and then commit (or
abort) through the new leader.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)

pytest.register_assert_rewrite("replication_testlib", "txn_testlib")

from replication_testlib import create_replicated_topic, wait_for  # noqa: E402
from strata_testlib import RDKAFKA_LOG, unique_topic  # noqa: E402
from test_replication import report, started_cluster  # noqa: E402
from txn_testlib import (  # noqa: E402
    COORDINATOR_TRANSACTION,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    describe_error,
    end_offset,
    end_offsets,
    find_coordinator,
    kafka_error,
    offset_fetch,
    open_on,
    read_all,
    txn_producer_conf,
    values,
)

NODES = (1, 2, 3)
PARTITIONS = 3
N_RECORDS = 5000
ROUNDS = 2           # each: output leader, input leader, transaction coordinator, the app
BATCH = 20
RATE = 60.0          # input records per second while the kills happen (pacing only)
PROGRESS = 150       # committed input records to wait for after each kill
TXN_TIMEOUT_MS = 15000
# A librdkafka call still blocked this long after it was made (its own timeout is 30 s)
# is hung: the app logs its stacks and exits with HANG_EXIT, and is restarted. Seen with
# librdkafka 2.16: send_offsets_to_transaction() blocked past its timeout after the group
# coordinator it had picked was SIGKILLed.
HANG_S = 40.0
HANG_EXIT = 75


@pytest.fixture
def cluster(broker_factory, request):
    """Three started agents sharing one metastore, short leases, short transaction
    cleanup interval."""
    yield from started_cluster(broker_factory, request, "strata-eos-", [
        "--lease-ms", "3000",
        "--replica-lag-time-max-ms", "2000",
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "200",
    ])


# --------------------------------------------------------------------------- the app
# The app runs as its own process (this file as a script: `python3 test_eos_chaos.py app
# ...`), so that a client-side crash (librdkafka asserts) ends only the app, which the
# test then restarts as a supervisor would: the new instance's init_transactions fences
# the old transactional.id's producer and aborts what it left open. It appends one JSON
# object per line (flushed as written) to its events file:
#   {"ev": "begin", "seq": S}                          before each transaction
#   {"ev": "committed", "seq": S, "n": N, "offsets": {P: O}}   commit_transaction returned
#   {"ev": "aborted", "seq": S}                        abort_transaction returned
#   {"ev": "unknown", "seq": S}                        producer replaced, outcome unknown
#   {"ev": "note", "what": ...}                        errors and recoveries
#   {"ev": "producer"} / {"ev": "consumer"}            a client was created
#   {"ev": "exit"}                                     clean stop (the stop file appeared)
# Control files in --control: "fast" ends the pacing, "stop" stops the loop between
# transactions.
class _Stopped(Exception):
    pass


class EosLoop:
    def __init__(self, opts):
        self.o = opts
        self.control = Path(opts.control)
        self.events = open(opts.out, "a", buffering=1)
        self.seq = opts.seq_base
        self.committed_here = 0
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.in_call: tuple[str, float] | None = None
        threading.Thread(target=self.watchdog, name="hang-watchdog", daemon=True).start()

    def emit(self, **ev) -> None:
        ev["t"] = round(time.monotonic(), 3)
        with self.lock:
            self.events.write(json.dumps(ev) + "\n")

    def guarded(self, what: str, call):
        """call(), watched by the hang watchdog."""
        self.in_call = (what, time.monotonic())
        try:
            return call()
        finally:
            self.in_call = None

    def watchdog(self) -> None:
        import faulthandler
        while True:
            time.sleep(0.5)
            current = self.in_call
            if current is not None and time.monotonic() - current[1] > HANG_S:
                self.emit(ev="hang", what=current[0], seconds=round(time.monotonic() - current[1], 1))
                sys.stderr.write(f"\n===== HANG: {current[0]} blocked for {HANG_S:.0f}s =====\n")
                faulthandler.dump_traceback(all_threads=True)
                sys.stderr.flush()
                os._exit(HANG_EXIT)

    def note(self, what: str) -> None:
        self.emit(ev="note", what=what)

    def stopping(self) -> bool:
        return (self.control / "stop").exists()

    # ------------------------------------------------------------- clients
    def new_producer(self) -> Producer:
        deadline = time.monotonic() + 60
        while not self.stopping():
            p = Producer(txn_producer_conf(self.o.servers, self.o.tid, **{
                "logger": None,  # librdkafka's own log lines straight to stderr (the app's log)
                "debug": os.environ.get("EOS_APP_DEBUG", "eos"),
                "transaction.timeout.ms": TXN_TIMEOUT_MS,
                "message.timeout.ms": TXN_TIMEOUT_MS - 1000,
                "socket.timeout.ms": 5000,
                "topic.metadata.refresh.interval.ms": 1000,
                "reconnect.backoff.ms": 100,
                "reconnect.backoff.max.ms": 1000,
            }))
            self.emit(ev="producer")
            while not self.stopping():
                try:
                    self.guarded("init_transactions", lambda: p.init_transactions(10))
                    return p
                except KafkaException as e:
                    err = kafka_error(e)
                    self.note(f"init_transactions: {describe_error(e)}")
                    if err is not None and err.fatal():
                        break
                    if time.monotonic() > deadline:
                        raise AssertionError(f"init_transactions did not succeed within 60s: {describe_error(e)}")
            del p  # a producer with a fatal error is dropped (flush would raise it)
            if time.monotonic() > deadline:
                raise AssertionError("no producer initialised within 60s")
        raise _Stopped()

    def new_consumer(self) -> Consumer:
        c = Consumer({
            "bootstrap.servers": self.o.servers,
            "group.id": self.o.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 60000,
            "socket.timeout.ms": 5000,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000,
        })
        c.subscribe([self.o.src])
        self.emit(ev="consumer")
        return c

    def rewind(self, consumer: Consumer) -> Consumer:
        """Seek every assigned partition to its committed offset (read_committed: librdkafka
        asks with require_stable); on any trouble, a new consumer (which starts there)."""
        try:
            assignment = consumer.assignment()
            if assignment:
                committed = self.guarded("committed", lambda: consumer.committed(assignment, timeout=20))
                for tp in committed:
                    if tp.error is not None:
                        raise KafkaException(tp.error)
                    off = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    consumer.seek(TopicPartition(tp.topic, tp.partition, off))
                self.note(f"rewound to {[(tp.partition, tp.offset) for tp in committed]}")
            return consumer
        except KafkaException as e:
            self.note(f"rewind failed ({describe_error(e)}): new consumer")
            try:
                consumer.close()
            except Exception:  # noqa: BLE001
                pass
            return self.new_consumer()

    # ------------------------------------------------------------- one transaction
    def retrying(self, what: str, seq: int, call) -> None:
        """call() again while it fails with a retriable error that needs no abort (as
        librdkafka documents for send_offsets_to_transaction and commit_transaction)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return self.guarded(what, call)
            except KafkaException as e:
                err = kafka_error(e)
                if err is not None and err.retriable() and not err.txn_requires_abort() \
                        and not err.fatal() and time.monotonic() < deadline:
                    self.note(f"{what} seq {seq} retried: {describe_error(e)}")
                    continue
                raise

    def pace(self, n: int) -> None:
        """Pacing (not a wait for a condition), inside the transaction: while the kills
        happen, a transaction is open most of the time, so that they hit open ones."""
        if (self.control / "fast").exists():
            return
        ahead = (self.committed_here + n) / self.o.rate - (time.monotonic() - self.t0)
        if ahead > 0:
            time.sleep(min(ahead, 1.0))

    def transact(self, producer: Producer, consumer: Consumer, msgs, seq: int) -> str:
        """'committed', 'aborted' or 'fatal' (outcome unknown: replace the producer)."""
        self.emit(ev="begin", seq=seq)
        offsets: dict[int, int] = {}
        for m in msgs:
            offsets[m.partition()] = max(offsets.get(m.partition(), 0), m.offset() + 1)
        try:
            producer.begin_transaction()
            for m in msgs:
                value = f"{m.value().decode()}|{seq}|{len(msgs)}".encode()
                while True:
                    try:
                        producer.produce(self.o.dst, key=m.key(), value=value, partition=m.partition())
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.poll(0)
            self.pace(len(msgs))
            group_metadata = consumer.consumer_group_metadata()
            self.retrying("send_offsets_to_transaction", seq, lambda: producer.send_offsets_to_transaction(
                [TopicPartition(self.o.src, p, o) for p, o in sorted(offsets.items())], group_metadata, 30))
            self.retrying("commit_transaction", seq, lambda: producer.commit_transaction(30))
        except KafkaException as e:
            err = kafka_error(e)
            self.note(f"txn seq {seq}: {describe_error(e)}")
            if err is not None and (err.fatal() or not err.txn_requires_abort()):
                return "fatal"
            return self.abort(producer, seq)
        self.emit(ev="committed", seq=seq, n=len(msgs), offsets={str(p): o for p, o in offsets.items()})
        self.committed_here += len(msgs)
        return "committed"

    def abort(self, producer: Producer, seq: int) -> str:
        try:
            self.retrying("abort_transaction", seq, lambda: producer.abort_transaction(30))
        except KafkaException as e:
            self.note(f"abort seq {seq}: {describe_error(e)}")
            return "fatal"
        self.emit(ev="aborted", seq=seq)
        return "aborted"

    # ------------------------------------------------------------- the loop
    def run(self) -> int:
        producer = consumer = None
        try:
            producer = self.new_producer()
            consumer = self.new_consumer()
            while not self.stopping():
                msgs = consumer.consume(num_messages=BATCH, timeout=0.5)
                data = []
                for m in msgs:
                    if m.error():
                        self.note(f"consumer: {m.error()}")
                        if m.error().fatal():
                            raise KafkaException(m.error())
                    else:
                        data.append(m)
                if not data:
                    continue
                self.seq += 1
                outcome = self.transact(producer, consumer, data, self.seq)
                if outcome == "aborted":
                    consumer = self.rewind(consumer)
                elif outcome == "fatal":
                    self.emit(ev="unknown", seq=self.seq)
                    self.note(f"replacing the producer after seq {self.seq}")
                    producer = None
                    producer = self.new_producer()
                    consumer = self.rewind(consumer)
        except _Stopped:
            pass
        finally:
            if consumer is not None:
                try:
                    consumer.close()
                except Exception:  # noqa: BLE001
                    pass
        self.emit(ev="exit")
        return 0


def app_main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="test_eos_chaos.py app")
    for a in ("--servers", "--src", "--dst", "--group", "--tid", "--out", "--control"):
        ap.add_argument(a, required=True)
    ap.add_argument("--seq-base", type=int, default=0)
    ap.add_argument("--rate", type=float, default=RATE)
    import faulthandler
    import signal
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # EosApp.stacks()
    return EosLoop(ap.parse_args(argv)).run()


class EosApp:
    """The test's side: starts the app process, follows its events file, restarts it when
    it dies (counting the crashes, with their stderr), stops it via the control file."""

    MAX_CRASHES = 5

    def __init__(self, root: Path, servers: str, src: str, dst: str, group: str, transactional_id: str):
        self.root, self.servers, self.src, self.dst, self.group, self.tid = \
            root, servers, src, dst, group, transactional_id
        self.control = root / "control"
        self.control.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.committed_txns: dict[int, int] = {}       # seq -> records
        self.aborted_txns: set[int] = set()            # abort_transaction returned OK
        self.unknown_txns: set[int] = set()            # begun, outcome not known
        self.committed_records = 0
        self.committed_offsets: dict[int, int] = {}
        self.events: list[tuple[float, str]] = []
        self.producers = self.consumers = 0
        self.crashes: list[str] = []
        self.hangs: list[str] = []   # the app's watchdog found a librdkafka call blocked
        self.incarnation = 0
        self.proc: subprocess.Popen | None = None
        self.error: str | None = None
        self._stopping = threading.Event()
        self._begun: set[int] = set()
        self._killed_on_purpose = False
        self.kills = 0
        self._files: dict[int, tuple] = {}
        self.monitor = threading.Thread(target=self._monitor, name="eos-app-monitor", daemon=True)

    def _spawn(self) -> None:
        self.incarnation += 1
        k = self.incarnation
        out = self.root / f"events-{k}.jsonl"
        out.touch()
        err = open(self.root / f"stderr-{k}.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "app", "--servers", self.servers,
             "--src", self.src, "--dst", self.dst, "--group", self.group, "--tid", self.tid,
             "--out", str(out), "--control", str(self.control), "--seq-base", str(k * 1_000_000)],
            stdin=subprocess.DEVNULL, stdout=err, stderr=err, cwd=str(Path(__file__).resolve().parent))
        self._files[k] = (open(out, "rb"), b"")

    def _read_events(self) -> None:
        for k, (f, buf) in list(self._files.items()):
            buf += f.read()
            *lines, rest = buf.split(b"\n")
            self._files[k] = (f, rest)
            for line in lines:
                if line.strip():
                    self._apply(json.loads(line))

    def _apply(self, ev: dict) -> None:
        kind = ev["ev"]
        with self.lock:
            if kind == "begin":
                self._begun.add(ev["seq"])
            elif kind == "committed":
                self._begun.discard(ev["seq"])
                self.committed_txns[ev["seq"]] = ev["n"]
                self.committed_records += ev["n"]
                for p, o in ev["offsets"].items():
                    self.committed_offsets[int(p)] = max(self.committed_offsets.get(int(p), 0), o)
            elif kind == "aborted":
                self._begun.discard(ev["seq"])
                self.aborted_txns.add(ev["seq"])
            elif kind == "unknown":
                self._begun.discard(ev["seq"])
                self.unknown_txns.add(ev["seq"])
            elif kind == "note":
                self.events.append((ev["t"], ev["what"]))
            elif kind == "producer":
                self.producers += 1
            elif kind == "consumer":
                self.consumers += 1

    def _monitor(self) -> None:
        try:
            while True:
                self._read_events()
                rc = self.proc.poll()
                if rc is not None:
                    self._read_events()
                    if self._stopping.is_set() and rc == 0:
                        return
                    tail = (self.root / f"stderr-{self.incarnation}.log").read_bytes()[-6000:].decode("utf-8", "replace")
                    with self.lock:
                        self.unknown_txns |= self._begun
                        self._begun.clear()
                        if self._killed_on_purpose:
                            self._killed_on_purpose = False
                            self.kills += 1
                        elif rc == HANG_EXIT:
                            self.hangs.append(f"incarnation {self.incarnation}: {tail}")
                        else:
                            self.crashes.append(f"incarnation {self.incarnation} exited {rc}: {tail}")
                        self.events.append((round(time.monotonic(), 3), f"app exited {rc}; restarted"))
                    if len(self.crashes) + len(self.hangs) > self.MAX_CRASHES or self._stopping.is_set():
                        last = (self.crashes + self.hangs)[-1]
                        self.error = (f"the app process exited {len(self.crashes)} times and hung "
                                      f"{len(self.hangs)} times; last: {last}")
                        return
                    self._spawn()
                time.sleep(0.05)
        except Exception as e:  # noqa: BLE001 - surfaced by check()
            self.error = f"monitor failed: {e!r}"

    # ------------------------------------------------------------- control
    def start(self) -> "EosApp":
        self._spawn()
        self.monitor.start()
        return self

    def fast(self) -> None:
        (self.control / "fast").touch()

    def stop(self) -> None:
        self._stopping.set()
        (self.control / "stop").touch()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.monitor.join(timeout=10)
        self._read_events()

    def sigkill(self) -> int:
        """SIGKILL the app process (the monitor restarts it); returns the incarnation
        killed."""
        with self.lock:
            self._killed_on_purpose = True
            k = self.incarnation
            self.proc.kill()
        return k

    def kill(self) -> None:
        """Teardown: no app process left behind (and none restarted)."""
        self._stopping.set()
        (self.control / "stop").touch()
        if self.monitor.is_alive():
            self.monitor.join(timeout=10)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def describe(self) -> str:
        with self.lock:
            return (f"committed_records={self.committed_records} txns committed={len(self.committed_txns)} "
                    f"aborted={len(self.aborted_txns)} unknown={len(self.unknown_txns)} "
                    f"producers={self.producers} consumers={self.consumers} crashes={len(self.crashes)} "
                    f"hangs={len(self.hangs)} "
                    f"offsets={self.committed_offsets} last events={self.events[-6:]}")

    def check(self) -> None:
        assert self.error is None, f"the EOS app failed: {self.error} [{self.describe()}]"

    def stacks(self) -> str:
        """The app's Python stacks (faulthandler on SIGUSR1) and the end of its log."""
        log = self.root / f"stderr-{self.incarnation}.log"
        if self.proc is None or self.proc.poll() is not None:
            return "(the app is not running)"
        size = log.stat().st_size
        self.proc.send_signal(signal.SIGUSR1)
        try:
            wait_for(lambda: (b"most recent call first" in log.read_bytes()[size:], None), 5, "a stack dump")
        except AssertionError:
            pass
        text = log.read_bytes().decode("utf-8", "replace")
        return text[-6000:]

    def wait_committed(self, n: int, timeout: float, what: str) -> None:
        try:
            wait_for(lambda: (self.committed_records >= n or self.error is not None, self.describe()),
                     timeout, what, interval=0.05)
        except AssertionError as e:
            raise AssertionError(f"{e}\n----- the app's stacks and log -----\n{self.stacks()}") from None
        self.check()


def committed_offsets(bootstraps: list[str], group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, OffsetFetch with require_stable over the raw wire
    (asked of the first agent that answers; not librdkafka's AdminClient, whose requests
    to agents being SIGKILLed tripped an assertion inside librdkafka 2.16 that took the
    whole test process down). Partitions without a committed offset: -1. Raises when no
    agent answers or an answer carries an error (UNSTABLE_OFFSET_COMMIT included)."""
    last = None
    for b in bootstraps:
        try:
            got = offset_fetch(b, group, topic, list(range(PARTITIONS)), require_stable=True)
        except (OSError, AssertionError, struct.error, IndexError) as e:
            last = e
            continue
        errors = {p: e for p, (_o, e) in got.items() if e}
        if errors:
            raise RuntimeError(f"OffsetFetch errors {errors} from {b}")
        return {p: o for p, (o, _e) in got.items()}
    raise RuntimeError(f"no agent answered OffsetFetch: {last!r}")


class OffsetSampler:
    """Reads the group's committed offsets (require_stable) every 0.3 s; counts any that
    went backwards."""

    def __init__(self, bootstraps: list[str], group: str, topic: str):
        self.bootstraps, self.group, self.topic = bootstraps, group, topic
        self.last: dict[int, int] = {}
        self.samples = 0
        self.backwards: list[tuple[int, int, int]] = []  # (partition, before, after)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="offset-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            try:
                got = committed_offsets(self.bootstraps, self.group, self.topic)
            except Exception:  # noqa: BLE001 - agents are being killed
                continue
            self.samples += 1
            for p, off in got.items():
                if off < 0:
                    continue
                prev = self.last.get(p)
                if prev is not None and off < prev:
                    self.backwards.append((p, prev, off))
                self.last[p] = max(prev or 0, off)

    def start(self) -> "OffsetSampler":
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=15)


# --------------------------------------------------------------------------- pieces
def fill_input(servers: str, src: str) -> tuple[dict[int, int], dict[int, list[str]]]:
    """N unique values, value i on partition i % 3 (idempotent, acks=all); returns the end
    offsets and each partition's values in log order."""
    p = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "linger.ms": 5,
                  "logger": RDKAFKA_LOG})
    for i in range(N_RECORDS):
        p.produce(src, key=f"k{i}".encode(), value=f"in-{i:05d}".encode(), partition=i % PARTITIONS)
        if i % 500 == 499:
            p.poll(0)
    assert p.flush(60) == 0, "the input was not written within 60s"
    input_ends = end_offsets(servers, src, PARTITIONS, READ_UNCOMMITTED)
    assert sum(input_ends.values()) == N_RECORDS, input_ends
    inputs = read_all(servers, src, PARTITIONS, READ_COMMITTED, timeout=60)
    input_values = {q: [r.value.decode() for r in inputs[q]] for q in inputs}
    assert sum(len(v) for v in input_values.values()) == N_RECORDS
    return input_ends, input_values


def wait_all_consumed(app: "EosApp", bootstraps: list[str], group: str, src: str,
                      input_ends: dict[int, int], timeout: float = 90) -> None:
    """Pacing off; until the group's committed offsets (require_stable) are the input's
    end offsets."""
    app.fast()
    state = {}

    def done():
        try:
            state["committed"] = committed_offsets(bootstraps, group, src)
        except Exception as e:  # noqa: BLE001
            state["committed"] = repr(e)
        return (state["committed"] == input_ends or app.error is not None,
                f"committed {state['committed']} [{app.describe()}]")
    wait_for(done, timeout, f"the EOS app consuming the whole input (ends {input_ends})", interval=0.2)
    app.check()


def analyse(servers: str, src: str, dst: str, group: str, app: "EosApp", sampler: OffsetSampler,
            input_ends: dict[int, int], input_values: dict[int, list[str]],
            kills: list[str]) -> tuple[str, list[str], list]:
    """Reads the whole output at both isolation levels and counts the anomalies: (summary
    line, problems, the app's last events)."""
    def stable():
        rc = end_offsets(servers, dst, PARTITIONS, READ_COMMITTED)
        ru = end_offsets(servers, dst, PARTITIONS, READ_UNCOMMITTED)
        return rc == ru, f"read_committed ends {rc}, read_uncommitted ends {ru}"
    wait_for(stable, 45, f"no open transaction left on {dst} (LSO == high watermark; a hanging "
                         f"transaction would keep them apart)", interval=0.2)
    rc = read_all(servers, dst, PARTITIONS, READ_COMMITTED, timeout=60)
    ru = read_all(servers, dst, PARTITIONS, READ_UNCOMMITTED, timeout=60)

    def parse(v: bytes):
        try:
            inp, seq, n = v.decode().split("|")
            return inp, int(seq), int(n)
        except (ValueError, AttributeError, UnicodeDecodeError):
            return None

    all_inputs = {v for vs in input_values.values() for v in vs}
    counts: Counter = Counter()
    seq_seen: Counter = Counter()
    seq_size: dict[int, int] = {}
    unknown, aborted_reads, reordered = [], [], []
    with app.lock:
        aborted = set(app.aborted_txns)
        committed_txns = dict(app.committed_txns)
        unknown_txns = set(app.unknown_txns)
        events = list(app.events)
    for q in range(PARTITIONS):
        got_inputs = []
        for r in rc[q]:
            parsed = parse(r.value)
            if parsed is None or parsed[0] not in all_inputs:
                unknown.append((q, r.offset, r.value))
                continue
            inp, seq, n = parsed
            counts[inp] += 1
            seq_seen[seq] += 1
            seq_size[seq] = n
            got_inputs.append(inp)
            if seq in aborted:
                aborted_reads.append((q, r.offset, r.value))
        if got_inputs != input_values[q]:
            reordered.append(q)
    lost = sorted(all_inputs - set(counts))
    duplicates = sorted(v for v, c in counts.items() if c > 1)
    torn = sorted(s for s, c in seq_seen.items() if c != seq_size[s])
    lost_commits = sorted(s for s, n in committed_txns.items() if seq_seen.get(s, 0) != n)
    final = committed_offsets(servers.split(","), group, src)
    offsets_wrong = {q: (final.get(q), input_ends[q]) for q in range(PARTITIONS) if final.get(q) != input_ends[q]}
    ru_records = sum(len(v) for v in ru.values())
    rc_records = sum(len(v) for v in rc.values())
    ru_seqs = {parse(r.value)[1] for v in ru.values() for r in v if parse(r.value)}
    aborted_in_log = len(ru_seqs - set(seq_seen))

    line = (f"lost={len(lost)} duplicates={len(duplicates)} aborted_reads={len(aborted_reads)} "
            f"torn={len(torn)} unknown={len(unknown)} reordered={len(reordered)} "
            f"lost_commits={len(lost_commits)} offsets_wrong={len(offsets_wrong)} "
            f"offsets_back={len(sampler.backwards)} | input={N_RECORDS} committed_output={rc_records} "
            f"all_output={ru_records} txns committed={len(committed_txns)} aborted={len(aborted)} "
            f"unknown_outcome={len(unknown_txns)} aborted_txns_in_log={aborted_in_log} "
            f"producers={app.producers} consumers={app.consumers} app_crashes={len(app.crashes)} "
            f"app_hangs={len(app.hangs)} "
            f"offset_samples={sampler.samples} | "
            + "; ".join(kills))
    problems = []
    if lost:
        problems.append(f"lost: {len(lost)} input values not in the committed output, e.g. {lost[:5]}")
    if duplicates:
        problems.append(f"duplicates: {len(duplicates)} input values more than once, e.g. "
                        f"{[(v, counts[v]) for v in duplicates[:5]]}")
    if aborted_reads:
        problems.append(f"aborted reads: {len(aborted_reads)} read_committed records of aborted "
                        f"transactions, e.g. {aborted_reads[:5]}")
    if torn:
        problems.append(f"torn transactions: {[(s, seq_seen[s], seq_size[s]) for s in torn[:5]]} "
                        f"(seq, visible, size)")
    if unknown:
        problems.append(f"unknown records in the committed output: {unknown[:5]}")
    if reordered:
        problems.append(f"output partitions {reordered} are not their input partition in order")
    if lost_commits:
        problems.append(f"commits acknowledged but not visible: {[(s, seq_seen.get(s, 0), committed_txns[s]) for s in lost_commits[:5]]}")
    if offsets_wrong:
        problems.append(f"final committed offsets (got, input end): {offsets_wrong}")
    if sampler.backwards:
        problems.append(f"committed offsets went backwards: {sampler.backwards[:5]}")
    return line, problems, events


# --------------------------------------------------------------------------- the test
def test_exactly_once_through_leader_and_coordinator_kills(cluster, capsys, record_property, tmp_path):
    src, dst = unique_topic("eos-in"), unique_topic("eos-out")
    create_replicated_topic(cluster, src, PARTITIONS)
    create_replicated_topic(cluster, dst, PARTITIONS)
    servers = cluster.servers()

    input_ends, input_values = fill_input(servers, src)

    group = f"eos-{uuid.uuid4().hex[:8]}"
    tid = f"eos-{uuid.uuid4().hex[:8]}"
    app = EosApp(tmp_path / "app", servers, src, dst, group, tid).start()
    sampler = OffsetSampler(servers.split(","), group, src).start()
    kills: list[str] = []
    try:
        app.wait_committed(PROGRESS, 45, "the EOS app committing its first transactions")

        def failed_over(victim: int):
            """(done, state): a live agent's Metadata shows every partition of both
            topics led by another agent, and FindCoordinator names another agent for
            the transactional id and for the group."""
            live = [n for n in cluster.up() if n != victim]
            if not live:
                return False, "no live agent"
            asked = cluster.agents[live[0]].bootstrap
            state = {}
            for t in (src, dst):
                v = cluster.view(live[0], t)
                state[t] = None if v is None or t not in v.topics else \
                    {q: pm.leader for q, pm in v.topics[t].partitions.items()}
            try:
                state["txn coordinator"] = find_coordinator(asked, tid, COORDINATOR_TRANSACTION)[:2]
                state["group coordinator"] = find_coordinator(asked, group, 0)[:2]
            except (OSError, AssertionError, struct.error) as e:
                return False, f"{state} FindCoordinator: {e!r}"
            ok = all(state[t] is not None and len(state[t]) == PARTITIONS
                     and all(ld in live for ld in state[t].values()) for t in (src, dst)) \
                and all(state[k][0] == 0 and state[k][1] in live for k in ("txn coordinator", "group coordinator"))
            return ok, state

        def kill_and_restart(node: int, why: str) -> None:
            """SIGKILL; wait until its partitions and coordinator roles failed over to the
            other agents (the app working on meanwhile); restart it; the app must commit
            PROGRESS more input records; the agent rejoins the ISRs.
            (It is restarted at once after the failover rather than left down until the
            app made progress: librdkafka 2.16's coordinator requests wait for the dead
            coordinator's connection, past their timeout, when it is gone from Metadata.)"""
            cluster.wait_healthy(src, PARTITIONS, 30, f"the input topic before killing {why}")
            cluster.wait_healthy(dst, PARTITIONS, 30, f"the output topic before killing {why}")
            mark = app.committed_records
            t_kill = time.monotonic()
            cluster.agents[node].kill()
            wait_for(lambda: failed_over(node), 30,
                     f"the partitions and coordinators of agent {node} ({why}) to fail over after SIGKILL",
                     interval=0.1)
            t_failover = time.monotonic() - t_kill
            during = app.committed_records - mark
            cluster.agents[node].start()
            app.wait_committed(mark + PROGRESS, 90,
                               f"the EOS app committing {PROGRESS} more input records after SIGKILL "
                               f"of agent {node} ({why}) and its restart")
            gap = time.monotonic() - t_kill
            cluster.wait_healthy(src, PARTITIONS, 30, f"agent {node} back in the input topic's ISRs")
            cluster.wait_healthy(dst, PARTITIONS, 30, f"agent {node} back in the output topic's ISRs")
            kills.append(f"agent {node} ({why}): failover {t_failover:.1f}s (+{during} committed while "
                         f"down), +{PROGRESS} committed {gap:.1f}s after the kill")

        def coordinator():
            for n in cluster.up():
                try:
                    err, node, _addr = find_coordinator(cluster.agents[n].bootstrap, tid,
                                                        COORDINATOR_TRANSACTION)
                except (OSError, AssertionError) as e:
                    return False, f"agent {n}: {e!r}"
                return err == 0 and node in NODES, (err, node)
            return False, "no agent up"

        for rnd in range(1, ROUNDS + 1):
            out_p = (rnd - 1) % PARTITIONS
            leaders = cluster.wait_healthy(dst, PARTITIONS, 30, "the output topic")
            out_victim = leaders[out_p].leader
            kill_and_restart(out_victim, f"round {rnd}: leader of output p{out_p}")

            leaders = cluster.wait_healthy(src, PARTITIONS, 30, "the input topic")
            order = [(out_p + 1 + i) % PARTITIONS for i in range(PARTITIONS)]
            part = next((q for q in order if leaders[q].leader != out_victim), order[0])
            kill_and_restart(leaders[part].leader, f"round {rnd}: leader of input p{part}")

            _err, coord = wait_for(coordinator, 20, f"FindCoordinator(transaction, {tid})")
            kill_and_restart(coord, f"round {rnd}: transaction coordinator of {tid}")

            # and the app itself, mid-transaction: its successor fences it and its open
            # transaction is aborted
            mark = app.committed_records
            t_kill = time.monotonic()
            app.sigkill()
            app.wait_committed(mark + PROGRESS, 90,
                               f"round {rnd}: the restarted EOS app committing {PROGRESS} more input records")
            kills.append(f"round {rnd}: the app: +{PROGRESS} committed {time.monotonic() - t_kill:.1f}s after the kill")

        wait_all_consumed(app, servers.split(","), group, src, input_ends)
        app.stop()
    finally:
        app.kill()
        sampler.stop()

    line, problems, events = analyse(servers, src, dst, group, app, sampler, input_ends,
                                     input_values, kills)
    report(capsys, record_property, "eos-chaos", line)
    # client-side trouble (librdkafka crashed, or a call blocked past its timeout): the app
    # was restarted, as a supervisor would; shown, not failed on
    for i, crash in enumerate(app.crashes):
        report(capsys, record_property, f"eos-chaos-app-crash-{i}", crash)
    for i, hang in enumerate(app.hangs):
        report(capsys, record_property, f"eos-chaos-app-hang-{i}", hang)
    assert not problems, "\n".join(problems) + f"\n[{line}]\napp events: {events[-30:]}"



# --------------------------------------------------------------------------- failover
def test_open_transaction_survives_leader_failover(cluster):
    """A transaction open on partition 0 of a RF 3 topic when its leader is SIGKILLed: the
    new leader knows it (ListOffsets read_committed still answers the transaction's first
    offset, read_committed returns nothing of it, /v1/transactions on the new leader lists
    it open and not hanging), and the producer then commits it through the new leader:
    all of it becomes visible once. A second transaction, open across another leader
    kill, is aborted: none of it is ever visible. (The end-of-run reads of the chaos test
    would not see a dirty read that only lasted while a failover was in progress.)"""
    topic = unique_topic("eos-lso-failover")
    create_replicated_topic(cluster, topic, 1)
    servers = cluster.servers()
    plain = Producer({"bootstrap.servers": servers, "acks": "all", "logger": RDKAFKA_LOG})
    plain.produce(topic, value=b"plain-0", partition=0)
    assert plain.flush(30) == 0
    t = f"lso-{uuid.uuid4().hex[:8]}"
    p = Producer(txn_producer_conf(servers, t, **{"transaction.timeout.ms": 60000,
                                                   "socket.timeout.ms": 5000,
                                                   "topic.metadata.refresh.interval.ms": 1000}))
    p.init_transactions(30)

    def lso_on_leader(victim: int):
        """(done, state): a new leader (not `victim`) answers ListOffsets."""
        live = [n for n in cluster.up() if n != victim]
        v = cluster.view(live[0], topic) if live else None
        pm = None if v is None else v.partition(topic, 0)
        if pm is None or pm.leader not in live:
            return False, f"leader: {pm}"
        b = cluster.agents[pm.leader].bootstrap
        try:
            return True, (pm.leader, end_offset(b, topic, 0, READ_COMMITTED),
                          end_offset(b, topic, 0, READ_UNCOMMITTED))
        except KafkaException as e:
            return False, repr(e)

    def open_txn(vals: list[bytes]) -> None:
        p.begin_transaction()
        for v in vals:
            p.produce(topic, value=v, partition=0)
        assert p.flush(30) == 0, "transactional records not delivered"

    def kill_leader_while_open(first: int, n: int, what: str) -> int:
        leaders = cluster.wait_healthy(topic, 1, 30, f"the topic before {what}")
        victim = leaders[0].leader
        cluster.agents[victim].kill()
        new, rc, ru = wait_for(lambda: lso_on_leader(victim), 30, f"a new leader after {what}", interval=0.1)
        assert ru >= first + n, f"{what}: the new leader {new} has high watermark {ru}, lost the open transaction's records"
        assert rc == first, (f"{what}: the new leader {new} answers read_committed end {rc} with a "
                             f"transaction open at {first} (high watermark {ru}): it does not know the "
                             f"open transaction, read_committed consumers would see uncommitted records")
        got = read_all(cluster.agents[new].bootstrap, topic, 1, READ_COMMITTED)[0]
        assert [r.offset for r in got if r.offset >= first] == [], (
            f"{what}: read_committed from the new leader returned records of the open transaction: {got}")
        entries = [e for e in open_on(cluster.agents[new], topic) if e["partition"] == 0]
        assert len(entries) == 1 and entries[0]["first_offset"] == first and not entries[0]["hanging"], (
            f"{what}: /v1/transactions on the new leader {new}: open={entries}")
        cluster.agents[victim].start()
        return victim

    # 1: open, kill the leader, commit through the new one
    vals1 = [f"c-{i}".encode() for i in range(5)]
    open_txn(vals1)
    kill_leader_while_open(1, len(vals1), "killing the leader with a transaction open")
    p.commit_transaction(30)
    cluster.wait_healthy(topic, 1, 30, "the topic after the first failover")

    def stable():
        rc = end_offset(servers, topic, 0, READ_COMMITTED)
        ru = end_offset(servers, topic, 0, READ_UNCOMMITTED)
        return rc == ru, (rc, ru)
    wait_for(stable, 30, "the LSO to reach the high watermark after the commit", interval=0.1)
    assert values(read_all(servers, topic, 1, READ_COMMITTED)) == [b"plain-0"] + vals1

    # 2: open, kill the leader, abort
    first2 = end_offset(servers, topic, 0, READ_UNCOMMITTED)
    vals2 = [f"a-{i}".encode() for i in range(5)]
    open_txn(vals2)
    kill_leader_while_open(first2, len(vals2), "killing the leader with a second transaction open")
    p.abort_transaction(30)
    cluster.wait_healthy(topic, 1, 30, "the topic after the second failover")
    wait_for(stable, 30, "the LSO to reach the high watermark after the abort", interval=0.1)
    assert values(read_all(servers, topic, 1, READ_COMMITTED)) == [b"plain-0"] + vals1
    assert values(read_all(servers, topic, 1, READ_UNCOMMITTED)) == [b"plain-0"] + vals1 + vals2


if __name__ == "__main__" and sys.argv[1:2] == ["app"]:
    sys.exit(app_main(sys.argv[2:]))
