"""First-run papercuts (issue 18, point 6), tried as a new user would: the version and
settings at start-up, `--help` with defaults, host names in listen addresses, a refused
0.0.0.0 without an advertised address (said once, clearly), debug logs that show
connections, requests and group joins, refusals that are logged, throttled warnings for
bad connections, a JSON 404, and `/v1/tiering` saying why a small topic's records wait.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import NewTopic

from conftest import pick_free_ports, strata_bin
from strata_testlib import (
    RDKAFKA_LOG,
    Out,
    admin,
    create_topic,
    produce_confluent,
    unique_topic,
    wait_until,
)


def run_strata(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(strata_bin()), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_version_names_the_commit_and_help_shows_defaults():
    version = run_strata("--version")
    assert version.returncode == 0, version.stderr
    assert re.search(r"strata \d+\.\d+\.\d+ \((unknown|[0-9a-f]{12})\)", version.stdout), version.stdout
    helptext = run_strata("agent", "--help").stdout
    assert "[default: 127.0.0.1:9092]" in helptext
    assert "[default: ./data]" in helptext


def test_a_host_name_listens_and_0_0_0_0_needs_an_advertised_address(tmp_path):
    kafka, http = pick_free_ports(2)
    # 0.0.0.0 with nothing advertised: refused at once, with the fix, said once.
    refused = run_strata("agent", "--kafka-listen", f"0.0.0.0:{kafka}",
                         "--http-listen", f"127.0.0.1:{http}", "--data-dir", str(tmp_path / "a"))
    assert refused.returncode != 0
    err = refused.stderr
    assert "--kafka-advertised" in err and "0.0.0.0" in err, err
    assert err.count("must be set") == 1, err

    # A host name is resolved: localhost listens on 127.0.0.1.
    proc = subprocess.Popen([str(strata_bin()), "agent", "--kafka-listen", f"localhost:{kafka}",
                             "--http-listen", f"localhost:{http}",
                             "--data-dir", str(tmp_path / "b")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        def ready():
            if proc.poll() is not None:
                raise AssertionError(f"strata exited: {proc.stderr.read()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=1) as r:
                    return r.status == 200
            except OSError:
                return False
        wait_until(ready, 60, "strata listening on localhost to be ready")
        md = admin(f"127.0.0.1:{kafka}").list_topics(timeout=10)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", kafka)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    startup = proc.stderr.read()
    assert "starting strata" in startup and "version=" in startup, startup
    # Where the metastore and the archive are, as paths (not DATA_DIR, not "Embedded").
    data = tmp_path / "b"
    assert f"metastore=embedded {data}/metastore.sqlite" in startup, startup
    assert f"archive=file://{data}/archive" in startup, startup


def test_a_misspelt_setting_names_the_one_meant(tmp_path):
    settings = tmp_path / "strata.toml"
    settings.write_text('kafka_lisen = "127.0.0.1:9092"\n')
    r = run_strata("agent", "--config", str(settings), "--data-dir", str(tmp_path / "d"))
    assert r.returncode != 0
    assert "unknown setting `kafka_lisen`: did you mean `kafka_listen`?" in r.stderr, r.stderr
    assert "node_id" not in r.stderr, r.stderr


def test_debug_logs_show_connections_requests_and_joins(broker_factory):
    b = broker_factory(extra_args=["--group-initial-rebalance-delay-ms", "100"],
                       extra_env={"STRATA_LOG": "debug"})
    b.start()
    topic = unique_topic("debuglog")
    create_topic(b.bootstrap, topic, 1)
    produce_confluent(b.bootstrap, topic, [Out(0, None, b"x")])
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique_topic("g"),
                  "auto.offset.reset": "earliest", "logger": RDKAFKA_LOG})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                break
        else:
            raise AssertionError("consumed nothing")
    finally:
        c.close()
    log = b.log_text()
    assert "connection accepted peer=127.0.0.1:" in log
    assert "request api=Produce version=" in log
    assert "join group=" in log
    assert "rebalance completed group=" in log


def test_refusals_are_logged_and_bad_connection_warnings_throttled(broker):
    # A refused topic creation is logged with its reason.
    a = admin(broker.bootstrap)
    fs = a.create_topics([NewTopic(unique_topic("toomany"), num_partitions=1,
                                   replication_factor=5)], request_timeout=20)
    try:
        next(iter(fs.values())).result(timeout=20)
        raise AssertionError("a replication factor of 5 on one agent was accepted")
    except KafkaException:
        pass
    wait_until(lambda: "topic creation refused" in broker.log_text(), 10,
               "the refused creation to be logged")

    # Fifty bad frames in a row: the warning is throttled to about one a second.
    started = time.monotonic()
    for _ in range(50):
        with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=5) as s:
            # A frame naming API key 9999: unknown, the connection is closed.
            s.sendall((10).to_bytes(4, "big") + (9999).to_bytes(2, "big") + bytes(8))
            try:
                s.recv(16)
            except OSError:
                pass
    took = time.monotonic() - started
    wait_until(lambda: "closed connection after a bad request" in broker.log_text(), 10,
               "a bad connection warning")
    warned = broker.log_text().count("closed connection after a bad request")
    assert 1 <= warned <= int(took) + 2, (warned, took)


def test_curl_on_the_kafka_port_is_told_where_the_http_api_is(broker):
    r = subprocess.run(["curl", "-s", "-i", f"http://127.0.0.1:{broker.kafka_port}/v1/topics"],
                       capture_output=True, text=True, timeout=30)
    assert r.stdout.startswith("HTTP/1.1 400 Bad Request"), (r.returncode, r.stdout, r.stderr)
    assert f"Its HTTP API is at {broker.http_url}/ (docs/http.md)" in r.stdout, r.stdout
    # The listener still serves Kafka clients.
    assert admin(broker.bootstrap).list_topics(timeout=10).brokers


def test_unknown_http_paths_answer_json_and_tiering_says_why_records_wait(broker):
    try:
        urllib.request.urlopen(broker.http_url + "/v1/nothing-here", timeout=5)
        raise AssertionError("an unknown path answered 2xx")
    except urllib.error.HTTPError as e:
        assert e.code == 404
        assert e.headers.get("Content-Type") == "application/problem+json"
        body = json.loads(e.read())
        assert body["status"] == 404 and "/v1/nothing-here" in body["detail"], body
        assert "/v1/acls" in body["detail"] and "/v1/topics/{topic}/produce" in body["detail"], body
    # A served path asked with a method it does not serve: 405, which it does, in words.
    try:
        urllib.request.urlopen(broker.http_url + "/v1/topics/orders/produce", timeout=5)
        raise AssertionError("GET on a POST route answered 2xx")
    except urllib.error.HTTPError as e:
        assert e.code == 405 and e.headers.get("Allow") == "POST", (e.code, e.headers)
        assert e.headers.get("Content-Type") == "application/problem+json"
        body = json.loads(e.read())
        assert body["status"] == 405, body
        assert body["detail"] == "GET is not served at /v1/topics/{topic}/produce: POST is", body

    topic = unique_topic("small")
    create_topic(broker.bootstrap, topic, 1)
    produce_confluent(broker.bootstrap, topic, [Out(0, None, b"one record")])

    def waiting():
        with urllib.request.urlopen(broker.http_url + "/v1/tiering", timeout=5) as r:
            parts = [p for p in json.load(r)["partitions"] if p["topic"] == topic]
        return parts and parts[0]["lag_records"] == 1 and "waiting_for" in parts[0] and parts[0]
    status = wait_until(waiting, 30, "the small topic's tiering status")
    assert "active segment" in status["waiting_for"], status
