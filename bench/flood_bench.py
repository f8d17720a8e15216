#!/usr/bin/env python3
"""A flood of large produce requests from many clients against the agent's request-memory
bound (`queued_max_request_bytes`, Kafka's `queued.max.request.bytes`): how much memory
the agent takes, against the bound, and whether every acknowledged record is kept.

For each bound in `--bounds-mib` (a tight one and a large one, in one run, alternating for
`--rounds`), a fresh release agent (`--queued-max-request-bytes BOUND`, and
`max_request_bytes` from a settings file, since a bound below the default 100 MiB frame
limit is refused) takes `--producers` librdkafka producers (confluent-kafka, one client
and connection each, threads of this process) sending `--size` (1 MiB) values for
`--seconds` to a topic of `--partitions` partitions: idempotent, acks=all, linger 5 ms,
4 MiB batches, requests up to 8 MiB, up to 5 requests in flight per producer. That asks
the agent to hold far more request bytes at once than the tight bound allows.

While the flood runs, the agent's VmRSS (and RssAnon) is read from /proc every 50 ms by
a separate process; VmHWM, reset before the flood, catches peaks between samples.
Reported: the baseline RSS before the flood, the peak during it, peak minus baseline
against the bound, the RSS after the read-back, records/s and MB/s acknowledged,
delivery latency, and the ratios of the tight bound to the large one. Then every
partition is read back from the start: every acknowledged record must be at the
partition and offset its acknowledgement gave, with its producer's key and a value that
is a function of (producer, sequence number), once. Each agent's data (gigabytes) is
deleted after its flood; its log stays until the run passes.

    cargo build --release -p strata-agent --bin strata
    python3 bench/flood_bench.py [--seconds 10] [--producers 32] [--bounds-mib 64,1024]

The agent inherits the environment: `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536`
(recorded in the results) shows how much of its memory is the allocator's
(docs/BENCHMARKS.md). Exits 1 if an acknowledged record is lost, corrupted, duplicated or
out of order, a producer hit a fatal error, or an agent crashed (died during the run,
panicked, or did not exit 0 on SIGTERM). tests/clients/test_request_memory.py runs a
small flood through the same functions against the debug agent.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import REPO, Strata  # noqa: E402
from tls_bench import percentile  # noqa: E402

MiB = 1 << 20


def value_for(producer: int, seq: int, size: int) -> bytes:
    """The value producer `producer` sends as its record `seq`: its stamp, repeated."""
    stamp = struct.pack(">QQ", producer, seq)
    return (stamp * (size // len(stamp) + 1))[:size]


def key_for(producer: int, seq: int) -> bytes:
    return struct.pack(">II", producer, seq)


def proc_status_kib(pid: int, field: str) -> int | None:
    """A `kB` field of /proc/<pid>/status; None once the process is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    m = re.search(rf"^{field}:\s+(\d+) kB", status, re.M)
    return int(m.group(1)) if m else None


def sample_rss(pid: int, interval: float) -> None:
    """Prints `seconds VmRSS-KiB RssAnon-KiB` for `pid` every `interval` seconds, and
    `gone` once it has exited. Runs in a process of its own (RssSampler), so that the
    producers' threads, which hold this one's GIL, cannot slow the sampling down."""
    started = time.perf_counter()
    while True:
        rss, anon = proc_status_kib(pid, "VmRSS"), proc_status_kib(pid, "RssAnon")
        if rss is None:
            print("gone", flush=True)
            return
        print(f"{time.perf_counter() - started:.3f} {rss} {anon or 0}", flush=True)
        time.sleep(interval)


class RssSampler:
    """Samples a process's VmRSS and RssAnon every `interval` seconds, from a child
    process, between start() and stop()."""

    def __init__(self, pid: int, interval: float = 0.05):
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, int, int]] = []  # (seconds, VmRSS KiB, RssAnon KiB)
        self.vanished = False

    def start(self) -> "RssSampler":
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
                f"import flood_bench; flood_bench.sample_rss({self.pid}, {self.interval})")
        self.out = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=self.out, text=True)
        deadline = time.monotonic() + 10
        while os.fstat(self.out.fileno()).st_size == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # until the first sample is in
        return self

    def stop(self) -> "RssSampler":
        self.proc.terminate()
        self.proc.wait()
        self.out.seek(0)
        for line in self.out.read().splitlines():
            if line == "gone":
                self.vanished = True
            elif len(line.split()) == 3:  # (the last line may be cut by terminate())
                t, rss, anon = line.split()
                self.samples.append((float(t), int(rss), int(anon)))
        self.out.close()
        return self

    def peak_mib(self, column: int = 1) -> float:
        return max((s[column] for s in self.samples), default=0) / 1024


