"""ACL authorization with real clients: an agent with `--authorizer acl`, a
SASL_PLAINTEXT listener and the users admin (a super user), alice and bob (SCRAM).
Bindings are created, described and deleted with librdkafka's AdminClient
(CreateAcls/DescribeAcls/DeleteAcls) and kafka-python's KafkaAdminClient, and then
enforced on librdkafka's and kafka-python's producers, consumers and admin requests
with Kafka's error codes: prefixed and literal ALLOWs, DENY beating ALLOW, the
wildcard principal `User:*`, topics hidden from Metadata, refused topic creation,
CLUSTER_AUTHORIZATION_FAILED for ACL changes by a non-admin, INVALID_REQUEST for
invalid bindings, SECURITY_DISABLED without an authorizer, KIP-430's authorized
operations, and the ACL changes in the audit log.

The PLAINTEXT listener's principal, User:ANONYMOUS, is a super user too: the tests
create users and topics through it. librdkafka drops DescribeAcls' top-level error code
(its describe_acls() answers a refused request with an empty list), so refusals of
DescribeAcls are checked with kafka-python."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka import ElectionType
from confluent_kafka.admin import (
    AclBinding,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from strata_testlib import RDKAFKA_LOG, consume_confluent, create_topic, delivered, unique_topic, wait_until
from test_sasl import USERS as SASL_USERS
from test_sasl import SaslBroker, add_users, sasl_conf, start_sasl_broker

USERS = {**SASL_USERS, "admin": "admin-secret"}
MECHANISM = "SCRAM-SHA-512"
TIMEOUT = 20

TOPIC_OPERATIONS = {
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
    AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}
CLUSTER_OPERATIONS = {
    AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
    AclOperation.DESCRIBE,
}
# librdkafka's name for the CLUSTER resource type (4) is BROKER.
CLUSTER = ResourceType.BROKER
EVERY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)


def start_acl_broker(broker_factory, *extra: str) -> SaslBroker:
    b = start_sasl_broker(broker_factory, "--authorizer", "acl",
                          "--super-users", "User:admin;User:ANONYMOUS", *extra)
    # 4096 iterations (Kafka's minimum): every new client authenticates once.
    add_users(b.plaintext, USERS, iterations=4096)
    return b


@pytest.fixture
def acl_broker(broker_factory) -> SaslBroker:
    return start_acl_broker(broker_factory)


def conf(b: SaslBroker, user: str, **extra) -> dict:
    return sasl_conf(b, MECHANISM, user, password=USERS[user],
                     **{"logger": RDKAFKA_LOG, **extra})


def admin_as(b: SaslBroker, user: str) -> AdminClient:
    return AdminClient(conf(b, user))


def binding(restype: ResourceType, name: str, principal: str, op: AclOperation,
            pattern: ResourcePatternType = ResourcePatternType.LITERAL,
            permission: AclPermissionType = AclPermissionType.ALLOW, host: str = "*") -> AclBinding:
    return AclBinding(restype, name, pattern, principal, host, op, permission)


def acl_filter(restype: ResourceType = ResourceType.ANY, name: str | None = None,
               pattern: ResourcePatternType = ResourcePatternType.ANY, principal: str | None = None,
               host: str | None = None, op: AclOperation = AclOperation.ANY,
               permission: AclPermissionType = AclPermissionType.ANY) -> AclBindingFilter:
    return AclBindingFilter(restype, name, pattern, principal, host, op, permission)


def create_acls(a: AdminClient, bindings: list[AclBinding]) -> None:
    for acl, f in a.create_acls(bindings, request_timeout=TIMEOUT).items():
        assert f.result(TIMEOUT) is None, acl


def describe_acls(a: AdminClient, f: AclBindingFilter) -> set[AclBinding]:
    return set(a.describe_acls(f, request_timeout=TIMEOUT).result(TIMEOUT))


def error_code(f) -> int:
    """The Kafka error code a future fails with (fails if it succeeds)."""
    with pytest.raises(KafkaException) as e:
        f.result(TIMEOUT)
    return e.value.args[0].code()


def produce(config: dict, topic: str, values: list[bytes], keyed: bool = False,
            **extra) -> list[int | None]:
    """Produces with acks=all (each value its own key if `keyed`); the error code of each
    record (None: acknowledged), from the delivery report or from produce() itself once
    librdkafka knows the topic's error."""
    p = Producer({**config, "acks": "all", "linger.ms": 5, "message.timeout.ms": 15000, **extra})
    outcomes: list[int | None] = []

    def on_delivery(err, _msg):
        outcomes.append(None if err is None else err.code())

    for v in values:
        try:
            p.produce(topic, key=v if keyed else None, value=v, on_delivery=on_delivery)
        except KafkaException as e:
            outcomes.append(e.args[0].code())
        p.poll(0)
    assert p.flush(TIMEOUT) == 0, "records still in flight"
    return outcomes


