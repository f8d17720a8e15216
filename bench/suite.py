#!/usr/bin/env python3
"""Runs the whole benchmark suite against a fresh single-node strata and writes the
results as JSON (and a Markdown table to stdout).

    cargo build --release -p strata-agent -p strata-bench --bin strata --bin strata-bench
    python3 bench/suite.py                   # the full matrix, ~20 min
    python3 bench/suite.py --quick           # a smoke run: tiny counts, a minute
    python3 bench/suite.py --against kafka   # strata beside Apache Kafka 4.4 (~10 min)
    python3 bench/suite.py --http            # HTTP produce beside Kafka produce (~1 min)
    python3 bench/suite.py --transactions    # transactions/s beside Kafka 4.4 (~5 min)
    python3 bench/suite.py --against kafka --replicas 3   # three agents, three brokers, RF=3

What it measures, in one run so the figures can be compared:
  * references: the disk's sequential write speed with fdatasync and its synchronous
    4 KiB write rate (dd, in strata's data directory), and loopback TCP bandwidth (iperf3);
  * for 1 and 8 partitions x 100 B and 1 KiB values x acks=1 and acks=all x no
    compression and lz4: produce at full speed; consume that topic from the start;
    produce at a fixed 50% of the full-speed rate (latency under load); end-to-end at the
    same 50% rate (send to receipt);
  * the broker's peak resident memory during each run (VmHWM, reset before each run).

With `--against kafka` the same load generator runs a smaller matrix (1 and 8 partitions,
100 B and 1 KiB, acks=all, no compression) in one run against three brokers on the same
machine and disk, one after the other: strata as it ships (acks=all answered after
fsync), strata with `--ack-durability page-cache` (answered from the page cache, as
Kafka's defaults do), and Apache Kafka 4.4.0 in KRaft combined mode (one process, jars
from Maven Central through bench/kafka/pom.xml, its default flush settings: no fsync
before an ack, `log.flush.interval.messages` and `log.flush.interval.ms` unset, 1 GiB
heap). Besides throughput and latency it records each broker's CPU seconds per GB
produced and its peak RSS, and prints the ratios strata / Kafka.

With `--replicas 3` (and `--against kafka`) each broker is a cluster on this machine:
three strata agents sharing an embedded metastore (and a `file://` archive), three Kafka
KRaft processes each broker and controller; every topic has replication factor 3, CPU
and peak memory are summed over the three processes, and the latency curve is skipped.

With `--http` it measures produce through the HTTP API (`strata-bench produce-http`: 4
clients, 100 base64 values of 1 KiB per request, acks=all, 1 partition) beside Kafka
produce of the same records on the same agent, alternately, twice, and prints the
ratios; each run's topic is deleted before the next starts, so neither runs while the
archive catches up with the other's data. `--quick` runs one small round of it too.

With `--transactions` it measures transactional produce on strata as it ships and on
Apache Kafka in the same run: 1 and 8 librdkafka producers, each with a transactional id
of its own, committing every record (and every 10 records), 8 partitions, 100-byte values,
acks=all; it prints transactions per second, the commit latency and the ratios strata /
Kafka (the median of `--rounds` rounds).

Every run reads back what it sent; a run that lost or corrupted a record fails the suite.
Needs dd (coreutils) and iperf3 (`apt-get install iperf3`); Linux only (/proc); Java 17
and Maven for `--against kafka`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine() -> dict:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(),
    }


def dd_write(directory: Path, quick: bool) -> dict:
    """Sequential write with one fdatasync at the end, and synchronous 4 KiB writes."""
    target = directory / "dd.bench"
    mib = 64 if quick else 1024
    out = subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mib}", "conv=fdatasync"],
        capture_output=True, text=True, check=True).stderr
    seconds = float(re.search(r"([\d.]+) s,", out).group(1))
    sequential = mib * 2**20 / seconds / 1e6
    count = 200 if quick else 2000
    out = subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=4k", f"count={count}", "oflag=dsync"],
        capture_output=True, text=True, check=True).stderr
    seconds = float(re.search(r"([\d.]+) s,", out).group(1))
    target.unlink()
    return {
        "sequential_write_fdatasync_mb_per_s": round(sequential, 1),
        "sync_4k_writes_per_s": round(count / seconds, 1),
        "sync_4k_write_ms": round(seconds / count * 1000, 3),
    }


def loopback(quick: bool) -> dict:
    if not shutil.which("iperf3"):
        return {"error": "iperf3 not installed (apt-get install iperf3)"}
    port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "2" if quick else "5", "-J"]
        for _ in range(50):
            run = subprocess.run(client, capture_output=True, text=True)
            try:
                bps = json.loads(run.stdout)["end"]["sum_received"]["bits_per_second"]
                return {"tcp_mb_per_s": round(bps / 8 / 1e6, 1)}
            except (ValueError, KeyError):
                time.sleep(0.1)  # the server is not listening yet, or was busy
        return {"error": f"iperf3 failed: {run.stdout[-500:]}"}
    finally:
        server.kill()
        server.wait()


class Broker:
    """A broker process under measurement: its peak RSS can be reset between runs, and
    its CPU time read."""

    proc: subprocess.Popen
    kafka: int
    name: str

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka}"

    def cpu_seconds(self) -> float:
        # utime and stime, fields 14 and 15 of /proc/<pid>/stat, in clock ticks.
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def reset_peak_memory(self) -> None:
        # Writing 5 to clear_refs resets VmHWM (Linux >= 4.0); needs to own the process.
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    def peak_memory_mib(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return round(int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) / 1024, 1)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Strata(Broker):
    """A release strata on free ports. With `cluster` (its directory), one agent of a
    cluster: its node id, the cluster's shared embedded metastore and `file://` archive."""

    def __init__(self, binary: Path, root: Path, extra: list[str] | None = None,
                 name: str = "strata", tiering: bool = False,
                 cluster: tuple[Path, int] | None = None, wait: bool = True):
        self.root, self.name = root, name
        self.kafka = free_port()
        self.http = free_port()
        self.log = open(root / f"{name}.log", "w")
        members = []
        if cluster is not None:
            home, node = cluster
            members = ["--node-id", str(node),
                       "--metastore-path", str(home / "metastore.sqlite"),
                       "--archive-url", f"file://{home / 'archive'}"]
        self.proc = subprocess.Popen(
            [str(binary), "agent", "--data-dir", str(root / name),
             "--kafka-listen", f"127.0.0.1:{self.kafka}",
             "--http-listen", f"127.0.0.1:{self.http}",
             # Tiering would compete for the two cores and is measured on its own
             # (docs/BENCHMARKS.md, replay; bench/catchup_bench.py).
             "--tiering-enabled", "true" if tiering else "false", *members, *(extra or [])],
            stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()

    def wait_ready(self) -> Strata:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.http}/readyz", timeout=1)
                return self
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise SystemExit(f"strata did not start; see {self.root / f'{self.name}.log'}")
                time.sleep(0.1)


