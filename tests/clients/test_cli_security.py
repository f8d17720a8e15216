"""`strata acls`, `strata users` and `strata quotas` (`agent/src/cli/security.rs`, on the
HTTP API's /v1/acls, /v1/users and /v1/quotas and the security service the Kafka APIs
share), each effect checked with a real Kafka client:
- a SCRAM user set with `strata users set` logs in over SASL with librdkafka, and
  librdkafka's DescribeUserScramCredentials shows its mechanisms; deleted, it cannot;
- a binding made with `strata acls create` is what librdkafka's DescribeAcls lists and
  lets the user produce; one made with librdkafka's CreateAcls is what `strata acls
  list` shows; `strata acls delete` takes the right away again;
- a producer quota set with `strata quotas alter` throttles a librdkafka producer of
  that client id (it is told a throttle time), and removed, is gone from the list;
- wrong input is one line on stderr with exit 1 (refused by the API) or 2 (usage), and
  without an authorizer `strata acls` says why there are no ACLs.
"""
from __future__ import annotations

import json

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from strata_testlib import create_topic, delivered, unique_topic, wait_until
from test_acls import EVERY_ACL, describe_acls, produce_one
from test_cli import REFUSED, USAGE, fails, ok, ok_json, strata, table
from test_quotas import set_quota
from test_sasl import start_sasl_broker

PASSWORD = "alice-secret-1"


def alice(b, password: str = PASSWORD) -> dict:
    return {"bootstrap.servers": b.sasl, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
            "sasl.password": password}


def alice_can_write(b, topic: str) -> bool:
    return produce_one(alice(b), topic) is None


def test_users_and_acls_made_with_the_cli_are_the_ones_kafka_clients_see(broker_factory):
    b = start_sasl_broker(broker_factory, "--authorizer", "acl", "--super-users", "User:ANONYMOUS")
    http = b.http_url
    kafka_admin = AdminClient({"bootstrap.servers": b.plaintext})
    topic = unique_topic("cli-acl")
    create_topic(b.plaintext, topic, 1)

    # A user, set from a password on stdin, is one librdkafka describes and logs in as.
    out = ok(strata("users", "set", "alice", http=http, stdin=PASSWORD + "\n"))
    assert "SCRAM-SHA-256 (4096 iterations)" in out and "SCRAM-SHA-512 (4096 iterations)" in out
    described = kafka_admin.describe_user_scram_credentials(["alice"])["alice"].result(15)
    assert sorted((c.mechanism.name, c.iterations) for c in described.scram_credential_infos) == [
        ("SCRAM_SHA_256", 4096), ("SCRAM_SHA_512", 4096)]
    # Authenticated, but no binding lets alice write yet.
    assert produce_one(alice(b), topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    out = ok(strata("acls", "create", "--topic", topic, "--allow-principal", "User:alice",
                    "--operation", "write", "--operation", "DESCRIBE", http=http))
    rows = table(out.split("created:\n", 1)[1], "RESOURCE_TYPE")
    assert sorted(r["OPERATION"] for r in rows) == ["DESCRIBE", "WRITE"]
    listed = describe_acls(kafka_admin, EVERY_ACL)
    for op in (AclOperation.WRITE, AclOperation.DESCRIBE):
        assert AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice",
                          "*", op, AclPermissionType.ALLOW) in listed, listed
    assert alice_can_write(b, topic)

    # A binding made through Kafka's CreateAcls is listed by the CLI.
    group = unique_topic("cli-group")
    made = AclBinding(ResourceType.GROUP, group, ResourcePatternType.PREFIXED, "User:alice", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)
    for f in kafka_admin.create_acls([made]).values():
        assert f.result(15) is None
    mine = ok_json(strata("acls", "list", "--principal", "User:alice", "-o", "json", http=http))
    assert {"resource_type": "GROUP", "resource_name": group, "pattern_type": "PREFIXED",
            "principal": "User:alice", "host": "*", "operation": "READ",
            "permission": "ALLOW"} in mine["acls"], mine
    assert len(mine["acls"]) == 3

    # Deleted through the CLI: gone for librdkafka too, and alice can no longer write.
    out = ok(strata("acls", "delete", "--topic", topic, "--principal", "User:alice", http=http))
    assert len(table(out.split("deleted:\n", 1)[1], "RESOURCE_TYPE")) == 2
    assert [a.name for a in describe_acls(kafka_admin, EVERY_ACL)] == [group]
    assert produce_one(alice(b), topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Wrong input: one line on stderr, nothing stored.
    fails(strata("acls", "create", "--topic", topic, "--allow-principal", "alice",
                 "--operation", "read", http=http), REFUSED, "Could not parse principal")
    fails(strata("acls", "create", "--topic", topic, "--allow-principal", "User:a",
                 "--operation", "reed", http=http), REFUSED, 'operation "reed" is not one of')
    fails(strata("acls", "delete", http=http), REFUSED, "--all")
    fails(strata("users", "set", "bob", "--iterations", "10", http=http, stdin="pw\n"),
          REFUSED, "Too few iterations", "UNACCEPTABLE_CREDENTIAL")
    fails(strata("users", "describe", "bob", http=http), REFUSED, "RESOURCE_NOT_FOUND")
    assert [a.name for a in describe_acls(kafka_admin, EVERY_ACL)] == [group]

    # A user deleted with the CLI no longer logs in.
    ok(strata("acls", "create", "--topic", topic, "--allow-principal", "User:alice",
              "--operation", "write", http=http))
    assert alice_can_write(b, topic)
    ok(strata("users", "delete", "alice", http=http))
    assert table(ok(strata("users", "list", http=http)), "USER") == []
    refused = produce_one(alice(b), topic)
    assert refused in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                       KafkaError._MSG_TIMED_OUT), refused


