"""Dynamic broker configuration (issue 18, point 4) in a 3-agent cluster, with
librdkafka's AdminClient (IncrementalAlterConfigs and DescribeConfigs; the cluster
default, an empty broker name, which librdkafka refuses to send, by kafka_wire):

- A cluster default set through one agent (`message.max.bytes`, the broker name of the
  topics' `max.message.bytes`) reaches every agent through the metastore: each shows it
  on the topic as DYNAMIC_DEFAULT_BROKER_CONFIG (DescribeConfigs and GET /v1/topics),
  and every leader refuses a batch over it (MSG_SIZE_TOO_LARGE), with no restart.
- A per-broker value beats the default on that broker only; it and the default survive
  a restart of that agent (stored, not in memory); deleting them restores the built-in
  default everywhere.
- A topic's own value beats both; `num.partitions` set dynamically is what a topic
  created without a count gets.
- Refused with INVALID_CONFIG and changing nothing: read-only configs, unknown names,
  bad values, a request mixing good and bad; validate_only changes nothing either.

Java's kafka-configs tool is tested against one agent in tests/java (ToolsTest).
"""

from __future__ import annotations

import pytest
import requests
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from kafka_wire import Wire
from strata_testlib import RDKAFKA_LOG, admin, create_topic, unique_topic, wait_until

BUILT_IN_MAX = "1048588"
RESOURCE_BROKER = 4


@pytest.fixture
def cluster3(broker_factory, request):
    from test_replication import started_cluster
    yield from started_cluster(broker_factory, request, "strata-dyncfg-", [])


def alter(bootstrap: str, name: str, ops: dict, validate_only: bool = False) -> None:
    """IncrementalAlterConfigs on broker resource `name` ("" is the cluster default, sent
    with kafka_wire: the Python clients refuse an empty name): {config: value to SET, or
    None to DELETE}. Raises KafkaException if refused."""
    if name == "":
        w = Wire.connect(bootstrap)
        try:
            code, message = w.incremental_alter_configs(
                RESOURCE_BROKER, "", [(k, 0 if v is not None else 1, v) for k, v in ops.items()],
                validate_only)
        finally:
            w.close()
        if code != 0:
            raise KafkaException(KafkaError(code, message or ""))
        return
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None
                           else AlterConfigOpType.DELETE) for k, v in ops.items()]
    res = ConfigResource(ResourceType.BROKER, name, incremental_configs=entries)
    a = admin(bootstrap)  # kept until the answer comes: a dropped client cancels it
    fs = a.incremental_alter_configs([res], validate_only=validate_only, request_timeout=20)
    fs[res].result(timeout=30)


def described(bootstrap: str, rtype: ResourceType, name: str) -> dict:
    res = ConfigResource(rtype, name)
    a = admin(bootstrap)
    return a.describe_configs([res], request_timeout=20)[res].result(timeout=30)


def src(entry: ConfigEntry) -> int:
    return getattr(entry.source, "value", entry.source)


