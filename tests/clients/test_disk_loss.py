"""A lost disk loses nothing (issue 32): three strata processes on one embedded metastore
and one archive, RF=3, `min.insync.replicas=2`, an idempotent acks=all librdkafka
producer writing throughout.

The drill that once lost 3,563 acknowledged records: an agent is SIGKILLed, its data
directory deleted, and it is started again under the same node id, on an empty
directory (with a new directory id). Four rounds: the leader of a partition and a
follower, each once started again the moment the metastore lets it (its lease just ran
out: the race with the controller's election) and once after its lease ran out and the
others moved on. Each round then SIGKILLs the two other agents (the ones holding the
records) and starts them again, so that the agent with the empty disk is the only one
up for a moment. Last, the whole cluster is killed at once, the agent the metastore
names leader of partition 0 loses its disk, and all three start again (it first).

What must hold (Kafka's terms): every acknowledged record is in the final log once, at
the offset it was acknowledged at, in send order (nothing lost, moved or acknowledged
twice); an agent whose disk was lost leads a partition only after it was seen back in
that partition's ISR (Metadata sampled every 50 ms, see cattle_testlib), that is, once
it had caught up; each such agent logged that its replicas' logs were not on its disk.
Preferred-leader election is off, so a leadership can only come from an election.
"""

from __future__ import annotations

import time

import pytest

pytest.register_assert_rewrite("replication_testlib", "cattle_testlib")

from cattle_testlib import LeadershipSampler, rejoin_lines, start_when_allowed, wipe  # noqa: E402
from replication_testlib import (  # noqa: E402
    Cluster,
    SeqProducer,
    check_log,
    create_replicated_topic,
    read_topic,
    wait_for,
)
from strata_testlib import unique_topic  # noqa: E402
from test_replication import report, started_cluster  # noqa: E402

NODES = (1, 2, 3)
LEASE_MS = 3000
LEASE_S = LEASE_MS / 1000
PARTITIONS = 4


@pytest.fixture
def drill_cluster(broker_factory, request):
    yield from started_cluster(broker_factory, request, "strata-disk-loss-", [
        "--lease-ms", str(LEASE_MS),
        "--replica-lag-time-max-ms", "2000",
    ], rebalance_ms=0, shared_archive=True)


def leader_of(cluster: Cluster, topic: str, p: int) -> int:
    def check():
        for n in cluster.up():
            v = cluster.view(n, topic)
            pm = None if v is None else v.partition(topic, p)
            if pm is not None and pm.leader in cluster.up():
                return True, pm.leader
        return False, None
    return wait_for(check, 30, f"a live leader of {topic}-{p}")


def follower_of(cluster: Cluster, topic: str, p: int) -> int:
    leader = leader_of(cluster, topic, p)
    return next(n for n in NODES if n != leader)


def all_in_sync(cluster: Cluster, topic: str, timeout: float, what: str) -> float:
    """Waits until every agent is up and shows every partition led, all three in the ISR;
    returns the seconds it took."""
    t0 = time.monotonic()
    cluster.wait_healthy(topic, PARTITIONS, timeout, what)
    return time.monotonic() - t0


def kill_and_restart_others(cluster: Cluster, wiped: int) -> None:
    """SIGKILL the two agents that kept their disks, then start them again (on their data
    directories they take their node ids back at once)."""
    others = [n for n in NODES if n != wiped]
    for n in others:
        cluster.agents[n].kill()
    for n in others:
        cluster.agents[n].start()


def test_a_lost_disk_loses_no_acknowledged_record(drill_cluster, capsys, record_property):
    cluster = drill_cluster
    topic = unique_topic("disk-loss")
    create_replicated_topic(cluster, topic, PARTITIONS)
    sampler = LeadershipSampler(cluster, topic).start()
    prod = SeqProducer(cluster.servers(), topic, PARTITIONS, tag="disk", rate=400).start()
    rounds = []  # (what, node, waited s, heal s)
    wiped_at: list[tuple[int, float, float]] = []  # (agent, lost its disk, started again)
    try:
        prod.wait_acked(1500, 30, "1500 acknowledged records before the first lost disk")
        plan = [
            ("leader, back as soon as allowed", leader_of, False),
            ("follower, back after its lease ran out", follower_of, True),
            ("follower, back as soon as allowed", follower_of, False),
            ("leader, back after its lease ran out", leader_of, True),
        ]
        for what, pick, late in plan:
            all_in_sync(cluster, topic, 60, f"every replica in sync before: {what}")
            node = pick(cluster, topic, 0)
            acked_before = prod.n_acked()
            t_wipe = time.monotonic()
            wipe(cluster.agents[node])
            if late:
                # Its lease runs out and the others drop it (or elect without it).
                time.sleep(LEASE_S + 1)
            waited = start_when_allowed(cluster.agents[node], timeout=4 * LEASE_S)
            wiped_at.append((node, t_wipe, time.monotonic()))
            kill_and_restart_others(cluster, node)
            heal = all_in_sync(cluster, topic, 90, f"agent {node} rebuilt after: {what}")
            prod.wait_acked(acked_before + 200, 60, f"writes acknowledged again after: {what}")
            rounds.append((what, node, round(waited, 2), round(heal, 2)))

        # The whole cluster at once; the agent named leader of p0 loses its disk.
        all_in_sync(cluster, topic, 60, "every replica in sync before the whole-cluster restart")
        node = leader_of(cluster, topic, 0)
        acked_before = prod.n_acked()
        for n in NODES:
            cluster.agents[n].kill()
        t_wipe = time.monotonic()
        wipe(cluster.agents[node])
        waited = start_when_allowed(cluster.agents[node], timeout=4 * LEASE_S)
        wiped_at.append((node, t_wipe, time.monotonic()))
        for n in NODES:
            if n != node:
                cluster.agents[n].start()
        heal = all_in_sync(cluster, topic, 90, f"agent {node} rebuilt after the whole-cluster restart")
        prod.wait_acked(acked_before + 200, 60, "writes acknowledged again after the whole-cluster restart")
        rounds.append(("whole cluster, the leader's disk lost", node, round(waited, 2), round(heal, 2)))
        prod.check()
    finally:
        prod.halt()
        sampler.stop()

    remaining = prod.finish(60)
    lows, ends, got = read_topic(cluster.servers(), topic, PARTITIONS)
    check = check_log(prod, lows, ends, got)
    early = [f"agent {n}: {b}" for n, t, back in wiped_at
             for b in sampler.led_before_rejoining(n, t, back)]
    line = (f"acknowledged={check.acknowledged} lost={len(check.lost)} "
            f"duplicated={len(check.duplicated)} moved={len(check.misplaced)} "
            f"acked_twice={len(check.acked_twice)} led_before_caught_up={len(early)} | "
            f"rounds (what, agent, waited for its node id s, until all in sync s)={rounds} "
            f"log_end={ends}")
    report(capsys, record_property, "disk-loss", line)
    check.assert_clean()
    assert remaining == 0, f"{remaining} records without a delivery report [{line}]"
    assert not early, f"an agent with an empty disk led before it caught up: {early[:5]} [{line}]"
    for n, _, _ in wiped_at:
        assert rejoin_lines(cluster.agents[n]) > 0, (
            f"agent {n} lost its disk but never logged that its replicas were new ones")
