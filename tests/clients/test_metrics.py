"""Prometheus metrics (issue 18): `GET /metrics` in Prometheus's text format, checked by
Prometheus's own tools.

- One agent: the page passes `promtool check metrics` (Prometheus's linter: names,
  types, help), and after librdkafka produced, consumed and asked for a topic that does
  not exist, it counts those requests by API, their latency in a histogram, the
  bytes produced and fetched, and the refused request under its Kafka error name.
- Three agents scraped every second by a real Prometheus server (Debian's
  `prometheus`): no partition is under-replicated while all run; the consumer lag
  Prometheus reports for a group is exactly what ListOffsets minus OffsetFetch gives,
  one series per partition; after one agent is SIGKILLed, the under-replicated query
  counts every partition of the topic and the ISR shrinks are counted; once it is back,
  the count returns to 0 and the expands are counted.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

pytest.register_assert_rewrite("replication_testlib")

from conftest import pick_free_ports  # noqa: E402
from replication_testlib import create_replicated_topic, produce_values, wait_for  # noqa: E402
from strata_testlib import RDKAFKA_LOG, admin, create_topic, unique_topic, watermarks  # noqa: E402
from test_replication import LAG_MS, LEASE_MS, started_cluster  # noqa: E402

PARTITIONS = 3


def scrape(http_url: str) -> tuple[str, str]:
    with urllib.request.urlopen(http_url + "/metrics", timeout=10) as resp:
        return resp.headers.get("Content-Type", ""), resp.read().decode()


LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> dict[frozenset, float]:
    """`{labels: value}` of one metric in a text page, `labels` a frozenset of pairs."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            out[frozenset(LABEL.findall(key[len(name):]))] = float(value)
    return out


def value(text: str, name: str, **labels) -> float:
    """The sample of `name` with exactly these labels; 0 when there is none."""
    return samples(text, name).get(frozenset(labels.items()), 0.0)


def test_metrics_page_is_valid_prometheus_text_and_counts_requests(broker_factory):
    broker = broker_factory(extra_args=["--auto-create-topics", "false"])
    broker.start()
    topic = unique_topic("metrics")
    create_topic(broker.bootstrap, topic, 1)
    values = [f"v{i}".encode() for i in range(50)]
    reports = produce_values(broker.bootstrap, topic, 0, values, flush_timeout=30)
    assert all(err is None for _, err, _ in reports), reports
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g"),
                  "enable.auto.commit": False, "logger": RDKAFKA_LOG})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + 30
        while got < len(values) and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got += 1
        assert got == len(values)
    finally:
        c.close()
    # A topic that does not exist (and is not created: auto-creation is off): Metadata
    # answers UNKNOWN_TOPIC_OR_PARTITION for it.
    missing = unique_topic("missing")
    # The admin client is kept until the scrape: its connection is the open one that
    # strata_connections counts (a dropped client may close it before the scrape).
    held = admin(broker.bootstrap)
    md = held.list_topics(topic=missing, timeout=10)
    assert md.topics[missing].error is not None

    content_type, text = scrape(broker.http_url)
    assert content_type.startswith("text/plain"), content_type
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    assert value(text, "strata_requests_total", api="Produce") >= 1
    assert value(text, "strata_requests_total", api="Fetch") >= 1
    assert value(text, "strata_request_duration_seconds_bucket", api="Produce", le="+Inf") >= 1
    assert value(text, "strata_request_errors_total", api="Metadata",
                 error="UNKNOWN_TOPIC_OR_PARTITION") >= 1, samples(text, "strata_request_errors_total")
    payload = sum(len(v) for v in values)
    produced = value(text, "strata_produced_bytes_total", topic=topic)
    assert produced > payload, (produced, payload)  # the batches, headers included
    assert value(text, "strata_fetched_bytes_total", topic=topic, by="consumer") >= produced
    partition = {"topic": topic, "partition": "0"}
    assert value(text, "strata_partition_high_watermark", **partition) == len(values)
    assert value(text, "strata_partition_log_end_offset", **partition) == len(values)
    assert value(text, "strata_partition_size_bytes", **partition) >= produced
    assert value(text, "strata_partition_leader", **partition) == 1
    assert value(text, "strata_connections") >= 1
    assert value(text, "strata_data_dir_free_bytes") > 0
    assert value(text, "strata_metastore_transactions_total") >= 1
    del held


# ------------------------------------------------------------------ a real Prometheus

