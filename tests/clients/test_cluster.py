"""Three strata processes on one embedded metastore file: membership, partition
placement, leader-only serving and group coordination spread over the agents, with
librdkafka (confluent-kafka) as the client.

Topics here have one replica per partition (replication is tested in
test_replication.py), so each partition lives on the one agent that leads it. These
tests check that the agents agree on who leads what, that an unchanged client finds
every leader from any bootstrap agent, and that losing an agent (SIGKILL) makes only its
own partitions unavailable, and only until it comes back with its data.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition

from strata_testlib import (RDKAFKA_LOG, admin, consume_confluent, create_topic, unique_topic,
                            wait_until)

NODES = (1, 2, 3)
# The agents' lease (membership.rs): a killed agent leaves the live set within it.
LEASE_S = 10


@pytest.fixture
def cluster(broker_factory):
    shared = Path(tempfile.mkdtemp(prefix="strata-cluster-"))
    agents = {
        node: broker_factory(extra_args=[
            "--node-id", str(node),
            "--metastore-path", str(shared / "metastore.sqlite"),
            "--group-initial-rebalance-delay-ms", "200",
        ])
        for node in NODES
    }
    for a in agents.values():
        a.start()
    yield agents
    shutil.rmtree(shared, ignore_errors=True)


def bootstrap(agents: dict) -> str:
    return ",".join(a.bootstrap for a in agents.values())


def brokers_and_leaders(bootstrap_servers: str, topic: str | None = None):
    a = admin(bootstrap_servers)
    md = a.list_topics(topic=topic, timeout=10)
    brokers = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
    leaders = {}
    if topic is not None and topic in md.topics:
        leaders = {p: pm.leader for p, pm in md.topics[topic].partitions.items()}
    return brokers, leaders


def test_every_agent_shows_the_same_cluster_and_spreads_the_leaders(cluster):
    expected = {node: a.bootstrap for node, a in cluster.items()}
    topic = unique_topic("cluster-spread")
    create_topic(cluster[1].bootstrap, topic, 6, any_leader=True)
    for node, a in cluster.items():
        # Agents learn of each other through a metastore watch, within a poll or two.
        brokers, leaders = wait_until(
            lambda: (lambda b, l: (b, l) if b == expected and len(l) == 6 else None)(
                *brokers_and_leaders(a.bootstrap, topic)),
            5, f"agent {node} to list all three agents and six partitions")
        counts = {n: list(leaders.values()).count(n) for n in NODES}
        assert counts == {1: 2, 2: 2, 3: 2}, f"agent {node}: leaders {leaders}"


def test_a_client_produces_and_consumes_through_all_leaders(cluster):
    topic = unique_topic("cluster-roundtrip")
    servers = bootstrap(cluster)
    create_topic(cluster[2].bootstrap, topic, 6, any_leader=True)
    p = Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "logger": RDKAFKA_LOG})
    sent = {part: [f"{part}-{i}".encode() for i in range(200)] for part in range(6)}
    errors = []
    for part, values in sent.items():
        for v in values:
            p.produce(topic, value=v, partition=part,
                      on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors, f"undelivered: {errors[:3]}"
    got = consume_confluent(servers, topic, {part: 0 for part in range(6)},
                            {part: 200 for part in range(6)})
    for part in range(6):
        assert [r.value for r in got[part]] == sent[part], f"partition {part}"
        assert [r.offset for r in got[part]] == list(range(200)), f"partition {part}"
    # Each partition's log is on its leader's disk and nowhere else.
    _, leaders = brokers_and_leaders(servers, topic)
    for part, leader in leaders.items():
        for node, a in cluster.items():
            has_log = (a.data_dir / "logs" / f"{topic}-{part}").exists()
            assert has_log == (node == leader), f"{topic}-{part} on agent {node}: {has_log}"


def test_a_second_process_cannot_take_a_live_node_id(cluster, broker_factory):
    shared = cluster[1].extra_args[cluster[1].extra_args.index("--metastore-path") + 1]
    impostor = broker_factory(extra_args=["--node-id", "2", "--metastore-path", shared])
    with pytest.raises(AssertionError) as refused:
        impostor.start(timeout=20)
    assert "node id 2 is in use by a live agent" in str(refused.value)


def test_groups_are_coordinated_on_several_agents_and_consume(cluster):
    """Groups hash to different coordinators; a group consumes from every leader."""
    servers = bootstrap(cluster)
    topic = unique_topic("cluster-group")
    create_topic(servers, topic, 3, any_leader=True)
    p = Producer({"bootstrap.servers": servers, "logger": RDKAFKA_LOG})
    for i in range(300):
        p.produce(topic, value=str(i).encode(), partition=i % 3)
    assert p.flush(30) == 0
    coordinators = set()
    for n in range(6):
        group = f"g-{uuid.uuid4().hex[:8]}-{n}"
        c = Consumer({"bootstrap.servers": servers, "group.id": group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "logger": RDKAFKA_LOG})
        c.subscribe([topic])
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 300 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen.append(int(m.value()))
        assert sorted(seen) == list(range(300)), f"group {group} saw {len(seen)} records"
        c.commit(asynchronous=False)
        c.close()
        a = admin(servers)  # kept: the futures need their client alive
        described = a.describe_consumer_groups([group])[group].result(timeout=10)
        coordinators.add(described.coordinator.id)
        committed = a.list_consumer_group_offsets(
            [_offsets_request(group, topic)])[group].result(timeout=10)
        assert sorted(tp.offset for tp in committed.topic_partitions) == [100, 100, 100]
    assert len(coordinators) > 1, f"every group landed on {coordinators}"


def _offsets_request(group: str, topic: str):
    return ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(3)])


def test_a_killed_agent_takes_only_its_partitions_away_until_it_returns(cluster):
    servers = bootstrap(cluster)
    topic = unique_topic("cluster-kill")
    create_topic(servers, topic, 3, any_leader=True)
    _, leaders = brokers_and_leaders(servers, topic)
    victim_part = next(p for p, leader in leaders.items() if leader == 3)
    p = Producer({"bootstrap.servers": servers, "acks": "all", "logger": RDKAFKA_LOG})
    for part in range(3):
        p.produce(topic, value=b"before", partition=part)
    assert p.flush(30) == 0

    cluster[3].kill()
    survivors = f"{cluster[1].bootstrap},{cluster[2].bootstrap}"
    brokers, leaders = wait_until(
        lambda: (lambda b, l: (b, l) if 3 not in b else None)(*brokers_and_leaders(survivors, topic)),
        LEASE_S + 10, "agent 3 to leave the live set")
    assert sorted(brokers) == [1, 2]
    assert leaders[victim_part] == -1, f"partition {victim_part} still shows a leader: {leaders}"
    # The other partitions take writes meanwhile.
    errors = []
    p2 = Producer({"bootstrap.servers": survivors, "acks": "all", "message.timeout.ms": 20000,
                   "logger": RDKAFKA_LOG})
    for part in range(3):
        if part != victim_part:
            p2.produce(topic, value=b"during", partition=part,
                       on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p2.flush(30) == 0 and not errors, f"{errors}"

    cluster[3].start()
    wait_until(lambda: brokers_and_leaders(servers, topic)[1].get(victim_part) == 3,
               20, "agent 3 to lead its partition again")
    for part in range(3):
        p2.produce(topic, value=b"after", partition=part)
    assert p2.flush(30) == 0
    ends = {part: (2 if part == victim_part else 3) for part in range(3)}
    got = consume_confluent(servers, topic, {part: 0 for part in range(3)}, ends)
    for part in range(3):
        want = [b"before", b"after"] if part == victim_part else [b"before", b"during", b"after"]
        assert [r.value for r in got[part]] == want, f"partition {part}"