def producer_conf(bootstrap: str, batch_bytes: int, request_bytes: int) -> dict:
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "batch.size": batch_bytes, "message.max.bytes": request_bytes,
            "max.in.flight.requests.per.connection": 5,
            # Room for a few requests queued in each client, no more: the flood is the
            # requests, not the clients' queues.
            "queue.buffering.max.kbytes": 4 * request_bytes // 1024}


def flood(bootstrap: str, topic: str, producers: int, seconds: float, size: int,
          batch_bytes: int = 4 * MiB, request_bytes: int = 8 * MiB) -> dict:
    """`producers` clients, each on its own thread, send values of `size` bytes to `topic`
    as fast as they can for `seconds`, then wait for every acknowledgement. Returns what
    was acknowledged: per producer, (seq, partition, offset) of each record."""
    acked: list[list[tuple[int, int, int]]] = [[] for _ in range(producers)]
    failed: list[collections.Counter] = [collections.Counter() for _ in range(producers)]
    latencies: list[list[float]] = [[] for _ in range(producers)]
    sent = [0] * producers
    undelivered = [0] * producers
    fatal: list[str | None] = [None] * producers
    conf = producer_conf(bootstrap, batch_bytes, request_bytes)

    def run(i: int) -> None:
        def delivered(err, msg, seq: int, t: float) -> None:
            if err is None:
                acked[i].append((seq, msg.partition(), msg.offset()))
                latencies[i].append(time.perf_counter() - t)
            else:
                failed[i][err.name()] += 1

        p = Producer({**conf, "client.id": f"flood-{i}"})
        seq = 0
        try:
            while time.perf_counter() < deadline:
                value, t = value_for(i, seq, size), time.perf_counter()
                while True:
                    try:
                        p.produce(topic, value, key_for(i, seq),
                                  on_delivery=lambda err, msg, seq=seq, t=t: delivered(err, msg, seq, t))
                        break
                    except BufferError:
                        p.poll(0.005)
                seq += 1
                p.poll(0)
            undelivered[i] = p.flush(120)
        except KafkaException as e:  # a fatal error (idempotence broken): this client stops
            fatal[i] = str(e)
            undelivered[i] = len(p)
        sent[i] = seq

    started = time.perf_counter()
    deadline = started + seconds
    threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    all_latencies = sorted(x for per in latencies for x in per)
    records = sum(len(a) for a in acked)
    return {
        "acked": acked, "sent": sum(sent), "undelivered": sum(undelivered),
        "failed": dict(sum(failed, collections.Counter())), "records": records,
        "fatal": [f"producer {i}: {e}" for i, e in enumerate(fatal) if e],
        "seconds": elapsed, "records_per_s": records / elapsed,
        "mb_per_s": records * size / elapsed / 1e6,
        "p50_ms": percentile(all_latencies, 0.50) * 1000 if all_latencies else None,
        "p99_ms": percentile(all_latencies, 0.99) * 1000 if all_latencies else None,
        "max_ms": all_latencies[-1] * 1000 if all_latencies else None,
    }