def produce_one(config: dict, topic: str) -> int | None:
    (outcome,) = produce(config, topic, [b"one"])
    return outcome


def consume_in_group(config: dict, topic: str, group: str, count: int,
                     timeout: float = 30) -> list[bytes]:
    """Values of `count` records read by a subscribed member of `group`, which commits."""
    c = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    got: list[bytes] = []
    errors: list[str] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                errors.append(str(m.error()))
                continue
            got.append(m.value())
        assert len(got) == count, f"got {len(got)} of {count} records; errors {errors[-5:]}"
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def group_consume_errors(config: dict, topic: str, group: str, wanted: int,
                         timeout: float = 20) -> tuple[set[int], list]:
    """A subscribed member's error codes, polled until `wanted` is among them, and
    whatever records it got."""
    c = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    codes: set[int] = set()
    got = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while wanted not in codes and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                codes.add(m.error().code())
            else:
                got.append(m.value())
    finally:
        c.close()
    return codes, got


def read_error(config: dict, topic: str, partition: int = 0, timeout: float = 20) -> int | bytes:
    """Assigns the partition at offset 0: the first partition error's code, or the first
    record's value."""
    # confluent-kafka wants a group.id even without subscribe(); librdkafka then looks
    # its coordinator up, and the GROUP_AUTHORIZATION_FAILED it may get for that is
    # not about the partition.
    c = Consumer({**config, "group.id": unique_topic("unused"), "enable.auto.commit": False,
                  "enable.partition.eof": False})
    other: list[str] = []
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                code = m.error().code()
                if m.topic() == topic or code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    return code
                other.append(str(m.error()))
                continue
            return m.value()
    finally:
        c.close()
    raise AssertionError(f"nothing read from {topic}[{partition}] within {timeout}s; other errors {other}")


def kafka_python_auth(b: SaslBroker, user: str) -> dict:
    return dict(bootstrap_servers=b.sasl, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user,
                sasl_plain_password=USERS[user])


