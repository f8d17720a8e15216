"""The HTTP administration and operator endpoints (`agent/src/http/admin.rs`,
`agent/src/http/operate.rs`) and the audit log, cross-checked with real Kafka clients:

- Topics: POST /v1/topics (partitions, configs, validate_only), PATCH .../configs (set
  and delete), POST .../partitions and DELETE are seen by librdkafka's AdminClient
  (Metadata, DescribeConfigs); wrong requests get problem details with Kafka's error
  name (TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, UNKNOWN_TOPIC_OR_PARTITION,
  INVALID_CONFIG, unknown fields).
- Groups: a live librdkafka member shows in GET /v1/groups (Stable) and
  GET /v1/groups/{g} with committed offsets, high watermarks and lag equal to what
  librdkafka computes (committed(), get_watermark_offsets()); an offset reset of a live
  group is refused (409 NON_EMPTY_GROUP) and changes nothing; once it is closed: dry
  run, earliest, by timestamp (against offsets_for_times), an offset past the end
  (clamped to the high watermark), one partition only; new librdkafka members resume
  where the reset put them; DELETE removes the group and its offsets.
- Disable/enable, the acceptance point: an acks=all librdkafka producer writing
  continuously gets POLICY_VIOLATION within a second of the disable, a consumer keeps
  reading, HTTP produce is 422; after enable the deliveries succeed again and every
  acknowledged record is in the log exactly once, no refused one is (with a plain and
  with an idempotent producer). The flag survives a restart, stays on its partition
  when the topic grows, and a topic re-created under the name starts writable.
- Tier and verify: POST .../tier archives the closed segments (the periodic pass is
  set to 10 minutes so that only the request does it), verify reads them back (ok),
  then a byte-flipped Parquet object is reported as a mismatch by name.
- Audit: every action above is a JSON line in {data_dir}/audit.log and in GET
  /v1/audit, refusals with ok=false; reads are not audited.
- A 3-agent cluster: group describe and offset reset through a non-coordinator are
  307s to the coordinator that work when followed; topic describe on any agent shows
  the offsets of partitions led elsewhere; a disable sent to one agent reaches the
  producer of a partition led by another within 2 s (the leader learns it through the
  metastore's watch); config changes sent one after the other through different
  agents all take effect (none lost to an agent's stale view of the topic).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections import Counter

import pytest
import requests
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import ConfigResource, ConfigSource

from strata_testlib import (
    BASE_TS,
    RDKAFKA_LOG,
    Out,
    admin,
    consume_confluent,
    consumer_conf,
    create_topic,
    produce_confluent,
    producer_conf,
    unique_topic,
    wait_for_partitions,
    wait_until,
    watermarks,
)

POLICY_VIOLATION = 44
assert KafkaError.POLICY_VIOLATION == POLICY_VIOLATION


# --------------------------------------------------------------------------- HTTP
def call(method: str, url: str, body=None, allow_redirects: bool = True,
         timeout: float = 30) -> requests.Response:
    return requests.request(method, url, json=body, allow_redirects=allow_redirects,
                            timeout=timeout)


def ok_json(r: requests.Response, status: int = 200) -> dict:
    assert r.status_code == status, (r.request.method, r.url, r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    return r.json()


def assert_problem(r: requests.Response, status: int, kafka_error: str | None = None,
                   says: str | None = None) -> dict:
    """An RFC 9457 problem-details answer with `status` (and Kafka's error name)."""
    assert r.status_code == status, (r.request.method, r.url, r.status_code, r.text)
    assert r.headers["content-type"] == "application/problem+json", r.headers
    body = r.json()
    assert body["status"] == status and body["title"] and body["detail"], body
    if kafka_error is not None:
        assert body.get("kafka_error") == kafka_error, body
    if says is not None:
        assert says in body["detail"], body
    return body


def describe_configs(a, topic: str) -> dict:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return a.describe_configs([res], request_timeout=15)[res].result(timeout=15)


def source_of(entry) -> int:
    return getattr(entry.source, "value", entry.source)


def b64_bytes(s: str) -> bytes:
    return base64.urlsafe_b64decode(s.replace("+", "-").replace("/", "_") + "=" * (-len(s) % 4))


def kafka_partitions(a, topic: str) -> int | None:
    t = a.list_topics(topic=topic, timeout=10).topics.get(topic)
    if t is None or t.error is not None:
        return None
    return len(t.partitions)


def kafka_committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as librdkafka's AdminClient (OffsetFetch) sees
    them; -1001 (OFFSET_INVALID) where none is committed."""
    a = admin(bootstrap)
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = a.list_consumer_group_offsets([req], request_timeout=15)[group].result(timeout=15)
    out = {}
    for tp in res.topic_partitions:
        assert tp.error is None, tp
        out[tp.partition] = tp.offset
    return out


def first_offsets(bootstrap: str, group: str, topic: str, partitions: list[int],
                  timeout: float = 30) -> dict[int, int]:
    """A new librdkafka member of `group` (auto.offset.reset=latest, so without a
    committed offset it would wait at the end): the offset of the first record it gets
    from each partition. Closes without committing."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "latest", "enable.auto.commit": False,
                  "session.timeout.ms": 10000, "logger": RDKAFKA_LOG})
    got: dict[int, int] = {}
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while set(got) != set(partitions):
            assert time.monotonic() < deadline, f"first records of {topic}: only {got}"
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            got.setdefault(m.partition(), m.offset())
    finally:
        c.close()
    return got


def group_state(http: str, group: str) -> str | None:
    r = call("GET", f"{http}/v1/groups/{group}")
    return r.json().get("state") if r.status_code == 200 else None


