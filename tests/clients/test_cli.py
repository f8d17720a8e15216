"""The operator CLI (`strata topics|groups|offsets|partitions|cluster|audit|produce|
consume`, `agent/src/cli.rs`), run as a subprocess against running agents through
`--http 127.0.0.1:PORT`, every effect cross-checked with librdkafka (confluent-kafka):

- topics create/list/describe/alter-configs/add-partitions/delete: the tables hold the
  values Kafka's Metadata and DescribeConfigs report, `-o json` is the API's answer;
- produce: stdin lines split at --key-separator, --header on every record, keyed lines
  on the partition librdkafka's `murmur2_random` picks for the key, --partition;
- consume --group --from-beginning --max-messages N: exactly N lines, committed, and a
  librdkafka member of the group resumes right after them (nothing lost or doubled);
- groups list/describe (lag = high watermark - committed, as librdkafka computes it),
  offsets reset (dry run, earliest, latest, one partition) and delete;
- partitions describe/disable/enable/tier/verify, produce to a disabled partition;
- audit (table and JSON, the same as {data_dir}/audit.log);
- consume prints a value that is not UTF-8 in base64, and `-o json` says so;
- errors: a message on stderr, nothing on stdout, exit 1 for refusals (unknown topic
  or group, invalid name or config, a live group, no --to-*, unreachable --http, a
  refused produce, a failed verify) and 2 for usage errors caught by clap;
- in a 3-agent cluster, requests given to any agent follow the 307 to the group's
  coordinator or the partition's leader.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import subprocess
import time
import uuid

import pytest
import requests
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import ConfigSource, NewTopic

from conftest import pick_free_ports, strata_bin
from strata_testlib import (
    BASE_TS,
    RDKAFKA_LOG,
    Out,
    admin,
    consume_confluent,
    create_topic,
    produce_confluent,
    unique_topic,
    wait_for_partitions,
    wait_until,
    watermarks,
)
from test_http_admin import (
    describe_configs,
    first_offsets,
    kafka_committed,
    source_of,
    wait_cluster_formed,
)

USAGE = 2
REFUSED = 1


# --------------------------------------------------------------------------- running
def strata(*args: str, http: str | None = None, stdin: str | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess:
    """`strata <args> --http HOST:PORT`, without the caller's STRATA_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    cmd = [str(strata_bin()), *args]
    if http is not None:
        cmd += ["--http", http.removeprefix("http://")]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout,
                          env=env)


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"{r.args}: exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r.stdout


def ok_json(r: subprocess.CompletedProcess):
    return json.loads(ok(r))


def fails(r: subprocess.CompletedProcess, code: int, *says: str) -> str:
    """Exit `code`, nothing on stdout, one clear message on stderr holding `says`."""
    assert r.returncode == code, f"{r.args}: exit {r.returncode}, expected {code}\n" \
                                 f"stdout: {r.stdout}\nstderr: {r.stderr}"
    assert r.stdout == "", f"{r.args}: printed {r.stdout!r} on a failure"
    err = r.stderr.strip()
    assert err, f"{r.args}: no message on stderr"
    if code == REFUSED:
        assert err.startswith("strata: ") and "\n" not in err, err
    else:
        assert err.startswith("error: "), err
    for s in says:
        assert s in err, f"{s!r} not in stderr: {err}"
    return err


def table(text: str, first: str) -> list[dict[str, str]]:
    """The rows of the table whose header line starts with the column `first`, as
    dicts; columns are found by where the header's names start (the CLI pads every
    column but the last to the header's position)."""
    lines = text.splitlines()
    i = next((i for i, line in enumerate(lines) if line.split()[:1] == [first]), None)
    assert i is not None, f"no table headed {first} in:\n{text}"
    cols = [(m.group(), m.start()) for m in re.finditer(r"\S+", lines[i])]
    rows = []
    for line in lines[i + 1:]:
        if not line.strip():
            break
        cells = {}
        for k, (name, start) in enumerate(cols):
            end = cols[k + 1][1] if k + 1 < len(cols) else None
            cells[name] = line[start:end].strip()
        rows.append(cells)
    return rows


def one(rows: list[dict], **match) -> dict:
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    assert len(found) == 1, f"{match} in {rows}"
    return found[0]


def read_all(bootstrap: str, topic: str, partitions: int) -> list:
    """Every record of the topic through librdkafka (assign from 0 to the end)."""
    ends = {p: watermarks(bootstrap, topic, p)[1] for p in range(partitions)}
    got = consume_confluent(bootstrap, topic, {p: 0 for p in range(partitions)}, ends)
    return [r for p in sorted(got) for r in got[p]]


