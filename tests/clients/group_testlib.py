"""Helpers for the consumer-group tests: group_consumer.py subprocesses and their event
files, a background producer that records every acknowledged record, and the checks
that every acknowledged record was processed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from strata_testlib import producer_conf, wait_until

HERE = Path(__file__).resolve().parent
CONSUMER_SCRIPT = HERE / "group_consumer.py"


class GroupConsumerProc:
    """A group_consumer.py process and the JSON-lines file it writes."""

    def __init__(self, bootstrap: str, topic: str, group: str, workdir: Path, name: str,
                 instance_id: str | None = None, session_timeout_ms: int = 6000,
                 heartbeat_interval_ms: int = 500, strategy: str = "range,roundrobin",
                 extra: list[str] | None = None):
        self.name = name
        self.out = workdir / f"{name}.jsonl"
        self.stderr_path = workdir / f"{name}.stderr"
        self.cmd = [sys.executable, str(CONSUMER_SCRIPT), "--bootstrap", bootstrap,
                    "--topic", topic, "--group", group, "--out", str(self.out), "--name", name,
                    "--session-timeout-ms", str(session_timeout_ms),
                    "--heartbeat-interval-ms", str(heartbeat_interval_ms),
                    "--strategy", strategy, *(extra or [])]
        if instance_id:
            self.cmd += ["--instance-id", instance_id]
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None
        self._lines_cache: list[dict] = []
        self._read_pos = 0
        self._partial = b""

    # ------------------------------------------------------------------ process
    def start(self) -> "GroupConsumerProc":
        """Start (again); a restarted consumer appends to the same events file."""
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} already running"
        self.started_at = time.monotonic()
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(self.cmd, cwd=HERE, stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err, start_new_session=True)
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM: the script closes the consumer cleanly (LeaveGroup for a dynamic
        member). Asserts exit code 0."""
        assert self.running(), f"{self.name} is not running (rc={self.proc and self.proc.poll()})"
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.name} did not exit within {timeout}s of SIGTERM\n"
                                 f"{self.diagnostics()}")
        assert rc == 0, f"{self.name} exited with {rc}\n{self.diagnostics()}"
        return rc

    def kill(self) -> None:
        """SIGKILL: no close, no LeaveGroup, no last commit."""
        if self.running():
            self.proc.kill()
            self.proc.wait(timeout=30)

    def cleanup(self) -> None:
        if self.running():
            self.proc.kill()
            self.proc.wait(timeout=30)

    # ------------------------------------------------------------------ events
    def events(self) -> list[dict]:
        """Every complete line written so far (incrementally read; a torn last line of a
        killed process is ignored until completed, i.e. forever)."""
        try:
            with open(self.out, "rb") as f:
                f.seek(self._read_pos)
                data = f.read()
        except FileNotFoundError:
            return self._lines_cache
        self._read_pos += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        for line in lines:
            if line.strip():
                self._lines_cache.append(json.loads(line))
        return self._lines_cache

    def of(self, *kinds: str, since: float | None = None) -> list[dict]:
        return [e for e in self.events() if e["ev"] in kinds and (since is None or e["t"] >= since)]

    def assignment(self) -> set[int] | None:
        """Partitions owned per the latest rebalance event (None: never assigned).
        A restart starts from nothing: the latest "start" line resets it."""
        cur = None
        for e in self.events():
            if e["ev"] == "start":
                cur = None
            elif e["ev"] in ("assign", "revoke", "lost"):
                cur = set(e["assignment"])
        if cur is not None and not self.running():
            return None
        return cur

    def records(self) -> list[tuple[int, int, str]]:
        return [(e["p"], e["o"], e["v"]) for e in self.of("rec")]

    def errors(self) -> list[dict]:
        return self.of("error")

    def diagnostics(self, n: int = 15) -> str:
        ev = self.events()
        interesting = [e for e in ev if e["ev"] not in ("rec", "stats", "commit")]
        try:
            err = self.stderr_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            err = ""
        rc = self.proc.poll() if self.proc else None
        return (f"--- {self.name} (rc={rc}, {len(ev)} events, "
                f"{sum(1 for e in ev if e['ev'] == 'rec')} records) last non-record events:\n"
                + "\n".join(json.dumps(e) for e in interesting[-n:])
                + (f"\n--- {self.name} stderr:\n{err}" if err.strip() else ""))