# =========================================================================== topics
def test_topics_created_altered_grown_and_deleted_over_http_are_what_kafka_sees(broker):
    http, b = broker.http_url, broker.bootstrap
    a = admin(b)
    topic = unique_topic("adm-topic")

    # validate_only creates nothing
    body = ok_json(call("POST", f"{http}/v1/topics",
                        {"name": topic, "partitions": 4, "validate_only": True}))
    assert body == {"name": topic, "partitions": 4, "replication_factor": 1,
                    "validate_only": True}, body
    assert topic not in a.list_topics(timeout=10).topics

    created = ok_json(call("POST", f"{http}/v1/topics", {
        "name": topic, "partitions": 4,
        "configs": {"retention.ms": "3600000", "cleanup.policy": "compact"}}), 201)
    assert created["name"] == topic and created["replication_factor"] == 1
    assert [p["partition"] for p in created["partitions"]] == [0, 1, 2, 3]
    assert created["configs"]["retention.ms"] == {"value": "3600000", "source": "topic"}
    wait_for_partitions(a, topic, 4)
    d = describe_configs(a, topic)
    assert (d["retention.ms"].value, source_of(d["retention.ms"])) == (
        "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value), d["retention.ms"]
    assert d["cleanup.policy"].value == "compact", d["cleanup.policy"]

    # GET agrees with Kafka on every config and on the topic id.
    described = ok_json(call("GET", f"{http}/v1/topics/{topic}"))
    for name, entry in d.items():
        assert described["configs"][name]["value"] == entry.value, (name, described["configs"][name], entry)
    md = a.list_topics(topic=topic, timeout=10).topics[topic]
    listed = {t["name"]: t for t in ok_json(call("GET", f"{http}/v1/topics"))["topics"]}
    assert listed[topic]["partitions"] == 4 and listed[topic]["disabled_partitions"] == []
    assert listed[topic]["topic_id"] == described["topic_id"] == created["topic_id"]
    assert all(p["leader"] == md.partitions[p["partition"]].leader for p in described["partitions"])
    # The same id as Kafka's DescribeTopics (strata prints it URL-safe, as Java's Uuid
    # does; librdkafka prints standard base64).
    kafka_id = a.describe_topics(TopicCollection([topic]), request_timeout=15)[topic].result(15).topic_id
    assert b64_bytes(described["topic_id"]) == b64_bytes(str(kafka_id)), (described["topic_id"], kafka_id)

    # PATCH: set two, delete one (back to its default); the others keep their values.
    r = call("PATCH", f"{http}/v1/topics/{topic}/configs",
             {"set": {"retention.ms": "7200000", "max.message.bytes": "200000"},
              "delete": ["cleanup.policy"]})
    body = ok_json(r)
    assert body["configs"] == {"retention.ms": "7200000", "max.message.bytes": "200000"}, body
    d = describe_configs(a, topic)
    assert d["retention.ms"].value == "7200000"
    assert (d["max.message.bytes"].value, source_of(d["max.message.bytes"])) == (
        "200000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (d["cleanup.policy"].value, d["cleanup.policy"].is_default) == ("delete", True), \
        d["cleanup.policy"]

    # More partitions: Kafka metadata shows them, and they take records.
    body = ok_json(call("POST", f"{http}/v1/topics/{topic}/partitions", {"count": 6}))
    assert body["partitions"] == 6
    wait_for_partitions(a, topic, 6)
    produce_confluent(b, topic, [Out(5, b"k", b"on the new partition", [], BASE_TS)])
    assert watermarks(b, topic, 5) == (0, 1)
    assert_problem(call("POST", f"{http}/v1/topics/{topic}/partitions", {"count": 3}), 400,
                   "INVALID_PARTITIONS")

    # DELETE: Kafka no longer lists it; describing or deleting it again is a 404.
    assert ok_json(call("DELETE", f"{http}/v1/topics/{topic}")) == {"deleted": topic}
    wait_until(lambda: topic not in a.list_topics(timeout=5).topics, 15, f"{topic} gone from Metadata")
    assert_problem(call("GET", f"{http}/v1/topics/{topic}"), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert topic not in {t["name"] for t in ok_json(call("GET", f"{http}/v1/topics"))["topics"]}


def test_topic_requests_that_are_wrong_get_problem_details(broker):
    http, b = broker.http_url, broker.bootstrap
    a = admin(b)
    topic = unique_topic("adm-bad")
    ok_json(call("POST", f"{http}/v1/topics", {"name": topic, "partitions": 2}), 201)

    body = assert_problem(call("POST", f"{http}/v1/topics", {"name": topic, "partitions": 5}),
                          409, "TOPIC_ALREADY_EXISTS")
    assert topic in body["detail"], body
    assert kafka_partitions(a, topic) == 2, "the duplicate creation changed the topic"

    for name in ("bad name", "star*", "..", "x" * 250):
        assert_problem(call("POST", f"{http}/v1/topics", {"name": name}), 400, "INVALID_TOPIC_EXCEPTION")
        assert name not in a.list_topics(timeout=10).topics

    missing = unique_topic("adm-missing")
    for method, path, body in (("GET", "", None), ("DELETE", "", None),
                               ("PATCH", "/configs", {"set": {"retention.ms": "1"}}),
                               ("POST", "/partitions", {"count": 3})):
        assert_problem(call(method, f"{http}/v1/topics/{missing}{path}", body), 404,
                       "UNKNOWN_TOPIC_OR_PARTITION")
    assert missing not in a.list_topics(timeout=10).topics

    bad = unique_topic("adm-badcfg")
    assert_problem(call("POST", f"{http}/v1/topics", {"name": bad, "configs": {"retention.ms": "forever"}}),
                   400, "INVALID_CONFIG", says="retention.ms")
    assert_problem(call("POST", f"{http}/v1/topics", {"name": bad, "configs": {"no.such.config": "1"}}),
                   400, "INVALID_CONFIG", says="no.such.config")
    assert bad not in a.list_topics(timeout=10).topics
    assert_problem(call("PATCH", f"{http}/v1/topics/{topic}/configs", {"set": {"retention.ms": "12abc"}}),
                   400, "INVALID_CONFIG")
    assert_problem(call("PATCH", f"{http}/v1/topics/{topic}/configs", {"delete": ["no.such.config"]}),
                   400, "INVALID_CONFIG")
    assert_problem(call("PATCH", f"{http}/v1/topics/{topic}/configs", {}), 400, says="nothing to change")
    assert describe_configs(a, topic)["retention.ms"].is_default, "a refused change was applied"

    # Unknown fields, wrong types, not JSON: 400 with the field named.
    assert_problem(call("POST", f"{http}/v1/topics", {"name": bad, "partitions": 1, "colour": "red"}),
                   400, says="unknown field `colour`")
    assert_problem(call("POST", f"{http}/v1/topics", {"name": bad, "partitions": 1.5}), 400)
    assert_problem(call("POST", f"{http}/v1/topics", ["not", "an", "object"]), 400)
    assert_problem(requests.post(f"{http}/v1/topics", data=b"{nope", timeout=10), 400)
    assert_problem(call("PATCH", f"{http}/v1/topics/{topic}/configs", {"sets": {"retention.ms": "1"}}),
                   400, says="unknown field `sets`")
    assert_problem(call("POST", f"{http}/v1/topics/{topic}/partitions", {"count": 4, "force": True}),
                   400, says="unknown field `force`")
    assert_problem(call("POST", f"{http}/v1/topics/{topic}/partitions", {}), 400, says="count")
    assert bad not in a.list_topics(timeout=10).topics
    assert kafka_partitions(a, topic) == 2


# =========================================================================== groups
def test_group_describe_lag_and_offset_resets_match_kafka(group_broker):
    http, b = group_broker.http_url, group_broker.bootstrap
    topic = unique_topic("adm-group")
    group = f"g-{uuid.uuid4().hex[:8]}"
    n, per = 3, 10
    create_topic(b, topic, n)
    # Partition p, record i: timestamp BASE_TS + 1000 i + 300 p (so that a time between
    # records falls at different offsets in different partitions).
    produce_confluent(b, topic, [Out(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), [],
                                     BASE_TS + 1000 * i + 300 * p)
                                 for i in range(per) for p in range(n)])
    commit_at = {0: 3, 1: 5, 2: 7}

    c = Consumer({"bootstrap.servers": b, "group.id": group, "client.id": "adm-member",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 10000, "logger": RDKAFKA_LOG})
    closed = False
    try:
        c.subscribe([topic])
        seen: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while any(seen.get(p, 0) < commit_at[p] for p in range(n)):
            assert time.monotonic() < deadline, f"consumed only {seen}"
            m = c.poll(0.2)
            if m is not None and not m.error():
                seen[m.partition()] = seen.get(m.partition(), 0) + 1
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in commit_at.items()],
                 asynchronous=False)
        # Records after the commit: the lag must follow the live high watermark.
        produce_confluent(b, topic, [Out(0, None, f"late-{i}".encode(), [], BASE_TS + 50_000 + i)
                                     for i in range(4)])

        listed = wait_until(
            lambda: [g for g in ok_json(call("GET", f"{http}/v1/groups"))["groups"]
                     if g["group_id"] == group and g["state"] == "Stable"],
            20, f"{group} listed as Stable")
        assert listed[0]["protocol_type"] == "consumer" and listed[0]["coordinator"] == 1, listed

        desc = ok_json(call("GET", f"{http}/v1/groups/{group}"))
        assert desc["state"] == "Stable" and desc["protocol_type"] == "consumer", desc
        [member] = desc["members"]
        assert member["member_id"] == c.memberid(), (member, c.memberid())
        assert member["client_id"] == "adm-member", member
        assert member["assignment"] == [{"topic": topic, "partitions": [0, 1, 2]}], member
        committed = {tp.partition: tp.offset
                     for tp in c.committed([TopicPartition(topic, p) for p in range(n)], timeout=10)}
        assert committed == commit_at
        highs = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                 for p in range(n)}
        assert highs == {0: per + 4, 1: per, 2: per}
        by_p = {o["partition"]: o for o in desc["offsets"] if o["topic"] == topic}
        assert sorted(by_p) == list(range(n)), desc["offsets"]
        for p in range(n):
            o = by_p[p]
            assert (o["committed_offset"], o["high_watermark"], o["lag"], o["member_id"]) == (
                committed[p], highs[p], highs[p] - committed[p], c.memberid()), o
        assert desc["total_lag"] == sum(highs[p] - committed[p] for p in range(n))

        # A live group's offsets are its members' to commit.
        r = call("POST", f"{http}/v1/groups/{group}/offsets", {"topic": topic, "to": "earliest"})
        assert_problem(r, 409, "NON_EMPTY_GROUP")
        assert_problem(call("DELETE", f"{http}/v1/groups/{group}"), 409, "NON_EMPTY_GROUP")
        assert kafka_committed(b, group, topic, n) == commit_at
        c.close()
        closed = True
    finally:
        if not closed:
            c.close()

    wait_until(lambda: group_state(http, group) == "Empty", 15, f"{group} Empty after close")

    # Dry run: the plan, nothing committed.
    plan = ok_json(call("POST", f"{http}/v1/groups/{group}/offsets",
                        {"topic": topic, "to": "earliest", "dry_run": True}))
    assert plan["dry_run"] is True and plan["group_id"] == group and plan["topic"] == topic
    assert plan["partitions"] == [{"partition": p, "previous_offset": commit_at[p], "new_offset": 0}
                                  for p in range(n)], plan
    assert kafka_committed(b, group, topic, n) == commit_at

    # Earliest: a new member starts at 0 everywhere.
    ok_json(call("POST", f"{http}/v1/groups/{group}/offsets", {"topic": topic, "to": "earliest"}))
    assert kafka_committed(b, group, topic, n) == {0: 0, 1: 0, 2: 0}
    assert first_offsets(b, group, topic, [0, 1, 2]) == {0: 0, 1: 0, 2: 0}
    wait_until(lambda: group_state(http, group) == "Empty", 15, f"{group} Empty again")

    # By timestamp: where Kafka's ListOffsets by time says, and a new member resumes there.
    ts = BASE_TS + 4500
    probe = Consumer(consumer_conf(b))
    try:
        by_time = {tp.partition: tp.offset for tp in probe.offsets_for_times(
            [TopicPartition(topic, p, ts) for p in range(n)], timeout=10)}
    finally:
        probe.close()
    assert by_time == {0: 5, 1: 5, 2: 4}, by_time
    body = ok_json(call("POST", f"{http}/v1/groups/{group}/offsets",
                        {"topic": topic, "to": "timestamp", "timestamp_ms": ts}))
    assert {p["partition"]: p["new_offset"] for p in body["partitions"]} == by_time
    assert kafka_committed(b, group, topic, n) == by_time
    assert first_offsets(b, group, topic, [0, 1, 2]) == by_time
    wait_until(lambda: group_state(http, group) == "Empty", 15, f"{group} Empty again")

    # Past the end: clamped to the high watermark.
    highs = {p: watermarks(b, topic, p)[1] for p in range(n)}
    body = ok_json(call("POST", f"{http}/v1/groups/{group}/offsets",
                        {"topic": topic, "to": "offset", "offset": 10_000}))
    assert {p["partition"]: p["new_offset"] for p in body["partitions"]} == highs
    assert kafka_committed(b, group, topic, n) == highs
    # One partition only; the others keep theirs.
    body = ok_json(call("POST", f"{http}/v1/groups/{group}/offsets",
                        {"topic": topic, "to": "offset", "offset": 2, "partitions": [1]}))
    assert body["partitions"] == [{"partition": 1, "previous_offset": highs[1], "new_offset": 2}]
    assert kafka_committed(b, group, topic, n) == {**highs, 1: 2}
    desc = ok_json(call("GET", f"{http}/v1/groups/{group}"))
    assert desc["state"] == "Empty" and desc["members"] == []
    assert {o["partition"]: o["lag"] for o in desc["offsets"]} == {0: 0, 1: highs[1] - 2, 2: 0}

    # After every record: the end. Below the log start (records deleted with Kafka's
    # DeleteRecords): the log start.
    body = ok_json(call("POST", f"{http}/v1/groups/{group}/offsets",
                        {"topic": topic, "to": "timestamp", "timestamp_ms": BASE_TS + 10**9}))
    assert {p["partition"]: p["new_offset"] for p in body["partitions"]} == highs
    a = admin(b)
    [f] = a.delete_records([TopicPartition(topic, 2, 6)], request_timeout=15).values()
    f.result(timeout=15)
    assert watermarks(b, topic, 2) == (6, highs[2])
    body = ok_json(call("POST", f"{http}/v1/groups/{group}/offsets", {"topic": topic, "to": "earliest"}))
    assert {p["partition"]: p["new_offset"] for p in body["partitions"]} == {0: 0, 1: 0, 2: 6}
    body = ok_json(call("POST", f"{http}/v1/groups/{group}/offsets",
                        {"topic": topic, "to": "offset", "offset": 2}))
    assert {p["partition"]: p["new_offset"] for p in body["partitions"]} == {0: 2, 1: 2, 2: 6}
    held = {0: 2, 1: 2, 2: 6}
    assert kafka_committed(b, group, topic, n) == held

    # Wrong resets change nothing.
    url = f"{http}/v1/groups/{group}/offsets"
    assert_problem(call("POST", url, {"topic": topic, "to": "soon"}), 400, says="\"to\"")
    assert_problem(call("POST", url, {"topic": topic, "to": "offset"}), 400, says="offset")
    assert_problem(call("POST", url, {"topic": topic, "to": "offset", "offset": -5}), 400)
    assert_problem(call("POST", url, {"topic": topic, "to": "timestamp"}), 400, says="timestamp_ms")
    assert_problem(call("POST", url, {"topic": topic, "to": "earliest", "partitions": [7]}), 404,
                   "UNKNOWN_TOPIC_OR_PARTITION")
    assert_problem(call("POST", url, {"topic": unique_topic("nope"), "to": "earliest"}), 404,
                   "UNKNOWN_TOPIC_OR_PARTITION")
    assert_problem(call("POST", url, {"topic": topic, "to": "earliest", "colour": 1}), 400,
                   says="unknown field `colour`")
    assert kafka_committed(b, group, topic, n) == held
    assert first_offsets(b, group, topic, [0, 1, 2]) == held
    wait_until(lambda: group_state(http, group) == "Empty", 15, f"{group} Empty again")

    # DELETE: gone for HTTP and for Kafka, offsets included.
    assert ok_json(call("DELETE", f"{http}/v1/groups/{group}")) == {"deleted": group}
    assert_problem(call("GET", f"{http}/v1/groups/{group}"), 404, "GROUP_ID_NOT_FOUND")
    assert_problem(call("DELETE", f"{http}/v1/groups/{group}"), 404, "GROUP_ID_NOT_FOUND")
    assert group not in {g["group_id"] for g in ok_json(call("GET", f"{http}/v1/groups"))["groups"]}
    assert kafka_committed(b, group, topic, n) == {p: -1001 for p in range(n)}
    listed = admin(b).list_consumer_groups(request_timeout=10).result(timeout=10)
    assert group not in {g.group_id for g in listed.valid}