def http_config(agent, topic: str, name: str) -> dict:
    r = requests.get(f"{agent.http_url}/v1/topics/{topic}", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["configs"][name]


def produce_error(bootstrap: str, topic: str, partition: int, size: int):
    """None if a `size`-byte record is acknowledged, else the KafkaError code."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                  "message.timeout.ms": 15000, "logger": RDKAFKA_LOG})
    got = []
    p.produce(topic, b"x" * size, partition=partition, on_delivery=lambda e, m: got.append(e))
    p.flush(20)
    assert len(got) == 1, "no delivery report"
    return None if got[0] is None else got[0].code()


def test_broker_configs_change_without_restart_on_every_agent(cluster3):
    c = cluster3
    agents = c.agents
    servers = c.servers()
    topic = unique_topic("dyncfg")
    create_topic(servers, topic, 3, any_leader=True)
    md = admin(servers).list_topics(topic=topic, timeout=10).topics[topic]
    leaders = {p: pm.leader for p, pm in md.partitions.items()}
    for p in leaders:
        assert produce_error(servers, topic, p, 4000) is None

    # The cluster default, sent to agent 1 only.
    alter(agents[1].bootstrap, "", {"message.max.bytes": "2000"})
    for node, a in agents.items():
        wait_until(lambda a=a: http_config(a, topic, "max.message.bytes")
                   == {"value": "2000", "source": "dynamic_default"}, 10,
                   f"agent {node} to apply the cluster default")
        entry = described(a.bootstrap, ResourceType.TOPIC, topic)["max.message.bytes"]
        assert (entry.value, src(entry)) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value), entry
    for p, leader in leaders.items():
        assert produce_error(servers, topic, p, 4000) == KafkaError.MSG_SIZE_TOO_LARGE, \
            f"partition {p}, led by agent {leader}, applies the default"
    # (librdkafka cannot describe the default resource itself: an empty name.)
    on2 = described(agents[2].bootstrap, ResourceType.BROKER, "2")["message.max.bytes"]
    assert (on2.value, src(on2)) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value), on2

    # A per-broker value on the leader of partition 0 only.
    node0 = leaders[0]
    other = next(p for p, n in leaders.items() if n != node0)
    alter(agents[node0].bootstrap, str(node0), {"message.max.bytes": "10000"})
    own = described(agents[node0].bootstrap, ResourceType.BROKER, str(node0))["message.max.bytes"]
    assert (own.value, src(own), own.is_read_only) == \
        ("10000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False), own
    # (the synonyms, all under one name, are checked in Java: librdkafka keys them by name)
    assert produce_error(servers, topic, 0, 4000) is None, "the leader's own value"
    assert produce_error(servers, topic, other, 4000) == KafkaError.MSG_SIZE_TOO_LARGE, \
        "the other agents keep the default"

    # Stored in the metastore: a restart keeps both levels.
    agents[node0].restart()
    wait_until(lambda: http_config(agents[node0], topic, "max.message.bytes")
               == {"value": "10000", "source": "dynamic_broker"}, 15, "the override after a restart")

    # A topic's own value beats the broker's.
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "3000", incremental_operation=AlterConfigOpType.SET)])
    a = admin(servers)
    a.incremental_alter_configs([res])[res].result(timeout=30)
    wait_until(lambda: http_config(agents[node0], topic, "max.message.bytes")
               == {"value": "3000", "source": "topic"}, 10, "the topic's own value")

    # num.partitions: the count of a topic created without one.
    alter(agents[3].bootstrap, "", {"num.partitions": "4"})
    for node, ag in agents.items():  # each agent applies it as its topic watch fires
        wait_until(lambda node=node, ag=ag: described(ag.bootstrap, ResourceType.BROKER, str(node))
                   ["num.partitions"].value == "4", 10, f"agent {node} to apply num.partitions")
    fresh = unique_topic("dyncfg-default-count")
    a = admin(agents[3].bootstrap)
    a.create_topics([NewTopic(fresh)])[fresh].result(timeout=30)
    wait_until(lambda: len(admin(servers).list_topics(topic=fresh, timeout=10)
                           .topics[fresh].partitions) == 4, 10, "4 partitions")

    # Refused, changing nothing.
    for ops, says in [({"log.dirs": "/elsewhere"}, "Cannot update these configs dynamically"),
                      ({"broker.id": "9"}, "Cannot update"),
                      ({"no.such.config": "1"}, "Unknown broker config"),
                      ({"log.retention.ms": "soon"}, "log.retention.ms"),
                      ({"num.partitions": "0"}, "num.partitions")]:
        with pytest.raises(KafkaException) as e:
            alter(agents[1].bootstrap, "", ops)
        err = e.value.args[0]
        assert err.code() == KafkaError.INVALID_CONFIG and says in err.str(), (ops, err)
    with pytest.raises(KafkaException):
        alter(agents[1].bootstrap, "", {"message.max.bytes": "1", "broker.id": "9"})
    alter(agents[1].bootstrap, "", {"message.max.bytes": "50"}, validate_only=True)
    n = leaders[other]  # an agent without a value of its own
    on1 = described(agents[n].bootstrap, ResourceType.BROKER, str(n))
    assert {k: (on1[k].value, src(on1[k])) for k in ("message.max.bytes", "num.partitions", "log.retention.ms")} \
        == {"message.max.bytes": ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
            "num.partitions": ("4", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
            "log.retention.ms": ("604800000", ConfigSource.DEFAULT_CONFIG.value)}, \
        "refusals and validate_only change nothing"

    # Deleting every level restores the built-in default everywhere.
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    a = admin(servers)
    a.incremental_alter_configs([res])[res].result(timeout=30)
    alter(agents[node0].bootstrap, str(node0), {"message.max.bytes": None})
    alter(agents[2].bootstrap, "", {"message.max.bytes": None, "num.partitions": None})
    for node, a in agents.items():
        wait_until(lambda a=a: http_config(a, topic, "max.message.bytes")
                   == {"value": BUILT_IN_MAX, "source": "default"}, 10, f"agent {node} back to the default")
    for p in leaders:
        assert produce_error(servers, topic, p, 4000) is None
    on1 = described(agents[1].bootstrap, ResourceType.BROKER, "1")
    assert {src(on1[k]) for k in ("message.max.bytes", "num.partitions")} == {ConfigSource.DEFAULT_CONFIG.value}


def test_kafka_python_alter_configs_on_a_broker_and_broker_loggers_change_levels(broker):
    """kafka-python: AlterConfigs (not incremental) on a broker, read-only configs
    refused, IncrementalAlterConfigs DELETE back to the defaults; BROKER_LOGGER changes a logger's level at once (its DEBUG lines
    appear, and stop when the level is deleted), and is refused with a bad level."""
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        def broker_alter(configs: dict) -> dict:
            return a.alter_configs([KConfigResource(ConfigResourceType.BROKER, "1", configs=configs)],
                                   incremental=False, raise_on_unknown=False)

        def broker_value(name: str) -> tuple[str, str] | None:
            """None for a config at its default: kafka-python leaves those out."""
            d = a.describe_configs([KConfigResource(ConfigResourceType.BROKER, "1", configs=[name])])
            e = d["broker"]["1"].get(name)
            return None if e is None else (e["value"], e["config_source"])

        assert broker_alter({"log.retention.ms": "5000", "log.segment.bytes": "1048576"}) == \
            {"broker": {"1": "OK"}}
        assert broker_value("log.retention.ms") == ("5000", "DYNAMIC_BROKER_CONFIG")
        # AlterConfigs replaces the set; kafka-python sends the other dynamic values
        # it read along with the change, so that they are kept.
        assert broker_alter({"log.segment.bytes": "2097152"}) == {"broker": {"1": "OK"}}
        assert broker_value("log.retention.ms") == ("5000", "DYNAMIC_BROKER_CONFIG")
        assert broker_value("log.segment.bytes") == ("2097152", "DYNAMIC_BROKER_CONFIG")
        refused = broker_alter({"broker.id": "3"})
        assert "Cannot update" in str(refused), refused
        assert broker_value("log.segment.bytes") == ("2097152", "DYNAMIC_BROKER_CONFIG"), "unchanged"
        deleted = a.alter_configs([KConfigResource(ConfigResourceType.BROKER, "1", configs={
            "log.segment.bytes": ("DELETE", None), "log.retention.ms": ("DELETE", None)})])
        assert deleted == {"broker": {"1": "OK"}}, deleted
        assert broker_value("log.segment.bytes") is None
        assert broker_value("log.retention.ms") is None

        def logger(configs: dict) -> dict:
            return a.alter_configs([KConfigResource(ConfigResourceType.BROKER_LOGGER, "1", configs=configs)],
                                   raise_on_unknown=False)

        def connect_once() -> None:
            probe = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
            probe.list_topics()
            probe.close()

        marker = "connection accepted"
        assert marker not in broker.log_text(), "INFO by default"
        assert logger({"strata_agent.server": "DEBUG"}) == {"broker_logger": {"1": "OK"}}
        levels = a.describe_configs([KConfigResource(ConfigResourceType.BROKER_LOGGER, "1")])
        assert levels["broker_logger"]["1"]["strata_agent.server"]["value"] == "DEBUG"
        assert levels["broker_logger"]["1"]["root"]["value"] == "INFO"
        connect_once()
        wait_until(lambda: marker in broker.log_text(), 10, "a DEBUG line of strata_agent::server")
        assert logger({"strata_agent.server": ("DELETE", None)}) == {"broker_logger": {"1": "OK"}}
        seen = broker.log_text().count(marker)
        connect_once()
        assert broker.log_text().count(marker) == seen, "back to INFO: no more DEBUG lines"
        bad = logger({"strata_agent": "LOUD"})
        assert "not a supported log level" in str(bad), bad
        bad = logger({"root": ("DELETE", None)})
        assert "root logger" in str(bad), bad
    finally:
        a.close()
