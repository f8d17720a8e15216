"""Consumer groups with kafka-python (KafkaConsumer(group_id=...)) and kafkajs
(kafka.consumer({groupId}), kafkajs_group.js): join, consume, commit, leave; the broker
is restarted; a new member of the same group resumes at the committed offsets and gets
exactly the records after them (including ones produced after the restart)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytest.register_assert_rewrite("group_testlib")

from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata  # noqa: E402
from kafka import TopicPartition as KTP  # noqa: E402

from group_testlib import end_offsets, produce_values, topic_offsets  # noqa: E402
from strata_testlib import admin, create_topic, unique_topic  # noqa: E402

HERE = Path(__file__).resolve().parent
KAFKAJS_SCRIPT = HERE / "kafkajs_group.js"
NODE = shutil.which("node")


# --------------------------------------------------------------------------- kafka-python
def kp_consumer(bootstrap: str, topic: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=f"kp-{group}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
        fetch_max_wait_ms=100,
        request_timeout_ms=30000,
    )


def kp_consume_until(c: KafkaConsumer, done, timeout: float) -> dict[int, list[tuple[int, str]]]:
    """poll() until done(got) holds; got = {partition: [(offset, value)]} in arrival order."""
    got: dict[int, list[tuple[int, str]]] = {}
    deadline = time.monotonic() + timeout
    while not done(got):
        assert time.monotonic() < deadline, (
            f"kafka-python consumer timed out after {timeout}s; got "
            f"{({p: (len(v), v[0][0], v[-1][0]) for p, v in got.items()})}; assignment {c.assignment()}")
        for tp, recs in c.poll(timeout_ms=200).items():
            got.setdefault(tp.partition, []).extend((r.offset, r.value.decode()) for r in recs)
    return got


def test_kafka_python_group_commit_and_resume_after_restart(group_broker):
    b = group_broker
    topic, group = unique_topic("kp-grp"), unique_topic("g-kp")
    create_topic(b.bootstrap, topic, 2)
    acked = produce_values(b.bootstrap, topic, 2, "kp", 120)  # 60 per partition
    value_at = {(p, o): v for p, o, v in acked}
    target = {0: 20, 1: 45}

    c = kp_consumer(b.bootstrap, topic, group)
    try:
        got = kp_consume_until(c, lambda g: all(len(g.get(p, [])) >= n for p, n in target.items()), 60)
        for p, n in target.items():
            assert [o for o, _ in got[p][:n]] == list(range(n)), f"partition {p}: {got[p][:n]}"
            assert all(v == value_at[(p, o)] for o, v in got[p])
        assert {tp.partition for tp in c.assignment()} == {0, 1}
        c.commit({KTP(topic, p): OffsetAndMetadata(o, "", -1) for p, o in target.items()})
        assert {p: c.committed(KTP(topic, p)) for p in target} == target
    finally:
        c.close()  # LeaveGroup

    assert topic_offsets(admin(b.bootstrap), group, topic) == target
    b.stop()
    b.start()
    assert topic_offsets(admin(b.bootstrap), group, topic) == target

    # records produced after the restart, by kafka-python too
    prod = KafkaProducer(bootstrap_servers=b.bootstrap, acks="all", linger_ms=5,
                         request_timeout_ms=15000, max_block_ms=15000)
    try:
        futs = [(p, i, prod.send(topic, value=f"kp-after-{p}-{i}".encode(), partition=p))
                for i in range(15) for p in (0, 1)]
        prod.flush(timeout=30)
        for p, i, f in futs:
            md = f.get(timeout=5)
            assert (md.partition, md.offset) == (p, 60 + i), (p, i, md)
            value_at[(p, md.offset)] = f"kp-after-{p}-{i}"
    finally:
        prod.close()

    c = kp_consumer(b.bootstrap, topic, group)
    try:
        got = kp_consume_until(c, lambda g: all(g.get(p) and g[p][-1][0] >= 74 for p in target), 60)
        for p, n in target.items():
            offs = [o for o, _ in got[p]]
            assert offs == list(range(n, 75)), (
                f"partition {p}: after the restart the group read {offs[:5]}...{offs[-3:]}, "
                f"expected {n}..74 (committed {n})")
            assert all(v == value_at[(p, o)] for o, v in got[p]), got[p]
        c.commit({KTP(topic, p): OffsetAndMetadata(75, "", -1) for p in target})
    finally:
        c.close()
    assert topic_offsets(admin(b.bootstrap), group, topic) == {0: 75, 1: 75}


# --------------------------------------------------------------------------- kafkajs
def run_kafkajs_group(bootstrap: str, topic: str, group: str, count: int, out: Path) -> dict:
    assert NODE, "node not found on PATH"
    assert (HERE / "node_modules" / "kafkajs").is_dir(), f"kafkajs not installed: run `npm ci` in {HERE}"
    cmd = [NODE, str(KAFKAJS_SCRIPT), bootstrap, topic, group, str(count), str(out)]
    try:
        p = subprocess.run(cmd, cwd=HERE, capture_output=True, timeout=100)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"kafkajs_group.js timed out; stderr:\n"
                             f"{(e.stderr or b'').decode(errors='replace')[-10000:]}")
    stderr = p.stderr.decode(errors="replace")
    res = json.loads(out.read_text()) if out.exists() else {}
    assert p.returncode == 0, (f"kafkajs_group.js exited {p.returncode}: {res.get('error')}\n"
                               f"crashes: {res.get('crashes')}\nstderr:\n{stderr[-10000:]}")
    assert not res["crashes"], res["crashes"]
    assert len(res["processed"]) == count
    return res


def test_kafkajs_group_commit_and_resume_after_restart(group_broker, tmp_path):
    b = group_broker
    topic, group = unique_topic("kjs-grp"), unique_topic("g-kjs")
    create_topic(b.bootstrap, topic, 2)
    acked = produce_values(b.bootstrap, topic, 2, "kjs", 80)  # 40 per partition
    first_count = 50

    r1 = run_kafkajs_group(b.bootstrap, topic, group, first_count, tmp_path / "run1.json")
    assert r1["joins"], "no GROUP_JOIN event"
    print(f"\nkafkajs run 1 joined as {r1['joins'][-1].get('memberId')}, assignment "
          f"{r1['joins'][-1].get('memberAssignment')}, committed {r1['committed']}")
    done1 = [(r["partition"], r["offset"], r["value"]) for r in r1["processed"]]
    committed = {c["partition"]: c["offset"] for c in r1["committed"]}
    # a new group starts at the beginning (fromBeginning) and reads each partition in order
    for p, n in committed.items():
        assert sorted(o for q, o, _ in done1 if q == p) == list(range(n)), (p, done1)
    assert set(done1) <= set(acked), "kafkajs processed records that were never produced"

    a = admin(b.bootstrap)
    assert topic_offsets(a, group, topic) == committed

    b.stop()
    b.start()
    assert topic_offsets(admin(b.bootstrap), group, topic) == committed
    acked += produce_values(b.bootstrap, topic, 2, "kjs-after", 40, start=80)  # 20 more per partition

    r2 = run_kafkajs_group(b.bootstrap, topic, group, len(acked) - first_count, tmp_path / "run2.json")
    done2 = [(r["partition"], r["offset"], r["value"]) for r in r2["processed"]]
    for p in (0, 1):
        offs = [o for q, o, _ in done2 if q == p]
        start = committed.get(p, 0)
        assert offs == list(range(start, 60)), (
            f"partition {p}: kafkajs run 2 read {offs[:5]}...{offs[-3:]}, expected {start}..59 "
            f"(committed {committed.get(p)})")
    assert sorted(done1 + done2) == sorted(acked), "runs 1 and 2 together are not exactly the records"
    assert topic_offsets(admin(b.bootstrap), group, topic) == end_offsets(acked)