# =========================================================================== disable
class Pump(threading.Thread):
    """An acks=all librdkafka producer writing numbered values to partition 0 of
    `topic` until stopped; keeps every delivery report with when it came and when the
    record was handed to the client."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.005, idempotent: bool = False):
        super().__init__(daemon=True)
        self.topic = topic
        self.interval = interval
        extra = {"linger.ms": 2, "message.timeout.ms": 20000, "error_cb": self._client_error}
        # Without idempotence no retries: a retried batch could be written twice.
        extra.update({"enable.idempotence": True} if idempotent else {"retries": 0})
        self.producer = Producer(producer_conf(bootstrap, **extra))
        self.client_errors: list[str] = []
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.sent: dict[str, float] = {}
        self.acked: dict[str, tuple[int, float]] = {}   # value -> (offset, when)
        self.failed: dict[str, tuple[int, str, float]] = {}  # value -> (code, text, when)
        self.error: BaseException | None = None

    def _client_error(self, err) -> None:
        self.client_errors.append(f"{err} fatal={err.fatal()}")
        if err.fatal():
            self.stop_flag.set()

    def _report(self, err, msg) -> None:
        now = time.monotonic()
        value = msg.value().decode()
        with self.lock:
            if err is None:
                self.acked[value] = (msg.offset(), now)
            else:
                self.failed[value] = (err.code(), str(err), now)

    def run(self) -> None:
        n = 0
        try:
            while not self.stop_flag.is_set():
                value = f"rec-{n:06d}"
                try:
                    self.producer.produce(self.topic, value=value.encode(), partition=0,
                                          on_delivery=self._report)
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                with self.lock:
                    self.sent[value] = time.monotonic()
                n += 1
                self.producer.poll(self.interval)
            remaining = self.producer.flush(30)
            assert remaining == 0, f"{remaining} records without a delivery report"
        except BaseException as e:  # reported by finish()
            self.error = e

    def finish(self) -> None:
        self.stop_flag.set()
        self.join(60)
        assert not self.is_alive(), "the producer thread did not stop"
        if self.error is not None:
            raise self.error

    def first_failure(self, code: int) -> float | None:
        """When the first delivery failed with `code` (the tests check that none
        failed before the switch)."""
        with self.lock:
            times = [when for c, _, when in self.failed.values() if c == code]
        return min(times) if times else None

    def acks_of_sent_after(self, t: float) -> list[str]:
        with self.lock:
            return [v for v, (_, when) in self.acked.items() if self.sent.get(v, 0) > t]

    def counts(self) -> tuple[int, int]:
        with self.lock:
            return len(self.acked), len(self.failed)


class Reader(threading.Thread):
    """A librdkafka consumer assigned to partition 0 from offset 0, collecting
    (offset, value) until stopped."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.c = Consumer(consumer_conf(bootstrap, **{"enable.partition.eof": False}))
        self.c.assign([TopicPartition(topic, 0, 0)])
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.got: list[tuple[int, str]] = []
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            while not self.stop_flag.is_set():
                m = self.c.poll(0.1)
                if m is None:
                    continue
                if m.error():
                    self.errors.append(str(m.error()))
                    continue
                with self.lock:
                    self.got.append((m.offset(), m.value().decode()))
        finally:
            self.c.close()

    def count(self) -> int:
        with self.lock:
            return len(self.got)

    def finish(self) -> None:
        self.stop_flag.set()
        self.join(30)


