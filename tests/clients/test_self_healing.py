"""Agents as cattle (issue 32): the cluster heals itself, with no operator, while
idempotent acks=all producers (librdkafka) and a consumer group run throughout.

- Autoscaling soak: 5 agents, RF=3, `min.insync.replicas=2`, 300 partitions archived
  as they fill (small segments, tiering on). Each round SIGKILLs a random agent and
  deletes its disk; five rounds start a replacement with a new node id (as an
  autoscaling group replaces a dead instance), two start it again under its old node id
  on the empty disk. The controller replaces the dead agent's replicas after
  `replica_replacement_delay_ms` (8 s here), the new replicas copy what is archived from
  the archive and the rest from their leaders, balancing spreads replicas and preferred
  leaderships. Per round it prints the time until every partition is back to three
  in-sync replicas on live agents, and the bytes rebuilt from the archive and from
  leaders. At the end every acknowledged record is in the log once, at its offset, and
  the consumer group consumed every one of them. `STRATA_SOAK_ROUNDS=a,b` (replacements,
  old-id rounds) runs more; `STRATA_SOAK_CLIENT_LOGS=<dir>` keeps the clients' librdkafka
  debug logs there.
- Scale out and drain: 3 agents under load, then 2 more join: replicas and leaderships
  end within 10% of even; then one agent is drained under load (`strata agents drain`
  over HTTP) until it is safe to stop, and stopped: the producer sees no error it did
  not retry, and nothing is lost.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import NewTopic

pytest.register_assert_rewrite("replication_testlib", "cattle_testlib")

from cattle_testlib import metric, start_when_allowed, wipe  # noqa: E402
from replication_testlib import (  # noqa: E402
    SeqProducer,
    check_log,
    metadata,
    read_topic,
    wait_for,
)
from strata_testlib import RDKAFKA_LOG, admin, unique_topic  # noqa: E402
from test_replication import report  # noqa: E402

LEASE_MS = 3000
REPLACEMENT_DELAY_MS = 8000


def client_logs(name: str, contexts: str) -> dict:
    """With STRATA_SOAK_CLIENT_LOGS=<dir>: librdkafka configuration that writes the debug
    `contexts` of client `name` to <dir>/<name>.log, the timeline a failed soak needs
    (retries, idempotent epoch bumps, metadata answers). Without it: nothing. It is for
    diagnosis only: with the consumer's tens of MB of debug lines going through Python's
    logging, its librdkafka main thread stopped in 2 runs of 10 (no metadata for minutes,
    so its group missed records), so a run with it is no verdict on the agents."""
    where = os.environ.get("STRATA_SOAK_CLIENT_LOGS")
    if not where:
        return {}
    log = logging.getLogger(f"soak-client.{name}")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    handler = logging.FileHandler(Path(where) / f"{name}.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.addHandler(handler)
    return {"debug": contexts, "logger": log}


class Fleet:
    """Agents that come and go, by node id, on one metastore and one archive."""

    def __init__(self, broker_factory, root: Path, extra_args: list[str]):
        self.factory = broker_factory
        self.root = root
        self.extra = extra_args
        self.agents: dict[int, object] = {}

    def add(self, node: int):
        agent = self.factory(extra_args=[
            "--node-id", str(node),
            "--metastore-path", str(self.root / "metastore.sqlite"),
            "--archive-url", f"file://{self.root / 'archive'}",
            "--lease-ms", str(LEASE_MS),
            "--replica-lag-time-max-ms", "4000",
            "--replica-replacement-delay-ms", str(REPLACEMENT_DELAY_MS),
            "--leader-rebalance-interval-ms", "1000",
            "--tiering-interval-ms", "500",
            "--group-initial-rebalance-delay-ms", "200",
            *self.extra,
        ])
        self.agents[node] = agent
        agent.start()
        return agent

    def live(self) -> list[int]:
        return sorted(n for n, a in self.agents.items() if a.is_running())

    def servers(self) -> str:
        return ",".join(self.agents[n].bootstrap for n in self.live())

    def http(self) -> str:
        return self.agents[self.live()[0]].http_url

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.http() + path, timeout=10) as r:
            return json.loads(r.read())

    def post(self, path: str) -> dict:
        req = urllib.request.Request(self.http() + path, data=b"{}", method="POST",
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def partitions(self, topic: str):
        for n in self.live():
            try:
                v = metadata(self.agents[n].bootstrap, [topic], asked=n, timeout=5)
            except Exception:
                continue
            t = v.topics.get(topic)
            if t is not None and t.error == 0:
                return t.partitions
        return None

    def healed(self, topic: str, count: int, rf: int = 3):
        """(done, state): every partition led by a live agent with `rf` replicas, all on
        live agents and all in the ISR, and nothing moving."""
        live = set(self.live())
        parts = self.partitions(topic)
        if parts is None or len(parts) != count:
            return False, "no metadata"
        bad = [f"p{p} leader={pm.leader} replicas={list(pm.replicas)} isr={list(pm.isr)}"
               for p, pm in sorted(parts.items())
               if pm.leader not in live or len(pm.replicas) != rf or not set(pm.replicas) <= live
               or sorted(pm.isr) != sorted(pm.replicas)]
        if bad:
            return False, f"{len(bad)} partitions not healed, e.g. {bad[:3]}"
        try:
            moving = self.get("/v1/agents")["moves_in_flight"]
        except Exception as e:
            return False, f"/v1/agents: {e}"
        return moving == 0, f"{moving} moves in flight"

    def rebuilt(self) -> dict[int, dict[str, float]]:
        out = {}
        for n in self.live():
            url = self.agents[n].http_url
            out[n] = {s: metric(url, "strata_replica_rebuild_bytes_total", f'source="{s}"')
                      for s in ("archive", "leader")}
        return out


def delta(before: dict, after: dict, source: str) -> float:
    """Bytes rebuilt between two readings (agents new since count from zero)."""
    return sum(v[source] - before.get(n, {}).get(source, 0.0) for n, v in after.items())


class GroupConsumer:
    """A consumer-group member (librdkafka) reading `topic` from the start from its own
    thread, keeping every value it saw."""

    def __init__(self, servers: str, topic: str, group: str):
        self.consumer = Consumer({
            "bootstrap.servers": servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "topic.metadata.refresh.interval.ms": 2000,
            "logger": RDKAFKA_LOG,
            **client_logs("consumer", "metadata,cgrp,topic"),
        })
        self.consumer.subscribe([topic])
        self.seen: set[bytes] = set()
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            msgs = self.consumer.consume(500, timeout=0.5)
            with self.lock:
                for m in msgs:
                    if m.error() is None:
                        self.seen.add(m.value())
                    elif not m.error().retriable() and m.error().code() != -191:  # _PARTITION_EOF
                        self.errors.append(str(m.error()))

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self._stop.set()
        self.thread.join(timeout=30)
        self.consumer.close()


class Padded(SeqProducer):
    """A SeqProducer whose values carry `pad` bytes of padding (so partitions fill their
    segments and the archive has something to rebuild from)."""

    def __init__(self, *args, pad: int = 0, **kwargs):
        self.pad = pad
        super().__init__(*args, **kwargs)

    def value(self, seq: int) -> bytes:
        return b"." * self.pad + super().value(seq)

    def seq_of(self, value: bytes | None) -> int | None:
        return super().seq_of(None if value is None else value.lstrip(b"."))


@pytest.fixture
def fleet_root(request):
    root = Path(tempfile.mkdtemp(prefix="strata-cattle-"))
    yield root
    failed = any(getattr(getattr(request.node, "rep_" + w, None), "failed", False)
                 for w in ("setup", "call"))
    if failed or os.environ.get("STRATA_KEEP_DATA") == "1":
        print(f"\n[strata] kept the shared metastore and archive of {request.node.nodeid}: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


def create(fleet: Fleet, topic: str, partitions: int, configs: dict | None = None) -> None:
    a = admin(fleet.servers())
    fs = a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=3,
                                   config={"min.insync.replicas": "2", **(configs or {})})],
                         operation_timeout=30, request_timeout=30)
    fs[topic].result(timeout=30)
    wait_for(lambda: fleet.healed(topic, partitions), 60, f"the new topic {topic} led and in sync")


def soak_rounds() -> tuple[int, int]:
    given = os.environ.get("STRATA_SOAK_ROUNDS")
    if not given:
        return 5, 2
    a, b = given.split(",")
    return int(a), int(b)


@pytest.mark.timeout(900)
def test_an_autoscaling_group_heals_the_cluster_with_no_operator(broker_factory, fleet_root,
                                                                   capsys, record_property):
    fleet = Fleet(broker_factory, fleet_root, [])
    for n in range(1, 6):
        fleet.add(n)
    topic = unique_topic("soak")
    partitions = 300
    create(fleet, topic, partitions, {"segment.bytes": str(128 * 1024)})
    prod = Padded(fleet.servers(), topic, partitions, tag="soak", rate=800, pad=400,
                  **client_logs("producer", "eos,broker")).start()
    group = GroupConsumer(fleet.servers(), topic, unique_topic("soak-group")).start()
    rng = random.Random(int(os.environ.get("STRATA_SOAK_SEED", "32")))
    replacements, old_ids = soak_rounds()
    plan = ["new id"] * replacements + ["old id"] * old_ids
    rng.shuffle(plan)
    next_id = 6
    rounds = []
    try:
        prod.wait_acked(4000, 60, "4000 acknowledged records before the first round")
        for i, kind in enumerate(plan, 1):
            wait_for(lambda: fleet.healed(topic, partitions), 120, f"a healed cluster before round {i}")
            victim = rng.choice(fleet.live())
            t0 = time.monotonic()
            wipe(fleet.agents[victim])
            before = fleet.rebuilt()
            if kind == "new id":
                fleet.add(next_id)
                who = f"{victim}->{next_id}"
                next_id += 1
            else:
                start_when_allowed(fleet.agents[victim], timeout=4 * LEASE_MS / 1000)
                who = f"{victim}->{victim}"
            wait_for(lambda: fleet.healed(topic, partitions), 240,
                     f"round {i} ({kind}, agent {who}): every partition back to 3 in-sync replicas")
            healed = time.monotonic() - t0
            after = fleet.rebuilt()
            rounds.append((i, kind, who, round(healed, 1),
                           round(delta(before, after, "archive") / 1e6, 2),
                           round(delta(before, after, "leader") / 1e6, 2)))
            with capsys.disabled():
                print(f"\n[soak] round {i} ({kind}, agent {who}): healed in {healed:.1f}s; rebuilt "
                      f"{rounds[-1][4]} MB from the archive, {rounds[-1][5]} MB from leaders; "
                      f"acknowledged so far {prod.n_acked()}", flush=True)
        prod.check()
    finally:
        prod.halt()
    remaining = prod.finish(120)
    lows, ends, got = read_topic(fleet.servers(), topic, partitions, timeout=180)
    check = check_log(prod, lows, ends, got)
    with prod.lock:
        acked_values = {prod.value(s) for s in prod.acked}
    wait_for(lambda: (len(acked_values - group.seen) == 0, len(acked_values - group.seen)),
             120, "the consumer group to have consumed every acknowledged record")
    group.stop()
    missed = len(acked_values - group.seen)
    line = (f"acknowledged={check.acknowledged} lost={len(check.lost)} "
            f"duplicated={len(check.duplicated)} moved={len(check.misplaced)} "
            f"consumer_missed={missed} | rounds (n, kind, agent, healed s, MB from archive, "
            f"MB from leaders)={rounds}")
    report(capsys, record_property, "cattle-soak", line)
    check.assert_clean()
    assert remaining == 0, f"{remaining} records without a delivery report [{line}]"
    assert missed == 0, f"the consumer group missed {missed} acknowledged records [{line}]"
    assert not group.errors, f"consumer errors: {group.errors[:5]}"
    assert sum(r[4] for r in rounds) > 0, f"nothing was rebuilt from the archive [{line}]"


@pytest.mark.timeout(600)
def test_new_agents_get_their_share_and_a_drained_agent_leaves_nothing_behind(
        broker_factory, fleet_root, capsys, record_property):
    fleet = Fleet(broker_factory, fleet_root, [])
    for n in range(1, 4):
        fleet.add(n)
    topic = unique_topic("scale")
    partitions = 60
    create(fleet, topic, partitions)
    prod = SeqProducer(fleet.servers(), topic, partitions, tag="scale", rate=500).start()
    try:
        prod.wait_acked(2000, 60, "2000 acknowledged records before scaling out")
        t0 = time.monotonic()
        fleet.add(4)
        fleet.add(5)

        def even():
            parts = fleet.partitions(topic)
            if parts is None:
                return False, "no metadata"
            replicas = {n: sum(n in pm.replicas for pm in parts.values()) for n in fleet.live()}
            leaders = {n: sum(pm.leader == n for pm in parts.values()) for n in fleet.live()}
            ok_r = all(abs(c - 3 * partitions / 5) <= 0.1 * 3 * partitions / 5 for c in replicas.values())
            ok_l = all(abs(c - partitions / 5) <= 0.1 * partitions / 5 + 0.01 for c in leaders.values())
            healed, why = fleet.healed(topic, partitions)
            return ok_r and ok_l and healed, f"replicas={replicas} leaders={leaders} ({why})"

        spread = wait_for(even, 240, "replicas and leaderships within 10% of even on 5 agents")
        scaled = time.monotonic() - t0

        t1 = time.monotonic()
        drained = 2
        fleet.post(f"/v1/agents/{drained}/drain")
        wait_for(lambda: (fleet.get(f"/v1/agents/{drained}")["drain"]["safe_to_stop"],
                          fleet.get(f"/v1/agents/{drained}")["drain"]),
                 240, f"agent {drained} drained under load")
        drain_s = time.monotonic() - t1
        fleet.agents[drained].stop()
        wait_for(lambda: fleet.healed(topic, partitions), 60, "the cluster after the drained agent stopped")
        prod.wait_acked(prod.n_acked() + 1000, 60, "writes acknowledged after the drained agent stopped")
        prod.check()
    finally:
        prod.halt()
    remaining = prod.finish(60)
    with prod.lock:
        failed = list(prod.failed)
        fatal = [e for e in prod.client_errors if e[2]]
    lows, ends, got = read_topic(fleet.servers(), topic, partitions)
    check = check_log(prod, lows, ends, got)
    line = (f"acknowledged={check.acknowledged} lost={len(check.lost)} duplicated={len(check.duplicated)} "
            f"failed={len(failed)} | 3->5 agents balanced in {scaled:.1f}s: {spread}; agent {drained} "
            f"drained in {drain_s:.1f}s")
    report(capsys, record_property, "cattle-scale-drain", line)
    check.assert_clean()
    assert remaining == 0, f"{remaining} records without a delivery report [{line}]"
    assert not failed and not fatal, (
        f"the producer saw errors it did not retry: {failed[:3]} {fatal[:3]} [{line}]")