class Cluster(Broker):
    """Brokers measured as one: clients bootstrap from all of them, and CPU and peak
    memory are the sums over the members (the peaks may fall at different moments, so
    the memory is an upper bound)."""

    def __init__(self, name: str, members: list[Broker]):
        self.name, self.members = name, members

    @property
    def bootstrap(self) -> str:
        return ",".join(m.bootstrap for m in self.members)

    def cpu_seconds(self) -> float:
        return sum(m.cpu_seconds() for m in self.members)

    def reset_peak_memory(self) -> None:
        for m in self.members:
            m.reset_peak_memory()

    def peak_memory_mib(self) -> float:
        return round(sum(m.peak_memory_mib() for m in self.members), 1)

    def stop(self) -> None:
        for m in self.members:
            m.stop()

    @staticmethod
    def started(name: str, members: list) -> Cluster:
        """Once every member is ready; if one is not, none is left running."""
        try:
            return Cluster(name, [m.wait_ready() for m in members])
        except BaseException:
            for m in members:
                m.stop()
            raise


def strata_broker(opts, root: Path, name: str, extra: list[str]) -> Broker:
    """strata as `--against kafka` measures it: one agent, or `--replicas` agents
    sharing a metastore and an archive."""
    if opts.replicas == 1:
        return Strata(opts.strata, root, name=name, tiering=opts.tiering, extra=extra)
    home = root / name
    home.mkdir()
    members = [Strata(opts.strata, home, name=f"agent-{node}", tiering=opts.tiering,
                      extra=extra, cluster=(home, node), wait=False)
               for node in range(1, opts.replicas + 1)]
    return Cluster.started(name, members)