def read_values(bootstrap: str, topic: str) -> list[tuple[int, str]]:
    end = watermarks(bootstrap, topic, 0)[1]
    got = consume_confluent(bootstrap, topic, {0: 0}, {0: end})[0]
    return [(r.offset, r.value.decode()) for r in got]


def check_nothing_lost(pump: Pump, log: list[tuple[int, str]]) -> None:
    """Every acknowledged record in the log exactly once, at its offset; no refused
    record in it at all."""
    counts = Counter(v for _, v in log)
    dup = [v for v, k in counts.items() if k > 1]
    assert not dup, f"records in the log twice: {dup[:10]}"
    at = {v: o for o, v in log}
    lost = sorted(v for v in pump.acked if v not in at)
    assert not lost, f"{len(lost)} acknowledged records lost: {lost[:10]}"
    moved = [(v, o, at[v]) for v, (o, _) in pump.acked.items() if at[v] != o]
    assert not moved, f"acknowledged at one offset, found at another: {moved[:10]}"
    written_refused = sorted(v for v in pump.failed if v in at)
    assert not written_refused, f"refused records in the log: {written_refused[:10]}"
    extra = sorted(set(at) - set(pump.acked))
    assert not extra, f"records in the log nobody acknowledged: {extra[:10]}"
    assert [o for o, _ in log] == list(range(len(log))), "offsets not dense"


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_disabling_a_partition_stops_producers_within_a_second_and_enabling_restores_writes(
        broker, idempotent):
    """The acceptance point. With idempotence on, the refused batches leave a gap in the
    producer's sequence numbers: librdkafka must get past it (no fatal error) and go on
    writing after the enable, still exactly once."""
    http, b = broker.http_url, broker.bootstrap
    topic = unique_topic("adm-disable")
    create_topic(b, topic, 1)
    pump, reader = Pump(b, topic, idempotent=idempotent), Reader(b, topic)
    pump.start()
    reader.start()
    try:
        wait_until(lambda: pump.counts()[0] >= 50, 20, "50 acknowledged records before the disable")
        assert pump.counts()[1] == 0, pump.failed

        reason = "incident 42: bad payloads"
        r = call("POST", f"{http}/v1/topics/{topic}/partitions/0/disable", {"reason": reason})
        disabled_at = time.monotonic()
        body = ok_json(r)
        assert body == {"topic": topic, "partition": 0, "writes": "disabled", "reason": reason}, body

        first = wait_until(lambda: pump.first_failure(POLICY_VIOLATION), 10,
                           "the producer's first POLICY_VIOLATION")
        delay = first - disabled_at
        print(f"\n[disable] first POLICY_VIOLATION {delay * 1000:.0f} ms after the disable answer")
        assert delay <= 1.0, f"the producer learnt of the disable {delay:.2f} s after it"
        with pump.lock:
            other = {v: f for v, f in pump.failed.items() if f[0] != POLICY_VIOLATION}
            sample = next(iter(pump.failed.values()))
        assert not other, f"deliveries failed otherwise: {list(other.items())[:5]}"
        assert "olicy" in sample[1], sample

        # Reads go on: the live consumer reaches the high watermark, a new one reads it all.
        high = watermarks(b, topic, 0)[1]
        assert high > 0
        wait_until(lambda: reader.count() >= high, 15, f"the consumer to read the {high} records")
        assert [o for o, _ in read_values(b, topic)] == list(range(high))

        # Other views of the switch.
        assert_problem(call("POST", f"{http}/v1/topics/{topic}/produce", {"messages": [{"value": "x"}]}),
                       422, "POLICY_VIOLATION", says=reason)
        t = ok_json(call("GET", f"{http}/v1/topics/{topic}"))
        assert t["partitions"][0]["disabled"] == reason, t["partitions"][0]
        listed = {x["name"]: x for x in ok_json(call("GET", f"{http}/v1/topics"))["topics"]}
        assert listed[topic]["disabled_partitions"] == [0]
        assert ok_json(call("GET", f"{http}/v1/topics/{topic}/partitions/0"))["disabled"] == reason

        # Keep it disabled a little longer, still refusing; the log does not grow.
        n_failed = pump.counts()[1]
        wait_until(lambda: pump.counts()[1] >= n_failed + 20, 10, "more refused deliveries")
        assert watermarks(b, topic, 0)[1] == high, "the disabled partition took writes"

        enable_sent = time.monotonic()
        r = call("POST", f"{http}/v1/topics/{topic}/partitions/0/enable")
        enabled_at = time.monotonic()
        assert ok_json(r) == {"topic": topic, "partition": 0, "writes": "enabled", "reason": None}
        # Nothing handed to the client after the disable answer was acknowledged, except
        # what may have reached the broker after the enable (linger.ms is 2).
        sneaked = [v for v in pump.acks_of_sent_after(disabled_at)
                   if pump.sent[v] < enable_sent - 0.2]
        assert not sneaked, f"records sent while disabled were acknowledged: {sneaked[:5]}"
        acked_later = wait_until(lambda: len(pump.acks_of_sent_after(enabled_at)) >= 50, 15,
                                 "50 acknowledged records after the enable")
        assert acked_later
        t = ok_json(call("GET", f"{http}/v1/topics/{topic}"))
        assert t["partitions"][0]["disabled"] is None
    finally:
        pump.finish()
        reader.finish()

    acked, failed = pump.counts()
    print(f"[disable] acknowledged={acked} refused={failed} client errors={pump.client_errors[:3]}")
    assert not [e for e in pump.client_errors if "fatal=True" in e], pump.client_errors
    log = read_values(b, topic)
    check_nothing_lost(pump, log)
    assert reader.errors == [], reader.errors
    assert reader.got == log[:len(reader.got)], "the live consumer saw another log"

    # Disabling what does not exist.
    assert_problem(call("POST", f"{http}/v1/topics/{topic}/partitions/3/disable"), 404,
                   "UNKNOWN_TOPIC_OR_PARTITION")
    assert_problem(call("POST", f"{http}/v1/topics/{unique_topic('nope')}/partitions/0/enable"), 404,
                   "UNKNOWN_TOPIC_OR_PARTITION")
    assert_problem(call("POST", f"{http}/v1/topics/{topic}/partitions/0/disable", {"why": "x"}), 400,
                   says="unknown field `why`")


