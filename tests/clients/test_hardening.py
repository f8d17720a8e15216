"""Security points found from outside (issue 34, point 5), each tried as an attacker or
an operator would, with real clients where there is one:

- a SASL listener reads at most `sasl_server_max_receive_size` (Kafka's
  `sasl.server.max.receive.size`, 512 KiB) per request before the client has
  authenticated: a 1 MiB SCRAM first message closes the connection unanswered (it was
  read and its nonce echoed back), and an authenticated client still sends large ones;
- one account's login between guesses at another's password does not reset the
  address's failure delay, and failed HTTP logins are delayed by the same count, logged
  and answered with a problem body whose status is the response's (401, not 400);
- the PLAINTEXT listener can be turned off (`--kafka-listen none`, Kafka's `listeners`
  semantics): with only a SASL listener nothing answers unauthenticated, and two agents
  replicate over it;
- the data directory is created 0700, the metastore and the audit log 0600.
"""

from __future__ import annotations

import base64
import socket
import stat
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from conftest import pick_free_ports, strata_bin
from strata_testlib import create_topic, delivered, unique_topic, wait_until
from test_sasl import SaslBroker, add_users, frame, read_frame, sasl_conf, start_sasl_broker

USERS = {"alice": "alice-secret", "bob": "bob-secret"}

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


def closed_unanswered(s: socket.socket) -> bool:
    """Whether the agent closed `s` without sending a frame."""
    try:
        return read_frame(s) is None
    except ConnectionResetError:
        return True


def scram_first(s: socket.socket, message: bytes) -> bytes | None:
    """SaslHandshake SCRAM-SHA-512, then `message` as the client's first SCRAM message
    (SaslAuthenticate v1); the answer's frame, or None if the connection was closed."""
    mech = b"SCRAM-SHA-512"
    s.sendall(frame(SASL_HANDSHAKE, 1, 1, struct.pack(">h", len(mech)) + mech))
    reply = read_frame(s)
    assert reply is not None and struct.unpack(">ih", reply[:6]) == (1, 0), reply
    try:
        s.sendall(frame(SASL_AUTHENTICATE, 1, 2, struct.pack(">i", len(message)) + message))
    except (BrokenPipeError, ConnectionResetError):
        return None
    try:
        return read_frame(s)
    except ConnectionResetError:
        return None


def test_a_large_request_before_authentication_closes_the_connection(broker_factory):
    b = start_sasl_broker(broker_factory)
    add_users(b.plaintext, USERS, iterations=4096)
    # A SCRAM first message of 1 MiB: before the cap, the agent read it whole and sent
    # its 1 MiB nonce back in the server's first message.
    with socket.create_connection(("127.0.0.1", b.sasl_port), timeout=10) as s:
        assert scram_first(s, b"n,,n=alice,r=" + b"x" * (1 << 20)) is None
        assert closed_unanswered(s)
    wait_until(lambda: "sasl_server_max_receive_size" in b.broker.log_text(), 10,
               "the closed connection logged with the setting's name")
    # A first message of ordinary size is answered with the server's first message.
    with socket.create_connection(("127.0.0.1", b.sasl_port), timeout=10) as s:
        reply = scram_first(s, b"n,,n=alice,r=" + b"y" * 32)
        assert reply is not None and b"r=" + b"y" * 32 in reply
    # Once authenticated, a client's requests may be larger: a 900 KiB record.
    topic = unique_topic("big")
    create_topic(b.plaintext, topic, 1)
    p = Producer({**sasl_conf(b, "SCRAM-SHA-512"), "acks": "all"})
    outcomes = []
    p.produce(topic, value=b"z" * (900 << 10), on_delivery=lambda e, m: outcomes.append(e))
    p.flush(30)
    assert delivered(outcomes) == ["ok"]


def failed_login_ms(url: str, user: str, password: str) -> float:
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    started = time.monotonic()
    r = requests.get(url + "/v1/topics", headers={"Authorization": "Basic " + pair}, timeout=30)
    assert r.status_code == 401, r.text
    body = r.json()
    assert (body["status"], body["title"]) == (401, "Unauthorized"), body
    assert r.headers["Content-Type"] == "application/problem+json"
    return (time.monotonic() - started) * 1000


def test_failed_logins_are_delayed_per_address_over_sasl_and_http(broker_factory):
    (port,) = pick_free_ports(1)
    agent = broker_factory(extra_args=[
        "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "--connection-failed-authentication-delay-ms", "150",
        "--http-authentication", "basic",
    ])
    agent.start()
    b = SaslBroker(agent, port)
    add_users(b.plaintext, USERS, iterations=4096)
    url = b.http_url
    ok = {"Authorization": "Basic " + base64.b64encode(b"bob:bob-secret").decode()}
    # Guessing at alice's password over HTTP, logging in as bob between guesses: the
    # delay still doubles (150, 300, 600 ms), where a success used to reset it.
    delays = []
    for guess in ("guess-1", "guess-2", "guess-3"):
        delays.append(failed_login_ms(url, "alice", guess))
        assert requests.get(url + "/v1/topics", headers=ok, timeout=10).status_code == 200
    assert delays[0] >= 150 and delays[1] >= 300 and delays[2] >= 600, delays
    assert "HTTP authentication failed" in b.broker.log_text()
    # A SASL login from the same address counts on: its answer waits 1.2 s.
    conf = sasl_conf(b, "PLAIN", password="guess-4")
    errors = []
    started = time.monotonic()
    p = Producer({**conf, "error_cb": lambda e: errors.append((time.monotonic(), e))})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        p.poll(0.05)
    assert errors, "the SASL failure was reported"
    assert errors[0][0] - started >= 1.2, errors
    # A good password over HTTP is not slowed by the address's failures.
    started = time.monotonic()
    assert requests.get(url + "/v1/topics", headers=ok, timeout=10).status_code == 200
    assert time.monotonic() - started < 1.2