class Prometheus:
    def __init__(self, url: str):
        self.url = url

    def query(self, expr: str) -> list[dict]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as resp:
            data = json.load(resp)
        assert data["status"] == "success", data
        return data["data"]["result"]

    def scalar(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def by(self, expr: str, label: str) -> dict[str, float]:
        return {r["metric"][label]: float(r["value"][1]) for r in self.query(expr)}


@pytest.fixture
def metrics_cluster(broker_factory, request):
    yield from started_cluster(broker_factory, request, "strata-metrics-", [
        "--lease-ms", str(LEASE_MS),
        "--replica-lag-time-max-ms", str(LAG_MS),
    ])


@pytest.fixture
def prometheus(metrics_cluster, tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed (tests/clients/install-deps.sh installs it)"
    port = pick_free_ports(1)[0]
    # JSON is YAML: no YAML library needed.
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [{
            "job_name": "strata",
            "static_configs": [
                {"targets": [f"127.0.0.1:{a.http_port}"], "labels": {"node": str(node)}}
                for node, a in metrics_cluster.agents.items()
            ],
        }],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([
        binary, f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()}")
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=1) as resp:
                return resp.status == 200, resp.status
        except OSError as e:
            return False, str(e)

    try:
        wait_for(ready, 60, "prometheus to be ready", interval=0.2)
        yield Prometheus(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_prometheus_sees_under_replication_and_consumer_lag(metrics_cluster, prometheus):
    cluster, prom = metrics_cluster, prometheus
    topic = unique_topic("scraped")
    create_replicated_topic(cluster, topic, PARTITIONS)
    for p in range(PARTITIONS):
        values = [f"{p}-{i}".encode() for i in range(100)]
        reports = produce_values(cluster.servers(), topic, p, values, flush_timeout=30)
        assert all(err is None for _, err, _ in reports), reports

    # A group that consumed 70 records of partition 0, 50 of partition 1 and all of 2.
    group = unique_topic("lagging")
    committed = {p: [70, 50, 100][p] for p in range(PARTITIONS)}
    c = Consumer({"bootstrap.servers": cluster.servers(), "group.id": group,
                  "enable.auto.commit": False, "logger": RDKAFKA_LOG})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()],
                 asynchronous=False)
        fetched = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        offset_fetch = {tp.partition: tp.offset for tp in fetched}
    finally:
        c.close()
    assert offset_fetch == committed
    list_offsets = {p: watermarks(cluster.servers(), topic, p)[1] for p in range(PARTITIONS)}
    expected_lag = {str(p): float(list_offsets[p] - offset_fetch[p]) for p in range(PARTITIONS)}

    wait_for(lambda: ((v := prom.scalar('sum(up{job="strata"})')) == 3, v), 30,
             "Prometheus to scrape all three agents")
    wait_for(lambda: ((v := prom.scalar(f'sum(strata_leader_partitions)')) is not None
                      and v >= PARTITIONS, v), 30, "the leaders to be scraped")
    assert prom.scalar("sum(strata_under_replicated_partitions)") == 0
    lag_query = f'strata_consumer_group_lag_records{{group="{group}",topic="{topic}"}}'
    # One series per partition (only its leader reports it), equal to ListOffsets minus
    # OffsetFetch.
    wait_for(lambda: ((v := prom.by(lag_query, "partition")) == expected_lag
                      and len(prom.query(lag_query)) == PARTITIONS, v), 30,
             f"the consumer lag {expected_lag}")
    seconds = prom.by(f'strata_consumer_group_lag_seconds{{group="{group}",topic="{topic}"}}',
                      "partition")
    assert seconds["2"] == 0 and seconds["0"] > 0 and seconds["1"] > 0, seconds
    assert prom.scalar('sum(strata_requests_total{api="Produce"})') >= PARTITIONS
    assert prom.query('strata_request_duration_seconds_bucket{api="Produce",le="+Inf"}')

    shrinks_before = prom.scalar("sum(strata_isr_shrinks_total)") or 0
    cluster.agents[3].kill()
    # Every partition has a replica on agent 3: each leader shrinks its ISR once agent
    # 3's lease runs out, and its partition counts as under-replicated.
    wait_for(lambda: ((v := prom.scalar("sum(strata_under_replicated_partitions)")) == PARTITIONS,
                      v), 30, f"{PARTITIONS} under-replicated partitions after agent 3 died")
    # (The partition agent 3 led moves to a new leader whose ISR leaves agent 3 out from
    # the start; the others shrink theirs.)
    assert prom.scalar("sum(strata_isr_shrinks_total)") >= shrinks_before + 1
    wait_for(lambda: ((v := prom.scalar("max(strata_offline_partitions)")) == 0, v), 30,
             "no offline partition (new leaders for agent 3's)")

    expands_before = prom.scalar("sum(strata_isr_expands_total)") or 0
    cluster.agents[3].start()  # on its data directory, at the same ports
    wait_for(lambda: ((v := prom.scalar("sum(strata_under_replicated_partitions)")) == 0, v),
             60, "no under-replicated partition once agent 3 is back")
    wait_for(lambda: ((v := prom.scalar("sum(strata_isr_expands_total)") or 0)
                      >= expands_before + PARTITIONS, v), 30, "the ISR expands to be counted")

    # Every query of the Grafana dashboard is valid PromQL over these series, and the
    # core panels have data.
    dashboard = json.loads((Path(__file__).parents[2] / "infra/grafana/strata.json").read_text())
    empty = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$job", "strata").replace("$__rate_interval", "1m")
            if not prom.query(expr):
                empty.append(f"{panel['title']}: {expr}")
    core = ("Under-replicated", "Offline", "Requests/s", "Consumer lag (records)",
            "Produce bytes", "p99 request latency")
    assert not [e for e in empty if e.startswith(core)], empty