# =========================================================================== topics
def test_topics_commands_do_what_kafka_sees(broker):
    http, b = broker.http_url, broker.bootstrap
    a = admin(b)
    topic = unique_topic("cli-topic")

    out = ok(strata("topics", "create", topic, "--validate-only", "-p", "2", http=http))
    assert out == f"topic {topic} would be created with 2 partitions, replication factor 1\n"
    assert topic not in a.list_topics(timeout=10).topics

    out = ok(strata("topics", "create", topic, "-p", "3", "-c", "retention.ms=3600000",
                    "--config", "cleanup.policy=compact", http=http))
    assert out.startswith(f"created topic {topic}\ntopic {topic}  id "), out
    rows = table(out, "PARTITION")
    assert [r["PARTITION"] for r in rows] == ["0", "1", "2"]
    assert all(r["LEADER"] == "1" and r["REPLICAS"] == "1" and r["ISR"] == "1" and r["WRITES"] == "-"
               for r in rows), rows
    configs = table(out, "CONFIG")
    assert one(configs, CONFIG="retention.ms") == {"CONFIG": "retention.ms", "VALUE": "3600000",
                                                   "SOURCE": "topic"}
    assert one(configs, CONFIG="cleanup.policy")["VALUE"] == "compact"
    wait_for_partitions(a, topic, 3)
    d = describe_configs(a, topic)
    assert (d["retention.ms"].value, source_of(d["retention.ms"])) == (
        "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert d["cleanup.policy"].value == "compact"

    produce_confluent(b, topic, [Out(1, b"k", f"v{i}".encode(), [], BASE_TS + i) for i in range(3)])
    out = ok(strata("topics", "describe", topic, http=http))
    rows = table(out, "PARTITION")
    assert [(r["LOG_START"], r["HIGH_WATERMARK"]) for r in rows] == [("0", "0"), ("0", "3"), ("0", "0")]
    api = requests.get(f"{http}/v1/topics/{topic}", timeout=10).json()
    assert ok_json(strata("topics", "describe", topic, "-o", "json", http=http)) == api
    assert f"id {api['topic_id']}  replication factor 1" in out.splitlines()[0]

    listed = one(table(ok(strata("topics", "list", http=http)), "TOPIC"), TOPIC=topic)
    assert listed == {"TOPIC": topic, "PARTITIONS": "3", "REPLICATION": "1",
                      "ID": api["topic_id"], "DISABLED": ""}, listed
    js = ok_json(strata("topics", "list", "-o", "json", http=http))
    assert [t for t in js["topics"] if t["name"] == topic] == [
        {"name": topic, "topic_id": api["topic_id"], "partitions": 3, "replication_factor": 1,
         "disabled_partitions": []}]
    assert {t["name"] for t in js["topics"]} == set(a.list_topics(timeout=10).topics)

    out = ok(strata("topics", "alter-configs", topic, "--set", "retention.ms=7200000",
                    "--set", "max.message.bytes=200000", "--delete", "cleanup.policy", http=http))
    assert out.startswith(f"topic {topic} now sets:\n"), out
    assert {r["CONFIG"]: r["VALUE"] for r in table(out, "CONFIG")} == {
        "max.message.bytes": "200000", "retention.ms": "7200000"}
    d = describe_configs(a, topic)
    assert (d["retention.ms"].value, d["max.message.bytes"].value) == ("7200000", "200000")
    assert (d["cleanup.policy"].value, d["cleanup.policy"].is_default) == ("delete", True)
    js = ok_json(strata("topics", "alter-configs", topic, "--delete", "max.message.bytes",
                        "-o", "json", http=http))
    assert js == {"name": topic, "configs": {"retention.ms": "7200000"}}, js
    assert describe_configs(a, topic)["max.message.bytes"].is_default

    assert ok(strata("topics", "add-partitions", topic, "--count", "5", http=http)) == \
        f"topic {topic} now has 5 partitions\n"
    wait_for_partitions(a, topic, 5)

    assert ok(strata("topics", "delete", topic, http=http)) == f"deleted topic {topic}\n"
    wait_until(lambda: topic not in a.list_topics(timeout=5).topics, 15, f"{topic} gone")
    assert topic not in {r["TOPIC"] for r in table(ok(strata("topics", "list", http=http)), "TOPIC")}


def test_topics_errors_are_one_line_on_stderr_with_the_right_exit_code(broker):
    http, b = broker.http_url, broker.bootstrap
    a = admin(b)
    topic = unique_topic("cli-err")
    ok(strata("topics", "create", topic, "-p", "2", http=http))
    missing = unique_topic("cli-missing")

    fails(strata("topics", "describe", missing, http=http), REFUSED,
          f'topic "{missing}" does not exist', "(UNKNOWN_TOPIC_OR_PARTITION)")
    fails(strata("topics", "delete", missing, http=http), REFUSED, "(UNKNOWN_TOPIC_OR_PARTITION)")
    fails(strata("topics", "add-partitions", missing, "--count", "3", http=http), REFUSED,
          "UNKNOWN_TOPIC_OR_PARTITION")
    fails(strata("topics", "create", "bad name!", http=http), REFUSED, "illegal",
          "(INVALID_TOPIC_EXCEPTION)")
    fails(strata("topics", "create", topic, "-p", "4", http=http), REFUSED, "already exists",
          "(TOPIC_ALREADY_EXISTS)")
    fails(strata("topics", "create", unique_topic("cli-badcfg"), "-c", "retention.ms=forever", http=http),
          REFUSED, "retention.ms", "(INVALID_CONFIG)")
    fails(strata("topics", "alter-configs", topic, "--set", "no.such.config=1", http=http), REFUSED,
          "(INVALID_CONFIG)")
    fails(strata("topics", "alter-configs", topic, http=http), REFUSED, "nothing to change")
    fails(strata("topics", "add-partitions", topic, "--count", "1", http=http), REFUSED,
          "(INVALID_PARTITIONS)")
    assert missing not in a.list_topics(timeout=10).topics
    assert len(a.list_topics(topic=topic, timeout=10).topics[topic].partitions) == 2
    assert describe_configs(a, topic)["retention.ms"].is_default

    # Usage errors, caught by clap before any request.
    fails(strata("topics", "create", topic, "-c", "no-equals-sign", http=http), USAGE, "name=value")
    fails(strata("topics", "add-partitions", topic, "--count", "many", http=http), USAGE, "--count")
    fails(strata("topics", "describe", http=http), USAGE, "<TOPIC>")
    fails(strata("topics", "rename", topic, http=http), USAGE, "rename")
    fails(strata("topics", "list", "-o", "yaml", http=http), USAGE, "yaml")

    # Nobody there.
    [dead] = pick_free_ports(1)
    fails(strata("topics", "list", http=f"127.0.0.1:{dead}"), REFUSED,
          f"cannot reach strata at http://127.0.0.1:{dead}")
    fails(strata("topics", "list", http="https://127.0.0.1:1"), REFUSED, "only http://")


# =========================================================================== produce
def test_produce_splits_keys_adds_headers_and_partitions_like_the_java_client(broker):
    http, b = broker.http_url, broker.bootstrap
    topic, twin = unique_topic("cli-produce"), unique_topic("cli-produce-twin")
    create_topic(b, topic, 6)
    create_topic(b, twin, 6)
    keyed = [(f"user-{i}", f"value {i}") for i in range(40)]
    lines = [f"{k}:{v}" for k, v in keyed] + ["a line without the separator", "k2:v:with:colons",
                                               ":empty key"]
    r = strata("produce", topic, "--key-separator", ":", "--header", "trace=cli",
               "--header", "env=a=b", "--batch", "7", http=http, stdin="\n".join(lines) + "\n")
    assert ok(r) == ""
    assert r.stderr.strip() == f"produced {len(lines)} records to {topic}", r.stderr

    # librdkafka's murmur2_random (the Java client's partitioner) on the same keys.
    where: dict[str, int] = {}
    p = Producer({"bootstrap.servers": b, "partitioner": "murmur2_random", "logger": RDKAFKA_LOG})
    for k, _ in keyed + [("k2", "")]:
        p.produce(twin, key=k, value=b"x",
                  on_delivery=lambda err, m: where.__setitem__(m.key().decode(), m.partition()))
    assert p.flush(30) == 0

    got = read_all(b, topic, 6)
    assert len(got) == len(lines), [r.short() for r in got]
    by_value = {r.value.decode(): r for r in got}
    headers = (("trace", b"cli"), ("env", b"a=b"))
    for k, v in keyed + [("k2", "v:with:colons")]:
        rec = by_value[v]
        assert (rec.key, rec.headers) == (k.encode(), headers), rec.short()
        assert rec.partition == where[k], f"{k}: CLI put it on {rec.partition}, librdkafka on {where[k]}"
    assert len({by_value[v].partition for _, v in keyed}) > 1, "every key on one partition"
    plain = by_value["a line without the separator"]
    assert plain.key is None and plain.headers == headers
    empty = by_value["empty key"]
    assert empty.key == b"" and empty.headers == headers

    # --partition, no separator: the whole line is the value; -o json prints the answers.
    r = strata("produce", topic, "--partition", "4", "--batch", "2", "-o", "json", http=http,
               stdin="x:1\ny:2\nz:3\n")
    answers = [json.loads(line) for line in ok(r).splitlines()]
    assert [len(a["offsets"]) for a in answers] == [2, 1], answers
    offsets = [o for a in answers for o in a["offsets"]]
    assert all(o["partition"] == 4 for o in offsets), offsets
    high = watermarks(b, topic, 4)[1]
    assert [o["offset"] for o in offsets] == list(range(high - 3, high))
    tail = consume_confluent(b, topic, {4: high - 3}, {4: high})[4]
    assert [(t.key, t.value) for t in tail] == [(None, b"x:1"), (None, b"y:2"), (None, b"z:3")]

    # Nothing on stdin: nothing produced, and that is no error.
    r = strata("produce", topic, http=http, stdin="")
    assert ok(r) == "" and r.stderr.strip() == f"produced 0 records to {topic}", r.stderr

    # Refusals: a bad --acks, a bad header, a partition the topic does not have.
    fails(strata("produce", topic, "--acks", "2", http=http, stdin="a\n"), REFUSED, "--acks")
    fails(strata("produce", topic, "--header", "novalue", http=http, stdin="a\n"), USAGE, "name=value")
    r = strata("produce", topic, "--partition", "9", http=http, stdin="a\nb\n")
    assert r.returncode == REFUSED and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    assert r.stderr.splitlines()[0].startswith("strata: 2 of 2 records refused: ") and \
        "(UNKNOWN_TOPIC_OR_PARTITION)" in r.stderr, r.stderr
    assert r.stderr.splitlines()[-1] == "strata: 2 of 2 records were not produced", r.stderr
    assert sum(watermarks(b, topic, q)[1] for q in range(6)) == len(lines) + 3


# =========================================================================== groups
def test_consume_commits_then_groups_and_offsets_commands(group_broker):
    http, b = group_broker.http_url, group_broker.bootstrap
    topic = unique_topic("cli-consume")
    group = f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, 2)
    produced = produce_confluent(b, topic, [Out(i % 2, f"k{i}".encode(), f"m{i}".encode(), [],
                                                BASE_TS + i) for i in range(30)])
    by_place = {(r.partition, r.offset): r for r in produced}

    # Exactly N lines, each partition:offset, key, value.
    out = ok(strata("consume", topic, "--group", group, "--from-beginning", "--max-messages", "12",
                    "--print-offset", "--print-key", http=http))
    lines = out.splitlines()
    assert len(lines) == 12, out
    printed = []
    for line in lines:
        place, key, value = line.split("\t")
        p, o = map(int, place.split(":"))
        rec = by_place[(p, o)]
        assert (key, value) == (rec.key.decode(), rec.value.decode()), line
        printed.append((p, o))
    assert len(set(printed)) == 12
    nexts = {}
    for p, o in printed:
        nexts[p] = max(nexts.get(p, 0), o + 1)
    for p in nexts:
        assert sorted(o for q, o in printed if q == p) == list(range(nexts[p])), printed
    committed = kafka_committed(b, group, topic, 2)
    assert {p: o for p, o in committed.items() if o >= 0} == nexts, (committed, nexts)

    # A librdkafka member of the group resumes right after what the CLI printed.
    c = Consumer({"bootstrap.servers": b, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "logger": RDKAFKA_LOG})
    rest = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(rest) < 30 - 12:
            assert time.monotonic() < deadline, f"the group member read only {len(rest)}"
            m = c.poll(0.2)
            if m is not None and not m.error():
                rest.append((m.partition(), m.offset()))
        # A live member: resets are refused and change nothing.
        err = fails(strata("offsets", "reset", group, "--topic", topic, "--to-earliest", http=http),
                    REFUSED, "(NON_EMPTY_GROUP)")
        assert "stop its consumers" in err
        fails(strata("groups", "delete", group, http=http), REFUSED, "(NON_EMPTY_GROUP)")
        listed = one(table(ok(strata("groups", "list", http=http)), "GROUP"), GROUP=group)
        assert listed == {"GROUP": group, "STATE": "Stable", "PROTOCOL": "consumer", "COORDINATOR": "1"}
        # Its member, and every partition assigned to it, committed or not (a partition
        # the CLI never read has no committed offset: `-`, as kafka-consumer-groups).
        out = ok(strata("groups", "describe", group, http=http))
        [member] = table(out, "MEMBER")
        assert member["ASSIGNMENT"] == f"{topic}:0,1", out
        rows = {r["PARTITION"]: r for r in table(out, "TOPIC")}
        assert sorted(rows) == ["0", "1"], out
        for p in range(2):
            r = rows[str(p)]
            assert r["MEMBER"] == member["MEMBER"], out
            assert r["COMMITTED"] == (str(nexts[p]) if p in nexts else "-"), out
            assert r["HIGH_WATERMARK"] == str(watermarks(b, topic, p)[1]), out
    finally:
        c.close()
    assert sorted(printed + rest) == sorted(by_place), "lost or doubled across the hand-over"
    for p in nexts:
        assert min(o for q, o in rest if q == p) == nexts[p]
    assert kafka_committed(b, group, topic, 2) == committed

    wait_until(lambda: one(table(ok(strata("groups", "list", http=http)), "GROUP"),
                           GROUP=group)["STATE"] == "Empty", 15, f"{group} Empty")
    highs = {p: watermarks(b, topic, p)[1] for p in range(2)}
    out = ok(strata("groups", "describe", group, http=http))
    # (The CLI may have printed from one partition only: the others have no offset.)
    total = sum(highs[p] - o for p, o in nexts.items())
    assert out.splitlines()[0] == (f"group {group}  state Empty  coordinator 1  members 0  "
                                   f"total lag {total}"), out
    rows = table(out, "TOPIC")
    assert sorted((r["TOPIC"], r["PARTITION"], r["COMMITTED"], r["HIGH_WATERMARK"], r["LAG"], r["MEMBER"])
                  for r in rows) == [
        (topic, str(p), str(o), str(highs[p]), str(highs[p] - o), "-") for p, o in sorted(nexts.items())]
    js = ok_json(strata("groups", "describe", group, "-o", "json", http=http))
    assert js == requests.get(f"{http}/v1/groups/{group}", timeout=10).json()
    assert js["total_lag"] == total

    # Dry run: the plan, nothing moved.
    out = ok(strata("offsets", "reset", group, "--topic", topic, "--to-earliest", "--dry-run", http=http))
    assert out.splitlines()[-1] == "(dry run: nothing committed)"
    plan = table(out.rsplit("\n(", 1)[0], "TOPIC")
    assert sorted((r["PARTITION"], r["PREVIOUS"], r["NEW"]) for r in plan) == [
        (str(p), str(nexts[p]) if p in nexts else "-", "0") for p in range(2)]
    assert kafka_committed(b, group, topic, 2) == committed
    # Real: the next CLI consume starts at 0 on each partition.
    out = ok(strata("offsets", "reset", group, "--topic", topic, "--to-earliest", http=http))
    assert "dry run" not in out
    assert kafka_committed(b, group, topic, 2) == {0: 0, 1: 0}
    out = ok(strata("consume", topic, "--group", group, "--max-messages", "6", "--print-offset",
                    http=http))
    firsts: dict[str, int] = {}
    for line in out.splitlines():
        p, o = line.split("\t")[0].split(":")
        firsts.setdefault(p, int(o))
    assert firsts and set(firsts.values()) == {0}, out
    # Latest, then one partition to an offset.
    ok(strata("offsets", "reset", group, "--topic", topic, "--to-latest", http=http))
    assert kafka_committed(b, group, topic, 2) == highs
    js = ok_json(strata("offsets", "reset", group, "--topic", topic, "--to-offset", "4",
                        "--partitions", "1", "-o", "json", http=http))
    assert js["partitions"] == [{"partition": 1, "previous_offset": highs[1], "new_offset": 4}], js
    assert kafka_committed(b, group, topic, 2) == {0: highs[0], 1: 4}
    assert first_offsets(b, group, topic, [1]) == {1: 4}
    wait_until(lambda: one(table(ok(strata("groups", "list", http=http)), "GROUP"),
                           GROUP=group)["STATE"] == "Empty", 15, f"{group} Empty")

    # Bad offsets and missing targets.
    fails(strata("offsets", "reset", group, "--topic", topic, "--to-offset", "-5", http=http), USAGE, "-5")
    fails(strata("offsets", "reset", group, "--topic", topic, "--to-offset=-5", http=http), REFUSED,
          "0 or more")
    fails(strata("offsets", "reset", group, "--topic", topic, http=http), REFUSED, "--to-earliest")
    fails(strata("offsets", "reset", group, "--topic", topic, "--to-earliest", "--to-latest", http=http),
          USAGE, "cannot be used with")
    fails(strata("offsets", "reset", group, "--to-earliest", http=http), USAGE, "--topic")
    fails(strata("offsets", "reset", group, "--topic", topic, "--to-earliest", "--partitions", "5",
                 http=http), REFUSED, "UNKNOWN_TOPIC_OR_PARTITION")
    fails(strata("offsets", "reset", group, "--topic", unique_topic("nope"), "--to-earliest", http=http),
          REFUSED, "UNKNOWN_TOPIC_OR_PARTITION")
    fails(strata("consume", unique_topic("nope"), "--max-messages", "1", http=http), REFUSED,
          "(UNKNOWN_TOPIC_OR_PARTITION)")
    assert kafka_committed(b, group, topic, 2) == {0: highs[0], 1: 4}

    # --no-commit in JSON: the messages as the API gives them, the group's offsets untouched.
    other = f"g-{uuid.uuid4().hex[:8]}"
    out = ok(strata("consume", topic, "-g", other, "--from-beginning", "--max-messages", "5",
                    "--no-commit", "-o", "json", http=http))
    msgs = [json.loads(line) for line in out.splitlines()]
    assert len(msgs) == 5
    for m in msgs:
        rec = by_place[(m["partition"], m["offset"])]
        assert (m["key"], m["value"]) == (rec.key.decode(), rec.value.decode()), m
    assert kafka_committed(b, other, topic, 2) == {0: -1001, 1: -1001}

    # --timeout-ms: nothing new for that long, and it stops (with nothing printed).
    started = time.monotonic()
    assert ok(strata("consume", topic, "-g", other, "--timeout-ms", "300", http=http)) == ""
    assert time.monotonic() - started < 20

    # Delete: gone.
    assert ok(strata("groups", "delete", group, http=http)) == f"deleted group {group}\n"
    fails(strata("groups", "describe", group, http=http), REFUSED, "(GROUP_ID_NOT_FOUND)")
    fails(strata("groups", "delete", group, http=http), REFUSED, "(GROUP_ID_NOT_FOUND)")
    assert kafka_committed(b, group, topic, 2) == {0: -1001, 1: -1001}
    assert group not in {r["GROUP"] for r in table(ok(strata("groups", "list", http=http)), "GROUP")}


