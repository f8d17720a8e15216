"""SASL/OAUTHBEARER with real clients: JWTs signed here (RS256 and ES256, with the
`cryptography` package) and validated by the agent against a JWKS file. librdkafka
(oauth_cb), kafka-python (a token provider) and kafkajs (oauthBearerProvider) produce,
consume and use groups; expired, not-yet-valid, wrongly signed, unsigned tokens and
ones with the wrong issuer or audience are refused fast with the reason; a key added
to the JWKS file is taken up without a restart; a session ends with its token
(KIP-368 with connections_max_reauth_ms), and librdkafka renews it on its connections."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from conftest import pick_free_ports
from strata_testlib import unique_topic, wait_until
from test_sasl import kafkajs, metric

NODE = shutil.which("node")

ISSUER = "https://idp.strata.test"
AUDIENCE = "strata"


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def big_endian(n: int, size: int | None = None) -> bytes:
    return n.to_bytes(size or (n.bit_length() + 7) // 8, "big")


class SigningKey:
    """An identity provider's signing key: its JWK and the tokens it signs."""

    def __init__(self, kid: str, kind: str = "RSA"):
        self.kid = kid
        self.kind = kind
        if kind == "RSA":
            self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.alg = "RS256"
        else:
            self.key = ec.generate_private_key(ec.SECP256R1())
            self.alg = "ES256"

    def jwk(self) -> dict:
        pub = self.key.public_key().public_numbers()
        if self.kind == "RSA":
            return {"kty": "RSA", "kid": self.kid, "use": "sig", "alg": self.alg,
                    "n": b64u(big_endian(pub.n)), "e": b64u(big_endian(pub.e))}
        return {"kty": "EC", "kid": self.kid, "use": "sig", "alg": self.alg, "crv": "P-256",
                "x": b64u(big_endian(pub.x, 32)), "y": b64u(big_endian(pub.y, 32))}

    def sign(self, claims: dict, header: dict | None = None) -> str:
        head = {"alg": self.alg, "typ": "JWT", "kid": self.kid, **(header or {})}
        signing_input = f"{b64u(json.dumps(head).encode())}.{b64u(json.dumps(claims).encode())}"
        if self.kind == "RSA":
            sig = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature(self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
            sig = big_endian(r, 32) + big_endian(s, 32)
        return f"{signing_input}.{b64u(sig)}"

    def token(self, sub: str = "svc-orders", lifetime: float = 300, **overrides) -> str:
        now = time.time()
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": int(now),
                  "exp": int(now + lifetime), **overrides}
        return self.sign({k: v for k, v in claims.items() if v is not None})


class OAuthBroker:
    def __init__(self, broker, port: int, jwks: Path):
        self.broker = broker
        self.port = port
        self.jwks = jwks

    @property
    def plaintext(self) -> str:
        return self.broker.bootstrap

    @property
    def sasl(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return self.broker.http_url

    def publish(self, *keys: SigningKey) -> None:
        """Rewrites the JWKS file, whole, as an identity provider's sync would."""
        tmp = self.jwks.with_suffix(".tmp")
        tmp.write_text(json.dumps({"keys": [k.jwk() for k in keys]}))
        tmp.rename(self.jwks)


@pytest.fixture
def rsa_key() -> SigningKey:
    return SigningKey("rsa-1")


def start_oauth_broker(broker_factory, tmp_path, keys, *extra: str) -> OAuthBroker:
    (port,) = pick_free_ports(1)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [k.jwk() for k in keys]}))
    b = broker_factory(extra_args=[
        "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "--sasl-enabled-mechanisms", "OAUTHBEARER,SCRAM-SHA-512",
        "--sasl-oauthbearer-jwks-location", str(jwks),
        "--sasl-oauthbearer-expected-issuer", ISSUER,
        "--sasl-oauthbearer-expected-audience", f"other,{AUDIENCE}",
        "--sasl-oauthbearer-clock-skew-seconds", "5",
        "--connection-failed-authentication-delay-ms", "10",
        "--group-initial-rebalance-delay-ms", "0",
        *extra,
    ])
    b.start()
    return OAuthBroker(b, port, jwks)


@pytest.fixture
def oauth_broker(broker_factory, tmp_path, rsa_key) -> OAuthBroker:
    return start_oauth_broker(broker_factory, tmp_path, [rsa_key])