def kafka_broker(opts, root: Path) -> Broker:
    """Apache Kafka: one KRaft process, or `--replicas` of them, each broker and
    controller (a quorum of all)."""
    if opts.replicas == 1:
        return Kafka(root)
    nodes = range(1, opts.replicas + 1)
    controllers = {node: free_port() for node in nodes}
    voters = ",".join(f"{node}@127.0.0.1:{port}" for node, port in controllers.items())
    members = [Kafka(root, node=node, controller=controllers[node], voters=voters,
                     replicas=opts.replicas, wait=False) for node in nodes]
    return Cluster.started("kafka", members)


KAFKA_POM = REPO / "bench" / "kafka" / "pom.xml"
KAFKA_JARS = REPO / "bench" / "kafka" / "target" / "dependency"


class Kafka(Broker):
    """Apache Kafka (bench/kafka/pom.xml's version) as one KRaft process, broker and
    controller, with its default flush settings, data on the same disk as strata's; with
    `replicas`, node `node` of that many such processes, `voters` the quorum."""

    def __init__(self, root: Path, node: int = 1, controller: int | None = None,
                 voters: str | None = None, replicas: int = 1, wait: bool = True):
        self.name = "kafka" if replicas == 1 else f"kafka-{node}"
        if not any(KAFKA_JARS.glob("kafka_2.13-*.jar")):
            subprocess.run(["mvn", "-B", "-ntp", "-q", "-f", str(KAFKA_POM),
                            "dependency:copy-dependencies"], check=True)
        self.root = root
        self.kafka, controller = free_port(), controller or free_port()
        home = root / self.name
        home.mkdir()
        props = home / "server.properties"
        # One broker holds its internal topics on itself; more use Kafka's defaults
        # (replication factor 3, transactions' min ISR 2).
        internal = (["offsets.topic.replication.factor=1",
                     "transaction.state.log.replication.factor=1",
                     "transaction.state.log.min.isr=1"] if replicas == 1 else [])
        props.write_text("\n".join([
            "process.roles=broker,controller",
            f"node.id={node}",
            f"controller.quorum.voters={voters or f'{node}@127.0.0.1:{controller}'}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.kafka},CONTROLLER://127.0.0.1:{controller}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.kafka}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={home / 'data'}",
            "num.partitions=1",
            *internal,
            "group.initial.rebalance.delay.ms=0",
            # Kafka's defaults, stated: no fsync before an ack (the OS writes back).
            "# log.flush.interval.messages and log.flush.interval.ms: unset",
            "",
        ]))
        log4j = home / "log4j2.properties"
        log4j.write_text("rootLogger.level=WARN\nrootLogger.appenderRef.stdout.ref=STDOUT\n"
                         "appender.stdout.type=Console\nappender.stdout.name=STDOUT\n"
                         "appender.stdout.layout.type=PatternLayout\n"
                         "appender.stdout.layout.pattern=[%d] %p %m (%c)%n\n")
        classpath = f"{KAFKA_JARS}/*"
        java = ["java", "-Xms1g", "-Xmx1g", "-XX:+UseG1GC",
                f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
        subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t",
                        "q1Sh-9_ISia_zwGINzRvyQ", "-c", str(props)],
                       check=True, capture_output=True)
        self.log = open(root / f"{self.name}.log", "w")
        self.proc = subprocess.Popen([*java, "kafka.Kafka", str(props)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()

    def wait_ready(self) -> Kafka:
        deadline = time.time() + 90
        from confluent_kafka.admin import AdminClient
        while True:
            try:
                AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
                return self
            except Exception:  # noqa: BLE001 - not up yet
                if self.proc.poll() is not None or time.time() > deadline:
                    raise SystemExit(f"Kafka did not start; see {self.root / f'{self.name}.log'}")
                time.sleep(0.5)


def bench(binary: Path, strata: Broker, args: list[str], work: Path) -> dict:
    out = work / "run.json"
    strata.reset_peak_memory()
    cpu_before = strata.cpu_seconds()
    cmd = [str(binary), "--bootstrap", strata.bootstrap, "--json", str(out), *args]
    print("$", " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not out.exists():
        sys.stdout.write(proc.stdout + proc.stderr)
        raise SystemExit(f"strata-bench failed (exit {proc.returncode}): {' '.join(args)}")
    report = json.loads(out.read_text())
    report["broker_peak_rss_mib"] = strata.peak_memory_mib()
    report["broker_cpu_s"] = round(strata.cpu_seconds() - cpu_before, 2)
    return report


def delete_topics(strata: Broker, topics: list[str]) -> None:
    """Frees the disk between configurations (the full matrix writes tens of GB)."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": strata.bootstrap})
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        future.result()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: one small configuration")
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each produce run")
    ap.add_argument("--strata", type=Path, default=REPO / "target/release/strata")
    ap.add_argument("--bench", type=Path, default=REPO / "target/release/strata-bench")
    ap.add_argument("--dir", type=Path, default=None,
                    help="where strata keeps its data (default: a temp dir); dd measures this disk")
    ap.add_argument("--out", type=Path, default=None, help="JSON results (default bench/results/<time>.json)")
    ap.add_argument("--against", choices=["kafka"], default=None,
                    help="also run Apache Kafka (and strata with page-cache acks) in the same run")
    ap.add_argument("--before", type=Path, default=None,
                    help="a strata binary built from an earlier commit: run the before/after "
                         "matrix (8 partitions, 1 KiB and 100 B, acks=all) on it and on --strata, "
                         "alternately, and print the ratios")
    ap.add_argument("--http", action="store_true",
                    help="HTTP produce beside Kafka produce (1 KiB, acks=all) on one strata")
    ap.add_argument("--http-producers", type=int, default=4,
                    help="with --http: concurrent HTTP producers (each one request in flight)")
    ap.add_argument("--curve-seconds", type=float, default=5.0,
                    help="with --against kafka: the length of each latency-curve step")
    ap.add_argument("--only", action="append", default=[], metavar="PxS",
                    help="with --against kafka: only these rows (partitions x size, e.g. 8x100); "
                         "repeatable")
    ap.add_argument("--replicas", type=int, default=1, metavar="N",
                    help="with --against kafka: N agents and N Kafka brokers (each broker and "
                         "controller), topics with replication factor N")
    ap.add_argument("--tiering", action="store_true",
                    help="with --against kafka: strata with tiering on (a file:// archive)")
    ap.add_argument("--transactions", action="store_true",
                    help="transactions per second, strata beside Apache Kafka, 1 and 8 producers")
    ap.add_argument("--rounds", type=int, default=2,
                    help="with --before, --http or --transactions: how many rounds")
    opts = ap.parse_args()
    for b in (opts.strata, opts.bench):
        if not b.exists():
            raise SystemExit(f"{b} is missing: cargo build --release -p strata-agent -p strata-bench --bin strata --bin strata-bench")

    root = Path(tempfile.mkdtemp(prefix="strata-suite-", dir=opts.dir))
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results: dict = {"started": started, "machine": machine(), "references": {}, "runs": []}
    print(f"machine: {results['machine']}", flush=True)
    results["references"]["disk"] = dd_write(root, opts.quick)
    results["references"]["loopback"] = loopback(opts.quick)
    print(f"references: {results['references']}", flush=True)

    if opts.before is not None:
        before_and_after(opts, root, results, started)
        return
    if opts.against == "kafka":
        matrix = [(p, size, "all", "none") for p in (1, 8) for size in (100, 1024)]
        if opts.only:
            matrix = [m for m in matrix if f"{m[0]}x{m[1]}" in opts.only]
        if opts.quick:
            matrix = matrix[:1]
        count_args = (["--records", "20000"] if opts.quick
                      else ["--duration-s", str(opts.seconds)])
        results["brokers"] = ["strata", "strata-page-cache", "kafka"]
        # Kafka first: its full-speed rates are the absolute rates every broker is
        # measured at (50% for the latency rows, and the curve's steps).
        reference: dict = {}
        results["replicas"] = opts.replicas
        topic_args = ["--replication-factor", str(opts.replicas)]
        for name in ["kafka", "strata", "strata-page-cache"]:
            broker = (kafka_broker(opts, root) if name == "kafka" else
                      strata_broker(opts, root, name,
                                    ["--ack-durability", "page-cache"] if name != "strata" else []))
            try:
                # A JVM needs a while to compile its hot paths: every broker gets the same
                # unrecorded warm-up before it is measured.
                warm = bench(opts.bench, broker, ["produce", "--partitions", "8", "--size", "1024",
                                                  "--acks", "all", *topic_args, "--duration-s",
                                                  "2" if opts.quick else "10"], root)
                delete_topics(broker, [warm["topic"]])
                # The curve is for one broker; a cluster gets the 50% rows.
                run_matrix(opts, broker, matrix, count_args, root, results, reference,
                           curve=not opts.quick and opts.replicas == 1, topic_args=topic_args)
            finally:
                broker.stop()
        finish(opts, results, started, root)
        print_comparison(results)
        print_curve(results)
        return
    if opts.transactions:
        transactions(opts, root, results)
        finish(opts, results, started, root)
        print_transactions(results)
        return
    if opts.http:
        strata = Strata(opts.strata, root)
        try:
            http_produce(opts, strata, root, results)
        finally:
            strata.stop()
        finish(opts, results, started, root)
        print_http(results)
        return
    if opts.quick:
        matrix = [(1, 100, "all", "none")]
        count_args = ["--records", "20000"]
    else:
        matrix = [(p, size, acks, comp)
                  for p in (1, 8) for size in (100, 1024)
                  for acks in ("1", "all") for comp in ("none", "lz4")]
        count_args = ["--duration-s", str(opts.seconds)]

    strata = Strata(opts.strata, root)
    try:
        run_matrix(opts, strata, matrix, count_args, root, results)
        if opts.quick:
            http_produce(opts, strata, root, results)
    finally:
        strata.stop()
    finish(opts, results, started, root)
    if opts.quick:
        print_http(results)


CURVE = (0.1, 0.3, 0.5, 0.7, 0.9)


def run_matrix(opts, broker: Broker, matrix, count_args: list[str], root: Path,
               results: dict, reference: dict | None = None, curve: bool = False,
               topic_args: list[str] | None = None) -> None:
    """Each configuration: full speed, consume, produce and end-to-end at 50% of a rate.
    With `reference` (filled by the first broker, read by the next ones), that rate is
    the first broker's full speed, so every broker is measured at the same absolute
    rates; with `curve`, produce also runs at each step of CURVE of it."""
    for partitions, size, acks, compression in matrix:
        common = ["--partitions", str(partitions), "--size", str(size),
                  "--acks", acks, "--compression", compression, *(topic_args or [])]
        config = {"partitions": partitions, "size": size, "acks": acks, "compression": compression}
        full = bench(opts.bench, broker, ["produce", *common, *count_args], root)
        consume = bench(opts.bench, broker, ["consume", "--topic", full["topic"]], root)
        if reference is not None:
            reference.setdefault((partitions, size, acks, compression), full["records_per_s"])
            top = reference[(partitions, size, acks, compression)]
        else:
            top = full["records_per_s"]
        length = (["--records", "10000"] if opts.quick
                  else ["--duration-s", str(opts.seconds)])
        rate_args = ["--rate", str(max(1, int(top * 0.5)))] + length
        half = bench(opts.bench, broker, ["produce", *common, *rate_args], root)
        e2e = bench(opts.bench, broker, ["e2e", *common, *rate_args], root)
        runs = [("produce", full), ("consume", consume), ("produce@50%", half), ("e2e@50%", e2e)]
        for fraction in CURVE if curve else ():
            step = bench(opts.bench, broker, [
                "produce", *common, "--rate", str(max(1, int(top * fraction))),
                "--duration-s", str(opts.curve_seconds), "--no-verify"], root)
            step["fraction"] = fraction
            runs.append((f"curve@{round(fraction * 100)}%", step))
        for kind, report in runs:
            results["runs"].append({"broker": broker.name, "config": config, "kind": kind, **report})
        delete_topics(broker, sorted({r["topic"] for _, r in runs}))


HTTP_CONFIG = {"partitions": 1, "size": 1024, "acks": "all", "compression": "none"}


def http_produce(opts, strata: Strata, root: Path, results: dict) -> None:
    """Kafka produce and HTTP produce of 1 KiB records, alternately, on one agent."""
    common = ["--partitions", "1", "--size", "1024", "--acks", "all"]
    count = ["--records", "2000"] if opts.quick else ["--duration-s", str(opts.seconds)]
    # Each run's topic is deleted before the next run starts, so neither runs while the
    # archive still catches up with the other's gigabytes (the HTTP runs always did).
    for _ in range(1 if opts.quick else opts.rounds):
        kafka = bench(opts.bench, strata, ["produce", *common, *count], root)
        delete_topics(strata, [kafka["topic"]])
        http = bench(opts.bench, strata, ["produce-http", "--http", f"127.0.0.1:{strata.http}",
                                          "--producers", str(opts.http_producers), "--batch", "100",
                                          *common, *count], root)
        delete_topics(strata, [http["topic"]])
        for kind, report in (("produce", kafka), ("produce-http", http)):
            config = {**HTTP_CONFIG, "http_producers": opts.http_producers}
            results["runs"].append({"broker": strata.name, "config": config, "kind": kind,
                                    "suite": "http", **report})


TXN_RUNS = [(producers, records) for producers in (1, 8) for records in (1, 10)]


def transactions(opts, root: Path, results: dict) -> None:
    """Transactional produce on strata and on Kafka, each broker fresh, the same runs."""
    seconds = "3" if opts.quick else str(opts.seconds)
    rounds = 1 if opts.quick else opts.rounds
    results["brokers"] = ["strata", "kafka"]
    for name in results["brokers"]:
        broker = Kafka(root) if name == "kafka" else Strata(opts.strata, root)
        try:
            # The same unrecorded warm-up for both (a JVM compiles its hot paths).
            warm = bench(opts.bench, broker, ["produce", "--partitions", "8", "--size", "100",
                                              "--acks", "all", "--transaction-records", "10",
                                              "--duration-s", "2" if opts.quick else "5"], root)
            delete_topics(broker, [warm["topic"]])
            for round_ in range(1, rounds + 1):
                for producers, records in TXN_RUNS:
                    report = bench(opts.bench, broker, [
                        "produce", "--partitions", "8", "--size", "100", "--acks", "all",
                        "--producers", str(producers), "--transaction-records", str(records),
                        "--duration-s", seconds], root)
                    results["runs"].append({
                        "broker": name, "suite": "transactions", "round": round_,
                        "config": {"partitions": 8, "size": 100, "acks": "all",
                                   "compression": "none", "producers": producers,
                                   "records_per_transaction": records},
                        "kind": "transactions", **report})
                    delete_topics(broker, [report["topic"]])
        finally:
            broker.stop()


def print_transactions(results: dict) -> None:
    """Per configuration: the medians over rounds, strata beside Kafka."""
    from statistics import median
    print("\n| producers | records per transaction | broker | transactions/s | "
          "commit p50 ms | commit p99 ms | broker CPU s | strata / Kafka (transactions/s) |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for producers, records in TXN_RUNS:
        rates = {}
        for broker in ("strata", "kafka"):
            runs = [r for r in results["runs"] if r.get("suite") == "transactions"
                    and r["broker"] == broker and r["config"]["producers"] == producers
                    and r["config"]["records_per_transaction"] == records]
            if not runs:
                continue
            commits = [r["transactions"]["commit_latency"] or {} for r in runs]
            rates[broker] = median(r["transactions"]["per_s"] for r in runs)
            p50 = median(c.get("p50_ms", 0) for c in commits)
            p99 = median(c.get("p99_ms", 0) for c in commits)
            cpu = median(r["broker_cpu_s"] for r in runs)
            ratio = (f"{rates['strata'] / rates['kafka']:.2f}"
                     if broker == "kafka" and rates.get("kafka") and "strata" in rates else "")
            print(f"| {producers} | {records} | {broker} | {rates[broker]:,.0f} | {p50:.1f} | "
                  f"{p99:.1f} | {cpu:.2f} | {ratio} |")


def print_http(results: dict) -> None:
    """HTTP produce against Kafka produce, run by run and as ratios of the medians."""
    runs = [r for r in results["runs"] if r.get("suite") == "http"]
    print("\n| run | records/s | MB/s | p50 ms | p99 ms | p99.9 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in runs:
        lat = r.get("latency") or {}
        print(f"| {r['kind']} | {r['records_per_s']:,.0f} | {r['mb_per_s']:.1f} | "
              f"{lat.get('p50_ms', 0):.2f} | {lat.get('p99_ms', 0):.2f} | {lat.get('p999_ms', 0):.2f} |")

    def median(kind: str, f) -> float:
        vals = sorted(f(r) for r in runs if r["kind"] == kind)
        return vals[len(vals) // 2] if vals else float("nan")

    rps = lambda r: r["records_per_s"]
    p99 = lambda r: (r.get("latency") or {}).get("p99_ms", float("nan"))
    print(f"\nHTTP / Kafka: throughput {median('produce-http', rps) / median('produce', rps):.2f}, "
          f"p99 latency {median('produce-http', p99) / median('produce', p99):.2f}")


def before_and_after(opts, root: Path, results: dict, started: str) -> None:
    """The same matrix on two strata binaries, in alternating rounds (before, after,
    before, after, ...) so that the machine's drift falls on both alike."""
    if not opts.before.exists():
        raise SystemExit(f"{opts.before} is missing")
    matrix = [(8, 1024, "all", "none"), (8, 100, "all", "none")]
    if opts.quick:
        matrix = matrix[:1]
    count_args = (["--records", "20000"] if opts.quick
                  else ["--duration-s", str(opts.seconds)])
    results["brokers"] = ["before", "after"]
    results["binaries"] = {"before": str(opts.before), "after": str(opts.strata)}
    for n in range(opts.rounds):
        for name, binary in (("before", opts.before), ("after", opts.strata)):
            broker = Strata(binary, root, name=f"{name}-{n}")
            broker.name = name
            try:
                warm = bench(opts.bench, broker, ["produce", "--partitions", "8", "--size", "1024",
                                                  "--acks", "all", "--duration-s",
                                                  "1" if opts.quick else "3"], root)
                delete_topics(broker, [warm["topic"]])
                first = len(results["runs"])
                run_matrix(opts, broker, matrix, count_args, root, results)
                for r in results["runs"][first:]:
                    r["round"] = n
            finally:
                broker.stop()
    finish(opts, results, started, root)
    print_before_after(results)


def print_before_after(results: dict) -> None:
    """Means over the rounds, and after / before (above 1: more throughput, or more
    latency or memory, after)."""
    runs: dict = {}
    for r in results["runs"]:
        c = r["config"]
        runs.setdefault((r["broker"], c["partitions"], c["size"], r["kind"]), []).append(r)

    def value(r: dict, m: str):
        if m in ("p50_ms", "p99_ms", "p999_ms"):
            return (r.get("latency") or {}).get(m)
        return r.get(m)

    print("\n| partitions | size | run | measure | before | after | after / before | rounds (before; after) |")
    print("|---:|---:|---|---|---:|---:|---:|---|")
    fmt = lambda v: "" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.2f}")
    for p, size in sorted({(p, s) for (_, p, s, _) in runs}, reverse=True):
        for kind, measures in (("produce", ("records_per_s", "mb_per_s", "broker_peak_rss_mib")),
                               ("produce", ("p50_ms", "p99_ms", "p999_ms")),
                               ("produce@50%", ("p50_ms", "p99_ms", "p999_ms")),
                               ("e2e@50%", ("p50_ms", "p99_ms", "p999_ms")),
                               ("consume", ("records_per_s",))):
            for m in measures:
                per = {}
                for b in ("before", "after"):
                    vals = [v for r in runs.get((b, p, size, kind), [])
                            if (v := value(r, m)) is not None]
                    per[b] = vals
                mean = {b: (sum(v) / len(v) if v else None) for b, v in per.items()}
                ratio = ("" if mean["before"] in (None, 0) or mean["after"] is None
                         else f"{mean['after'] / mean['before']:.2f}")
                rounds = "; ".join(", ".join(fmt(v) for v in per[b]) for b in ("before", "after"))
                print(f"| {p} | {size} | {kind} | {m} | {fmt(mean['before'])} | "
                      f"{fmt(mean['after'])} | {ratio} | {rounds} |")


def finish(opts, results: dict, started: str, root: Path) -> None:
    out = opts.out or REPO / "bench" / "results" / f"{started.replace(':', '')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    print(f"\nresults: {out}")
    shutil.rmtree(root, ignore_errors=True)


def print_comparison(results: dict) -> None:
    """strata and strata with page-cache acks against Kafka, as ratios (above 1: strata
    has more throughput, or more latency, CPU or memory)."""
    runs = {(r["broker"], r["config"]["partitions"], r["config"]["size"], r["kind"]): r
            for r in results["runs"]}

    def cpu_per_gb(r: dict) -> float | None:
        gb = r.get("bytes", 0) / 1e9
        return r["broker_cpu_s"] / gb if gb else None

    replicas = results.get("replicas", 1)
    if replicas > 1:
        print(f"\n{replicas} agents against {replicas} Kafka brokers, replication factor "
              f"{replicas}; CPU and memory summed over each broker's processes")
    print("\n| partitions | size | run | measure | strata | strata page-cache | Kafka | "
          "strata / Kafka | page-cache / Kafka |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|")
    configs = sorted({(p, s) for (_, p, s, _) in runs})
    for p, size in configs:
        for kind, measures in (("produce", ("records_per_s", "cpu_s_per_gb", "broker_peak_rss_mib")),
                               ("produce@50%", ("p50_ms", "p99_ms", "p999_ms")),
                               ("e2e@50%", ("p50_ms", "p99_ms", "p999_ms")),
                               ("consume", ("records_per_s",))):
            for m in measures:
                vals = []
                for b in ("strata", "strata-page-cache", "kafka"):
                    r = runs.get((b, p, size, kind))
                    if r is None:
                        vals.append(None)
                    elif m == "cpu_s_per_gb":
                        vals.append(cpu_per_gb(r))
                    elif m in ("p50_ms", "p99_ms", "p999_ms"):
                        vals.append((r.get("latency") or {}).get(m))
                    else:
                        vals.append(r.get(m))
                fmt = lambda v: "" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.2f}")
                ratio = lambda a, b: "" if a is None or not b else f"{a / b:.2f}"
                print(f"| {p} | {size} | {kind} | {m} | {fmt(vals[0])} | {fmt(vals[1])} | "
                      f"{fmt(vals[2])} | {ratio(vals[0], vals[2])} | {ratio(vals[1], vals[2])} |")


def print_curve(results: dict) -> None:
    """Produce latency at the same absolute rates (fractions of Kafka's full speed)."""
    runs = {(r["broker"], r["config"]["partitions"], r["config"]["size"], r["kind"]): r
            for r in results["runs"] if r["kind"].startswith("curve@")}
    if not runs:
        return
    print("\n| partitions × size | rate (of Kafka's full speed) | records/s | "
          "strata p50 / p99 / p99.9 ms | strata page-cache | Kafka | strata / Kafka p99 |")
    print("|---|---:|---:|---|---|---|---:|")
    for p, size in sorted({(p, s) for (_, p, s, _) in runs}):
        for fraction in CURVE:
            kind = f"curve@{round(fraction * 100)}%"
            cells, p99 = [], {}
            for b in ("strata", "strata-page-cache", "kafka"):
                lat = (runs.get((b, p, size, kind)) or {}).get("latency") or {}
                p99[b] = lat.get("p99_ms")
                cells.append(" / ".join(f"{lat[m]:.1f}" for m in ("p50_ms", "p99_ms", "p999_ms"))
                             if lat else "")
            rate = (runs.get(("kafka", p, size, kind)) or {}).get("records_per_s", 0)
            ratio = f"{p99['strata'] / p99['kafka']:.2f}" if p99["strata"] and p99["kafka"] else ""
            print(f"| {p} × {size} B | {round(fraction * 100)}% | {rate:,.0f} | "
                  f"{' | '.join(cells)} | {ratio} |")


def print_table(results: dict) -> None:
    disk = results["references"]["disk"]["sequential_write_fdatasync_mb_per_s"]
    net = results["references"]["loopback"].get("tcp_mb_per_s")
    print(f"\nreferences: disk {disk} MB/s sequential (fdatasync), "
          f"{results['references']['disk']['sync_4k_write_ms']} ms per synchronous 4 KiB write; "
          f"loopback {net} MB/s")
    print("\n| partitions | size | acks | compression | run | records/s | MB/s | of disk | "
          "p50 ms | p99 ms | p99.9 ms | max ms | broker peak RSS MiB |")
    print("|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results["runs"]:
        c, lat = r["config"], r.get("latency") or {}
        if r.get("broker", "strata") != "strata":
            continue
        fmt = lambda v: "" if v is None else f"{v:.2f}"
        print(f"| {c['partitions']} | {c['size']} | {c['acks']} | {c['compression']} | {r['kind']} | "
              f"{r['records_per_s']:,.0f} | {r['mb_per_s']:.1f} | {r['mb_per_s'] / disk:.2f} | "
              f"{fmt(lat.get('p50_ms'))} | {fmt(lat.get('p99_ms'))} | {fmt(lat.get('p999_ms'))} | "
              f"{fmt(lat.get('max_ms'))} | {r['broker_peak_rss_mib']} |")


if __name__ == "__main__":
    main()
