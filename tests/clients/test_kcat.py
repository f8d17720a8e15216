"""kcat (Debian's, librdkafka 2.0.2) against strata: metadata, keyed produce with
headers in every codec, consume with a format string and with -J, ListOffsets -Q."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from strata_testlib import (
    BASE_TS,
    CODECS,
    NODE_ID,
    Out,
    create_topic,
    produce_confluent,
    unique_topic,
)

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat not installed (apt-get install -y kcat)")


def kcat(broker, *args, stdin: bytes | None = None, timeout: float = 30) -> str:
    cmd = [KCAT, "-b", broker.bootstrap, *args]
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{cmd} timed out after {timeout}s; stderr: {e.stderr!r}")
    assert p.returncode == 0, f"{cmd} exited {p.returncode}\nstdout: {p.stdout!r}\nstderr: {p.stderr!r}"
    return p.stdout.decode()


def test_kcat_metadata(broker):
    topic = unique_topic("kcat-md")
    create_topic(broker.bootstrap, topic, 3)

    md = json.loads(kcat(broker, "-L", "-J"))
    assert md["brokers"] == [{"id": NODE_ID, "name": f"127.0.0.1:{broker.kafka_port}"}], md
    assert md["controllerid"] == NODE_ID, md
    t = next(t for t in md["topics"] if t["topic"] == topic)
    assert "error" not in t, t
    assert sorted(t["partitions"], key=lambda p: p["partition"]) == [
        {"partition": p, "leader": NODE_ID, "replicas": [{"id": NODE_ID}], "isrs": [{"id": NODE_ID}]} for p in range(3)
    ]

    text = kcat(broker, "-L", "-t", topic)
    assert f"broker {NODE_ID} at 127.0.0.1:{broker.kafka_port}" in text, text
    assert f'topic "{topic}" with 3 partitions:' in text, text
    for p in range(3):
        assert f"partition {p}, leader {NODE_ID}, replicas: {NODE_ID}, isrs: {NODE_ID}" in text, text


FMT = r"%p\t%o\t%K\t%k\t%S\t%s\t%h\n"


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce_consume(broker, codec):
    topic = unique_topic(f"kcat-{codec}")
    create_topic(broker.bootstrap, topic, 2)
    headers = [("h1", "v1"), ("dup", "a"), ("dup", "b"), ("empty", "")]
    hargs = [a for k, v in headers for a in ("-H", f"{k}={v}")]
    expected = []  # (partition, offset, key, value)
    t_before = int(time.time() * 1000)
    for p in range(2):
        lines = []
        for i in range(60):
            key = f"k-{codec}-{p}-{i}"
            value = f"value {codec} {p} {i} " + "abcdefgh" * (i % 8 + 1)
            lines.append(f"{key}:{value}")
            expected.append((p, i, key, value))
        kcat(broker, "-P", "-t", topic, "-p", str(p), "-K:",
             "-X", f"compression.codec={codec}", "-X", "enable.idempotence=false",
             "-X", "acks=all", "-X", "linger.ms=5", *hargs,
             stdin=("\n".join(lines) + "\n").encode())
    t_after = int(time.time() * 1000)

    # format string, one partition at a time (per-partition order is what Kafka defines)
    hstr = ",".join(f"{k}={v}" for k, v in headers)
    for p in range(2):
        out = kcat(broker, "-C", "-t", topic, "-p", str(p), "-o", "beginning", "-e", "-f", FMT)
        rows = [line.split("\t") for line in out.splitlines()]
        want = [[str(pp), str(o), str(len(k)), k, str(len(v)), v, hstr]
                for pp, o, k, v in expected if pp == p]
        assert rows == want

    # JSON envelope: headers as an ordered [name, value, ...] array, timestamps
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-J")
    msgs = [json.loads(line) for line in out.splitlines()]
    got = sorted((m["partition"], m["offset"], m["key"], m["payload"]) for m in msgs)
    assert got == sorted(expected)
    for m in msgs:
        assert m["headers"] == [x for kv in headers for x in kv], m
        assert m["tstype"] == "create", m
        assert t_before - 1000 <= m["ts"] <= t_after + 1000, (m, t_before, t_after)
        assert m["broker"] == NODE_ID, m


def test_kcat_null_keys_values_and_headers(broker):
    """-Z on produce turns empty keys/values into NULL; null header values from
    librdkafka come back as JSON null."""
    topic = unique_topic("kcat-null")
    create_topic(broker.bootstrap, topic, 1)
    kcat(broker, "-P", "-t", topic, "-p", "0", "-K:", "-Z", "-X", "enable.idempotence=false",
         stdin=b":value-with-null-key\nkey-with-null-value:\nk3:v3\n")
    produce_confluent(broker.bootstrap, topic, [
        Out(0, b"hk", b"hv", [("n", None), ("x", b"1"), ("n", b"2")], BASE_TS + 5)])

    out = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J")
    msgs = [json.loads(line) for line in out.splitlines()]
    assert [(m["offset"], m["key"], m["payload"]) for m in msgs] == [
        (0, None, "value-with-null-key"),
        (1, "key-with-null-value", None),
        (2, "k3", "v3"),
        (3, "hk", "hv"),
    ]
    assert msgs[3]["headers"] == ["n", None, "x", "1", "n", "2"]
    assert msgs[3]["ts"] == BASE_TS + 5

    out = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", r"%o %K %S\n")
    assert out.splitlines() == ["0 -1 19", "1 19 -1", "2 2 2", "3 2 2"]

    # start from an offset
    out = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", "2", "-e", "-f", r"%o:%k:%s\n")
    assert out.splitlines() == ["2:k3:v3", "3:hk:hv"]


def test_kcat_query_offsets_by_timestamp(broker):
    topic = unique_topic("kcat-q")
    create_topic(broker.bootstrap, topic, 1)
    produce_confluent(broker.bootstrap, topic,
                      [Out(0, None, f"v{i}".encode(), [], BASE_TS + 100 * i) for i in range(10)])
    for q, want in [(BASE_TS, 0), (BASE_TS + 1, 1), (BASE_TS + 450, 5), (BASE_TS + 900, 9),
                    (BASE_TS + 901, -1)]:
        out = json.loads(kcat(broker, "-Q", "-J", "-t", f"{topic}:0:{q}"))
        entry = out[topic]["0"]
        assert "error" not in entry, entry
        assert entry["offset"] == want, (q - BASE_TS, entry)