def oauth_conf(b: OAuthBroker, make_token, **extra) -> dict:
    """librdkafka with an oauth_cb that asks make_token() for each token."""
    def oauth_cb(_config):
        token = make_token()
        try:
            claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        except (IndexError, ValueError):
            claims = {}
        # librdkafka refuses a lifetime in the past (the agent is to judge those
        # tokens); otherwise it refreshes the token at 80% of the one given.
        expiry = float(claims.get("exp", 0))
        if expiry < time.time() + 1:
            expiry = time.time() + 60
        return token, expiry, claims.get("sub") or "unknown", {}

    return {"bootstrap.servers": b.sasl, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": oauth_cb, **extra}


def audit_principals(http_url: str, resource: str) -> list[str]:
    with urllib.request.urlopen(http_url + "/v1/audit?limit=200", timeout=10) as resp:
        entries = json.loads(resp.read())["entries"]
    return [e["principal"] for e in entries if e["resource"] == resource]


def test_librdkafka_produces_and_consumes_in_a_group_with_a_token(oauth_broker, rsa_key):
    b = oauth_broker
    topic = unique_topic("oauth")
    admin = AdminClient(oauth_conf(b, lambda: rsa_key.token("svc-admin")))
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=20)
    assert audit_principals(b.http_url, f"topic:{topic}") == ["User:svc-admin"]

    p = Producer(oauth_conf(b, rsa_key.token, **{"enable.idempotence": True}))
    for i in range(20):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(20) == 0
    c = Consumer(oauth_conf(b, rsa_key.token, **{
        "group.id": f"g-{topic}", "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.commit(asynchronous=False)
    c.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
    assert metric(b.http_url, "strata_sasl_authentications_total",
                  mechanism="OAUTHBEARER", outcome="ok") >= 3


def first_error(conf: dict, timeout: float = 20) -> tuple[KafkaError, float]:
    errors: list[KafkaError] = []
    seen = threading.Event()

    def on_error(e):
        if e.code() == KafkaError._AUTHENTICATION:
            errors.append(e)
            seen.set()

    started = time.monotonic()
    p = Producer({**conf, "error_cb": on_error})
    while not seen.is_set() and time.monotonic() < started + timeout:
        p.poll(0.1)
    assert errors, "no authentication error reported"
    return errors[0], time.monotonic() - started


def test_bad_tokens_are_refused_fast_with_the_reason(oauth_broker, rsa_key):
    b = oauth_broker
    stranger = SigningKey("rsa-1")  # the same kid, another key: a forged signature
    header, payload, _ = rsa_key.token().split(".")
    cases = {
        "expired": (lambda: rsa_key.token(lifetime=-60), "expired"),
        "not yet valid": (lambda: rsa_key.token(nbf=int(time.time()) + 600), "not valid yet"),
        "issuer": (lambda: rsa_key.token(iss="https://evil.test"), f"its iss is not {ISSUER}"),
        "audience": (lambda: rsa_key.token(aud="someone-else"), "its aud names none of other, strata"),
        "no subject": (lambda: rsa_key.token(sub=None), "no sub claim"),
        "forged": (lambda: stranger.token(), "signature does not verify with key rsa-1"),
        "unknown kid": (lambda: SigningKey("rsa-9").token(), "no key \"rsa-9\""),
        "unsigned": (lambda: f"{b64u(json.dumps({'alg': 'none'}).encode())}.{payload}.", "not a JWT"),
        "symmetric": (lambda: f"{b64u(json.dumps({'alg': 'HS256', 'kid': 'rsa-1'}).encode())}.{payload}.AAAA",
                      "not an asymmetric"),
        "not a jwt": (lambda: "definitely-not-a-token", "not a JWT"),
    }
    assert header  # the unsigned and symmetric cases reuse a real payload
    for name, (make, reason) in cases.items():
        e, took = first_error(oauth_conf(b, make))
        assert took < 10, (name, took)
        assert reason in e.str(), (name, e.str())
    wait_until(lambda: metric(b.http_url, "strata_sasl_authentications_total",
                              mechanism="OAUTHBEARER", outcome="failed") >= len(cases),
               10, "failed authentications counted")
    # No token reaches the log.
    assert payload not in b.broker.log_text()


def test_a_new_key_in_the_jwks_file_is_taken_up_without_a_restart(oauth_broker, rsa_key):
    b = oauth_broker
    rotated = SigningKey("ec-2", "EC")
    e, _ = first_error(oauth_conf(b, lambda: rotated.token("svc-rotated")))
    assert 'no key "ec-2"' in e.str()
    # A file that is not a JWKS document leaves the old keys working.
    b.jwks.write_text("{not json")
    wait_until(lambda: AdminClient(oauth_conf(b, rsa_key.token)).list_topics(timeout=10).brokers,
               15, "old key still accepted")
    b.publish(rsa_key, rotated)
    topic = unique_topic("oauth-rotated")
    admin = AdminClient(oauth_conf(b, lambda: rotated.token("svc-rotated")))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    assert audit_principals(b.http_url, f"topic:{topic}") == ["User:svc-rotated"]
    log = b.broker.log_text()
    assert "the JWKS file changed but does not load" in log
    assert "OAUTHBEARER keys changed" in log


def test_the_session_ends_with_the_token_and_librdkafka_renews_it(broker_factory, tmp_path, rsa_key):
    b = start_oauth_broker(broker_factory, tmp_path, [rsa_key], "--connections-max-reauth-ms", "600000")
    topic = unique_topic("oauth-reauth")
    tokens: list[str] = []

    def short_token():
        tokens.append(rsa_key.token(lifetime=3))
        return tokens[-1]

    # 3 s tokens: the agent answers a session lifetime of at most 3 s (not the 10 min of
    # connections_max_reauth_ms), and librdkafka refreshes the token and re-authenticates
    # on its connections while producing.
    admin = AdminClient(oauth_conf(b, rsa_key.token))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    p = Producer(oauth_conf(b, short_token, **{"linger.ms": 0}))
    delivered: list[bool] = []
    deadline = time.monotonic() + 8
    sent = 0
    while time.monotonic() < deadline:
        p.produce(topic, value=f"r{sent}".encode(),
                  on_delivery=lambda err, _m: delivered.append(err is None))
        sent += 1
        p.poll(0.1)
    assert p.flush(20) == 0
    assert len(delivered) == sent and all(delivered)
    assert len(tokens) >= 3, "librdkafka refreshed its token"
    # Connections re-authenticated (a connection librdkafka leaves idle past its session
    # may instead be closed at its next request, and reconnects: not counted here).
    assert metric(b.http_url, "strata_sasl_authentications_total", mechanism="OAUTHBEARER",
                  outcome="ok", reauthentication="true") >= 2


def test_kafka_python_authenticates_with_a_token(oauth_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.net.sasl.oauth import AbstractTokenProvider

    b = oauth_broker
    key = SigningKey("ec-1", "EC")
    b.publish(SigningKey("rsa-unused"), key)

    class Provider(AbstractTokenProvider):
        def token(self):
            return key.token("svc-python")

    topic = unique_topic("oauth-kp")
    admin = AdminClient(oauth_conf(b, lambda: key.token("svc-admin")))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    auth = dict(bootstrap_servers=b.sasl, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Provider())
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


@pytest.mark.skipif(NODE is None, reason="node not installed")
def test_kafkajs_authenticates_with_a_token(oauth_broker, rsa_key):
    b = oauth_broker
    topic = unique_topic("oauth-js")
    admin = AdminClient(oauth_conf(b, rsa_key.token))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    ok = kafkajs(b.sasl, topic, {"sasl": {"mechanism": "oauthbearer", "token": rsa_key.token("svc-js")}})
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == ["js1", "js2", "js3"]
    bad = kafkajs(b.sasl, topic, {"sasl": {"mechanism": "oauthbearer",
                                           "token": rsa_key.token(lifetime=-60)}})
    assert bad.returncode == 1
    assert "expired" in bad.stderr, bad.stderr


def test_oauthbearer_without_a_jwks_file_stops_the_agent_at_start(broker_factory):
    (port,) = pick_free_ports(1)
    b = broker_factory(extra_args=["--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}",
                                   "--sasl-enabled-mechanisms", "OAUTHBEARER"])
    done = subprocess.run(b.command(), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "sasl_oauthbearer_jwks_location" in done.stderr, done.stderr