def agent_command(b, listen_port: int) -> list[str]:
    """The agent's command line with `--kafka-listen none` instead of the harness's
    PLAINTEXT port."""
    return [str(b.binary), "agent", "--kafka-listen", "none",
            "--http-listen", f"127.0.0.1:{b.http_port}", "--data-dir", str(b.data_dir),
            *b.extra_args]


def test_the_plaintext_listener_can_be_turned_off(broker_factory):
    # Without any listener the agent does not start, and says why.
    out = subprocess.run([str(strata_bin()), "agent", "--kafka-listen", "none",
                          "--data-dir", tempfile.mkdtemp(prefix="strata-nolisten-")],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode != 0
    assert "kafka_listen is none and listeners is empty" in out.stderr, out.stderr

    metastore = Path(tempfile.mkdtemp(prefix="strata-nolisten-")) / "metastore.sqlite"
    password = "broker-secret"
    agents = {}
    for node, port in zip((1, 2), pick_free_ports(2)):
        b = broker_factory(
            extra_args=[
                "--node-id", str(node),
                "--metastore-path", str(metastore),
                "--listeners", f"INTERNAL://127.0.0.1:{port}",
                "--listener-security-protocol-map", "INTERNAL:SASL_PLAINTEXT",
                "--inter-agent-listener", "INTERNAL",
                "--inter-agent-sasl-username", "broker",
                "--connection-failed-authentication-delay-ms", "10",
                "--lease-ms", "2000",
            ],
            extra_env={"STRATA_INTER_AGENT_SASL_PASSWORD": password},
        )
        b.plaintext_port = b.kafka_port  # never listened on
        b.kafka_port = port  # the harness waits for this port to accept
        b.command = (lambda b=b, port=port: agent_command(b, port))
        agents[node] = b
    for b in agents.values():
        b.start()
    conf = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "broker",
        "sasl.password": password,
    }
    for b in agents.values():
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", b.plaintext_port), timeout=5).close()
        # An unauthenticated Metadata request on the only listener is closed unanswered.
        with socket.create_connection(("127.0.0.1", b.kafka_port), timeout=10) as s:
            s.sendall(frame(3, 1, 7, struct.pack(">i", -1)))
            assert closed_unanswered(s)

    admin = AdminClient({**conf, "bootstrap.servers": f"127.0.0.1:{agents[1].kafka_port}"})
    # Each agent is known by its one listener's address.
    wait_until(lambda: sorted((br.id, br.port) for br in admin.list_topics(timeout=15)
                              .brokers.values()) == sorted((n, a.kafka_port)
                                                           for n, a in agents.items()),
               15, "both agents in Metadata at their SASL listeners")
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(15)
    assert configs["listeners"].value == f"INTERNAL://127.0.0.1:{agents[1].kafka_port}"
    assert configs["listener.security.protocol.map"].value == "INTERNAL:SASL_PLAINTEXT"

    # The agents replicate over the SASL listener: acks=all with two in-sync replicas.
    topic = unique_topic("nolisten")
    admin.create_topics([NewTopic(topic, 1, 2, config={"min.insync.replicas": "2"})])[topic] \
        .result(15)

    def isr() -> list[int]:
        t = admin.list_topics(topic, timeout=10).topics[topic]
        return [] if t.error or 0 not in t.partitions else sorted(t.partitions[0].isrs)

    wait_until(lambda: isr() == [1, 2], 30, "both agents in the ISR")
    bootstrap = ",".join(f"127.0.0.1:{a.kafka_port}" for a in agents.values())
    p = Producer({**conf, "bootstrap.servers": bootstrap, "acks": "all"})
    outcomes = []
    for i in range(10):
        p.produce(topic, value=b"v%d" % i, on_delivery=lambda e, m: outcomes.append(e))
    p.flush(30)
    assert delivered(outcomes) == ["ok"] * 10
    c = Consumer({**conf, "bootstrap.servers": bootstrap, "group.id": "g",
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 10 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            values.append(m.value())
    c.close()
    assert values == [b"v%d" % i for i in range(10)]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_data_directory_metastore_and_audit_log_are_private(broker_factory):
    b = broker_factory()
    b.data_dir.rmdir()  # the agent creates it
    b.start()
    create_topic(b.bootstrap, unique_topic("private"), 1)  # an audited action
    audit = b.data_dir / "audit.log"
    wait_until(audit.exists, 10, "the audit log written")
    assert mode(b.data_dir) == 0o700
    assert mode(audit) == 0o600
    for name in ("metastore.sqlite", "metastore.sqlite-wal"):
        assert mode(b.data_dir / name) == 0o600, name
