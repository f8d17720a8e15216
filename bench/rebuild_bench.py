#!/usr/bin/env python3
"""How fast a replica that lost its disk is rebuilt (issue 32), from the archive and from
its leader, beside the disk and loopback references measured in the same run.

Three release agents on one machine share an embedded metastore and a `file://` archive
on the same disk. For each path, a topic of `--partitions` partitions (RF=3) is filled
with `--mib` MiB of 1 KiB records (librdkafka, acks=all), in 16 MiB segments:

  * archive: tiering on; once the archive holds every closed segment, agent 3 is
    SIGKILLed, its data directory deleted, and it is started again under its node id on
    the empty disk. Its replicas copy what is archived from the archive (Parquet read
    back into batches) and the active segments from their leaders;
  * leader: the same with tiering off for the topic (`remote.storage.enable=false`):
    everything comes from the leaders over the inter-agent listener.

Measured from agent 3's start (not counting its wait for its node id) until every
partition lists it in the ISR again: the seconds, and the bytes copied by source
(`strata_replica_rebuild_bytes_total`), as MB/s. The rebuild rate limit is off
(`--replica-rebuild-max-bytes-per-second 0`) so that the paths themselves are measured.
References: `dd` sequential write with fdatasync in the agents' directory, `iperf3`
over loopback (bench/suite.py's). Every record is read back from agent 3 as the only
leader afterwards (the others killed): a lost or corrupted record fails the run.

    cargo build --release -p strata-agent --bin strata
    python3 bench/rebuild_bench.py [--mib 512] [--partitions 4] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import REPO, dd_write, free_port, loopback, machine  # noqa: E402

LEASE_MS = 3000


class Agent:
    def __init__(self, binary: Path, root: Path, node: int):
        self.binary, self.root, self.node = binary, root, node
        self.kafka, self.http = free_port(), free_port()
        self.data = root / f"agent-{node}"
        self.proc = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka}"

    def start(self) -> float:
        """Starts it (retrying while its old lease holds the node id); returns when."""
        while True:
            log = open(self.root / f"agent-{self.node}.log", "a")
            self.proc = subprocess.Popen(
                [str(self.binary), "agent", "--node-id", str(self.node),
                 "--data-dir", str(self.data),
                 "--kafka-listen", self.bootstrap, "--http-listen", f"127.0.0.1:{self.http}",
                 "--metastore-path", str(self.root / "metastore.sqlite"),
                 "--archive-url", f"file://{self.root / 'archive'}",
                 "--lease-ms", str(LEASE_MS), "--tiering-interval-ms", "200",
                 "--replica-rebuild-max-bytes-per-second", "0",
                 "--leader-rebalance-interval-ms", "0"],
                stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 60
            while True:
                if self.proc.poll() is not None:
                    break
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{self.http}/readyz", timeout=1)
                    return time.monotonic()
                except OSError:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"agent {self.node} did not start")
                    time.sleep(0.05)
            time.sleep(0.2)  # refused: its node id's lease still runs

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def get(self, path: str):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}{path}", timeout=10) as r:
            return r.read().decode()

    def rebuilt(self, source: str) -> float:
        want = f'strata_replica_rebuild_bytes_total{{source="{source}"}}'
        for line in self.get("/metrics").splitlines():
            if line.startswith(want + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


def produce(servers: str, topic: str, partitions: int, mib: int) -> int:
    p = Producer({"bootstrap.servers": servers, "acks": "all", "linger.ms": 20,
                  "batch.size": 1 << 20, "compression.type": "none"})
    count = mib * 1024
    for i in range(count):
        value = (f"{i:012d}".encode() * 86)[:1024]
        while True:
            try:
                p.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(300):
        raise SystemExit("records not acknowledged")
    return count


def in_sync(agent: Agent, topic: str, partitions: int) -> bool:
    """Whether every replica of `topic` on `agent` is back in the ISR, as the agent itself
    sees it (it made the record that took it out, so its view is not stale)."""
    mine = [p for p in json.loads(agent.get("/v1/partitions"))["partitions"] if p["topic"] == topic]
    return len(mine) == partitions and all(p.get("role") == "leader" or p.get("in_isr") for p in mine)


def archived(agent: Agent, topic: str) -> bool:
    tiering = json.loads(agent.get("/v1/tiering"))
    mine = [p for p in tiering["partitions"] if p["topic"] == topic]
    return bool(mine) and all(p.get("lag_records", 1) == 0
                              or "active segment" in (p.get("waiting_for") or "") for p in mine)


def read_back(agent: Agent, topic: str, partitions: int, count: int) -> None:
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "rebuild-bench",
                  "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                  "topic.metadata.refresh.interval.ms": 1000, "log_level": 3})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    deadline = time.monotonic() + 300
    while seen < count and time.monotonic() < deadline:
        for m in c.consume(10000, timeout=1):
            if m.error():
                continue
            i = int(m.value()[:12])
            if m.value() != (f"{i:012d}".encode() * 86)[:1024] or i % partitions != m.partition():
                raise SystemExit(f"corrupted record at {m.partition()}@{m.offset()}")
            seen += 1
    c.close()
    if seen != count:
        raise SystemExit(f"read back {seen} of {count} records from the rebuilt agent")


def run_path(binary: Path, root: Path, opts, tiered: bool) -> dict:
    agents = [Agent(binary, root, n) for n in (1, 2, 3)]
    for a in agents:
        a.start()
    servers = ",".join(a.bootstrap for a in agents)
    topic = "rebuild-archive" if tiered else "rebuild-leader"
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(topic, opts.partitions, 3, config={
        "segment.bytes": str(16 << 20),
        "remote.storage.enable": "true" if tiered else "false"})])[topic].result(30)
    time.sleep(1)
    t0 = time.monotonic()
    count = produce(servers, topic, opts.partitions, opts.mib)
    produced_s = time.monotonic() - t0
    if tiered:
        deadline = time.monotonic() + 600
        while not all(archived(a, topic) for a in agents[:2]):
            if time.monotonic() > deadline:
                raise SystemExit("the archive did not catch up")
            time.sleep(0.5)
    victim = agents[2]
    victim.kill()
    shutil.rmtree(victim.data)
    started = victim.start()
    while not in_sync(victim, topic, opts.partitions):
        time.sleep(0.1)
    seconds = time.monotonic() - started
    archive, leader = victim.rebuilt("archive"), victim.rebuilt("leader")
    for a in agents[:2]:
        a.kill()
    read_back(victim, topic, opts.partitions, count)
    victim.kill()
    if not opts.keep:
        shutil.rmtree(root)
        root.mkdir()
    total = archive + leader
    return {
        "path": "archive" if tiered else "leader",
        "records": count,
        "produce_s": round(produced_s, 1),
        "rebuild_s": round(seconds, 2),
        "from_archive_mb": round(archive / 1e6, 1),
        "from_leader_mb": round(leader / 1e6, 1),
        "mb_per_s": round(total / 1e6 / seconds, 1),
        "archive_mb_per_s": round(archive / 1e6 / seconds, 1),
        "leader_mb_per_s": round(leader / 1e6 / seconds, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strata", type=Path, default=REPO / "target" / "release" / "strata")
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--keep", action="store_true", help="keep the agents' directories and logs")
    opts = ap.parse_args()
    if not opts.strata.exists():
        raise SystemExit(f"no {opts.strata}: cargo build --release -p strata-agent --bin strata")
    root = Path(tempfile.mkdtemp(prefix="strata-rebuild-", dir=str(REPO / "target")))
    try:
        results = {
            "started": time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime()),
            "machine": machine(),
            "references": {"disk": dd_write(root, False), "loopback": loopback(False)},
            "mib": opts.mib,
            "partitions": opts.partitions,
            "paths": [run_path(opts.strata, root, opts, True),
                      run_path(opts.strata, root, opts, False)],
        }
    finally:
        if not opts.keep:
            shutil.rmtree(root, ignore_errors=True)
    disk = results["references"]["disk"]["sequential_write_fdatasync_mb_per_s"]
    net = results["references"]["loopback"].get("tcp_mb_per_s")
    print(f"references: disk sequential write (fdatasync) {disk} MB/s, loopback TCP {net} MB/s")
    print("| path | rebuild s | from archive MB | from leader MB | MB/s | vs disk | vs loopback |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results["paths"]:
        print(f"| {r['path']} | {r['rebuild_s']} | {r['from_archive_mb']} | {r['from_leader_mb']} | "
              f"{r['mb_per_s']} | {r['mb_per_s'] / disk:.2f}x | "
              f"{(r['mb_per_s'] / net) if net else float('nan'):.2f}x |")
    out = opts.out or REPO / "bench" / "results" / f"rebuild-{results['started']}.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
