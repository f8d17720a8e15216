"""The HTTP produce, consume and commit API (issue 18, point 1), with real Kafka clients
on the other side:

- HTTP produce -> librdkafka consume: every keyed message lands on the partition that
  librdkafka's `murmur2_random` partitioner (the Java client's default) picks for the
  same key, at the offset the HTTP answer names, with its headers.
- librdkafka produce -> HTTP consume -> HTTP commit -> a librdkafka group consumer
  resumes at exactly the committed offsets, and nothing is lost between the two.
- A mixed group: a librdkafka consumer joining an HTTP consumer's group splits the
  partitions with it, and a commit under the HTTP consumer's old generation is refused
  with ILLEGAL_GENERATION (409).
- An Idempotency-Key retry writes nothing and answers the first offsets.
- Bytes that are not UTF-8 round-trip as base64.
- Wrong input gets a problem-details answer (RFC 9457) with the Kafka error name.
- In a 3-agent cluster, an HTTP produce to any agent reaches every partition's leader,
  and a consume through a non-coordinator is redirected (307) to the coordinator.
- schemathesis, run against /v1/openapi.json, finds no 5xx and no answer that breaks
  the document.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests
from confluent_kafka import Consumer, Producer, TopicPartition

from strata_testlib import (
    RDKAFKA_LOG,
    create_topic,
    unique_topic,
    wait_until,
    watermarks,
)

PARTITIONS = 6


def post(url: str, body: dict, headers: dict | None = None, allow_redirects: bool = True,
         timeout: float = 40) -> requests.Response:
    return requests.post(url, json=body, headers=headers, allow_redirects=allow_redirects,
                         timeout=timeout)


def produce(http: str, topic: str, messages: list[dict], **extra) -> list[dict]:
    r = post(f"{http}/v1/topics/{topic}/produce", {"messages": messages, **extra})
    assert r.status_code == 200, r.text
    offsets = r.json()["offsets"]
    assert all("error" not in o for o in offsets), offsets
    return offsets


def assert_problem(r: requests.Response, status: int, kafka_error: str | None = None,
                   says: str | None = None) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/problem+json", r.headers
    body = r.json()
    assert body["status"] == status and body["title"] and body["detail"], body
    if kafka_error is not None:
        assert body.get("kafka_error") == kafka_error, body
    if says is not None:
        assert says in body["detail"], body


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30) -> list:
    """Every record of the topic, through librdkafka (assign, from the start to the end)."""
    ends = {p: watermarks(bootstrap, topic, p)[1] for p in range(partitions)}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "enable.partition.eof": True, "logger": RDKAFKA_LOG})
    got = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
        done = {p for p in range(partitions) if ends[p] == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    if m.offset() >= ends[m.partition()]:
                        done.add(m.partition())
                    continue
                raise AssertionError(m.error())
            got.append(m)
    finally:
        c.close()
    assert len(done) == partitions, f"read only partitions {done} of {topic}"
    return got


def test_http_produce_puts_keys_where_librdkafka_does_and_kafka_consumers_read_it(group_broker):
    b, http = group_broker.bootstrap, group_broker.http_url
    topic = unique_topic("http-produce")
    create_topic(b, topic, PARTITIONS)
    keys = [f"user-{i}" for i in range(60)]
    messages = [{"key": k, "value": f"v-{k}", "headers": [{"key": "trace", "value": k},
                                                           {"key": "trace", "value": "again"}]}
                for k in keys]
    offsets = produce(http, topic, messages)
    assert len(offsets) == len(keys)

    # librdkafka's murmur2_random on the same keys, to a second topic of the same size.
    twin = unique_topic("http-produce-twin")
    create_topic(b, twin, PARTITIONS)
    delivered = {}
    p = Producer({"bootstrap.servers": b, "partitioner": "murmur2_random", "logger": RDKAFKA_LOG})
    for k in keys:
        p.produce(twin, key=k, value=b"x",
                  on_delivery=lambda err, m: delivered.__setitem__(m.key().decode(), m.partition()))
    assert p.flush(30) == 0
    for k, o in zip(keys, offsets):
        assert o["partition"] == delivered[k], f"{k}: HTTP {o['partition']}, librdkafka {delivered[k]}"
    assert len({o["partition"] for o in offsets}) > 1, "all keys on one partition: no spread"

    # Kafka reads exactly what HTTP wrote, where HTTP said.
    by_place = {(m.partition(), m.offset()): m for m in read_all(b, topic, PARTITIONS)}
    assert len(by_place) == len(keys)
    for k, o in zip(keys, offsets):
        m = by_place[(o["partition"], o["offset"])]
        assert m.key() == k.encode() and m.value() == f"v-{k}".encode()
        assert m.headers() == [("trace", k.encode()), ("trace", b"again")]

    # Unkeyed messages of one request go to one partition; `partition` overrides.
    unkeyed = produce(http, topic, [{"value": "a"}, {"value": "b"}, {"value": "c", "partition": 5}])
    assert unkeyed[0]["partition"] == unkeyed[1]["partition"]
    assert unkeyed[1]["offset"] == unkeyed[0]["offset"] + 1
    assert unkeyed[2]["partition"] == 5


def test_kafka_produce_http_consume_and_commit_then_a_kafka_consumer_resumes(group_broker):
    b, http = group_broker.bootstrap, group_broker.http_url
    topic = unique_topic("http-consume")
    group = f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, 3)
    p = Producer({"bootstrap.servers": b, "logger": RDKAFKA_LOG})
    values = [f"m{i}" for i in range(90)]
    for i, v in enumerate(values):
        p.produce(topic, key=f"k{i}", value=v, headers=[("h", b"1")])
    assert p.flush(30) == 0

    consume = f"{http}/v1/topics/{topic}/consume"
    r = post(consume, {"group_id": group, "max_messages": 40, "timeout_ms": 5000,
                       "auto_offset_reset": "earliest"})
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["assignment"] == [0, 1, 2] and first["generation_id"] >= 1
    assert 0 < len(first["messages"]) <= 40 and first["has_more"] is True
    seen = list(first["messages"])
    cid, gen = first["consumer_id"], first["generation_id"]
    r = post(consume, {"group_id": group, "consumer_id": cid, "max_messages": 10, "timeout_ms": 5000})
    assert r.status_code == 200, r.text
    seen += r.json()["messages"]
    assert all(m["headers"] == [{"key": "h", "value": "1"}] for m in seen)
    assert len({(m["partition"], m["offset"]) for m in seen}) == len(seen), "a message twice"

    # Commit the next offset to read per partition, under the instance's generation.
    nexts: dict[int, int] = {}
    for m in seen:
        nexts[m["partition"]] = max(nexts.get(m["partition"], 0), m["offset"] + 1)
    r = post(f"{http}/v1/topics/{topic}/commit",
             {"group_id": group, "consumer_id": cid, "generation_id": gen,
              "offsets": {str(k): v for k, v in nexts.items()}})
    assert r.status_code == 200, r.text
    assert requests.delete(f"{http}/v1/consumers/{cid}", timeout=10).status_code == 204
    assert_problem(post(consume, {"group_id": group, "consumer_id": cid}), 404, "UNKNOWN_MEMBER_ID")

    # A Kafka group consumer takes over from the committed offsets: it reads what HTTP
    # did not, and the first offset it gets of each partition is the committed one.
    c = Consumer({"bootstrap.servers": b, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "logger": RDKAFKA_LOG})
    rest = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 40
        while len(seen) + len(rest) < len(values) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                rest.append(m)
        committed = c.committed([TopicPartition(topic, q) for q in range(3)], timeout=10)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in committed if tp.offset >= 0} == nexts
    for q, start in nexts.items():
        firsts = [m.offset() for m in rest if m.partition() == q]
        if firsts:
            assert min(firsts) == start, f"partition {q} resumed at {min(firsts)}, committed {start}"
    got = sorted([m["value"] for m in seen] + [m.value().decode() for m in rest])
    assert got == sorted(values), "lost or duplicated across the hand-over"


def curl(*args: str) -> dict:
    out = subprocess.run(["curl", "-s", "-S", "--fail-with-body", *args], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return json.loads(out.stdout)


def test_the_design_flow_with_curl_as_written(group_broker):
    """The design's HTTP API (seed 002) as it is written: produce, consume twice and
    commit naming only the group, then a Kafka consumer of that group resumes at the
    committed offset. The second consume reads on from the first (one implicit member,
    not a new one per call) and answers within its timeout_ms."""
    b, http = group_broker.bootstrap, group_broker.http_url
    topic = "orders"
    produced = curl("-X", "POST", f"{http}/v1/topics/{topic}/produce", "-d",
                    json.dumps({"messages": [{"key": "user_123", "value": f"order-{i}"}
                                             for i in range(3)]}))
    assert [o["offset"] for o in produced["offsets"]] == [0, 1, 2]
    body = '{"group_id": "payment-processor", "max_messages": 100, "timeout_ms": 2000}'
    first = curl("-X", "POST", f"{http}/v1/topics/{topic}/consume", "-d", body)
    assert [(m["partition"], m["offset"], m["value"]) for m in first["messages"]] == \
        [(0, i, f"order-{i}") for i in range(3)], first
    curl("-X", "POST", f"{http}/v1/topics/{topic}/produce", "-d",
         '{"messages": [{"key": "user_123", "value": "order-3"}, {"value": "order-4"}]}')
    started = time.monotonic()
    second = curl("-X", "POST", f"{http}/v1/topics/{topic}/consume", "-d", body)
    took = time.monotonic() - started
    assert [m["offset"] for m in second["messages"]] == [3, 4], second
    assert second["consumer_id"] == first["consumer_id"], "a new member per call"
    assert took < 2.0, f"the second consume took {took:.2f} s"
    # Waiting for more: the timeout answers empty, still as the same member.
    third = curl("-X", "POST", f"{http}/v1/topics/{topic}/consume", "-d",
                 '{"group_id": "payment-processor", "timeout_ms": 300}')
    assert third["messages"] == [] and third["consumer_id"] == first["consumer_id"]

    # Offsets 0-3 processed: commit the next one to read, naming only the group.
    committed = curl("-X", "POST", f"{http}/v1/topics/{topic}/commit", "-d",
                     '{"group_id": "payment-processor", "offsets": {"0": 4}}')
    assert committed["offsets"] == {"0": 4} and committed["generation_id"] >= 1
    described = requests.get(f"{http}/v1/groups/payment-processor", timeout=10).json()
    assert len(described["members"]) == 1, described

    # A Kafka consumer of the group, given the partition, starts at the committed offset.
    c = Consumer({"bootstrap.servers": b, "group.id": "payment-processor",
                  "enable.auto.commit": False, "logger": RDKAFKA_LOG})
    try:
        c.assign([TopicPartition(topic, 0)])
        m = wait_until(lambda: c.poll(0.5), 30, "a record for the Kafka consumer")
        assert (m.offset(), m.value()) == (4, b"order-4")
    finally:
        c.close()


def test_a_kafka_consumer_shares_the_group_and_a_stale_generation_cannot_commit(group_broker):
    b, http = group_broker.bootstrap, group_broker.http_url
    topic = unique_topic("http-mixed")
    group = f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, 4)
    consume = f"{http}/v1/topics/{topic}/consume"
    r = post(consume, {"group_id": group, "timeout_ms": 0, "new_consumer": True})
    assert r.status_code == 200, r.text
    cid, old_gen = r.json()["consumer_id"], r.json()["generation_id"]
    assert r.json()["assignment"] == [0, 1, 2, 3]

    c = Consumer({"bootstrap.servers": b, "group.id": group, "enable.auto.commit": False,
                  "session.timeout.ms": 10000, "logger": RDKAFKA_LOG})
    try:
        c.subscribe([topic])
        state = {}

        def rebalanced():
            c.poll(0.2)
            r = post(consume, {"group_id": group, "consumer_id": cid, "timeout_ms": 0})
            assert r.status_code == 200, r.text
            state.update(r.json())
            mine = c.assignment()
            return state["generation_id"] > old_gen and len(state["assignment"]) == 2 and len(mine) == 2

        wait_until(rebalanced, 40, "the HTTP and the Kafka consumer to split the partitions")
        kafka_side = {tp.partition for tp in c.assignment()}
        assert kafka_side.isdisjoint(state["assignment"])
        assert kafka_side | set(state["assignment"]) == {0, 1, 2, 3}

        # Offsets consumed under the old generation may belong to partitions moved away.
        r = post(f"{http}/v1/topics/{topic}/commit",
                 {"group_id": group, "consumer_id": cid, "generation_id": old_gen,
                  "offsets": {"0": 1}})
        assert_problem(r, 409, "ILLEGAL_GENERATION")
        # Outside the group (the caller has no implicit instance: its only one was made
        # with new_consumer), a commit is refused while the group has members.
        r = post(f"{http}/v1/topics/{topic}/commit", {"group_id": group, "offsets": {"0": 1}})
        assert r.status_code == 409, r.text
        r = post(f"{http}/v1/topics/{topic}/commit",
                 {"group_id": group, "consumer_id": cid, "generation_id": state["generation_id"],
                  "offsets": {str(state["assignment"][0]): 0}})
        assert r.status_code == 200, r.text
    finally:
        c.close()


def test_an_idempotency_key_retry_writes_nothing(broker):
    b, http = broker.bootstrap, broker.http_url
    topic = unique_topic("http-idem")
    create_topic(b, topic, 1)
    url = f"{http}/v1/topics/{topic}/produce"
    body = {"messages": [{"key": "a", "value": "1"}, {"key": "b", "value": "2"}]}
    first = post(url, body, headers={"Idempotency-Key": "order-17"})
    assert first.status_code == 200, first.text
    again = post(url, body, headers={"Idempotency-Key": "order-17"})
    assert again.status_code == 200 and again.json() == first.json()
    assert watermarks(b, topic, 0)[1] == 2, "the retry wrote"
    other = post(url, {"messages": [{"value": "3"}]}, headers={"Idempotency-Key": "order-17"})
    assert_problem(other, 409, says="Idempotency-Key")
    fresh = post(url, body, headers={"Idempotency-Key": "order-18"})
    assert fresh.json()["offsets"][0]["offset"] == 2


def test_bytes_that_are_not_text_round_trip_as_base64(broker):
    b, http = broker.bootstrap, broker.http_url
    topic = unique_topic("http-b64")
    create_topic(b, topic, 1)
    raw = bytes(range(256))
    produce(http, topic, [{"key": base64.b64encode(b"\xff\xfe").decode(),
                           "value": base64.b64encode(raw).decode(),
                           "headers": {"bin": base64.b64encode(b"\x00\x80").decode()}},
                          {"value": base64.b64encode(b"plain").decode()}], encoding="base64")
    [m0, m1] = read_all(b, topic, 1)
    assert m0.key() == b"\xff\xfe" and m0.value() == raw and m0.headers() == [("bin", b"\x00\x80")]
    r = post(f"{http}/v1/topics/{topic}/consume",
             {"group_id": "b64", "auto_offset_reset": "earliest", "timeout_ms": 5000})
    assert r.status_code == 200, r.text
    got = r.json()["messages"]
    assert got[0]["encoding"] == "base64" and base64.b64decode(got[0]["value"]) == raw
    assert got[1]["encoding"] == "utf-8" and got[1]["value"] == "plain"
    assert got[1]["key"] is None


def test_http_reads_at_read_committed_leave_out_aborted_transactions(broker):
    """librdkafka's transactional producer commits, aborts, commits, and writes one more
    transaction it leaves open. Over HTTP, `read` and `consume` at read_committed give
    the committed records only, with the control markers' offsets skipped and nothing
    past the open transaction; at read_uncommitted `read` gives every record."""
    b, http = broker.bootstrap, broker.http_url
    topic = unique_topic("http-rc")
    create_topic(b, topic, 1)
    p = Producer({"bootstrap.servers": b, "transactional.id": f"t-{topic}", "logger": RDKAFKA_LOG})
    p.init_transactions(30)
    for batch, commit in (("a", True), ("b", False), ("c", True)):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, value=f"{batch}{i}".encode(), partition=0)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    p.flush(30)
    committed = ["a0", "a1", "a2", "c0", "c1", "c2"]

    def values(answer: dict) -> list[str]:
        return [m["value"] for m in answer["messages"]]

    r = post(f"{http}/v1/topics/{topic}/read",
             {"isolation_level": "read_committed", "max_messages": 100})
    assert r.status_code == 200, r.text
    assert values(r.json()) == committed, r.text
    # Past the last stable offset: the open transaction's first record, not beyond.
    stable = r.json()["next_offsets"]["0"]
    assert r.json()["messages"][-1]["offset"] < stable
    r = post(f"{http}/v1/topics/{topic}/read",
             {"isolation_level": "read_uncommitted", "max_messages": 100})
    assert r.status_code == 200, r.text
    assert values(r.json()) == ["a0", "a1", "a2", "b0", "b1", "b2", "c0", "c1", "c2", "open"]
    r = post(f"{http}/v1/topics/{topic}/consume",
             {"group_id": f"g-{topic}", "auto_offset_reset": "earliest",
              "isolation_level": "read_committed", "timeout_ms": 5000})
    assert r.status_code == 200, r.text
    assert values(r.json()) == committed, r.text
    p.abort_transaction(30)


def test_wrong_input_gets_problem_details_with_the_kafka_error(broker):
    b, http = broker.bootstrap, broker.http_url
    topic = unique_topic("http-bad")
    create_topic(b, topic, 2)
    url = f"{http}/v1/topics/{topic}"
    r = requests.post(f"{url}/produce", data=b"{not json", timeout=10)
    assert_problem(r, 400, says="not a produce request")
    assert_problem(post(f"{url}/produce", {"messages": [{"value": "x", "colour": "red"}]}), 400,
                   says="unknown field `colour`")
    assert_problem(post(f"{url}/produce", {"messages": [[None, "x"]]}), 400)
    assert_problem(post(f"{url}/produce", {"messages": []}), 400, says="empty")
    assert_problem(post(f"{url}/produce", {"messages": [{"value": "%%%"}], "encoding": "base64"}),
                   400, says="messages[0]: value is not base64")
    assert_problem(post(f"{url}/produce", {"messages": [{"value": "x"}], "acks": 2}), 400,
                   "INVALID_REQUIRED_ACKS")
    # A partition that does not exist: the message's error, and nothing written.
    r = post(f"{url}/produce", {"messages": [{"value": "x", "partition": 7}]})
    assert_problem(r, 404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert r.json()["offsets"][0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    # Mixed: written where it could be, the error where not.
    r = post(f"{url}/produce", {"messages": [{"value": "x", "partition": 1},
                                             {"value": "y", "partition": 9}]})
    assert r.status_code == 200 and r.json()["offsets"][0] == {"partition": 1, "offset": 0}
    assert r.json()["offsets"][1]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert watermarks(b, topic, 0)[1] == 0

    assert_problem(post(f"{url}/consume", {"group_id": ""}), 400, "INVALID_GROUP_ID")
    assert_problem(post(f"{url}/consume", {"group_id": "g", "max_messages": 0}), 400)
    assert_problem(post(f"{url}/consume", {"group_id": "g", "auto_offset_reset": "soon"}), 400,
                   says="auto_offset_reset")
    assert_problem(post(f"{url}/consume", {"group_id": "g", "consumer_id": "1-nope"}), 404,
                   "UNKNOWN_MEMBER_ID")
    assert_problem(post(f"{http}/v1/topics/no-such-topic/consume", {"group_id": "g"}), 404,
                   "UNKNOWN_TOPIC_OR_PARTITION")
    assert_problem(post(f"{url}/commit", {"group_id": "g", "offsets": {"0": -5}}), 400,
                   says="not an offset")
    assert_problem(post(f"{url}/commit", {"group_id": "g", "offsets": {"2": 1}}), 404,
                   "UNKNOWN_TOPIC_OR_PARTITION")
    assert_problem(post(f"{url}/commit", {"group_id": "g", "offsets": {}}), 400)
    assert_problem(requests.get(f"{http}/v1/nothing-here", timeout=10), 404, says="/v1/topics/")
    # None of it wrote anything more.
    assert watermarks(b, topic, 1)[1] == 1


# Every phase over 40 operations: about three minutes on two cores.
@pytest.mark.timeout(480)
def test_schemathesis_finds_no_server_error_and_no_answer_off_the_document(broker, tmp_path):
    st = shutil.which("st") or shutil.which("schemathesis")
    assert st, "schemathesis is not installed (tests/clients/requirements.txt)"
    create_topic(broker.bootstrap, "orders", 3)

    def fuzz(*select: str, timeout: float):
        run = subprocess.run(
            [st, "--config-file", str(Path(__file__).with_name("schemathesis.toml")),
             "run", f"{broker.http_url}/v1/openapi.json", "--checks", "all",
             "--max-examples", "25", "--max-response-time", "45", "--request-timeout", "60",
             "--seed", "18", "--no-color", *select],
            capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
        tail = run.stdout[-6000:] + run.stderr[-2000:]
        assert run.returncode == 0, tail
        assert " passed" in run.stdout and "failure" not in run.stdout.split("SUMMARY")[-1], tail

    # The quotas the fuzzer sets (1 byte a second for every user) would hold back the
    # other operations' answers: they are fuzzed after them.
    fuzz("--exclude-name", "PATCH /v1/quotas", timeout=390)
    fuzz("--include-path", "/v1/quotas", timeout=60)


@pytest.fixture
def cluster3(broker_factory, request):
    from test_replication import started_cluster
    yield from started_cluster(broker_factory, request, "strata-http-", [])


def test_in_a_cluster_any_agent_takes_produce_and_redirects_consume(cluster3):
    c = cluster3
    agents = c.agents
    first = agents[1]
    topic = unique_topic("http-cluster")
    create_topic(c.servers(), topic, PARTITIONS, any_leader=True)
    messages = [{"key": f"k{i}", "value": f"v{i}"} for i in range(120)]
    offsets = produce(first.http_url, topic, messages)
    assert len({o["partition"] for o in offsets}) == PARTITIONS
    got = read_all(c.servers(), topic, PARTITIONS)
    assert sorted(m.value().decode() for m in got) == sorted(m["value"] for m in messages)

    # Each agent either runs the group's consumers or redirects there.
    group = f"g-{uuid.uuid4().hex[:8]}"
    answers = {}
    for node, a in agents.items():
        r = post(f"{a.http_url}/v1/topics/{topic}/consume", {"group_id": group, "timeout_ms": 0},
                 allow_redirects=False)
        answers[node] = r
    coordinators = [n for n, r in answers.items() if r.status_code == 200]
    redirected = [n for n, r in answers.items() if r.status_code == 307]
    assert len(coordinators) == 1 and len(redirected) == 2, {n: r.status_code for n, r in answers.items()}
    coordinator = agents[coordinators[0]]
    for n in redirected:
        assert answers[n].headers["location"] == \
            f"{coordinator.http_url}/v1/topics/{topic}/consume", answers[n].headers
    # Following the redirect (as requests and curl -L do), a consumer reads every
    # partition, whichever agent leads it.
    via = agents[redirected[0]]
    r = post(f"{via.http_url}/v1/topics/{topic}/consume",
             {"group_id": f"{group}-b", "auto_offset_reset": "earliest", "max_messages": 1000,
              "timeout_ms": 10000})
    assert r.status_code == 200, r.text
    body = r.json()
    seen = list(body["messages"])
    while body["has_more"] or len(seen) < len(messages):
        r = post(f"{via.http_url}/v1/topics/{topic}/consume",
                 {"group_id": f"{group}-b", "consumer_id": body["consumer_id"], "max_messages": 1000,
                  "timeout_ms": 5000})
        assert r.status_code == 200, r.text
        body = r.json()
        if not body["messages"] and not body["has_more"]:
            break
        seen += body["messages"]
    assert sorted(m["value"] for m in seen) == sorted(m["value"] for m in messages)