def test_without_an_authorizer_acls_say_why(broker):
    fails(strata("acls", "list", http=broker.http_url), REFUSED,
          "no authorizer is configured", "SECURITY_DISABLED")


def test_a_quota_set_with_the_cli_throttles_a_librdkafka_producer(broker_factory):
    # Two 1 s windows: a rate over the quota shows at once (over Kafka's default eleven,
    # a burst is spread thin).
    broker = broker_factory(extra_args=["--quota-window-num", "2"])
    broker.start()
    http = broker.http_url
    topic = unique_topic("cli-quota")
    create_topic(broker.bootstrap, topic, 1)
    out = ok(strata("quotas", "alter", "client-id=slow-writer", "--set",
                    "producer_byte_rate=65536", http=http))
    assert "client-id=slow-writer" in out and "producer_byte_rate=65536" in out
    # One set through Kafka's AlterClientQuotas is listed beside it.
    set_quota(broker.bootstrap, [("user", None), ("client-id", "other")],
              [("consumer_byte_rate", 2097152.0)])
    listed = ok_json(strata("quotas", "list", "-o", "json", http=http))["quotas"]
    assert {"entity": {"client-id": "slow-writer"}, "values": {"producer_byte_rate": 65536.0}} in listed
    assert {"entity": {"client-id": "other", "user": None},
            "values": {"consumer_byte_rate": 2097152.0}} in listed
    rows = table(ok(strata("quotas", "list", "user=<default>,client-id=other", http=http)), "ENTITY")
    assert rows == [{"ENTITY": "client-id=other,user=<default>",
                     "QUOTAS": "consumer_byte_rate=2097152.0"}]

    throttles: list[int] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "slow-writer", "acks": "1",
                  "linger.ms": 5, "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    outcomes = []
    for _ in range(16):
        p.produce(topic, value=b"t" * 16384, on_delivery=lambda e, _m: outcomes.append(e))
        p.poll(0)
    assert p.flush(60) == 0
    assert delivered(outcomes) == ["ok"] * 16

    def told_to_wait() -> bool:
        p.poll(0.2)
        return any(t > 0 for t in throttles)

    wait_until(told_to_wait, 15, "a throttle time reported to the producer")

    ok(strata("quotas", "alter", "client-id=slow-writer", "--delete", "producer_byte_rate",
              http=http))
    listed = json.loads(ok(strata("quotas", "list", "-o", "json", http=http)))["quotas"]
    assert all(q["entity"] != {"client-id": "slow-writer"} for q in listed), listed

    fails(strata("quotas", "alter", "usr=x", "--set", "a=1", http=http), USAGE,
          '"usr" is not an entity type')
    fails(strata("quotas", "alter", "ip=10.0.0.1", "--set", "producer_byte_rate=5", http=http),
          REFUSED, "not a quota of a ip entity")
    fails(strata("quotas", "alter", "user=alice", "--set", "producer_byte_rate=-1", http=http),
          REFUSED, "must be positive")