def produce_one(bootstrap: str, topic: str, partition: int):
    """One acks=all record through librdkafka: None, or the delivery error."""
    reports = []
    p = Producer(producer_conf(bootstrap, retries=0))
    p.produce(topic, value=b"probe", partition=partition,
              on_delivery=lambda err, m: reports.append(err))
    assert p.flush(30) == 0 and len(reports) == 1
    return reports[0]


def test_a_disabled_partition_stays_disabled_across_a_restart_and_not_for_a_new_topic(broker):
    http, b = broker.http_url, broker.bootstrap
    topic = unique_topic("adm-persist")
    create_topic(b, topic, 2)
    ok_json(call("POST", f"{http}/v1/topics/{topic}/partitions/1/disable", {"reason": "kept"}))
    # An empty body is a disable without a reason.
    ok_json(call("POST", f"{http}/v1/topics/{topic}/partitions/0/disable"))
    assert ok_json(call("POST", f"{http}/v1/topics/{topic}/partitions/0/enable"))["writes"] == "enabled"
    broker.restart()
    err = produce_one(b, topic, 1)
    assert err is not None and err.code() == POLICY_VIOLATION, err
    assert produce_one(b, topic, 0) is None
    assert ok_json(call("GET", f"{http}/v1/topics/{topic}"))["partitions"][1]["disabled"] == "kept"
    # Growing the topic keeps the flag where it was.
    ok_json(call("POST", f"{http}/v1/topics/{topic}/partitions", {"count": 3}))
    wait_for_partitions(admin(b), topic, 3)
    assert [p["disabled"] for p in ok_json(call("GET", f"{http}/v1/topics/{topic}"))["partitions"]] == \
        [None, "kept", None]
    assert produce_one(b, topic, 2) is None

    # A topic created again under the name starts with every partition writable.
    ok_json(call("DELETE", f"{http}/v1/topics/{topic}"))
    wait_until(lambda: topic not in admin(b).list_topics(timeout=5).topics, 15, f"{topic} gone")
    ok_json(call("POST", f"{http}/v1/topics", {"name": topic, "partitions": 2}), 201)
    wait_for_partitions(admin(b), topic, 2)
    assert [p["disabled"] for p in ok_json(call("GET", f"{http}/v1/topics/{topic}"))["partitions"]] == \
        [None, None]
    assert produce_one(b, topic, 1) is None
    r = call("POST", f"{http}/v1/topics/{topic}/partitions/1/disable")
    assert ok_json(r)["reason"] == "no reason given"