def verify(bootstrap: str, topic: str, partitions: int, acked: list[list[tuple[int, int, int]]],
           size: int) -> dict:
    """Reads every partition of `topic` from its start and checks it against `acked`
    (per producer, (seq, partition, offset) of each acknowledged record)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{topic}",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    ends = {}
    for p in range(partitions):
        low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        if high > low:
            ends[p] = high
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    found: dict[tuple[int, int], tuple[int, int]] = {}  # (partition, offset) -> (producer, seq)
    seen: collections.Counter = collections.Counter()  # (producer, seq) -> copies
    corrupted: list[str] = []
    read_bytes = 0
    idle_since = time.monotonic()
    while ends and time.monotonic() - idle_since < 60:
        for m in c.consume(50, timeout=1):
            if m.error():
                raise RuntimeError(f"reading back {topic}: {m.error()}")
            idle_since = time.monotonic()
            producer, seq = struct.unpack(">II", m.key())
            value = m.value()
            read_bytes += len(value)
            if value != value_for(producer, seq, size):
                corrupted.append(f"{m.partition()}@{m.offset()} (producer {producer} seq {seq})")
            found[(m.partition(), m.offset())] = (producer, seq)
            seen[(producer, seq)] += 1
            if m.offset() + 1 >= ends.get(m.partition(), 0):
                ends.pop(m.partition(), None)
    c.close()
    if ends:
        raise RuntimeError(f"reading back {topic}: partitions {sorted(ends)} stalled short of their end")
    lost, out_of_order = [], 0
    for producer, records in enumerate(acked):
        last: dict[int, tuple[int, int]] = {}  # partition -> (offset, seq) of the last acked
        for seq, partition, offset in sorted(records, key=lambda r: (r[1], r[2])):
            if found.get((partition, offset)) != (producer, seq):
                lost.append(f"producer {producer} seq {seq} at {partition}@{offset}: "
                            f"the log has {found.get((partition, offset))}")
            prev = last.get(partition)
            if prev is not None and seq < prev[1]:
                out_of_order += 1
            last[partition] = (offset, seq)
    acked_keys = {(p, r[0]) for p, records in enumerate(acked) for r in records}
    return {
        "log_records": len(found), "read_bytes": read_bytes,
        "lost": len(lost), "lost_examples": lost[:10],
        "corrupted": len(corrupted), "corrupted_examples": corrupted[:10],
        "duplicated": sum(n - 1 for n in seen.values() if n > 1),
        "unacknowledged_in_log": sum(1 for k in seen if k not in acked_keys),
        "out_of_order": out_of_order,
    }


def run_one(binary: Path, root: Path, bound: int, opts: argparse.Namespace, tag: str) -> dict:
    settings = root / f"{tag}.toml"
    settings.write_text(f"max_request_bytes = {opts.max_request_mib * MiB}\n")
    strata = Strata(binary, root, ["--config", str(settings),
                                   "--queued-max-request-bytes", str(bound)], name=tag)
    result: dict = {"bound_mib": bound / MiB}
    try:
        topic = "flood"
        a = AdminClient({"bootstrap.servers": strata.bootstrap})
        a.create_topics([NewTopic(topic, opts.partitions, 1, config={
            "max.message.bytes": str(opts.request_mib * MiB)})])[topic].result(30)
        time.sleep(1)
        pid = strata.proc.pid
        result["baseline_rss_mib"] = proc_status_kib(pid, "VmRSS") / 1024
        result["baseline_anon_mib"] = proc_status_kib(pid, "RssAnon") / 1024
        strata.reset_peak_memory()
        sampler = RssSampler(pid)
        sampler.start()
        f = flood(strata.bootstrap, topic, opts.producers, opts.seconds, opts.size,
                  opts.batch_mib * MiB, opts.request_mib * MiB)
        sampler.stop()
        result["alive_after_flood"] = strata.proc.poll() is None and not sampler.vanished
        result["peak_rss_mib"] = sampler.peak_mib(1)
        result["peak_anon_mib"] = sampler.peak_mib(2)
        result["peak_hwm_mib"] = strata.peak_memory_mib() if result["alive_after_flood"] else None
        result["samples"] = len(sampler.samples)
        result["peak_over_baseline_mib"] = max(result["peak_rss_mib"], result["peak_hwm_mib"] or 0) \
            - result["baseline_rss_mib"]
        result["peak_over_baseline_per_bound"] = result["peak_over_baseline_mib"] / (bound / MiB)
        acked = f.pop("acked")
        result.update(f)
        if result["alive_after_flood"]:
            result.update(verify(strata.bootstrap, topic, opts.partitions, acked, opts.size))
            time.sleep(1)
            result["rss_after_mib"] = proc_status_kib(pid, "VmRSS") / 1024
    finally:
        if strata.proc.poll() is None:
            strata.stop()
        result["exit_code"] = strata.proc.returncode
        # Gigabytes per flood: the data goes, the log and settings stay.
        shutil.rmtree(root / tag, ignore_errors=True)
        try:
            result["panics"] = (root / f"{tag}.log").read_text(errors="replace").count("panicked at")
        except OSError as e:  # the directory went away: say so, do not hide what happened
            print(f"{tag}: cannot read the agent's log: {e}", file=sys.stderr)
    return result


def failures(r: dict) -> list[str]:
    out = []
    if not r["alive_after_flood"]:
        out.append("the agent died during the flood")
    if r["exit_code"] != 0:
        out.append(f"the agent exited with {r['exit_code']} on SIGTERM")
    if r.get("panics"):
        out.append(f"{r['panics']} panics in the agent's log")
    for k in ("lost", "corrupted", "duplicated", "out_of_order"):
        if r.get(k):
            out.append(f"{r[k]} {k} acknowledged records")
    out += [f"client fatal error: {e}" for e in r.get("fatal", [])]
    if r["records"] == 0:
        out.append("nothing was acknowledged")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--producers", type=int, default=32)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--size", type=int, default=MiB, help="value bytes")
    ap.add_argument("--batch-mib", type=int, default=4, help="the producers' batch.size")
    ap.add_argument("--request-mib", type=int, default=8,
                    help="the producers' message.max.bytes and the topic's max.message.bytes")
    ap.add_argument("--max-request-mib", type=int, default=16, help="the agent's max_request_bytes")
    ap.add_argument("--bounds-mib", default="64,1024",
                    help="queued_max_request_bytes for each agent: the tight one first")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--strata", type=Path, default=REPO / "target/release/strata")
    ap.add_argument("--out", type=Path, default=None)
    opts = ap.parse_args()
    bounds = [int(b) * MiB for b in opts.bounds_mib.split(",")]

    root = Path(tempfile.mkdtemp(prefix="strata-flood-bench-"))
    runs: dict[int, list[dict]] = {b: [] for b in bounds}
    for rnd in range(opts.rounds):
        for b in bounds:
            r = run_one(opts.strata, root, b, opts, f"strata-{b // MiB}m-{rnd}")
            runs[b].append(r)
            print(f"round {rnd + 1} bound {b // MiB:5} MiB: {r['records_per_s']:7,.0f} rec/s "
                  f"{r['mb_per_s']:7.1f} MB/s, RSS {r['baseline_rss_mib']:.0f} -> peak "
                  f"{r['peak_rss_mib']:.0f} MiB (HWM {r['peak_hwm_mib']}), acked {r['records']}, "
                  f"lost {r.get('lost')}, failed {r['failed']}", file=sys.stderr)

    keys = ["records_per_s", "mb_per_s", "p50_ms", "p99_ms", "baseline_rss_mib", "peak_rss_mib",
            "peak_hwm_mib", "peak_over_baseline_mib", "peak_over_baseline_per_bound", "rss_after_mib"]

    def median(b: int, k: str) -> float | None:
        values = [r[k] for r in runs[b] if r.get(k) is not None]
        return statistics.median(values) if values else None

    summary = {b: {k: median(b, k) for k in keys} for b in bounds}
    large = bounds[-1]
    print(f"\n{opts.producers} idempotent producers, {opts.size} B values, acks=all, "
          f"{opts.partitions} partitions, {opts.seconds:g} s; medians of {opts.rounds} round(s); "
          f"ratio to the {large // MiB} MiB bound in brackets; GLIBC_TUNABLES="
          f"{os.environ.get('GLIBC_TUNABLES') or '(unset)'}\n")
    print("| bound MiB | records/s | MB/s | p50 ms | p99 ms | RSS before MiB | peak RSS MiB "
          "| peak VmHWM MiB | peak − before MiB | of the bound | RSS after MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for b in bounds:
        cells = []
        for k in keys:
            v, base = summary[b][k], summary[large][k]
            if k == "peak_over_baseline_per_bound":  # already a ratio, to its own bound
                base = None
            cells.append("" if v is None else f"{v:,.2f} ({v / base:.2f})" if base else f"{v:,.2f}")
        print(f"| {b // MiB} | " + " | ".join(cells) + " |")
    bad = [f"bound {b // MiB} MiB round {i + 1}: {why}"
           for b in bounds for i, r in enumerate(runs[b]) for why in failures(r)]
    total = {k: sum(r.get(k) or 0 for rs in runs.values() for r in rs)
             for k in ("records", "log_records", "lost", "corrupted", "duplicated")}
    print(f"\nacknowledged {total['records']}, in the logs {total['log_records']}, lost "
          f"{total['lost']}, corrupted {total['corrupted']}, duplicated {total['duplicated']}")
    out = opts.out or REPO / "bench" / "results" / f"flood-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps({"options": {k: str(v) for k, v in vars(opts).items()},
                               # The agent inherits it; glibc's malloc settings move the figures.
                               "GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES"),
                               "runs": {str(b // MiB): rs for b, rs in runs.items()},
                               "summary": {str(b // MiB): s for b, s in summary.items()},
                               "failures": bad}, indent=2))
    print(f"results: {out}")
    if bad:
        print("FAILED:\n  " + "\n  ".join(bad) + f"\nthe agents' logs are in {root}", file=sys.stderr)
        sys.exit(1)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