def diagnostics(consumers) -> str:
    return "\n".join(c.diagnostics() for c in consumers)


def assignments(consumers) -> dict[str, set[int] | None]:
    return {c.name: c.assignment() for c in consumers}


def balanced(consumers, partitions: int):
    """Truthy iff every given consumer owns at least one partition, no partition is
    owned twice and together they own all `partitions`. Returns the assignment."""
    a = assignments(consumers)
    if any(not s for s in a.values()):
        return None
    total = sum(len(s) for s in a.values())
    union = set().union(*a.values())
    if total != partitions or union != set(range(partitions)):
        return None
    return a


def wait_balanced(consumers, partitions: int, timeout: float, what: str):
    try:
        return wait_until(lambda: balanced(consumers, partitions), timeout, what, interval=0.1)
    except AssertionError as e:
        raise AssertionError(f"{e}\nassignments now: {assignments(consumers)}\n"
                             f"{diagnostics(consumers)}") from None


def assert_consumers_healthy(consumers) -> None:
    """No consumer reported a fatal error or died on its own."""
    for c in consumers:
        fatal = [e for e in c.errors() if e.get("fatal")]
        assert not fatal, f"{c.name} reported fatal errors: {fatal}\n{c.diagnostics()}"


# --------------------------------------------------------------------------- producing
class BackgroundProducer:
    """Produces values f"{tag}-{seq:07d}" round-robin to explicit partitions at about
    `rate` records/s until stopped; keeps every acknowledged (partition, offset, value)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, tag: str, rate: float = 300,
                 **conf):
        self.topic, self.partitions, self.tag, self.rate = topic, partitions, tag, rate
        self.producer = Producer(producer_conf(bootstrap, "none", **conf))
        self.lock = threading.Lock()
        self.acked: list[tuple[int, int, str]] = []
        self.failed: list[tuple[str, str]] = []
        self.sent = 0
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"producer-{tag}", daemon=True)

    def _cb(self, err, msg):
        with self.lock:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value().decode()))
            else:
                self.failed.append((msg.value().decode(), str(err)))

    def _run(self):
        try:
            t0 = time.monotonic()
            seq = 0
            while not self._stop.is_set():
                # pace to `rate` (this paces the load, it waits for no condition)
                ahead = seq / self.rate - (time.monotonic() - t0)
                if ahead > 0:
                    self.producer.poll(min(ahead, 0.05))
                    continue
                value = f"{self.tag}-{seq:07d}"
                try:
                    self.producer.produce(self.topic, value=value.encode(), key=value[-3:].encode(),
                                          partition=seq % self.partitions, on_delivery=self._cb)
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                seq += 1
                self.sent = seq
                self.producer.poll(0)
        except BaseException as e:  # surfaced by stop()
            self.error = e

    def start(self) -> "BackgroundProducer":
        self.thread.start()
        return self

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_acked(self, n: int, timeout: float) -> None:
        wait_until(lambda: self.acked_count() >= n or self.error, timeout,
                   f"{n} acknowledged records from the background producer")
        assert self.error is None, f"producer thread failed: {self.error!r}"

    def stop(self, timeout: float = 30) -> list[tuple[int, int, str]]:
        self._stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "producer thread did not stop"
        assert self.error is None, f"producer thread failed: {self.error!r}"
        remaining = self.producer.flush(timeout)
        assert remaining == 0, f"{remaining} records not delivered within {timeout}s"
        assert not self.failed, f"{len(self.failed)} deliveries failed, e.g. {self.failed[:3]}"
        with self.lock:
            return list(self.acked)


def produce_values(bootstrap: str, topic: str, partitions: int, tag: str, n: int,
                   start: int = 0) -> list[tuple[int, int, str]]:
    """Produce n values f"{tag}-{seq:07d}" round-robin to explicit partitions, flush,
    return the acknowledged (partition, offset, value)."""
    p = Producer(producer_conf(bootstrap, "none", **{"linger.ms": 5}))
    acked, failed = [], []

    def cb(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value().decode()))
        else:
            failed.append(str(err))

    for seq in range(start, start + n):
        value = f"{tag}-{seq:07d}"
        while True:
            try:
                p.produce(topic, value=value.encode(), key=value[-3:].encode(),
                          partition=seq % partitions, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
    remaining = p.flush(30)
    assert remaining == 0 and not failed, f"produce failed: remaining={remaining} errors={failed[:3]}"
    assert len(acked) == n
    return acked


# --------------------------------------------------------------------------- checks
@dataclass
class Coverage:
    processed_twice: int
    never_processed: list[tuple[int, int, str]]
    wrong_value: list[tuple[int, int, str, str]]
    unknown: list[tuple[int, int, str]]


def coverage(acked: list[tuple[int, int, str]], consumers) -> Coverage:
    """Compare what the consumers processed with what was acknowledged."""
    want = {(p, o): v for p, o, v in acked}
    count: dict[tuple[int, int], int] = {}
    wrong, unknown = [], []
    for c in consumers:
        for p, o, v in c.records():
            count[(p, o)] = count.get((p, o), 0) + 1
            if (p, o) not in want:
                unknown.append((p, o, v))
            elif want[(p, o)] != v:
                wrong.append((p, o, v, want[(p, o)]))
    never = sorted((p, o, v) for (p, o), v in want.items() if (p, o) not in count)
    twice = sum(1 for k, n in count.items() if n > 1 and k in want)
    return Coverage(twice, never, wrong, unknown)


def wait_all_processed(acked, consumers, timeout: float) -> Coverage:
    want = {(p, o) for p, o, _ in acked}

    def done():
        seen = set()
        for c in consumers:
            seen.update((p, o) for p, o, _ in c.records())
        return want <= seen

    try:
        wait_until(done, timeout, f"all {len(want)} acknowledged records processed", interval=0.2)
    except AssertionError as e:
        cov = coverage(acked, consumers)
        raise AssertionError(
            f"{e}\nnever processed: {len(cov.never_processed)}, e.g. {cov.never_processed[:10]}\n"
            f"assignments now: {assignments(consumers)}\n{diagnostics(consumers)}") from None
    return coverage(acked, consumers)


def assert_coverage(cov: Coverage) -> None:
    assert not cov.wrong_value, f"records with a value other than acknowledged: {cov.wrong_value[:5]}"
    assert not cov.unknown, f"records processed at offsets never acknowledged: {cov.unknown[:5]}"
    assert not cov.never_processed, (
        f"{len(cov.never_processed)} acknowledged records never processed, e.g. {cov.never_processed[:10]}")


def end_offsets(acked) -> dict[int, int]:
    out: dict[int, int] = {}
    for p, o, _ in acked:
        out[p] = max(out.get(p, 0), o + 1)
    return out


def kafka_error_code(exc) -> int | None:
    """The KafkaError code inside a KafkaException (or a KafkaError), else None."""
    err = exc.args[0] if getattr(exc, "args", None) else exc
    return err.code() if isinstance(err, KafkaError) else None


# --------------------------------------------------------------------------- admin
def committed_offsets(a: AdminClient, group: str, timeout: float = 15) -> dict[tuple[str, int], int]:
    """OffsetFetch of every committed offset of the group (AdminClient
    list_consumer_group_offsets without partitions): {(topic, partition): offset};
    partitions without a committed offset are left out."""
    fut = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                        request_timeout=timeout)[group]
    res = fut.result(timeout=timeout + 5)
    out = {}
    for tp in res.topic_partitions or []:
        assert tp.error is None, f"OffsetFetch error for {tp.topic}[{tp.partition}]: {tp.error}"
        if tp.offset >= 0:
            out[(tp.topic, tp.partition)] = tp.offset
    return out


def topic_offsets(a: AdminClient, group: str, topic: str) -> dict[int, int]:
    return {p: o for (t, p), o in committed_offsets(a, group).items() if t == topic}


def wait_committed(a: AdminClient, group: str, topic: str, want: dict[int, int], timeout: float):
    """Poll OffsetFetch until the group's committed offsets of `topic` are exactly `want`."""
    last = {}

    def ok():
        nonlocal last
        last = topic_offsets(a, group, topic)
        return last == want
    try:
        wait_until(ok, timeout, f"committed offsets of {group} == {want}", interval=0.25)
    except AssertionError as e:
        raise AssertionError(f"{e}; last committed: {last}") from None


def describe_group(a: AdminClient, group: str, timeout: float = 15):
    return a.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout=timeout + 5)


def list_groups(a: AdminClient, timeout: float = 15, **kw) -> dict[str, object]:
    res = a.list_consumer_groups(request_timeout=timeout, **kw).result(timeout=timeout + 5)
    assert not res.errors, f"ListGroups errors: {res.errors}"
    return {g.group_id: g for g in res.valid}