def kafka_python_describe_every_acl(**connection):
    """kafka-python's DescribeAcls of every binding: (bindings, error), raising the
    response's error. (librdkafka drops DescribeAcls' top-level error code: its
    describe_acls() answers a refused request with an empty list.)"""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType

    admin = KafkaAdminClient(**connection)
    try:
        return admin.describe_acls(ACLFilter(
            principal=None, host=None, operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        admin.close()


def topic_names(a: AdminClient) -> set[str]:
    return set(a.list_topics(timeout=TIMEOUT).topics)


def audit(b: SaslBroker, limit: int = 500) -> list[dict]:
    with urllib.request.urlopen(f"{b.http_url}/v1/audit?limit={limit}", timeout=10) as resp:
        return json.loads(resp.read())["entries"]


# --------------------------------------------------------------------------- tests
def test_alice_produces_and_consumes_with_prefixed_topic_acls_and_a_group_acl(acl_broker):
    b = acl_broker
    prefix = unique_topic("alice") + "-"
    topic, group = prefix + "orders", unique_topic("alice-group")
    create_topic(b.plaintext, topic, 2)
    create_acls(admin_as(b, "admin"), [
        binding(ResourceType.TOPIC, prefix, "User:alice", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        binding(ResourceType.TOPIC, prefix, "User:alice", AclOperation.READ, ResourcePatternType.PREFIXED),
        binding(ResourceType.GROUP, group, "User:alice", AclOperation.READ),
    ])

    # Idempotent: InitProducerId is allowed by WRITE on a topic (no IDEMPOTENT_WRITE).
    values = [f"v{i}".encode() for i in range(40)]
    outcomes = produce(conf(b, "alice"), topic, values, keyed=True, **{"enable.idempotence": True})
    assert delivered(outcomes) == ["ok"] * len(values)
    got = consume_in_group(conf(b, "alice"), topic, group, len(values))
    assert sorted(got) == sorted(values)

    # The group's committed offsets are the end offsets (OffsetCommit and OffsetFetch
    # allowed to her too).
    c = Consumer(conf(b, "alice", **{"group.id": group}))
    committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=TIMEOUT)
    ends = [c.get_watermark_offsets(tp, timeout=TIMEOUT)[1] for tp in committed]
    c.close()
    assert [tp.offset for tp in committed] == ends and sum(ends) == len(values) and 0 not in ends


def test_bob_without_acls_is_refused_with_kafkas_codes(acl_broker):
    b = acl_broker
    topic, other = unique_topic("bob-t"), unique_topic("bob-u")
    create_topic(b.plaintext, topic, 1)
    create_topic(b.plaintext, other, 1)
    admin = admin_as(b, "admin")
    assert {topic, other} <= topic_names(admin)
    # Someone else's binding on the topic: bob's refusals are not "no ACL at all".
    create_acls(admin, [binding(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ)])

    assert produce_one(conf(b, "bob"), topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Not auto-created for him either.
    missing = unique_topic("bob-missing")
    assert produce_one(conf(b, "bob"), missing) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    codes, got = group_consume_errors(conf(b, "bob"), topic, unique_topic("bob-group"),
                                      KafkaError.GROUP_AUTHORIZATION_FAILED)
    assert KafkaError.GROUP_AUTHORIZATION_FAILED in codes, codes
    assert got == []

    bob = admin_as(b, "bob")
    listed = bob.list_topics(timeout=TIMEOUT)
    assert topic not in listed.topics and other not in listed.topics, sorted(listed.topics)
    named = bob.list_topics(topic=topic, timeout=TIMEOUT).topics[topic]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert named.partitions == {}

    created = unique_topic("bob-created")
    fs = bob.create_topics([NewTopic(created, num_partitions=1, replication_factor=1)],
                           request_timeout=TIMEOUT)
    assert error_code(fs[created]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    names = topic_names(admin)
    assert created not in names and missing not in names, sorted(names)


def test_a_deny_beats_the_prefixed_allow(acl_broker):
    b = acl_broker
    prefix = unique_topic("deny") + "-"
    open_, secret, sealed, hidden, local = (
        prefix + n for n in ("open", "secret", "sealed", "hidden", "local"))
    for t in (open_, secret, sealed, hidden, local):
        create_topic(b.plaintext, t, 1)
        assert produce_one(conf(b, "admin"), t) is None
    create_acls(admin_as(b, "admin"), [
        binding(ResourceType.TOPIC, prefix, "User:alice", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        binding(ResourceType.TOPIC, prefix, "User:alice", AclOperation.READ, ResourcePatternType.PREFIXED),
        # alice may not write `secret` (but may still read and describe it) ...
        binding(ResourceType.TOPIC, secret, "User:alice", AclOperation.WRITE,
                permission=AclPermissionType.DENY),
        # ... nobody may read `sealed` ...
        binding(ResourceType.TOPIC, sealed, "User:*", AclOperation.READ,
                permission=AclPermissionType.DENY),
        # ... and nobody may do anything with what starts with `hidden`.
        binding(ResourceType.TOPIC, prefix + "hid", "User:*", AclOperation.ALL,
                ResourcePatternType.PREFIXED, AclPermissionType.DENY),
        # A DENY from the host she connects from applies; one from another host does not.
        binding(ResourceType.TOPIC, local, "User:alice", AclOperation.WRITE,
                permission=AclPermissionType.DENY, host="127.0.0.1"),
        binding(ResourceType.TOPIC, open_, "User:alice", AclOperation.WRITE,
                permission=AclPermissionType.DENY, host="10.1.2.3"),
    ])
    alice = conf(b, "alice")
    assert produce_one(alice, open_) is None
    assert produce_one(alice, secret) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_one(alice, sealed) is None
    assert produce_one(alice, hidden) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_one(alice, local) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    assert read_error(alice, secret) == b"one"
    assert read_error(alice, open_) == b"one"
    assert read_error(alice, sealed) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # (librdkafka reports nothing for an assigned partition of a topic whose Metadata
    # is refused: `hidden` is checked through Metadata.)
    alice_admin = admin_as(b, "alice")
    seen = topic_names(alice_admin)
    assert {open_, secret, sealed} <= seen and hidden not in seen, sorted(seen)
    named = alice_admin.list_topics(topic=hidden, timeout=TIMEOUT).topics[hidden]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Nothing she was refused was written.
    got = consume_confluent(b.sasl, secret, {0: 0}, {0: 1}, **conf(b, "admin"))
    assert [r.value for r in got[0]] == [b"one"]


def test_describe_acls_filters_and_delete_acls_removes_exactly_the_matches(acl_broker):
    b = acl_broker
    admin = admin_as(b, "admin")
    prefix = unique_topic("flt") + "-"
    topic, group = prefix + "eu", unique_topic("flt-group")
    create_topic(b.plaintext, topic, 1)
    T, G, C = ResourceType.TOPIC, ResourceType.GROUP, CLUSTER
    LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    literal_read = binding(T, topic, "User:alice", AclOperation.READ)
    prefixed_write = binding(T, prefix, "User:alice", AclOperation.WRITE, PRE)
    wildcard_describe = binding(T, "*", "User:bob", AclOperation.DESCRIBE)
    other_topic_deny = binding(T, prefix + "us", "User:alice", AclOperation.READ,
                               permission=AclPermissionType.DENY, host="127.0.0.1")
    group_read = binding(G, group, "User:alice", AclOperation.READ)
    cluster_describe = binding(C, "kafka-cluster", "User:bob", AclOperation.DESCRIBE)
    everything = {literal_read, prefixed_write, wildcard_describe, other_topic_deny, group_read,
                  cluster_describe}
    create_acls(admin, list(everything))

    assert describe_acls(admin, EVERY_ACL) == everything
    # MATCH: the literal binding of the name, the wildcard and the prefixes of it.
    assert describe_acls(admin, acl_filter(T, topic, ResourcePatternType.MATCH)) == {
        literal_read, prefixed_write, wildcard_describe}
    # ANY: bindings named exactly so, of any pattern type; LITERAL / PREFIXED: only that type.
    assert describe_acls(admin, acl_filter(T, topic)) == {literal_read}
    assert describe_acls(admin, acl_filter(T, prefix)) == {prefixed_write}
    assert describe_acls(admin, acl_filter(T, prefix, LIT)) == set()
    assert describe_acls(admin, acl_filter(T, None, PRE)) == {prefixed_write}
    assert describe_acls(admin, acl_filter(T, "*", LIT)) == {wildcard_describe}
    assert describe_acls(admin, acl_filter(principal="User:alice")) == {
        literal_read, prefixed_write, other_topic_deny, group_read}
    assert describe_acls(admin, acl_filter(op=AclOperation.READ,
                                           permission=AclPermissionType.ALLOW)) == {
        literal_read, group_read}
    assert describe_acls(admin, acl_filter(host="127.0.0.1")) == {other_topic_deny}
    assert describe_acls(admin, acl_filter(permission=AclPermissionType.DENY)) == {other_topic_deny}
    assert describe_acls(admin, acl_filter(C)) == {cluster_describe}
    assert describe_acls(admin, acl_filter(G, "no-such-group")) == set()

    alice = conf(b, "alice")
    assert produce_one(alice, topic) is None

    # alice's ALLOWs that apply to the topic go; bob's wildcard binding, her DENY and
    # her group binding stay.
    by_match = acl_filter(T, topic, ResourcePatternType.MATCH, "User:alice",
                          permission=AclPermissionType.ALLOW)
    by_host = acl_filter(host="10.9.9.9")
    results = admin.delete_acls([by_match, by_host], request_timeout=TIMEOUT)
    assert set(results[by_match].result(TIMEOUT)) == {literal_read, prefixed_write}
    assert results[by_host].result(TIMEOUT) == []
    assert describe_acls(admin, EVERY_ACL) == {wildcard_describe, other_topic_deny, group_read,
                                               cluster_describe}
    assert admin.delete_acls([by_match])[by_match].result(TIMEOUT) == []

    wait_until(lambda: produce_one(alice, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED,
               TIMEOUT, "alice refused once her ACLs are deleted")

    # A filter of everything deletes everything.
    assert set(admin.delete_acls([EVERY_ACL])[EVERY_ACL].result(TIMEOUT)) == {
        wildcard_describe, other_topic_deny, group_read, cluster_describe}
    assert describe_acls(admin, EVERY_ACL) == set()


def test_invalid_bindings_are_refused_and_the_others_in_the_call_created(acl_broker):
    b = acl_broker
    admin = admin_as(b, "admin")
    topic = unique_topic("inv")
    wrong_cluster = binding(CLUSTER, "my-cluster", "User:alice", AclOperation.ALTER)
    no_principal_type = binding(ResourceType.TOPIC, topic, "alice", AclOperation.READ)
    empty_name = binding(ResourceType.TOPIC, "", "User:alice", AclOperation.READ)
    good_topic = binding(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ)
    good_cluster = binding(CLUSTER, "kafka-cluster", "User:alice", AclOperation.DESCRIBE)
    futures = admin.create_acls([wrong_cluster, good_topic, no_principal_type, empty_name,
                                 good_cluster], request_timeout=TIMEOUT)
    for bad in (wrong_cluster, no_principal_type, empty_name):
        assert error_code(futures[bad]) == KafkaError.INVALID_REQUEST, bad
    assert futures[good_topic].result(TIMEOUT) is None
    assert futures[good_cluster].result(TIMEOUT) is None
    assert describe_acls(admin, EVERY_ACL) == {good_topic, good_cluster}

    # Creating a binding again is no error, and stores it once.
    create_acls(admin, [good_topic])
    assert describe_acls(admin, EVERY_ACL) == {good_topic, good_cluster}


def test_only_a_principal_with_alter_on_the_cluster_changes_acls(acl_broker):
    b = acl_broker
    admin, bob = admin_as(b, "admin"), admin_as(b, "bob")
    topic = unique_topic("clu")
    wanted = binding(ResourceType.TOPIC, topic, "User:bob", AclOperation.ALL)
    assert error_code(bob.create_acls([wanted], request_timeout=TIMEOUT)[wanted]) == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    from kafka.errors import ClusterAuthorizationFailedError
    with pytest.raises(ClusterAuthorizationFailedError):
        kafka_python_describe_every_acl(**kafka_python_auth(b, "bob"))
    assert error_code(bob.delete_acls([EVERY_ACL], request_timeout=TIMEOUT)[EVERY_ACL]) == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert describe_acls(admin, EVERY_ACL) == set()

    # DESCRIBE on the cluster: he may describe ACLs, not change them.
    describe = binding(CLUSTER, "kafka-cluster", "User:bob", AclOperation.DESCRIBE)
    create_acls(admin, [describe])
    assert describe_acls(bob, EVERY_ACL) == {describe}
    assert error_code(bob.create_acls([wanted], request_timeout=TIMEOUT)[wanted]) == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # ALTER on the cluster: he may.
    alter = binding(CLUSTER, "kafka-cluster", "User:bob", AclOperation.ALTER)
    create_acls(admin, [alter])
    create_acls(bob, [wanted])
    assert describe_acls(admin, EVERY_ACL) == {describe, alter, wanted}

    refused = [e for e in audit(b) if e["action"] == "acl.create" and e["principal"] == "User:bob"
               and not e["ok"]]
    assert len(refused) == 2, refused
    assert all("CLUSTER_AUTHORIZATION_FAILED" in e["outcome"] for e in refused), refused


def test_acl_changes_are_audited(acl_broker):
    b = acl_broker
    admin = admin_as(b, "admin")
    prefix = unique_topic("aud") + "-"
    create_acls(admin, [binding(ResourceType.TOPIC, prefix, "User:alice", AclOperation.WRITE,
                                ResourcePatternType.PREFIXED)])
    gone = acl_filter(ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED, "User:alice")
    assert len(admin.delete_acls([gone])[gone].result(TIMEOUT)) == 1

    entries = audit(b)
    created = [e for e in entries if e["action"] == "acl.create"]
    deleted = [e for e in entries if e["action"] == "acl.delete"]
    assert len(created) == 1 and len(deleted) == 1, entries
    c, d = created[0], deleted[0]
    assert (c["principal"], c["resource"], c["ok"], c["via"]) == (
        "User:admin", f"acl:TOPIC:PREFIXED:{prefix}", True, "kafka"), c
    assert (c["request"]["principal"], c["request"]["operation"], c["request"]["permission"]) == (
        "User:alice", "WRITE", "ALLOW"), c
    assert (d["principal"], d["resource"], d["ok"]) == (
        "User:admin", f"acl:TOPIC:PREFIXED:{prefix}", True), d
    assert d["outcome"] == {"deleted": 1}, d


def http_call(b: SaslBroker, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{b.http_url}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_security_changes_are_audited_alike_whichever_edge_asked(acl_broker):
    """The security service audits ACL, SCRAM and quota changes itself, one entry per
    binding, user or entity, so an HTTP request and a Kafka request naming the same
    things leave the same entries but for `via`."""
    b = acl_broker
    admin = admin_as(b, "admin")
    kafka_prefix, http_prefix = unique_topic("kaud") + "-", unique_topic("haud") + "-"

    def wanted(prefix):
        return [binding(ResourceType.TOPIC, prefix + "a", "User:alice", AclOperation.READ),
                binding(ResourceType.GROUP, prefix + "g", "User:bob", AclOperation.READ,
                        permission=AclPermissionType.DENY)]
    create_acls(admin, wanted(kafka_prefix))
    status, answer = http_call(b, "POST", "/v1/acls", {"acls": [
        {"resource_type": "TOPIC", "resource_name": http_prefix + "a", "principal": "User:alice",
         "operation": "read"},
        {"resource_type": "group", "resource_name": http_prefix + "g", "principal": "User:bob",
         "operation": "READ", "permission": "deny"}]})
    assert status == 201, answer

    def entries(prefix):
        return [(e["action"], e["resource"].replace(prefix, "<p>"), e["request"], e["ok"], e["outcome"])
                for e in audit(b) if e["action"] == "acl.create" and prefix in e["resource"]]
    kafka, http = entries(kafka_prefix), entries(http_prefix)
    assert kafka == http, (kafka, http)
    assert [r for _, r, *_ in kafka] == ["acl:TOPIC:LITERAL:<p>a", "acl:GROUP:LITERAL:<p>g"], kafka

    # All or none over HTTP: the invalid binding and the one not created for it are
    # both in the log.
    status, answer = http_call(b, "POST", "/v1/acls", {"acls": [
        {"resource_type": "TOPIC", "resource_name": http_prefix + "ok", "principal": "User:alice",
         "operation": "READ"},
        {"resource_type": "TOPIC", "resource_name": http_prefix + "bad", "principal": "alice",
         "operation": "READ"}]})
    assert status == 400 and "acls[1]" in answer["detail"], answer
    refused = [e for e in audit(b) if e["action"] == "acl.create" and not e["ok"]
               and (e["resource"].endswith(http_prefix + "ok") or e["resource"].endswith(http_prefix + "bad"))]
    assert [(e["resource"], e["outcome"].split(":")[0]) for e in refused] == [
        (f"acl:TOPIC:LITERAL:{http_prefix}ok", "not created"),
        (f"acl:TOPIC:LITERAL:{http_prefix}bad", "INVALID_REQUEST")], refused

    # A user deleted over HTTP without naming a mechanism: the entry names those deleted.
    user = unique_topic("carol")
    status, answer = http_call(b, "PUT", f"/v1/users/{user}", {"password": "carol-secret"})
    assert status == 200, answer
    status, answer = http_call(b, "DELETE", f"/v1/users/{user}")
    assert (status, sorted(answer["deleted"])) == (200, ["SCRAM-SHA-256", "SCRAM-SHA-512"]), answer
    changes = [(e["via"], e["request"]["delete"], [u["mechanism"] for u in e["request"]["upsert"]])
               for e in audit(b) if e["resource"] == f"user:{user}"]
    assert changes == [("http", [], ["SCRAM-SHA-256", "SCRAM-SHA-512"]),
                       ("http", ["SCRAM-SHA-256", "SCRAM-SHA-512"], [])], changes


def test_the_services_decide_and_audit_changes(acl_broker):
    """Creating (auto-creation too), growing and deleting topics, configs, deleted
    records and leader elections are authorized and audited by their services,
    whichever edge asked: a producer's auto-creation needs CREATE even with DESCRIBE
    and WRITE, a topic created so is audited, and refused changes are audited with
    Kafka's error name."""
    b = acl_broker
    admin = admin_as(b, "admin")
    prefix = unique_topic("svc") + "-"
    create_acls(admin, [
        binding(ResourceType.TOPIC, prefix, "User:alice", op, ResourcePatternType.PREFIXED)
        for op in (AclOperation.DESCRIBE, AclOperation.WRITE)
    ])
    auto = prefix + "auto"
    # DESCRIBE lets the request reach the service; without CREATE it is not created.
    assert produce_one(conf(b, "alice"), auto) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert auto not in topic_names(admin)

    create_acls(admin, [binding(ResourceType.TOPIC, prefix, "User:alice", AclOperation.CREATE,
                                ResourcePatternType.PREFIXED)])
    # The agent that stored the binding decides by it at once.
    assert produce_one(conf(b, "alice"), auto) is None
    alice = admin_as(b, "alice")
    fs = alice.create_partitions([NewPartitions(auto, 2)], request_timeout=TIMEOUT)
    assert error_code(fs[auto]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    fs = alice.delete_topics([auto], request_timeout=TIMEOUT)
    assert error_code(fs[auto]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Configs: the config service, DESCRIBE_CONFIGS and ALTER_CONFIGS on the topic, on
    # the cluster for a broker.
    own = ConfigResource("topic", auto)
    assert error_code(alice.describe_configs([own])[own]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    change = ConfigResource("topic", auto, incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    (f,) = alice.incremental_alter_configs([change]).values()
    assert error_code(f) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Records and leaders: DELETE on the topic, ALTER on the cluster.
    (f,) = alice.delete_records([TopicPartition(auto, 0, 1)]).values()
    assert error_code(f) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    f = alice.elect_leaders(ElectionType.PREFERRED, [TopicPartition(auto, 0)])
    assert error_code(f) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    node = ConfigResource("broker", "1", incremental_configs=[
        ConfigEntry("log.retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    (f,) = alice.incremental_alter_configs([node]).values()
    assert error_code(f) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert len(admin.list_topics(auto, timeout=TIMEOUT).topics[auto].partitions) == 1

    # Over HTTP (no authentication here: the super user ANONYMOUS) the same service.
    body = json.dumps({"messages": [{"value": "h"}]}).encode()
    request = urllib.request.Request(f"{b.http_url}/v1/topics/{prefix}http/produce", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:
        assert resp.status == 200

    entries = [e for e in audit(b) if e["resource"].startswith(f"topic:{prefix}")]
    seen = [(e["action"], e["resource"], e["principal"], e["via"], e["ok"]) for e in entries]
    # The refused auto-creation is not audited: clients ask again and again.
    assert seen == [
        ("topic.create", f"topic:{auto}", "User:alice", "kafka", True),
        ("topic.add_partitions", f"topic:{auto}", "User:alice", "kafka", False),
        ("topic.delete", f"topic:{auto}", "User:alice", "kafka", False),
        ("topic.alter_configs", f"topic:{auto}", "User:alice", "kafka", False),
        ("topic.create", f"topic:{prefix}http", "User:ANONYMOUS", "http", True),
    ], entries
    moves = [(e["action"], e["resource"], e["principal"], e["ok"]) for e in audit(b)
             if e["resource"].startswith(f"partition:{auto}")]
    assert moves == [
        ("partition.delete_records", f"partition:{auto}-0", "User:alice", False),
        ("partition.elect_leader", f"partition:{auto}-0", "User:alice", False),
    ], moves
    (broker_change,) = [e for e in audit(b) if e["action"] == "broker.alter_configs"]
    assert (broker_change["resource"], broker_change["principal"], broker_change["ok"]) == (
        "broker:1", "User:alice", False), broker_change
    assert broker_change["outcome"].startswith("CLUSTER_AUTHORIZATION_FAILED"), broker_change
    assert entries[0]["request"] == {"auto_created": True}, entries[0]
    assert entries[0]["outcome"]["partitions"] == 1, entries[0]
    for refused in entries[1:4]:
        assert refused["outcome"].startswith("TOPIC_AUTHORIZATION_FAILED"), refused
        assert "User:alice may not" in refused["outcome"], refused
    assert entries[1]["request"]["count"] == 2, entries[1]


def test_kafka_python_creates_and_describes_acls_and_is_refused_without_them(acl_broker):
    from kafka import KafkaProducer
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError

    b = acl_broker
    topic = unique_topic("kp-acl")
    create_topic(b.plaintext, topic, 1)
    acl = ACL(principal="User:alice", host="*", operation=ACLOperation.WRITE,
              permission_type=ACLPermissionType.ALLOW,
              resource_pattern=ResourcePattern(KpResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))
    admin = KafkaAdminClient(**kafka_python_auth(b, "admin"))
    try:
        result = admin.create_acls([acl])
        assert result["failed"] == [] and result["succeeded"] == [acl], result
        described, error = admin.describe_acls(ACLFilter(
            principal=None, host=None, operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KpResourceType.TOPIC, topic, ACLResourcePatternType.MATCH)))
        assert error.errno == 0
        assert [(a.principal, a.host, a.operation, a.permission_type, a.resource_pattern)
                for a in described] == [("User:alice", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                                         acl.resource_pattern)]
    finally:
        admin.close()

    # librdkafka sees what kafka-python created.
    assert describe_acls(admin_as(b, "admin"), EVERY_ACL) == {
        binding(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE)}

    alice = KafkaProducer(**kafka_python_auth(b, "alice"), acks="all", max_block_ms=15000)
    try:
        meta = alice.send(topic, b"from-alice").get(timeout=TIMEOUT)
        assert meta.offset == 0
    finally:
        alice.close()
    bob = KafkaProducer(**kafka_python_auth(b, "bob"), acks="all", max_block_ms=15000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            bob.send(topic, b"from-bob").get(timeout=TIMEOUT)
    finally:
        bob.close(timeout=5)

    # bob may not describe ACLs: CLUSTER_AUTHORIZATION_FAILED.
    with pytest.raises(ClusterAuthorizationFailedError):
        kafka_python_describe_every_acl(**kafka_python_auth(b, "bob"))
    got = consume_confluent(b.sasl, topic, {0: 0}, {0: 1}, **conf(b, "admin"))
    assert [r.value for r in got[0]] == [b"from-alice"]


def test_without_an_authorizer_acl_requests_are_security_disabled(broker):
    from kafka.errors import SecurityDisabledError

    with pytest.raises(SecurityDisabledError):
        kafka_python_describe_every_acl(bootstrap_servers=broker.bootstrap)
    a = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": RDKAFKA_LOG})
    acl = binding(ResourceType.TOPIC, "t", "User:alice", AclOperation.READ)
    assert error_code(a.create_acls([acl], request_timeout=TIMEOUT)[acl]) == KafkaError.SECURITY_DISABLED
    assert error_code(a.delete_acls([EVERY_ACL], request_timeout=TIMEOUT)[EVERY_ACL]) == \
        KafkaError.SECURITY_DISABLED
    # And nothing is enforced: anyone may do anything.
    topic = unique_topic("noauth")
    create_topic(broker.bootstrap, topic, 1)
    assert produce_one({"bootstrap.servers": broker.bootstrap, "logger": RDKAFKA_LOG}, topic) is None


def test_authorized_operations_are_the_principals_own(acl_broker):
    b = acl_broker
    prefix = unique_topic("ops") + "-"
    topic, other = prefix + "mine", unique_topic("ops-other")
    create_topic(b.plaintext, topic, 1)
    create_topic(b.plaintext, other, 1)
    admin = admin_as(b, "admin")
    create_acls(admin, [
        binding(ResourceType.TOPIC, prefix, "User:alice", AclOperation.READ, ResourcePatternType.PREFIXED),
        binding(ResourceType.TOPIC, prefix, "User:alice", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        binding(CLUSTER, "kafka-cluster", "User:alice", AclOperation.IDEMPOTENT_WRITE),
    ])

    def topic_ops(a: AdminClient, name: str) -> set[AclOperation]:
        d = a.describe_topics(TopicCollection([name]), include_authorized_operations=True,
                              request_timeout=TIMEOUT)[name].result(TIMEOUT)
        return set(d.authorized_operations or [])

    def cluster_ops(a: AdminClient) -> set[AclOperation]:
        d = a.describe_cluster(include_authorized_operations=True, request_timeout=TIMEOUT).result(TIMEOUT)
        return set(d.authorized_operations or [])

    alice = admin_as(b, "alice")
    assert topic_ops(alice, topic) == {AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE}
    assert topic_ops(admin, topic) == TOPIC_OPERATIONS
    assert error_code(alice.describe_topics(TopicCollection([other]), request_timeout=TIMEOUT)[other]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED

    assert cluster_ops(admin) == CLUSTER_OPERATIONS
    # Kafka fills the cluster's authorized operations in only for a principal that may
    # DESCRIBE the cluster (0 otherwise, whatever else it may do there) ...
    assert cluster_ops(alice) == set()
    # ... and then with all of them.
    create_acls(admin, [binding(CLUSTER, "kafka-cluster", "User:alice", AclOperation.DESCRIBE)])
    assert cluster_ops(alice) == {AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE}


def test_bindings_kafka_accepts_are_stored(acl_broker):
    """Kafka's CreateAcls refuses only a CLUSTER resource not named kafka-cluster, an
    empty resource name, a principal without `type:` and unknown or ANY codes
    (KafkaApis.handleCreateAcls, AclControlManager.validateNewAcl); it does not check
    that the operation applies to the resource type, nor the CLUSTER's pattern type."""
    b = acl_broker
    admin = admin_as(b, "admin")
    odd = {
        binding(ResourceType.TOPIC, unique_topic("odd"), "User:alice", AclOperation.IDEMPOTENT_WRITE),
        binding(ResourceType.GROUP, unique_topic("odd-group"), "User:alice", AclOperation.WRITE),
        binding(CLUSTER, "kafka-cluster", "User:alice", AclOperation.DESCRIBE, ResourcePatternType.PREFIXED),
    }
    futures = admin.create_acls(list(odd), request_timeout=TIMEOUT)
    errors = {}
    for acl, f in futures.items():
        try:
            f.result(TIMEOUT)
        except KafkaException as e:
            errors[acl] = e.args[0]
    assert errors == {}
    assert describe_acls(admin, EVERY_ACL) == odd
