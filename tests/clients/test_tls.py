"""TLS on named listeners, with real clients and certificates made by the openssl CLI:
an SSL listener requiring client certificates (mutual TLS, the principal taken from the
certificate's subject through Kafka's principal mapping rules) and a SASL_SSL listener
(SCRAM over TLS, no client certificate asked, as KIP-684 has it) beside the PLAINTEXT
one. librdkafka, kafka-python and kafkajs connect; a client without a certificate, with
one from another authority, or speaking plaintext to a TLS port is refused quickly; the
certificate files are replaced under a running agent and new connections get the new
certificate, while files that do not load leave the old one serving."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from conftest import pick_free_ports
from strata_testlib import unique_topic, wait_until
from test_sasl import USERS, add_users, kafkajs, metric

NODE = shutil.which("node")
OPENSSL = shutil.which("openssl")

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="openssl CLI not installed")

RULES = "RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT"


def openssl(cwd: Path, *args: str) -> None:
    done = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def new_key_and_request(d: Path, name: str, subject: str) -> None:
    openssl(d, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject)


def make_ca(d: Path, name: str) -> None:
    openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}")


def issue(d: Path, ca: str, name: str, subject: str, extensions: str) -> None:
    new_key_and_request(d, name, subject)
    (d / f"{name}.ext").write_text(extensions)
    openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-set_serial", str(int(time.time_ns() % 2**62)), "-days", "2", "-out", f"{name}.pem",
            "-extfile", f"{name}.ext")


SERVER_EXT = ("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
              "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
CLIENT_EXT = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"


@dataclass
class TlsBroker:
    broker: object
    ssl_port: int
    sasl_ssl_port: int
    certs: Path

    @property
    def plaintext(self) -> str:
        return self.broker.bootstrap

    @property
    def ssl(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def sasl_ssl(self) -> str:
        return f"127.0.0.1:{self.sasl_ssl_port}"

    @property
    def http_url(self) -> str:
        return self.broker.http_url

    def path(self, name: str) -> str:
        return str(self.certs / name)

    def mtls_conf(self, client: str = "alice", **extra) -> dict:
        return {
            "bootstrap.servers": self.ssl,
            "security.protocol": "SSL",
            "ssl.ca.location": self.path("ca.pem"),
            "ssl.certificate.location": self.path(f"{client}.pem"),
            "ssl.key.location": self.path(f"{client}.key"),
            **extra,
        }

    def scram_conf(self, user: str = "bob", **extra) -> dict:
        return {
            "bootstrap.servers": self.sasl_ssl,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": self.path("ca.pem"),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": USERS[user],
            **extra,
        }


@pytest.fixture
def tls_broker(broker_factory, tmp_path) -> TlsBroker:
    certs = tmp_path / "certs"
    certs.mkdir()
    make_ca(certs, "ca")
    make_ca(certs, "other-ca")
    issue(certs, "ca", "server", "/O=strata/CN=localhost", SERVER_EXT)
    issue(certs, "ca", "alice", "/O=strata/OU=eng/CN=Alice", CLIENT_EXT)
    issue(certs, "ca", "robot", "/O=strata/OU=ops/CN=deploy-bot", CLIENT_EXT)
    issue(certs, "other-ca", "mallory", "/O=strata/OU=eng/CN=Mallory", CLIENT_EXT)
    ssl_port, sasl_ssl_port = pick_free_ports(2)
    b = broker_factory(extra_args=[
        "--listeners", f"SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
        "--ssl-certificate-location", str(certs / "server.pem"),
        "--ssl-key-location", str(certs / "server.key"),
        "--ssl-truststore-location", str(certs / "ca.pem"),
        "--ssl-client-auth", "required",
        "--ssl-principal-mapping-rules", RULES,
        "--ssl-reload-interval-ms", "200",
        "--connection-failed-authentication-delay-ms", "10",
        "--group-initial-rebalance-delay-ms", "0",
    ])
    b.start()
    add_users(b.bootstrap, USERS)
    return TlsBroker(b, ssl_port, sasl_ssl_port, certs)


def create(conf: dict, topic: str, partitions: int) -> None:
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=20)


def audit_entries(http_url: str) -> list[dict]:
    with urllib.request.urlopen(http_url + "/v1/audit?limit=200", timeout=10) as resp:
        return json.loads(resp.read())["entries"]


def consume(conf: dict, topic: str, n: int, timeout: float = 30) -> list[bytes]:
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.commit(asynchronous=False)
    c.close()
    return got


def test_librdkafka_with_a_client_certificate_is_the_mapped_principal(tls_broker):
    b = tls_broker
    topic = unique_topic("mtls")
    create(b.mtls_conf(), topic, 2)
    p = Producer(b.mtls_conf(**{"enable.idempotence": True}))
    for i in range(20):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(20) == 0
    got = consume(b.mtls_conf(), topic, 20)
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))

    # The rule turned CN=Alice,OU=eng,O=strata into "alice"; a certificate no rule but
    # DEFAULT matches is its whole RFC 2253 subject.
    created = [e for e in audit_entries(b.http_url) if e["resource"] == f"topic:{topic}"]
    assert [e["principal"] for e in created] == ["User:alice"], created
    other = unique_topic("mtls-bot")
    create(b.mtls_conf("robot"), other, 1)
    created = [e for e in audit_entries(b.http_url) if e["resource"] == f"topic:{other}"]
    assert [e["principal"] for e in created] == ["User:CN=deploy-bot,OU=ops,O=strata"], created
    assert metric(b.http_url, "strata_tls_handshakes_total", outcome="ok") >= 3


def read_back_large_batches(conf: dict) -> None:
    """Records of 40–45 KB in batches of about 1 MiB, three partitions: every one read
    back byte for byte, in order within its partition."""
    topic = unique_topic("big")
    create(conf, topic, 3)
    values = [bytes([i % 251]) * (40_000 + 37 * i) for i in range(120)]
    p = Producer({**conf, "linger.ms": 50, "batch.size": 1_000_000,
                  "message.max.bytes": 2_000_000})
    for i, v in enumerate(values):
        p.produce(topic, key=str(i).encode(), value=v, partition=i % 3)
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": f"o-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.max.bytes": 3_000_000})
    c.subscribe([topic])
    seen: dict[int, list[int]] = {}
    deadline = time.monotonic() + 30
    while sum(map(len, seen.values())) < len(values) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            i = int(m.key())
            assert m.value() == values[i], f"record {i} read back differs"
            seen.setdefault(m.partition(), []).append(i)
    c.close()
    assert seen == {p: [i for i in range(len(values)) if i % 3 == p] for p in range(3)}, seen


def test_large_batches_are_read_back_whole_over_tls(tls_broker):
    """Fetch answers send records of 16 KiB or more from their read buffers, in pieces
    beside the encoded answer (vectored writes, `agent/src/frame.rs`): through rustls
    too, every byte comes back."""
    read_back_large_batches(tls_broker.mtls_conf())


def test_large_batches_are_read_back_whole_over_plaintext(broker):
    read_back_large_batches({"bootstrap.servers": broker.bootstrap})


def test_metadata_advertises_each_tls_listener(tls_broker):
    b = tls_broker
    on_ssl = AdminClient(b.mtls_conf()).list_topics(timeout=15)
    on_sasl = AdminClient(b.scram_conf()).list_topics(timeout=15)
    assert [(x.host, x.port) for x in on_ssl.brokers.values()] == [("127.0.0.1", b.ssl_port)]
    assert [(x.host, x.port) for x in on_sasl.brokers.values()] == [
        ("127.0.0.1", b.sasl_ssl_port)]
    # The broker's TLS settings are described under Kafka's names.
    admin = AdminClient(b.mtls_conf())
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(timeout=15)
    assert configs["ssl.client.auth"].value == "required"
    assert configs["ssl.principal.mapping.rules"].value == RULES
    assert "SSL://127.0.0.1:" in configs["listeners"].value


def test_librdkafka_authenticates_with_scram_over_tls(tls_broker):
    b = tls_broker
    topic = unique_topic("sasl-ssl")
    create(b.scram_conf(), topic, 1)
    p = Producer(b.scram_conf())
    for i in range(10):
        p.produce(topic, value=f"s{i}".encode())
    assert p.flush(20) == 0
    assert consume(b.scram_conf(), topic, 10) == [f"s{i}".encode() for i in range(10)]
    created = [e for e in audit_entries(b.http_url) if e["resource"] == f"topic:{topic}"]
    assert [e["principal"] for e in created] == ["User:bob"], created


def first_error(conf: dict, timeout: float = 20) -> tuple[KafkaError, float]:
    errors: list[KafkaError] = []
    seen = threading.Event()

    def on_error(e):
        errors.append(e)
        seen.set()

    started = time.monotonic()
    p = Producer({**conf, "error_cb": on_error})
    deadline = started + timeout
    while not seen.is_set() and time.monotonic() < deadline:
        p.poll(0.1)
    assert errors, "no error reported"
    return errors[0], time.monotonic() - started


def test_clients_without_a_trusted_certificate_are_refused(tls_broker):
    b = tls_broker
    failed_before = metric(b.http_url, "strata_tls_handshakes_total", outcome="failed")
    no_cert = b.mtls_conf()
    del no_cert["ssl.certificate.location"], no_cert["ssl.key.location"]
    for conf in (no_cert, b.mtls_conf("mallory")):
        e, took = first_error(conf)
        assert e.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN), e
        assert took < 10, took
    # The client does not trust a server certificate from another authority either.
    e, _ = first_error({**b.mtls_conf(), "ssl.ca.location": b.path("other-ca.pem")})
    assert e.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN), e
    assert "certificate verify failed" in e.str() or "SSL" in e.str(), e
    wait_until(lambda: metric(b.http_url, "strata_tls_handshakes_total", outcome="failed")
               >= failed_before + 3, 10, "failed handshakes counted")
    assert "TLS handshake failed" in b.broker.log_text()
    # The agent is unharmed: a good client still gets in.
    assert AdminClient(b.mtls_conf()).list_topics(timeout=15).brokers


def test_plaintext_kafka_on_a_tls_port_is_closed_not_answered(tls_broker):
    b = tls_broker
    cid = b"t"
    header = struct.pack(">hhih", 18, 0, 1, len(cid)) + cid
    for port in (b.ssl_port, b.sasl_ssl_port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(struct.pack(">i", len(header)) + header)
            started = time.monotonic()
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            # At most a TLS alert record (content type 21), never a Kafka reply.
            assert data == b"" or data[0] == 21, data[:16]
            assert time.monotonic() - started < 5


def served_certificate(port: int, ca: str) -> bytes:
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert(binary_form=True)


def test_replaced_certificate_files_are_taken_up_without_a_restart(tls_broker):
    b = tls_broker
    before = served_certificate(b.sasl_ssl_port, b.path("ca.pem"))
    # Files that do not load (a truncated certificate) leave the old ones serving.
    good = (b.certs / "server.pem").read_bytes()
    (b.certs / "server.pem").write_bytes(good[: len(good) // 2])
    wait_until(lambda: "do not load" in b.broker.log_text(), 10, "bad files noticed")
    assert served_certificate(b.sasl_ssl_port, b.path("ca.pem")) == before

    # A new key and certificate, written beside and renamed into place as cert
    # managers do.
    issue(b.certs, "ca", "renewed", "/O=strata/CN=localhost", SERVER_EXT)
    (b.certs / "renewed.key").rename(b.certs / "server.key")
    (b.certs / "renewed.pem").rename(b.certs / "server.pem")
    renewed = (b.certs / "server.pem").read_text()
    wait_until(lambda: served_certificate(b.sasl_ssl_port, b.path("ca.pem")) != before,
               10, "new certificate served")
    assert ssl.DER_cert_to_PEM_cert(
        served_certificate(b.sasl_ssl_port, b.path("ca.pem"))).strip() == renewed.strip()
    assert "TLS files changed: new connections use them" in b.broker.log_text()
    # Clients connect through the new certificate, mutual TLS included.
    assert AdminClient(b.mtls_conf()).list_topics(timeout=15).brokers
    assert AdminClient(b.scram_conf()).list_topics(timeout=15).brokers


def test_kafka_python_authenticates_with_scram_over_tls(tls_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    b = tls_broker
    topic = unique_topic("sasl-ssl-kp")
    create(b.scram_conf(), topic, 1)
    auth = dict(bootstrap_servers=b.sasl_ssl, security_protocol="SASL_SSL",
                ssl_cafile=b.path("ca.pem"), sasl_mechanism="SCRAM-SHA-256",
                sasl_plain_username="alice", sasl_plain_password=USERS["alice"])
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


def test_kafka_python_with_a_client_certificate(tls_broker):
    from kafka import KafkaProducer

    b = tls_broker
    topic = unique_topic("mtls-kp")
    create(b.mtls_conf(), topic, 1)
    p = KafkaProducer(bootstrap_servers=b.ssl, security_protocol="SSL",
                      ssl_cafile=b.path("ca.pem"), ssl_certfile=b.path("alice.pem"),
                      ssl_keyfile=b.path("alice.key"))
    meta = p.send(topic, b"hello").get(timeout=20)
    p.close()
    assert meta.offset == 0


@pytest.mark.skipif(NODE is None, reason="node not installed")
def test_kafkajs_over_tls_with_scram_and_with_a_client_certificate(tls_broker):
    b = tls_broker
    scram = {"mechanism": "scram-sha-512", "username": "bob", "password": USERS["bob"]}
    for name, bootstrap, options in (
        ("scram", b.sasl_ssl, {"sasl": scram, "ssl": {"ca": b.path("ca.pem")}}),
        ("mtls", b.ssl, {"ssl": {"ca": b.path("ca.pem"), "cert": b.path("alice.pem"),
                                 "key": b.path("alice.key")}}),
    ):
        topic = unique_topic(f"tls-js-{name}")
        create(b.mtls_conf(), topic, 1)
        ok = kafkajs(bootstrap, topic, options)
        assert ok.returncode == 0, (name, ok.stderr)
        assert json.loads(ok.stdout) == ["js1", "js2", "js3"]
