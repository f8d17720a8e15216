"""Helpers for the agents-as-cattle tests (test_disk_loss.py, test_self_healing.py): losing
an agent's disk, starting an agent the moment the metastore lets it take its node id
back, reading a counter off an agent's /metrics, and a sampler that records who led each
partition and who was in its ISR, as Metadata showed it over time.

Why a sampler: "the agent whose disk was lost leads a partition only once it is back in
its ISR" is a statement about every moment, not the end state; the sampler asks the
live agents for Metadata every 50 ms and keeps what changed, so the check can look at the
whole history after the test (it can miss a change shorter than the sampling interval;
the log check at the end catches what such a moment could have cost).
"""

from __future__ import annotations

import re
import shutil
import threading
import time
import urllib.request
from dataclasses import dataclass, field

from conftest import BrokerError
from replication_testlib import Cluster, metadata


def wipe(agent) -> None:
    """SIGKILL the agent and delete its data directory: the disk is gone (the agent comes
    back on an empty directory, with a new directory id, under the same node id)."""
    agent.kill()
    shutil.rmtree(agent.data_dir, ignore_errors=True)
    agent.data_dir.mkdir(parents=True, exist_ok=True)


def start_when_allowed(agent, timeout: float) -> float:
    """Starts the agent, retrying while the metastore refuses its node id because the
    agent before it (another data directory) still holds the lease; returns the seconds
    it waited. This is the earliest moment such an agent can come back: the race with the
    controller's election that once lost acknowledged records."""
    t0 = time.monotonic()
    while True:
        try:
            agent.start()
            return time.monotonic() - t0
        except BrokerError as e:
            if "in use by a live agent" not in str(e) or time.monotonic() - t0 > timeout:
                raise
            time.sleep(0.05)


def metric(http_url: str, name: str, labels: str | None = None) -> float:
    """The value of `name` (with exactly `labels`, e.g. 'source="archive"', if given) in
    the agent's /metrics; 0 if absent."""
    with urllib.request.urlopen(http_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    want = name if labels is None else f"{name}{{{labels}}}"
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if key == want:
            return float(value)
    return 0.0


@dataclass
class Sample:
    t: float
    asked: int
    # partition -> (leader, leader epoch, isr)
    partitions: dict[int, tuple[int, int, tuple[int, ...]]]


@dataclass
class LeadershipSampler:
    """Asks a live agent for `topic`'s Metadata every `every` seconds, from its own
    thread, and keeps the answers that differ from the one before."""

    cluster: Cluster
    topic: str
    every: float = 0.05
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "LeadershipSampler":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        last = None
        while not self._stop.is_set():
            for n in self.cluster.up():
                try:
                    v = metadata(self.cluster.agents[n].bootstrap, [self.topic], asked=n, timeout=1.0)
                except Exception:  # an agent going down mid-request: ask another
                    continue
                t = v.topics.get(self.topic)
                if t is None or t.error != 0:
                    continue
                now = {p: (pm.leader, pm.epoch, tuple(sorted(pm.isr)))
                       for p, pm in t.partitions.items()}
                if now != last:
                    self.samples.append(Sample(time.monotonic(), n, now))
                    last = now
                break
            self._stop.wait(self.every)

    def led_before_rejoining(self, node: int, since: float, back: float) -> list[str]:
        """Moments at which Metadata showed `node`, whose disk was lost at `since` and
        which started again at `back`, leading a partition before it was seen back in
        that partition's ISR: in an epoch newer than any seen before the loss (a new
        leadership), or in an older one more than a second after it started (the
        leadership it had before, taken back: what once lost acknowledged records).
        Views from before the loss show it leading in the old epoch until it is replaced;
        those are not counted."""
        before: dict[int, int] = {}
        rejoined: set[int] = set()
        bad = []
        for s in self.samples:
            for p, (leader, epoch, isr) in s.partitions.items():
                if s.t < since:
                    before[p] = max(before.get(p, -1), epoch)
                    continue
                newer = epoch > before.get(p, -1)
                if newer and node in isr and leader != node:
                    rejoined.add(p)
                if leader != node or p in rejoined:
                    continue
                if newer or s.t > back + 1.0:
                    bad.append(f"p{p} led by {node} in epoch {epoch} at +{s.t - since:.2f}s "
                               f"(ISR {list(isr)}, asked agent {s.asked}) before it was seen "
                               f"back in the ISR")
        return bad


LOG_LINE = re.compile(r"this replica's log is not on this disk")


def rejoin_lines(agent) -> int:
    """How many times the agent logged that a replica's log was not on its disk."""
    return len(LOG_LINE.findall(agent.log_text()))
