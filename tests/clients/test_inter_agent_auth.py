"""Agents authenticating to each other (issue 17): two agents whose inter-agent listener
is SASL_PLAINTEXT, an authorizer on, and the agents' own user `User:broker` the only
super user. The agents seed their SCRAM credential themselves, replicate as that
principal, and a follower restarted with a wrong password cannot fetch as a replica:
it stays out of the ISR (acks=all writes with min.insync.replicas=2 are refused) until
it is given the right one. A plain client on the PLAINTEXT listener sees no topic and
cannot write.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import pick_free_ports
from strata_testlib import wait_until

PASSWORD = "broker-secret"


def sasl(address: str, password: str = PASSWORD) -> dict:
    return {
        "bootstrap.servers": address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "broker",
        "sasl.password": password,
    }


@pytest.fixture
def agents(broker_factory):
    metastore = Path(tempfile.mkdtemp(prefix="strata-interagent-")) / "metastore.sqlite"
    ports = pick_free_ports(2)
    out = {}
    for node, port in zip((1, 2), ports):
        b = broker_factory(
            extra_args=[
                "--node-id", str(node),
                "--metastore-path", str(metastore),
                "--listeners", f"INTERNAL://127.0.0.1:{port}",
                "--listener-security-protocol-map", "INTERNAL:SASL_PLAINTEXT",
                "--inter-agent-listener", "INTERNAL",
                "--inter-agent-sasl-username", "broker",
                "--authorizer", "acl",
                "--super-users", "User:broker",
                "--connection-failed-authentication-delay-ms", "10",
                "--lease-ms", "2000",
                "--replica-lag-time-max-ms", "2000",
            ],
            extra_env={"STRATA_INTER_AGENT_SASL_PASSWORD": PASSWORD},
        )
        b.internal = f"127.0.0.1:{port}"
        out[node] = b
    for b in out.values():
        b.start()
    return out


def isr(admin: AdminClient, topic: str) -> list[int]:
    md = admin.list_topics(topic, timeout=10)
    t = md.topics[topic]
    if t.error is not None or 0 not in t.partitions:
        return []
    return sorted(t.partitions[0].isrs)


def leader(admin: AdminClient, topic: str) -> int:
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader


def produce(address: str, topic: str, n: int, password: str = PASSWORD) -> list:
    """Produces n records with acks=all; returns the delivery errors (None for each
    delivered record)."""
    p = Producer({**sasl(address, password), "acks": "all", "message.timeout.ms": 5000,
                  "retries": 0})
    outcomes = []
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, on_delivery=lambda err, _m: outcomes.append(err))
    p.flush(15)
    return outcomes


def test_agents_replicate_as_their_own_principal_and_a_wrong_password_cannot(agents):
    admin = AdminClient(sasl(agents[1].internal))
    topic = "replicated"
    futures = admin.create_topics([NewTopic(topic, 1, 2, config={"min.insync.replicas": "2"})])
    futures[topic].result(15)
    wait_until(lambda: isr(admin, topic) == [1, 2], 20, "both agents in the ISR")
    assert produce(agents[1].internal, topic, 20) == [None] * 20

    # The PLAINTEXT listener's User:ANONYMOUS is no replica and no writer.
    plain = AdminClient({"bootstrap.servers": agents[1].bootstrap})
    assert topic not in plain.list_topics(timeout=10).topics
    p = Producer({"bootstrap.servers": agents[1].bootstrap, "message.timeout.ms": 5000})
    errors = []
    p.produce(topic, b"x", on_delivery=lambda err, _m: errors.append(err))
    p.flush(10)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors

    # The follower restarted with a wrong password cannot authenticate to its leader:
    # it stays out of the ISR, so acks=all writes are refused for want of replicas.
    lead = leader(admin, topic)
    follower = agents[3 - lead]
    follower.stop()
    follower.extra_env["STRATA_INTER_AGENT_SASL_PASSWORD"] = "wrong"
    follower.start()
    admin = AdminClient(sasl(agents[lead].internal))
    wait_until(lambda: isr(admin, topic) == [lead], 20, "the ISR without the follower")
    failures = lambda: follower.log_text().count("a follower cannot authenticate to its leader")
    seen = failures()
    wait_until(lambda: failures() >= seen + 2, 20, "the follower failing to authenticate again")
    assert isr(admin, topic) == [lead]
    refused = produce(agents[lead].internal, topic, 1)
    assert refused[0] is not None and refused[0].code() in (
        KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND), refused
    # The credential it could not use was not replaced by its own.
    assert produce(agents[lead].internal, topic, 1, password="wrong")[0] is not None

    # With the right password it catches up and rejoins.
    follower.stop()
    follower.extra_env["STRATA_INTER_AGENT_SASL_PASSWORD"] = PASSWORD
    follower.start()
    wait_until(lambda: isr(admin, topic) == [1, 2], 20, "the follower back in the ISR")
    assert produce(agents[lead].internal, topic, 5) == [None] * 5


def test_a_sasl_inter_agent_listener_without_credentials_stops_the_agent(broker_factory):
    (port,) = pick_free_ports(1)
    b = broker_factory(extra_args=[
        "--listeners", f"INTERNAL://127.0.0.1:{port}",
        "--listener-security-protocol-map", "INTERNAL:SASL_PLAINTEXT",
        "--inter-agent-listener", "INTERNAL",
    ])
    with pytest.raises(Exception):
        b.start(timeout=15)
    assert "inter_agent_sasl_username and inter_agent_sasl_password" in b.log_text()
    b2 = broker_factory(extra_args=["--inter-agent-listener", "NOPE"])
    with pytest.raises(Exception):
        b2.start(timeout=15)
    assert 'inter_agent_listener: "NOPE" is not a listener' in b2.log_text()