# =========================================================================== tier/verify
def test_tier_archives_now_and_verify_finds_a_corrupted_object(broker_factory):
    # The periodic pass every 10 minutes: only POST .../tier archives during the test.
    broker = broker_factory(extra_args=["--tiering-interval-ms", "600000"])
    broker.start()
    http, b = broker.http_url, broker.bootstrap
    topic = unique_topic("adm-tier")
    create_topic(b, topic, 1, {"segment.bytes": "1024"})
    records = [Out(0, f"k{i}".encode(), f"value {i} ".encode() * 12, [], BASE_TS + i) for i in range(60)]
    produce_confluent(b, topic, records, waves=6)
    logdir = broker.data_dir / "logs" / f"{topic}-0"
    bases = sorted(int(f.stem) for f in logdir.glob("*.log"))
    assert len(bases) >= 3, f"segments did not close: {bases}"
    pdir = broker.data_dir / "archive" / f"topic={topic}" / "partition=0"

    def status():
        return {e["partition"]: e for e in ok_json(call("GET", f"{http}/v1/tiering"))["partitions"]
                if e["topic"] == topic}

    assert status().get(0, {"archived_upto": -1})["archived_upto"] == -1
    assert not list(pdir.glob("*.parquet"))
    body = ok_json(call("POST", f"{http}/v1/topics/{topic}/partitions/0/tier"))
    assert body["archived_upto_before"] == -1, body
    assert body["archived_upto"] == bases[-1] - 1, (body, bases)
    st = wait_until(lambda: status().get(0) if status().get(0, {}).get("archived_upto") == bases[-1] - 1
                    else None, 10, "/v1/tiering to show the archived offsets")
    objects = sorted(pdir.glob("*.parquet"))
    assert st["objects"] == len(objects) >= 1 and st["last_error"] is None, (st, objects)

    v = ok_json(call("POST", f"{http}/v1/topics/{topic}/partitions/0/verify"))
    assert v["ok"] is True and v["mismatches"] == [], v
    assert v["verified"] == v["entries"] == len(objects) >= 1, v
    assert (v["first_offset"], v["last_offset"]) == (0, bases[-1] - 1), v
    assert v["bytes_read"] == sum(o.stat().st_size for o in objects), v

    # Flip bytes in the middle of one object: verify names it.
    victim = objects[len(objects) // 2]
    data = bytearray(victim.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 16):
        data[i] ^= 0xFF
    victim.write_bytes(bytes(data))
    v = ok_json(call("POST", f"{http}/v1/topics/{topic}/partitions/0/verify"))
    assert v["ok"] is False, v
    [bad] = v["mismatches"]
    assert bad["object"].endswith(f"partition=0/{victim.name}"), (bad, victim.name)
    assert "CRC32C" in bad["problem"], bad
    assert v["verified"] == len(objects)

    # Tier again: nothing new to archive, the same answer.
    again = ok_json(call("POST", f"{http}/v1/topics/{topic}/partitions/0/tier"))
    assert again["archived_upto"] == again["archived_upto_before"] == bases[-1] - 1, again

    # Errors: an untiered topic, a partition that does not exist.
    plain = unique_topic("adm-untiered")
    create_topic(b, plain, 1, {"remote.storage.enable": "false"})
    assert_problem(call("POST", f"{http}/v1/topics/{plain}/partitions/0/tier"), 409,
                   says="remote.storage.enable")
    assert_problem(call("POST", f"{http}/v1/topics/{topic}/partitions/4/verify"), 404,
                   "UNKNOWN_TOPIC_OR_PARTITION")
    assert_problem(call("POST", f"{http}/v1/topics/{topic}/partitions/4/tier"), 404,
                   "UNKNOWN_TOPIC_OR_PARTITION")


# =========================================================================== audit
def test_every_action_is_audited_in_the_log_file_and_the_api(group_broker):
    broker = group_broker
    http, b = broker.http_url, broker.bootstrap
    topic = unique_topic("adm-audit")
    group = f"g-{uuid.uuid4().hex[:8]}"
    steps = [
        ("POST", "/v1/topics", {"name": topic, "partitions": 2}, 201),
        ("POST", "/v1/topics", {"name": topic}, 409),
        ("PATCH", f"/v1/topics/{topic}/configs", {"set": {"retention.ms": "3600000"}}, 200),
        ("PATCH", f"/v1/topics/{topic}/configs", {"set": {"retention.ms": "x"}}, 400),
        ("POST", f"/v1/topics/{topic}/partitions", {"count": 3}, 200),
        ("POST", f"/v1/topics/{topic}/partitions/1/disable", {"reason": "audit me"}, 200),
        ("POST", f"/v1/topics/{topic}/partitions/1/enable", None, 200),
        ("POST", f"/v1/groups/{group}/offsets", {"topic": topic, "to": "latest", "dry_run": True}, 200),
        ("POST", f"/v1/groups/{group}/offsets", {"topic": topic, "to": "earliest"}, 200),
        ("POST", f"/v1/topics/{topic}/partitions/0/verify", None, 200),
        ("DELETE", f"/v1/groups/{group}", None, 200),
        ("DELETE", f"/v1/groups/{group}", None, 404),
        ("POST", "/v1/topics", {"name": "bad name"}, 400),
        ("DELETE", f"/v1/topics/{topic}", None, 200),
    ]
    expected = [
        ("topic.create", f"topic:{topic}", True),
        ("topic.create", f"topic:{topic}", False),
        ("topic.alter_configs", f"topic:{topic}", True),
        ("topic.alter_configs", f"topic:{topic}", False),
        ("topic.add_partitions", f"topic:{topic}", True),
        ("partition.disable", f"partition:{topic}-1", True),
        ("partition.enable", f"partition:{topic}-1", True),
        ("group.reset_offsets.dry_run", f"group:{group}", True),
        ("group.reset_offsets", f"group:{group}", True),
        ("partition.verify", f"partition:{topic}-0", True),
        ("group.delete", f"group:{group}", True),
        ("group.delete", f"group:{group}", False),
        ("topic.create", "topic:bad name", False),
        ("topic.delete", f"topic:{topic}", True),
    ]
    started = int(time.time() * 1000)
    for method, path, body, status in steps:
        r = call(method, f"{http}{path}", body)
        assert r.status_code == status, (method, path, r.status_code, r.text)
        # Reads between the actions are not audited.
        call("GET", f"{http}/v1/topics")
    assert topic not in admin(b).list_topics(timeout=10).topics

    api = ok_json(call("GET", f"{http}/v1/audit?limit=1000"))
    assert api["node_id"] == 1
    entries = api["entries"]
    assert [(e["action"], e["resource"], e["ok"]) for e in entries] == expected, \
        [(e["action"], e["resource"], e["ok"]) for e in entries]
    path = broker.data_dir / "audit.log"
    assert api["path"].endswith("audit.log")
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == entries, "audit.log and GET /v1/audit differ"
    for e in entries:
        assert e["principal"] == "User:ANONYMOUS" and e["via"] == "http", e
        assert e["address"].startswith("127.0.0.1:"), e
        assert started <= e["time_ms"] <= int(time.time() * 1000), e
    times = [e["time_ms"] for e in entries]
    assert times == sorted(times)
    # What was asked and how it ended.
    assert entries[0]["request"]["partitions"] == 2
    assert entries[0]["outcome"]["name"] == topic
    assert "already exists" in entries[1]["outcome"], entries[1]
    # The config service records the change as Kafka's IncrementalAlterConfigs would.
    assert entries[2]["request"]["ops"] == [{"name": "retention.ms", "op": "set", "value": "3600000"}]
    assert entries[5]["request"] == {"reason": "audit me"}
    assert entries[5]["outcome"]["writes"] == "disabled"
    assert entries[8]["request"]["to"] == "earliest"
    assert entries[8]["outcome"]["partitions"][0]["new_offset"] == 0
    assert isinstance(entries[12]["outcome"], str) and "bad name" in entries[12]["outcome"]
    # limit: the newest entries.
    tail = ok_json(call("GET", f"{http}/v1/audit?limit=2"))["entries"]
    assert tail == entries[-2:]
    assert_problem(call("GET", f"{http}/v1/audit?limit=lots"), 400)


def test_kafka_protocol_admin_mutations_are_audited(group_broker):
    """Privileged requests of the Kafka API (librdkafka's AdminClient here) are audited
    as the HTTP API's actions are, one entry per resource, `via: kafka`, refusals with
    Kafka's error name; Metadata, DescribeConfigs and produce are not audited."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, NewPartitions, NewTopic

    broker = group_broker
    b = broker.bootstrap
    a = admin(b)
    topic = unique_topic("adm-kaudit")
    missing_group = f"g-{uuid.uuid4().hex[:8]}"

    def done(fs: dict):
        return {k: (f.exception(timeout=30) is None) for k, f in fs.items()}

    assert done(a.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "3600000"})])) == {topic: True}
    wait_for_partitions(a, topic, 2)
    assert done(a.create_topics([NewTopic(topic, 1, 1)])) == {topic: False}
    res = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    assert list(done(a.incremental_alter_configs([res])).values()) == [False]
    res = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    assert list(done(a.incremental_alter_configs([res])).values()) == [True]
    a.describe_configs([ConfigResource("topic", topic)])[ConfigResource("topic", topic)].result(timeout=30)
    assert done(a.create_partitions([NewPartitions(topic, 3)])) == {topic: True}
    produce_confluent(b, topic, [Out(0, None, f"v{i}".encode(), [], BASE_TS + i) for i in range(5)])
    assert list(done(a.delete_records([TopicPartition(topic, 0, 2)])).values()) == [True]
    assert list(done(a.delete_consumer_groups([missing_group])).values()) == [False]
    assert done(a.delete_topics([topic])) == {topic: True}

    entries = [e for e in ok_json(call("GET", f"{broker.http_url}/v1/audit?limit=1000"))["entries"]]
    assert all(e["via"] == "kafka" for e in entries), entries
    assert [(e["action"], e["resource"], e["ok"]) for e in entries] == [
        ("topic.create", f"topic:{topic}", True),
        ("topic.create", f"topic:{topic}", False),
        ("topic.alter_configs", f"topic:{topic}", False),
        ("topic.alter_configs", f"topic:{topic}", True),
        ("topic.add_partitions", f"topic:{topic}", True),
        ("partition.delete_records", f"partition:{topic}-0", True),
        ("group.delete", f"group:{missing_group}", False),
        ("topic.delete", f"topic:{topic}", True),
    ], [(e["action"], e["resource"], e["ok"]) for e in entries]
    for e in entries:
        assert e["principal"] == "User:ANONYMOUS" and e["address"].startswith("127.0.0.1:"), e
    assert entries[0]["request"]["partitions"] == 2
    assert entries[0]["request"]["configs"] == {"retention.ms": "3600000"}
    assert entries[1]["outcome"].startswith("TOPIC_ALREADY_EXISTS"), entries[1]
    assert entries[2]["outcome"].startswith("INVALID_CONFIG") and "soon" in entries[2]["outcome"], entries[2]
    assert entries[3]["request"]["ops"] == [{"name": "retention.ms", "op": "set", "value": "7200000"}]
    assert entries[4]["request"]["count"] == 3
    assert entries[5]["request"] == {"before_offset": 2} and entries[5]["outcome"] == {"low_watermark": 2}
    assert entries[6]["outcome"].startswith("GROUP_ID_NOT_FOUND"), entries[6]
    lines = (broker.data_dir / "audit.log").read_text().splitlines()
    assert [json.loads(line) for line in lines] == entries


# =========================================================================== cluster
@pytest.fixture
def cluster3(broker_factory, request):
    from test_replication import started_cluster
    yield from started_cluster(broker_factory, request, "strata-admin-", [])


def wait_cluster_formed(agents: dict, timeout: float = 15) -> None:
    """Until every agent lists every agent as live (each learns of the others through
    the metastore a moment after they start), so that they agree on coordinators."""
    want = sorted(agents)

    def live(a) -> list[int]:
        return sorted(x["node_id"] for x in ok_json(call("GET", f"{a.http_url}/v1/cluster"))["agents"])

    wait_until(lambda: all(live(a) == want for a in agents.values()), timeout,
               f"every agent to list agents {want}")


def test_in_a_cluster_requests_reach_the_coordinator_and_the_leader(cluster3):
    c = cluster3
    agents = c.agents
    servers = c.servers()
    wait_cluster_formed(agents)
    topic = unique_topic("adm-cluster")
    create_topic(servers, topic, 3, any_leader=True)
    md = admin(servers).list_topics(topic=topic, timeout=10).topics[topic]
    leaders = {p: pm.leader for p, pm in md.partitions.items()}
    assert len(set(leaders.values())) > 1, f"every partition on one agent: {leaders}"
    counts = {0: 4, 1: 7, 2: 9}
    produce_confluent(servers, topic, [Out(p, None, f"v{p}-{i}".encode(), [], BASE_TS + i)
                                       for p, k in counts.items() for i in range(k)])

    # Any agent describes every partition, offsets of those led elsewhere included.
    for node, a in agents.items():
        t = ok_json(call("GET", f"{a.http_url}/v1/topics/{topic}"))
        got = {p["partition"]: (p["leader"], p["log_start_offset"], p["high_watermark"])
               for p in t["partitions"]}
        assert got == {p: (leaders[p], 0, counts[p]) for p in counts}, (node, got)
        assert any(leaders[p] != node for p in counts)

    # The group: a live librdkafka member commits; describe through every agent.
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 10000, "logger": RDKAFKA_LOG})
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < sum(counts.values()):
            assert time.monotonic() < deadline, f"consumed only {seen}"
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                seen += 1
        consumer.commit(offsets=[TopicPartition(topic, p, 2) for p in counts], asynchronous=False)
        answers = {n: call("GET", f"{a.http_url}/v1/groups/{group}", allow_redirects=False)
                   for n, a in agents.items()}
        here = [n for n, r in answers.items() if r.status_code == 200]
        away = [n for n, r in answers.items() if r.status_code == 307]
        assert len(here) == 1 and len(away) == 2, {n: (r.status_code, r.text) for n, r in answers.items()}
        coordinator = here[0]
        for n in away:
            assert answers[n].headers["location"] == \
                f"{agents[coordinator].http_url}/v1/groups/{group}", answers[n].headers
            desc = ok_json(call("GET", f"{agents[n].http_url}/v1/groups/{group}"))
            assert desc["coordinator"] == coordinator and desc["state"] == "Stable", desc
            assert [m["member_id"] for m in desc["members"]] == [consumer.memberid()]
            assert {o["partition"]: (o["committed_offset"], o["high_watermark"], o["lag"])
                    for o in desc["offsets"]} == {p: (2, k, k - 2) for p, k in counts.items()}
        groups = ok_json(call("GET", f"{agents[away[0]].http_url}/v1/groups"))
        [g] = [g for g in groups["groups"] if g["group_id"] == group]
        assert g["coordinator"] == coordinator and "unreachable" not in groups, groups
    finally:
        consumer.close()

    via = agents[away[0]].http_url
    wait_until(lambda: group_state(via, group) == "Empty", 15, f"{group} Empty after close")
    r = call("POST", f"{via}/v1/groups/{group}/offsets", {"topic": topic, "to": "earliest"},
             allow_redirects=False)
    assert r.status_code == 307, (r.status_code, r.text)
    assert r.headers["location"] == f"{agents[coordinator].http_url}/v1/groups/{group}/offsets"
    body = ok_json(call("POST", f"{via}/v1/groups/{group}/offsets",
                        {"topic": topic, "to": "offset", "offset": 1}))
    assert [p["new_offset"] for p in body["partitions"]] == [1, 1, 1], body
    assert kafka_committed(servers, group, topic, 3) == {0: 1, 1: 1, 2: 1}
    assert first_offsets(servers, group, topic, [0, 1, 2]) == {0: 1, 1: 1, 2: 1}

    # Disable through an agent that does not lead the partition: the producer to its
    # leader is refused within 2 s.
    wtopic = unique_topic("adm-cluster-disable")
    create_topic(servers, wtopic, 1, any_leader=True)
    leader = admin(servers).list_topics(topic=wtopic, timeout=10).topics[wtopic].partitions[0].leader
    others = [n for n in agents if n != leader]
    pump = Pump(agents[leader].bootstrap, wtopic)
    pump.start()
    try:
        wait_until(lambda: pump.counts()[0] >= 30, 20, "30 acknowledged records")
        r = call("POST", f"{agents[others[0]].http_url}/v1/topics/{wtopic}/partitions/0/disable",
                 {"reason": "cluster drill"})
        disabled_at = time.monotonic()
        assert ok_json(r)["writes"] == "disabled"
        first = wait_until(lambda: pump.first_failure(POLICY_VIOLATION), 10,
                           "the producer's first POLICY_VIOLATION")
        delay = first - disabled_at
        print(f"\n[cluster disable] first POLICY_VIOLATION at agent {leader} "
              f"{delay * 1000:.0f} ms after agent {others[0]} answered the disable")
        assert delay <= 2.0, f"the leader learnt of the disable {delay:.2f} s after it"
        # Every agent shows the reason.
        for n, a in agents.items():
            t = ok_json(call("GET", f"{a.http_url}/v1/topics/{wtopic}"))
            assert t["partitions"][0]["disabled"] == "cluster drill", (n, t["partitions"][0])
        n_failed = pump.counts()[1]
        wait_until(lambda: pump.counts()[1] >= n_failed + 10, 10, "more refused deliveries")
        r = call("POST", f"{agents[others[1]].http_url}/v1/topics/{wtopic}/partitions/0/enable")
        enabled_at = time.monotonic()
        assert ok_json(r)["writes"] == "enabled"
        wait_until(lambda: len(pump.acks_of_sent_after(enabled_at)) >= 30, 15,
                   "30 acknowledged records after the enable")
        again = min(pump.acked[v][1] for v in pump.acks_of_sent_after(enabled_at)) - enabled_at
        print(f"[cluster enable] writes acknowledged again {again * 1000:.0f} ms after the enable")
    finally:
        pump.finish()
    with pump.lock:
        other = {v: f for v, f in pump.failed.items() if f[0] != POLICY_VIOLATION}
    assert not other, f"deliveries failed otherwise: {list(other.items())[:5]}"
    check_nothing_lost(pump, read_values(servers, wtopic))


def test_in_a_cluster_topic_changes_through_different_agents_build_on_each_other(cluster3):
    """Requests sent one after the other (each after the previous was answered) to
    different agents: each must act on what the previous did. An agent learns of a
    change through the metastore's watch a moment later, so what it reads from its own
    view of the topic may be stale (GET /v1/topics/{t} reads the metastore for that
    reason). A PATCH that starts from a stale view would write back the configs without
    the previous change, losing it although it was answered 200."""
    c = cluster3
    agents = c.agents
    wait_cluster_formed(agents)
    a = admin(c.servers())
    problems = []
    for trial in range(5):
        topic = unique_topic(f"adm-seq{trial}")
        ok_json(call("POST", f"{agents[1].http_url}/v1/topics",
                     {"name": topic, "partitions": 2, "configs": {"retention.ms": "3600000"}}), 201)
        expected = {"retention.ms": "3600000"}
        for node, name in ((3, "max.message.bytes"), (1, "segment.ms"), (2, "flush.ms")):
            r = call("PATCH", f"{agents[node].http_url}/v1/topics/{topic}/configs",
                     {"set": {name: "3600000" if name != "max.message.bytes" else "200000"}})
            if r.status_code == 200:
                expected[name] = "3600000" if name != "max.message.bytes" else "200000"
            else:
                problems.append(f"{topic}: PATCH {name} via agent {node}: {r.status_code} {r.text}")

        def shown():
            d = describe_configs(a, topic)
            return {k: d[k].value for k in expected} == expected

        try:
            wait_until(shown, 2, f"{topic}'s configs")
        except AssertionError:
            d = describe_configs(a, topic)
            stored = ok_json(call("GET", f"{agents[1].http_url}/v1/topics/{topic}"))["configs"]
            problems.append(
                f"{topic}: every PATCH above answered 200 set {expected}, but Kafka DescribeConfigs "
                f"shows {({k: d[k].value for k in expected})} and GET /v1/topics shows "
                f"{({k: stored[k]['value'] for k in expected})}")
    assert not problems, "\n".join(problems)
