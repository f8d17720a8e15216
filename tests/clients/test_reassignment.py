"""Moving replicas and leaders on request, with real admin clients: kafka-python's
alter/list_partition_reassignments (KIP-455) and confluent-kafka's elect_leaders
(KIP-460), against three strata processes sharing one metastore.

A reassignment adds the new replicas first; they copy everything from the leader and
join the ISR; only then does the controller drop the old replicas (in a new leader
epoch). The test checks each step from the outside: the new replica's data while it
catches up, the old replica's log leaving its disk, and every record still there.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KTopicPartition

from strata_testlib import admin, consume_confluent, unique_topic, wait_until
from test_replication import cluster  # noqa: F401  (the three-agent fixture)
from replication_testlib import produce_values


def partition_state(servers: str, topic: str, p: int = 0):
    md = admin(servers).list_topics(topic=topic, timeout=10)
    pm = md.topics[topic].partitions[p]
    return pm.leader, list(pm.replicas), sorted(pm.isrs)


def test_reassignment_copies_before_it_switches_and_elect_leaders_moves_leadership(cluster):  # noqa: F811
    servers = cluster.servers()
    topic = unique_topic("reassign")
    a = admin(servers)
    futures = a.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]],
                                        config={"min.insync.replicas": "1"})])
    futures[topic].result(30)
    wait_until(lambda: partition_state(servers, topic) == (1, [1, 2], [1, 2]), 20,
               "partition 0 on agents 1 and 2, led by 1, both in sync")

    values = [f"v{i:05d}".encode() for i in range(3000)]
    results = produce_values(servers, topic, 0, values, flush_timeout=30, acks="all")
    assert all(err is None for _, err, _ in results), [e for _, e, _ in results if e][:3]

    kadmin = KafkaAdminClient(bootstrap_servers=servers, client_id="strata-reassign-test")
    try:
        outcome = kadmin.alter_partition_reassignments({KTopicPartition(topic, 0): [3, 2]})
        assert outcome == {KTopicPartition(topic, 0): None}, outcome
        # Agent 3 copies the log, joins the ISR, and then 1 is removed in a new epoch.
        final = wait_until(
            lambda: (lambda s: s if s[1] == [3, 2] and s[2] == [2, 3] else None)(
                partition_state(servers, topic)),
            30, "replicas [3, 2] with both in sync")
        assert final[0] in (2, 3), f"leader {final[0]} must be a target replica"
        ongoing = kadmin.list_partition_reassignments()
        assert not ongoing, f"the reassignment is complete, yet listed: {ongoing}"
    finally:
        kadmin.close()

    # The removed replica's log leaves agent 1's disk; agent 3 has the whole log.
    old = cluster.agents[1].data_dir / "logs" / f"{topic}-0"
    wait_until(lambda: not old.exists(), 10, f"{old} deleted after the move")
    new = cluster.agents[3].data_dir / "logs" / f"{topic}-0"
    assert new.exists(), f"{new} missing"

    # Hand leadership to the preferred replica (3) on request, then read everything
    # back from it.
    if final[0] != 3:
        f = a.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
        outcome = f.result(20)
        assert outcome[TopicPartition(topic, 0)] is None, outcome
    wait_until(lambda: partition_state(servers, topic)[0] == 3, 20, "agent 3 leads")
    # A second request finds nothing to do.
    f = a.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
    err = f.result(20)[TopicPartition(topic, 0)]
    assert err is not None and err.name() == "ELECTION_NOT_NEEDED", err

    got = consume_confluent(servers, topic, {0: 0}, {0: len(values)}, timeout=30)[0]
    assert [r.value for r in got] == values, "every record, in order, after the move"
    assert [r.offset for r in got] == list(range(len(values)))

    # Each agent's own view over HTTP: 3 leads with both in sync, 2 follows, 1 has none.
    def replicas_on(node: int) -> list[dict]:
        url = f"http://127.0.0.1:{cluster.agents[node].http_port}/v1/partitions"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["node_id"] == node, body
        return [p for p in body["partitions"] if p["topic"] == topic]

    def leader_view():
        mine = replicas_on(3)
        return mine if mine and mine[0].get("role") == "leader" and \
            sorted(mine[0]["isr"]) == [2, 3] and mine[0]["high_watermark"] == len(values) else None

    lead = wait_until(leader_view, 10, "agent 3 leading over HTTP")[0]
    assert {f["node_id"] for f in lead["followers"]} == {2}, lead
    # Agent 2 learns the new epoch from the metastore on its own (a watch), possibly
    # after agent 3 already leads it: wait for its view, then check it.
    def follower_view():
        mine = replicas_on(2)
        return mine if mine and mine[0].get("leader") == 3 else None

    follow = wait_until(follower_view, 10, "agent 2 following agent 3 over HTTP")
    assert [(p["role"], p["leader"], p["log_end_offset"]) for p in follow] == \
        [("follower", 3, len(values))], follow
    assert replicas_on(1) == [], "agent 1 no longer holds a replica"


@pytest.mark.parametrize("target,error", [
    ([4, 2], "InvalidReplicationAssignmentError"),  # no agent 4
    ([2, 2], "InvalidReplicationAssignmentError"),  # a replica twice
    (None, "NoReassignmentInProgressError"),  # cancel when nothing moves
])
def test_invalid_reassignments_are_refused(cluster, target, error):  # noqa: F811
    servers = cluster.servers()
    topic = unique_topic("reassign-bad")
    a = admin(servers)
    a.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]])])[topic].result(30)
    wait_until(lambda: partition_state(servers, topic)[2] == [1, 2], 20, "in sync")
    kadmin = KafkaAdminClient(bootstrap_servers=servers, client_id="strata-reassign-test")
    try:
        outcome = kadmin.alter_partition_reassignments({KTopicPartition(topic, 0): target})
        err = outcome[KTopicPartition(topic, 0)]
        assert err is not None and err.__name__ == error, outcome
    finally:
        kadmin.close()
    assert partition_state(servers, topic)[1] == [1, 2], "nothing moved"


@pytest.fixture
def tiered_cluster(broker_factory):
    """Three agents on one metastore and one archive directory, tiering every 200 ms."""
    import shutil
    import tempfile
    from pathlib import Path

    from replication_testlib import Cluster
    shared = Path(tempfile.mkdtemp(prefix="strata-reassign-tiered-"))
    agents = {
        node: broker_factory(extra_args=[
            "--node-id", str(node),
            "--metastore-path", str(shared / "metastore.sqlite"),
            "--archive-url", f"file://{shared / 'archive'}",
            "--tiering-interval-ms", "200",
            "--lease-ms", "3000",
            "--replica-lag-time-max-ms", "2000",
        ])
        for node in (1, 2, 3)
    }
    c = Cluster(agents, shared / "metastore.sqlite")
    try:
        for a in agents.values():
            a.start()
        yield c
    finally:
        for a in agents.values():
            a.kill()
        shutil.rmtree(shared, ignore_errors=True)


def replica_status(agent, topic: str) -> dict | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.http_port}/v1/partitions", timeout=10) as r:
        mine = [p for p in json.load(r)["partitions"] if p["topic"] == topic]
    return mine[0] if mine else None


def test_a_new_replica_behind_the_leaders_log_start_starts_there(tiered_cluster):
    """A replica added after the leader archived and deleted its oldest segments cannot
    copy them: it starts its log at the leader's log start (Kafka's
    truncateFullyAndStartAt), catches up, joins the ISR, and the move completes; the
    older records stay readable from the archive."""
    cluster = tiered_cluster
    servers = cluster.servers()
    topic = unique_topic("reassign-tiered")
    a = admin(servers)
    a.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]], config={
        "remote.storage.enable": "true", "segment.bytes": "3000", "local.retention.ms": "0",
    })])[topic].result(30)
    wait_until(lambda: partition_state(servers, topic) == (1, [1, 2], [1, 2]), 20, "in sync")
    values = [f"t{i:05d}".encode() for i in range(2000)]
    results = produce_values(servers, topic, 0, values, flush_timeout=30, acks="all",
                             **{"linger.ms": 0, "batch.num.messages": 20})
    assert all(err is None for _, err, _ in results), [e for _, e, _ in results if e][:3]
    # The agent applies local retention every 5 s, once segments are archived.
    leader_start = wait_until(
        lambda: (lambda s: s["log_start_offset"] if s and s["log_start_offset"] > 0 else None)(
            replica_status(cluster.agents[1], topic)),
        30, "the leader's oldest segments archived and deleted locally")

    kadmin = KafkaAdminClient(bootstrap_servers=servers, client_id="strata-reassign-test")
    try:
        outcome = kadmin.alter_partition_reassignments({KTopicPartition(topic, 0): [1, 2, 3]})
        assert outcome == {KTopicPartition(topic, 0): None}, outcome
        wait_until(lambda: partition_state(servers, topic) == (1, [1, 2, 3], [1, 2, 3]), 30,
                   "agent 3 in sync")
        # The controller completes the move on its next pass.
        wait_until(lambda: not kadmin.list_partition_reassignments(), 10, "the move complete")
    finally:
        kadmin.close()
    new = replica_status(cluster.agents[3], topic)
    assert new["role"] == "follower" and new["log_end_offset"] == len(values), new
    assert new["log_start_offset"] >= leader_start > 0, \
        f"agent 3 started at the leader's log start ({leader_start}), not 0: {new}"
    got = consume_confluent(servers, topic, {0: 0}, {0: len(values)}, timeout=30)[0]
    assert [r.value for r in got] == values, "every record, the oldest from the archive"
