"""SASL on a named listener, with real clients: SCRAM credentials managed through
AlterUserScramCredentials / DescribeUserScramCredentials (librdkafka's admin client),
then librdkafka, kafka-python and kafkajs authenticating with SCRAM-SHA-512,
SCRAM-SHA-256 and PLAIN on a SASL_PLAINTEXT listener beside the PLAINTEXT one; wrong
passwords, unknown mechanisms and unauthenticated requests refused; Metadata
advertising each listener's own address; KIP-368 re-authentication keeping a
librdkafka producer's connections alive past the session lifetime."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from conftest import pick_free_ports
from strata_testlib import create_topic, unique_topic, wait_until

HERE = Path(__file__).resolve().parent
NODE = shutil.which("node")

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


def metric(http_url: str, name: str, **labels) -> float:
    with urllib.request.urlopen(http_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        key, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in key for k, v in labels.items()):
            total += float(value)
    return total


class SaslBroker:
    def __init__(self, broker, sasl_port: int):
        self.broker = broker
        self.sasl_port = sasl_port

    @property
    def plaintext(self) -> str:
        return self.broker.bootstrap

    @property
    def sasl(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def http_url(self) -> str:
        return self.broker.http_url


def start_sasl_broker(broker_factory, *extra: str) -> SaslBroker:
    (port,) = pick_free_ports(1)
    b = broker_factory(extra_args=[
        "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "--connection-failed-authentication-delay-ms", "10",
        "--group-initial-rebalance-delay-ms", "0",
        *extra,
    ])
    b.start()
    return SaslBroker(b, port)


def add_users(bootstrap: str, users: dict[str, str], iterations: int = 8192) -> None:
    """Both SCRAM credentials for every user, through the PLAINTEXT listener."""
    a = AdminClient({"bootstrap.servers": bootstrap})
    alterations = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(m, iterations), password.encode())
        for user, password in users.items()
        for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for user, f in a.alter_user_scram_credentials(alterations).items():
        assert f.result(timeout=15) is None, user


@pytest.fixture
def sasl_broker(broker_factory) -> SaslBroker:
    b = start_sasl_broker(broker_factory)
    add_users(b.plaintext, USERS)
    return b


def sasl_conf(b: SaslBroker, mechanism: str, user: str = "alice", password: str | None = None,
              **extra) -> dict:
    return {
        "bootstrap.servers": b.sasl,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": USERS[user] if password is None else password,
        **extra,
    }


def test_scram_credentials_are_altered_and_described_as_kafka_does(broker_factory):
    b = start_sasl_broker(broker_factory)
    a = AdminClient({"bootstrap.servers": b.plaintext})
    add_users(b.plaintext, {"alice": "pw"}, iterations=4096)
    a.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 16384), b"pw")])["carol"].result(15)

    described = a.describe_user_scram_credentials().result(15)
    assert sorted(described) == ["alice", "carol"]
    alice = {(i.mechanism, i.iterations) for i in described["alice"].scram_credential_infos}
    assert alice == {(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)}
    one = a.describe_user_scram_credentials(["carol"])["carol"].result(15)
    assert [(i.mechanism, i.iterations) for i in one.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 16384)]

    # Wrong input gets Kafka's error codes, per user; the other users' changes apply.
    with pytest.raises(KafkaException) as e:
        a.describe_user_scram_credentials(["nobody"])["nobody"].result(15)
    assert e.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    futures = a.alter_user_scram_credentials([
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"pw"),
        UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256),
        UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512),
    ])
    with pytest.raises(KafkaException) as e:
        futures["dave"].result(15)
    assert e.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    with pytest.raises(KafkaException) as e:
        futures["erin"].result(15)
    assert e.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    assert futures["carol"].result(15) is None
    assert sorted(a.describe_user_scram_credentials().result(15)) == ["alice"]

    # Every alteration is in the audit log, without the salted password.
    with urllib.request.urlopen(b.http_url + "/v1/audit?limit=100", timeout=10) as resp:
        body = resp.read().decode()
    entries = [e for e in json.loads(body)["entries"]
               if e["action"] == "user.alter_scram_credentials"]
    assert {e["resource"] for e in entries} >= {"user:alice", "user:carol", "user:dave", "user:erin"}
    assert "salt" not in body and "password" not in body.lower().replace("alter_scram", "")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_librdkafka_authenticates_produces_and_consumes_in_a_group(sasl_broker, mechanism):
    b = sasl_broker
    topic = unique_topic("sasl")
    create_topic(b.plaintext, topic, 2)
    p = Producer(sasl_conf(b, mechanism, "bob", **{"enable.idempotence": True}))
    for i in range(20):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(20) == 0

    c = Consumer(sasl_conf(b, mechanism, "bob", **{
        "group.id": f"g-{topic}", "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.commit(asynchronous=False)
    c.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
    assert metric(b.http_url, "strata_sasl_authentications_total",
                  mechanism=mechanism, outcome="ok", reauthentication="false") >= 2


def test_metadata_advertises_the_listener_the_client_came_in_on(sasl_broker):
    b = sasl_broker
    on_sasl = AdminClient(sasl_conf(b, "SCRAM-SHA-512")).list_topics(timeout=15)
    on_plain = AdminClient({"bootstrap.servers": b.plaintext}).list_topics(timeout=15)
    assert [(x.host, x.port) for x in on_sasl.brokers.values()] == [("127.0.0.1", b.sasl_port)]
    assert [(x.host, x.port) for x in on_plain.brokers.values()] == [
        ("127.0.0.1", b.broker.kafka_port)]


def wait_for_error(conf: dict, timeout: float = 20) -> KafkaError:
    errors: list[KafkaError] = []
    seen = threading.Event()

    def on_error(e):
        errors.append(e)
        seen.set()

    p = Producer({**conf, "error_cb": on_error})
    deadline = time.monotonic() + timeout
    while not seen.is_set() and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors, "no error reported"
    return errors[0]


def test_a_wrong_password_or_an_unknown_user_is_refused(sasl_broker):
    b = sasl_broker
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        e = wait_for_error(sasl_conf(b, mechanism, password="wrong"))
        assert e.code() == KafkaError._AUTHENTICATION, e
        assert "Authentication failed" in e.str() or "authentication" in e.str().lower(), e
    e = wait_for_error({**sasl_conf(b, "SCRAM-SHA-256"), "sasl.username": "mallory"})
    assert e.code() == KafkaError._AUTHENTICATION, e
    wait_until(lambda: metric(b.http_url, "strata_sasl_authentications_total", outcome="failed") >= 3,
               10, "failed authentications counted")


def frame(api_key: int, version: int, correlation_id: int, body: bytes, client_id: str = "t") -> bytes:
    cid = client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid
    return struct.pack(">i", len(header) + len(body)) + header + body


def read_frame(s: socket.socket) -> bytes | None:
    size = b""
    while len(size) < 4:
        chunk = s.recv(4 - len(size))
        if not chunk:
            return None
        size += chunk
    (n,) = struct.unpack(">i", size)
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def test_the_sasl_listener_answers_nothing_but_authentication_before_it(sasl_broker):
    b = sasl_broker
    # Metadata v1 for every topic, before SaslHandshake: the connection is closed.
    with socket.create_connection(("127.0.0.1", b.sasl_port), timeout=10) as s:
        s.sendall(frame(3, 1, 7, struct.pack(">i", -1)))
        assert read_frame(s) is None
    # ApiVersions is answered; SaslHandshake with an unknown mechanism gets
    # UNSUPPORTED_SASL_MECHANISM (33) and the enabled ones, then the connection closes.
    with socket.create_connection(("127.0.0.1", b.sasl_port), timeout=10) as s:
        s.sendall(frame(18, 0, 1, b""))
        reply = read_frame(s)
        assert reply is not None and struct.unpack(">ih", reply[:6]) == (1, 0)
        mech = b"GSSAPI"
        s.sendall(frame(17, 1, 2, struct.pack(">h", len(mech)) + mech))
        reply = read_frame(s)
        assert reply is not None
        correlation, error, count = struct.unpack(">ihi", reply[:10])
        assert (correlation, error) == (2, 33)
        names, rest = [], reply[10:]
        for _ in range(count):
            (n,) = struct.unpack(">h", rest[:2])
            names.append(rest[2:2 + n].decode())
            rest = rest[2 + n:]
        assert names == ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]
        assert read_frame(s) is None
    # On the PLAINTEXT listener, SaslHandshake is an illegal state (34), as in Kafka.
    with socket.create_connection(("127.0.0.1", b.broker.kafka_port), timeout=10) as s:
        mech = b"PLAIN"
        s.sendall(frame(17, 1, 3, struct.pack(">h", len(mech)) + mech))
        reply = read_frame(s)
        assert reply is not None and struct.unpack(">ih", reply[:6]) == (3, 34)


def test_kafka_python_authenticates_with_scram(sasl_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    b = sasl_broker
    topic = unique_topic("sasl-kp")
    create_topic(b.plaintext, topic, 1)
    auth = dict(bootstrap_servers=b.sasl, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                sasl_plain_password=USERS["alice"])
    p = KafkaProducer(**auth)
    for i in range(5):
        p.send(topic, f"kp{i}".encode()).get(timeout=20)
    p.close()
    c = KafkaConsumer(**auth, consumer_timeout_ms=10000)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = [m.value for _, m in zip(range(5), c)]
    c.close()
    assert got == [f"kp{i}".encode() for i in range(5)]


def kafkajs(bootstrap: str, topic: str, options: dict) -> subprocess.CompletedProcess:
    """kafkajs_auth.js: produce three records and read them back in a group, with the
    connection options (sasl, ssl) given."""
    return subprocess.run([NODE, str(HERE / "kafkajs_auth.js"), bootstrap, topic, json.dumps(options)],
                          cwd=HERE, capture_output=True, timeout=120, text=True)


@pytest.mark.skipif(NODE is None, reason="node not installed")
def test_kafkajs_authenticates_with_scram_sha_512(sasl_broker):
    b = sasl_broker
    topic = unique_topic("sasl-js")
    create_topic(b.plaintext, topic, 1)
    scram = {"mechanism": "scram-sha-512", "username": "bob"}
    ok = kafkajs(b.sasl, topic, {"sasl": {**scram, "password": USERS["bob"]}})
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == ["js1", "js2", "js3"]
    bad = kafkajs(b.sasl, topic, {"sasl": {**scram, "password": "wrong"}})
    assert bad.returncode == 1
    assert "SASL SCRAM SHA512 authentication failed" in bad.stderr, bad.stderr


def test_librdkafka_reauthenticates_before_the_session_expires(broker_factory):
    b = start_sasl_broker(broker_factory, "--connections-max-reauth-ms", "1500")
    add_users(b.plaintext, USERS)
    topic = unique_topic("sasl-reauth")
    create_topic(b.plaintext, topic, 1)
    p = Producer(sasl_conf(b, "SCRAM-SHA-512", **{"linger.ms": 0}))
    delivered: list[bool] = []

    def on_delivery(err, _msg):
        delivered.append(err is None)

    # Keep producing across several session lifetimes; every record must be delivered
    # and the sessions renewed on the same connections (no failed authentication, no
    # connection closed for an expired session).
    deadline = time.monotonic() + 6
    sent = 0
    while time.monotonic() < deadline:
        p.produce(topic, value=f"r{sent}".encode(), on_delivery=on_delivery)
        sent += 1
        p.poll(0.1)
    assert p.flush(20) == 0
    assert len(delivered) == sent and all(delivered)
    assert metric(b.http_url, "strata_sasl_authentications_total",
                  outcome="ok", reauthentication="true") >= 2
    assert metric(b.http_url, "strata_sasl_authentications_total", outcome="failed") == 0
    assert "SASL session expired" not in b.broker.log_text()