def test_consume_prints_a_value_that_is_not_utf8_in_base64_and_json_says_so(group_broker):
    """docs/cli.md: a record that is not UTF-8 is printed as the API answers it, in
    base64; only `-o json` (its "encoding") tells it from a text value that happens to
    be the same base64 text."""
    http, b = group_broker.http_url, group_broker.bootstrap
    topic = unique_topic("cli-binary")
    create_topic(b, topic, 1)
    raw = b"\xff\x00\xfe"
    text = base64.b64encode(raw)
    produce_confluent(b, topic, [Out(0, b"\x80", raw, [], BASE_TS), Out(0, b"k", text, [], BASE_TS + 1)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    r = subprocess.run([str(strata_bin()), "consume", topic, "--from-beginning", "--max-messages", "2",
                        "--print-key", "--http", http.removeprefix("http://")],
                       capture_output=True, timeout=60, env=env)
    assert r.returncode == 0, r
    assert r.stdout == b"gA==\t" + text + b"\nk\t" + text + b"\n", r.stdout
    out = ok(strata("consume", topic, "--from-beginning", "--max-messages", "2", "-o", "json", http=http))
    [binary, plain] = [json.loads(line) for line in out.splitlines()]
    assert (binary["encoding"], binary["key"], binary["value"]) == ("base64", "gA==", text.decode()), binary
    assert (plain["encoding"], plain["key"], plain["value"]) == ("utf-8", "k", text.decode()), plain
    assert base64.b64decode(binary["value"]) == raw


# =========================================================================== partitions
def test_produce_sends_bytes_that_are_not_text_unaltered(broker, tmp_path):
    http, b = broker.http_url, broker.bootstrap
    topic = unique_topic("cli-binary")
    create_topic(b, topic, 1)
    # Whole files, one record each: any bytes.
    raw, empty = tmp_path / "raw.bin", tmp_path / "empty.bin"
    raw.write_bytes(bytes(range(256)) * 3)
    empty.write_bytes(b"")
    ok(strata("produce", topic, "--file", str(raw), "--file", str(empty), "--key", "k",
              http=http))
    # Lines of base64 keys and values.
    key64, value64 = base64.b64encode(b"\xff\x00").decode(), base64.b64encode(b"\x80\x81").decode()
    lines = f"{key64}:{value64}\n"
    ok(strata("produce", topic, "--encoding", "base64", "--key-separator", ":", http=http,
              stdin=lines))
    got = read_all(b, topic, 1)
    assert [(r.key, r.value) for r in got] == [
        (b"k", bytes(range(256)) * 3), (b"k", b""), (b"\xff\x00", b"\x80\x81")]
    # A line that is not UTF-8 in text mode: refused, saying what to do, nothing sent.
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    r = subprocess.run([str(strata_bin()), "produce", topic, "--http", http.removeprefix("http://")],
                       input=b"fine\n\xff\xfe\n", capture_output=True, timeout=60, env=env)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "stdin line 2 is not UTF-8" in err and "--encoding base64" in err and "--file" in err, err
    assert len(read_all(b, topic, 1)) == 3


def test_partitions_disable_enable_describe_and_a_refused_produce(group_broker):
    http, b = group_broker.http_url, group_broker.bootstrap
    topic = unique_topic("cli-part")
    create_topic(b, topic, 2)
    produce_confluent(b, topic, [Out(i % 2, None, f"v{i}".encode(), [], BASE_TS + i) for i in range(8)])

    out = ok(strata("partitions", "describe", topic, "0", http=http))
    assert out.splitlines()[0] == f"partition {topic}-0"
    fields = {r["FIELD"]: r["VALUE"] for r in table(out, "FIELD")}
    assert {k: fields[k] for k in ("role", "node_id", "replicas", "isr", "log_start_offset",
                                   "log_end_offset", "high_watermark", "disabled")} == {
        "role": "leader", "node_id": "1", "replicas": "1", "isr": "1", "log_start_offset": "0",
        "log_end_offset": "4", "high_watermark": "4", "disabled": "-"}, fields

    out = ok(strata("partitions", "disable", topic, "0", "--reason", "incident 7", http=http))
    assert out == f"writes to {topic}-0 disabled (incident 7); reads go on\n"
    # A Kafka producer is refused with POLICY_VIOLATION; partition 1 still takes writes.
    reports = {}
    p = Producer({"bootstrap.servers": b, "acks": "all", "retries": 0, "logger": RDKAFKA_LOG})
    for q in (0, 1):
        p.produce(topic, value=b"kafka", partition=q,
                  on_delivery=lambda err, m: reports.__setitem__(m.partition(), err))
    assert p.flush(30) == 0
    assert reports[0] is not None and reports[0].code() == KafkaError.POLICY_VIOLATION, reports
    assert reports[1] is None, reports

    fields = {r["FIELD"]: r["VALUE"] for r in table(ok(strata("partitions", "describe", topic, "0",
                                                                http=http)), "FIELD")}
    assert fields["disabled"] == "incident 7"
    rows = table(ok(strata("topics", "describe", topic, http=http)), "PARTITION")
    assert [r["WRITES"] for r in rows] == ["disabled: incident 7", "-"]
    assert one(table(ok(strata("topics", "list", http=http)), "TOPIC"), TOPIC=topic)["DISABLED"] == "0"

    # The CLI's own produce: exit 1, POLICY_VIOLATION named, nothing written.
    r = strata("produce", topic, "--partition", "0", http=http, stdin="a\nb\n")
    assert r.returncode == REFUSED, (r.returncode, r.stdout, r.stderr)
    assert "POLICY_VIOLATION" in r.stderr and "incident 7" in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "strata: 2 of 2 records were not produced", r.stderr
    assert watermarks(b, topic, 0) == (0, 4)
    # Reads go on: the CLI reads both partitions, the disabled one included.
    out = ok(strata("consume", topic, "--from-beginning", "--max-messages", "9", "--print-offset",
                    http=http))
    assert sorted(line.split("\t")[0] for line in out.splitlines()) == sorted(
        [f"0:{o}" for o in range(4)] + [f"1:{o}" for o in range(5)])

    assert ok(strata("partitions", "enable", topic, "0", http=http)) == f"writes to {topic}-0 enabled\n"
    r = strata("produce", topic, "--partition", "0", http=http, stdin="after\n")
    ok(r)
    assert watermarks(b, topic, 0) == (0, 5)
    reports.clear()
    p.produce(topic, value=b"kafka again", partition=0,
              on_delivery=lambda err, m: reports.__setitem__(m.partition(), err))
    assert p.flush(30) == 0 and reports == {0: None}, reports
    assert ok_json(strata("partitions", "describe", topic, "0", "-o", "json", http=http))["disabled"] is None

    # Verify with nothing archived yet: nothing to check, and that is a match.
    r = strata("partitions", "verify", topic, "1", http=http)
    assert ok(r) == f"{topic}-1: nothing archived yet (segments are archived once closed)\n"
    assert r.stderr.strip() == "the archive matches its manifest"

    fails(strata("partitions", "disable", topic, "9", http=http), REFUSED, "(UNKNOWN_TOPIC_OR_PARTITION)")
    fails(strata("partitions", "describe", unique_topic("nope"), "0", http=http), REFUSED,
          "(UNKNOWN_TOPIC_OR_PARTITION)")
    fails(strata("partitions", "enable", topic, "first", http=http), USAGE, "first")
    fails(strata("partitions", "disable", topic, http=http), USAGE, "<PARTITION>")


def test_partitions_tier_and_verify_exit_1_on_a_corrupted_archive(broker_factory):
    broker = broker_factory(extra_args=["--tiering-interval-ms", "600000"])
    broker.start()
    http, b = broker.http_url, broker.bootstrap
    topic = unique_topic("cli-tier")
    create_topic(b, topic, 1, {"segment.bytes": "1024"})
    produce_confluent(b, topic, [Out(0, None, f"value {i} ".encode() * 12, [], BASE_TS + i)
                                 for i in range(50)], waves=5)
    bases = sorted(int(f.stem) for f in (broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))
    assert len(bases) >= 3, bases

    out = ok(strata("partitions", "tier", topic, "0", http=http))
    assert out.splitlines()[0] == f"{topic}-0: archived up to offset {bases[-1] - 1} (was -1)", out
    objects = sorted((broker.data_dir / "archive" / f"topic={topic}" / "partition=0").glob("*.parquet"))
    assert objects
    r = strata("partitions", "verify", topic, "0", http=http)
    n = len(objects)
    size = sum(o.stat().st_size for o in objects)
    assert ok(r) == (f"{topic}-0: {n} of {n} archived objects read back ({size} bytes), "
                     f"offsets 0..{bases[-1] - 1}\n")
    assert r.stderr.strip() == "the archive matches its manifest"

    victim = objects[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    r = strata("partitions", "verify", topic, "0", http=http)
    assert r.returncode == REFUSED, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.strip() == f"strata: the archive of {topic}-0 does not match its manifest", r.stderr
    [bad] = table(r.stdout, "OBJECT")
    assert bad["OBJECT"].endswith(victim.name) and "CRC32C" in bad["PROBLEM"], bad
    r = strata("partitions", "verify", topic, "0", "-o", "json", http=http)
    assert r.returncode == REFUSED
    js = json.loads(r.stdout)
    assert js["ok"] is False and [m["object"].rsplit("/", 1)[-1] for m in js["mismatches"]] == [victim.name]

    plain = unique_topic("cli-untiered")
    create_topic(b, plain, 1, {"remote.storage.enable": "false"})
    fails(strata("partitions", "tier", plain, "0", http=http), REFUSED, "not tiered")


# =========================================================================== audit
def test_audit_shows_the_cli_actions_as_the_log_file_holds_them(broker):
    http = broker.http_url
    topic = unique_topic("cli-audit")
    ok(strata("topics", "create", topic, "-p", "1", http=http))
    fails(strata("topics", "create", topic, http=http), REFUSED, "TOPIC_ALREADY_EXISTS")
    ok(strata("partitions", "disable", topic, "0", "--reason", "audit", http=http))
    ok(strata("partitions", "enable", topic, "0", http=http))
    ok(strata("topics", "describe", topic, http=http))  # a read: not audited
    ok(strata("topics", "delete", topic, http=http))

    expected = [("topic.create", f"topic:{topic}", "ok"),
                ("topic.create", f"topic:{topic}", "refused"),
                ("partition.disable", f"partition:{topic}-0", "ok"),
                ("partition.enable", f"partition:{topic}-0", "ok"),
                ("topic.delete", f"topic:{topic}", "ok")]
    rows = table(ok(strata("audit", http=http)), "TIME")
    assert [(r["ACTION"], r["RESOURCE"], r["OUTCOME"].split(":")[0]) for r in rows] == expected, rows
    assert all(r["PRINCIPAL"] == "User:ANONYMOUS" and r["ADDRESS"].startswith("127.0.0.1:")
               for r in rows), rows
    assert "already exists" in rows[1]["OUTCOME"]
    js = ok_json(strata("audit", "--limit", "3", "-o", "json", http=http))
    lines = [json.loads(line) for line in (broker.data_dir / "audit.log").read_text().splitlines()]
    assert len(lines) == len(expected)
    assert js["entries"] == lines[-3:]
    # Times in UTC to the millisecond, as the log's milliseconds since the epoch are.
    utc = [datetime.datetime.fromtimestamp(e["time_ms"] / 1000, datetime.timezone.utc)
           .isoformat(timespec="milliseconds").replace("+00:00", "Z") for e in lines]
    assert [r["TIME"] for r in rows] == utc
    fails(strata("audit", "--limit", "some", http=http), USAGE, "--limit")


# =========================================================================== cluster
@pytest.fixture
def cluster3(broker_factory, request):
    from test_replication import started_cluster
    yield from started_cluster(broker_factory, request, "strata-cli-", [])


def test_in_a_cluster_the_cli_follows_redirects_to_coordinator_and_leader(cluster3):
    c = cluster3
    agents = c.agents
    servers = c.servers()
    wait_cluster_formed(agents)
    out = ok(strata("cluster", http=agents[2].http_url))
    assert re.match(r"cluster [0-9a-f]+  controller [123]  version ", out.splitlines()[0]), out
    assert {r["NODE"]: (r["KAFKA"], r["HTTP"]) for r in table(out, "NODE")} == {
        str(n): (a.bootstrap, a.http_url.removeprefix("http://")) for n, a in agents.items()}
    js = ok_json(strata("cluster", "-o", "json", http=agents[3].http_url))
    assert js["node_id"] == 3 and len(js["agents"]) == 3

    topic = unique_topic("cli-cluster")
    ok(strata("topics", "create", topic, "-p", "3", http=agents[1].http_url))
    wait_for_partitions(admin(servers), topic, 3, any_leader=True)
    md = admin(servers).list_topics(topic=topic, timeout=10).topics[topic]
    leaders = {p: pm.leader for p, pm in md.partitions.items()}
    ok(strata("produce", topic, "--key-separator", ":", http=agents[2].http_url,
              stdin="".join(f"k{i}:v{i}\n" for i in range(30))))
    highs = {p: watermarks(servers, topic, p)[1] for p in range(3)}
    assert sum(highs.values()) == 30
    for n, a in agents.items():
        rows = table(ok(strata("topics", "describe", topic, http=a.http_url)), "PARTITION")
        assert {int(r["PARTITION"]): (int(r["LEADER"]), int(r["HIGH_WATERMARK"])) for r in rows} == {
            p: (leaders[p], highs[p]) for p in range(3)}, (n, rows)
        # Partition describe goes to the leader, wherever it was asked.
        for p in range(3):
            js = ok_json(strata("partitions", "describe", topic, str(p), "-o", "json", http=a.http_url))
            assert (js["node_id"], js["role"], js["high_watermark"]) == (leaders[p], "leader", highs[p]), js

    # A group consumed through one agent, described and reset through each.
    group = f"g-{uuid.uuid4().hex[:8]}"
    out = ok(strata("consume", topic, "--group", group, "--from-beginning", "--max-messages", "30",
                    http=agents[3].http_url))
    assert sorted(out.splitlines()) == sorted(f"v{i}" for i in range(30))
    assert kafka_committed(servers, group, topic, 3) == highs
    coordinators = set()
    for n, a in agents.items():
        out = ok(strata("groups", "describe", group, http=a.http_url))
        coordinators.add(re.search(r"coordinator (\d+)", out.splitlines()[0]).group(1))
        assert sorted((r["PARTITION"], r["COMMITTED"], r["LAG"]) for r in table(out, "TOPIC")) == [
            (str(p), str(highs[p]), "0") for p in range(3)], out
    assert len(coordinators) == 1, coordinators
    coordinator = int(coordinators.pop())
    elsewhere = next(n for n in agents if n != coordinator)
    ok(strata("offsets", "reset", group, "--topic", topic, "--to-offset", "2",
              http=agents[elsewhere].http_url))
    assert kafka_committed(servers, group, topic, 3) == {0: 2, 1: 2, 2: 2}

    # Disabled through one agent, refused to a produce through another, once the leader
    # knows (it learns through the metastore's watch).
    leader = leaders[0]
    others = [n for n in agents if n != leader]
    ok(strata("partitions", "disable", topic, "0", "--reason", "drill", http=agents[others[0]].http_url))
    wait_until(lambda: requests.get(f"{agents[leader].http_url}/v1/topics/{topic}/partitions/0",
                                    timeout=5).json().get("disabled") == "drill",
               5, "the leader to learn of the disable")
    r = strata("produce", topic, "--partition", "0", http=agents[others[1]].http_url, stdin="x\n")
    assert r.returncode == REFUSED and "POLICY_VIOLATION" in r.stderr, (r.returncode, r.stderr)
    assert watermarks(servers, topic, 0)[1] == highs[0]


@pytest.fixture
def short_lease_cluster(broker_factory, request):
    from test_replication import started_cluster
    yield from started_cluster(broker_factory, request, "strata-cli-health-", [
        "--lease-ms", "2000", "--replica-lag-time-max-ms", "2000"])


def test_cluster_health_says_what_needs_attention(short_lease_cluster):
    c = short_lease_cluster
    agents = c.agents
    wait_cluster_formed(agents)
    topic = unique_topic("health")
    a = admin(c.servers())
    a.create_topics([NewTopic(topic, num_partitions=2, replication_factor=3)])[topic].result(20)
    wait_for_partitions(a, topic, 2, any_leader=True)

    def health(via: int) -> subprocess.CompletedProcess:
        return strata("cluster", "health", http=agents[via].http_url)

    wait_until(lambda: health(1).returncode == 0, 20, "a healthy cluster")
    out = health(2).stdout
    assert re.match(r"healthy  controller [123]  agents 3 live \(racks -:3\)  topics 1  partitions 2$",
                    out.splitlines()[0]), out
    js = ok_json(strata("cluster", "health", "-o", "json", http=agents[3].http_url))
    assert js["healthy"] is True and js["problems"] == [] and js["agents_live"] == 3

    # One agent killed: once its lease runs out it is gone, and the partitions it held
    # are under-replicated (the ISR shrinks) until it is back or replaced.
    agents[3].kill()
    wait_until(lambda: health(1).returncode == 1, 30, "the cluster reported unhealthy")
    def both_under_replicated():
        h = health(1)
        return "\nSTATE " in h.stdout and len(table(h.stdout, "STATE")) == 2 and h

    r = wait_until(both_under_replicated, 30, "both partitions reported under-replicated")
    lines = r.stdout.splitlines()
    assert lines[0].startswith("UNHEALTHY  controller ") and "agents 2 live, 1 gone (3)" in lines[0], r.stdout
    assert any(line.startswith("- agent 3 is gone and holds 2 replicas") for line in lines), r.stdout
    rows = table(r.stdout, "STATE")
    assert {(row["STATE"], row["TOPIC"], row["PARTITION"]) for row in rows
            if row["STATE"] == "under-replicated"} == {("under-replicated", topic, "0"),
                                                      ("under-replicated", topic, "1")}, r.stdout
    assert r.stderr.strip() == "strata: the cluster needs attention"

    # Back: healthy again once it has caught up.
    agents[3].start()
    wait_until(lambda: health(1).returncode == 0, 60, "healthy again")


def test_consume_without_a_group_reads_the_partitions_directly(group_broker):
    """`strata consume` without --group reads partitions as kcat does
    (`POST /v1/topics/{topic}/read`): no group is joined or left behind, nothing is
    committed, --partition and --offset pick where to start, and the API's long poll
    answers a record produced while it waits."""
    http, b = group_broker.http_url, group_broker.bootstrap
    topic = unique_topic("cli-read")
    create_topic(b, topic, 2)
    produce_confluent(b, topic, [Out(i % 2, f"k{i}".encode(), f"v{i}".encode(), [], BASE_TS + i)
                                 for i in range(10)])
    groups_before = {g.group_id for g in admin(b).list_consumer_groups().result(timeout=30).valid}

    out = ok(strata("consume", topic, "--from-beginning", "--max-messages", "10", "--print-offset",
                    http=http))
    assert sorted(line.split("\t")[0] for line in out.splitlines()) == sorted(
        [f"0:{o}" for o in range(5)] + [f"1:{o}" for o in range(5)]), out
    out = ok(strata("consume", topic, "-p", "1", "--offset", "2", "--max-messages", "3", "--print-offset",
                    "--print-key", http=http))
    assert out.splitlines() == ["1:2\tk5\tv5", "1:3\tk7\tv7", "1:4\tk9\tv9"], out
    # From the latest offset (the default): nothing new, so nothing printed.
    assert ok(strata("consume", topic, "--timeout-ms", "300", http=http)) == ""
    # No group was made for any of it (the group-less consume used to join one).
    groups_after = {g.group_id for g in admin(b).list_consumer_groups().result(timeout=30).valid}
    assert groups_after == groups_before, groups_after - groups_before

    # Wrong input.
    fails(strata("consume", topic, "--offset", "2", http=http), USAGE, "--partition")
    fails(strata("consume", topic, "-g", "g", "-p", "0", http=http), USAGE, "cannot be used with")
    fails(strata("consume", topic, "-p", "7", "--max-messages", "1", http=http), REFUSED,
          "UNKNOWN_TOPIC_OR_PARTITION")
    url = f"{http}/v1/topics/{topic}/read"
    for body, says in [({"from": "middle"}, "from must be"),
                       ({"partitions": [9]}, "not one of them"),
                       ({"offsets": {"0": -3}}, "not an offset"),
                       ({"max_messages": 0}, "max_messages"),
                       ({"group_id": "g"}, "group_id")]:
        r = requests.post(url, json=body, timeout=30)
        assert r.status_code in (400, 404) and says in r.json()["detail"], (body, r.text)

    # The API directly: where each partition continues, and a long poll that answers a
    # record produced while it waits.
    r = requests.post(url, json={"offsets": {"0": 3}, "max_messages": 100}, timeout=30)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert [m["offset"] for m in answer["messages"]] == [3, 4]
    assert answer["next_offsets"] == {"0": 5} and answer["has_more"] is False, answer
    # Offsets for some partitions, `from` for others.
    r = requests.post(url, json={"offsets": {"0": 4}, "partitions": [1], "from": "latest"}, timeout=30)
    answer = r.json()
    assert [(m["partition"], m["offset"]) for m in answer["messages"]] == [(0, 4)], answer
    assert answer["next_offsets"] == {"0": 5, "1": 5}, answer
    import threading
    waited: dict = {}
    reader = threading.Thread(target=lambda: waited.update(
        requests.post(url, json={"offsets": {"0": 5}, "timeout_ms": 20000}, timeout=60).json()))
    reader.start()
    produce_confluent(b, topic, [Out(0, b"late", b"late", [], BASE_TS + 99)])
    reader.join(60)
    assert [m["value"] for m in waited["messages"]] == ["late"], waited
    assert waited["next_offsets"] == {"0": 6}, waited
