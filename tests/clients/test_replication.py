"""Replication (issue 5) across three strata processes on one embedded metastore file,
with librdkafka (confluent-kafka) as the client: the acceptance tests.

Every test starts three agents (`--node-id 1..3`, one shared `--metastore-path`) with a
3 s membership lease (`--lease-ms 3000`) and a 2 s `--replica-lag-time-max-ms`, creates
topics with replication factor 3 and `min.insync.replicas=2`, and produces with
acks=all. What is checked, in Kafka's terms:

- SIGKILLed leaders (5 times, on rotating partitions and agents; each killed agent is
  restarted on its data dir once a new leader took a write) lose no acknowledged record
  and duplicate none: an idempotent producer writes numbered records throughout;
  afterwards every partition is read from offset 0 to its high watermark and every
  acknowledged record must be there exactly once, at the offset it was acknowledged
  at, in send order. Prints `acknowledged=N lost=0 duplicated=0 kill->produce p50=..s
  max=..s` (kill->produce: SIGKILL to the next acknowledged write to that partition).
- A leader paused (SIGSTOP) for longer than its lease is replaced by a new leader that
  takes the writes; on SIGCONT it acknowledges nothing as the old leader (a Produce
  waiting for it when it resumes is refused, or if acknowledged is in the final log),
  rejoins the ISR as a follower, and preferred-leader election gives it its partition
  back.
- A paused follower leaves the ISR after replica.lag.time.max.ms while writes go on,
  and rejoins it after SIGCONT.
- With two of three agents down the ISR shrinks to the leader alone and acks=all writes
  are refused with NOT_ENOUGH_REPLICAS, nothing becomes visible; with the agents back,
  writes succeed again.
- A consumer group keeps consuming, and misses nothing, while its coordinator and then a
  partition leader are SIGKILLed and restarted; its final commit succeeds.

Preferred-leader election runs on a timer: if the agent offers
`--leader-rebalance-interval-ms` the fixture sets it to 1 s, otherwise the test allows
for a 30 s default.

Metadata checks ask one named agent over the raw wire (`replication_testlib.metadata`),
so a stopped agent is never asked and "agent 2 shows ..." means exactly that. SIGSTOP is
retried when it lands inside a metastore transaction (see replication_testlib): with the
embedded SQLite backend a stopped agent holding the file's write lock would stall every
agent, which is an artifact of the test setup, not the behaviour under test.
Stopped agents are always resumed (SIGCONT) in `finally` and by the fixture.
"""

from __future__ import annotations

import functools
import os
import shutil
import statistics
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

pytest.register_assert_rewrite("replication_testlib")

from conftest import strata_bin  # noqa: E402
from replication_testlib import (  # noqa: E402
    Cluster,
    ProduceProbe,
    SeqProducer,
    check_log,
    create_replicated_topic,
    produce_values,
    read_topic,
    wait_for,
)
from strata_testlib import (  # noqa: E402
    RDKAFKA_LOG,
    admin,
    consume_confluent,
    consumer_conf,
    unique_topic,
    watermarks,
)

NODES = (1, 2, 3)
LEASE_MS = 3000
LAG_MS = 2000
LEASE_S = LEASE_MS / 1000
LAG_S = LAG_MS / 1000

NOT_ENOUGH_REPLICAS = KafkaError.NOT_ENOUGH_REPLICAS
MSG_TIMED_OUT = KafkaError._MSG_TIMED_OUT

# Preferred-leader election runs on a timer (Kafka's leader.imbalance.check.interval).
# When the agent has the flag for it, the tests set it short; otherwise they allow for
# a default of up to 30 s.
REBALANCE_FLAG = "--leader-rebalance-interval-ms"
REBALANCE_MS = 1000


@functools.lru_cache(maxsize=None)
def agent_has_flag(flag: str) -> bool:
    try:
        out = subprocess.run([str(strata_bin()), "agent", "--help"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return flag in out


def preferred_election_timeout() -> float:
    return REBALANCE_MS / 1000 + 20 if agent_has_flag(REBALANCE_FLAG) else 45


def started_cluster(broker_factory, request, prefix: str, extra_args: list[str],
                    nodes=NODES, rebalance_ms: int = REBALANCE_MS, shared_archive: bool = False):
    """Agents `nodes` (three by default) sharing one metastore (and with `shared_archive`
    one archive directory, as a cluster's agents share one bucket), started; yields the
    Cluster, then kills them all (resuming any stopped one first) and removes the shared
    directory unless the test failed or STRATA_KEEP_DATA=1. `rebalance_ms`: the
    preferred-leader election interval (0: none). For fixtures:
    `yield from started_cluster(...)`."""
    shared = Path(tempfile.mkdtemp(prefix=prefix))
    metastore = shared / "metastore.sqlite"
    extra = [REBALANCE_FLAG, str(rebalance_ms)] if agent_has_flag(REBALANCE_FLAG) else []
    if shared_archive:
        extra += ["--archive-url", f"file://{shared / 'archive'}"]
    agents = {
        node: broker_factory(extra_args=[
            "--node-id", str(node),
            "--metastore-path", str(metastore),
            "--group-initial-rebalance-delay-ms", "200",
            *extra_args,
            *extra,
        ])
        for node in nodes
    }
    c = Cluster(agents, metastore)
    try:
        for a in agents.values():
            a.start()
        yield c
    finally:
        c.resume_all()  # never leave a stopped process behind
        for a in agents.values():
            a.kill()
        failed = any(getattr(getattr(request.node, "rep_" + w, None), "failed", False)
                     for w in ("setup", "call"))
        if failed or os.environ.get("STRATA_KEEP_DATA") == "1":
            print(f"\n[strata] kept the shared metastore of {request.node.nodeid}: {shared}")
        else:
            shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture
def cluster(broker_factory, request):
    """Three started agents sharing one metastore, with short leases."""
    yield from started_cluster(broker_factory, request, "strata-replication-", [
        "--lease-ms", str(LEASE_MS),
        "--replica-lag-time-max-ms", str(LAG_MS),
    ])


def report(capsys, record_property, name: str, line: str) -> None:
    """Shows the figures whether or not pytest captures output (and in junit xml)."""
    record_property(name, line)
    with capsys.disabled():
        print(f"\n[{name}] {line}", flush=True)


def pview(cluster: Cluster, node: int, topic: str, p: int):
    v = cluster.view(node, topic)
    return None if v is None else v.partition(topic, p)


def client_view_isrs(servers: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """What librdkafka's AdminClient.list_topics shows: {p: (leader, replicas, isrs)}."""
    a = admin(servers)
    md = a.list_topics(topic=topic, timeout=10)
    t = md.topics[topic]
    return {p: (pm.leader, sorted(pm.replicas), sorted(pm.isrs)) for p, pm in t.partitions.items()}


# =========================================================================== 1
KILL_ROUNDS = 5


def test_leader_kills_lose_nothing(cluster, capsys, record_property):
    """5 times: SIGKILL the leader of a partition (rotating partitions and agents) while
    an idempotent acks=all producer writes, time until the next write to that partition
    is acknowledged, restart the killed agent on its data dir and wait until it is back
    in the ISR of every partition. Then every acknowledged record must be in the log
    once, at its offset, in send order.

    The killed agent is restarted only after that acknowledgement: it can then only come
    from a new leader elected among the other replicas, so every round is a failover
    (kill->produce is the failover time), and the restart is a rejoin as follower with a
    possibly divergent suffix to truncate, then preferred-leader election hands the
    partition back: two leader changes per round under load. (An agent restarted at once
    takes its node id back before its lease runs out; test 5 restarts that way.)"""
    topic = unique_topic("repl-kills")
    partitions = 6
    create_replicated_topic(cluster, topic, partitions)
    prod = SeqProducer(cluster.servers(), topic, partitions, tag="kill", rate=1000).start()
    kills: list[tuple[int, int, int, float, int]] = []  # (round, partition, agent, kill->produce s, new leader)
    try:
        prod.wait_acked(2000, 30, "2000 acknowledged records before the first kill")
        for rnd in range(1, KILL_ROUNDS + 1):
            leaders = cluster.wait_healthy(topic, partitions, 30, f"the cluster before kill {rnd}")
            target = NODES[(rnd - 1) % len(NODES)]
            used = {k[1] for k in kills}
            led = [p for p in sorted(leaders) if leaders[p].leader == target]
            unused = [p for p in sorted(leaders) if p not in used]
            part = ([p for p in led if p not in used] or led or unused or sorted(leaders))[0]
            victim = leaders[part].leader
            agent = cluster.agents[victim]

            t_kill = time.monotonic()
            agent.kill()
            mark = prod.sent  # records from here on were produced after the leader died
            try:
                t_ack, _ = prod.wait_ack_after(
                    part, mark, 30,
                    f"an acknowledged write to p{part} after SIGKILL of its leader, agent {victim} "
                    f"(kill {rnd})")
            except AssertionError as e:
                raise AssertionError(f"{e}; metadata now: {cluster.describe(topic, part)}") from None
            now_leader = next((pm.leader for pm in (pview(cluster, n, topic, part) for n in cluster.up())
                               if pm is not None), -1)
            kills.append((rnd, part, victim, t_ack - t_kill, now_leader))
            agent.start()
            cluster.wait_healthy(topic, partitions, 30,
                                 f"agent {victim}, restarted, back in the ISR after kill {rnd}")
        prod.check()
    finally:
        prod.halt()

    remaining = prod.finish(60)
    with prod.lock:
        failed = list(prod.failed)
        client_errors = sorted({e[1] for e in prod.client_errors})
    client_view = client_view_isrs(cluster.servers(), topic)
    lows, ends, got = read_topic(cluster.servers(), topic, partitions)
    check = check_log(prod, lows, ends, got)
    delays = [k[3] for k in kills]
    line = (f"acknowledged={check.acknowledged} lost={len(check.lost)} "
            f"duplicated={len(check.duplicated)} kill->produce p50={statistics.median(delays):.2f}s "
            f"max={max(delays):.2f}s | misplaced={len(check.misplaced)} "
            f"out_of_order={len(check.out_of_order)} sent={check.sent} failed={len(failed)} "
            f"kills(partition, killed, new leader, s)={[(p, a, nl, round(d, 2)) for _, p, a, d, nl in kills]} "
            f"log_end={ends}")
    report(capsys, record_property, "leader-kills", line)
    if client_errors:
        print(f"producer client errors: {client_errors[:8]}")

    check.assert_clean()
    assert remaining == 0, f"{remaining} records still without a delivery report 60s after the last kill [{line}]"
    assert not failed, (f"{len(failed)} deliveries failed although every outage was one agent "
                        f"of three, e.g. {failed[:3]} [{line}]")
    assert check.acknowledged == check.sent, (
        f"{check.sent - check.acknowledged} of {check.sent} records never acknowledged [{line}]")
    assert all(r == list(NODES) and i == list(NODES) and ld in NODES
               for ld, r, i in client_view.values()), (
        f"AdminClient.list_topics should show every partition led, with replicas and isrs "
        f"{list(NODES)}; it shows (leader, replicas, isrs) {client_view}")


# =========================================================================== 2
PAUSE_MIN_S = 2 * LEASE_S  # the stopped leader's lease runs out well before it resumes


def test_paused_leader_is_replaced_and_rejoins_as_follower(cluster, capsys, record_property):
    """SIGSTOP the leader of a partition for longer than its lease while a producer
    writes: the other agents elect a new leader that takes the writes; on SIGCONT the old
    leader acknowledges nothing as leader, rejoins the ISR, and gets its partition back by
    preferred-leader election. Nothing acknowledged is lost or duplicated."""
    topic = unique_topic("repl-paused-leader")
    partitions = 3
    leaders = create_replicated_topic(cluster, topic, partitions)
    part = next((p for p in sorted(leaders) if leaders[p].leader == leaders[p].replicas[0]), 0)
    before = leaders[part]
    old = before.leader
    others = [n for n in NODES if n != old]
    probe_value = f"stale-leader-probe-{uuid.uuid4().hex[:8]}".encode()
    probe_outcome, probe_acked_at = "not sent", None
    prod = SeqProducer(cluster.servers(), topic, partitions, tag="pause", rate=600).start()
    probe = None
    try:
        prod.wait_acked(1000, 30, "1000 acknowledged records before the pause")
        probe = ProduceProbe(cluster.agents[old].bootstrap)  # connected while it runs
        with cluster.paused(old) as t_stop:
            mark = prod.sent

            def replaced():
                seen = {n: pview(cluster, n, topic, part) for n in others}
                ok = all(pm is not None and pm.leader in others and old not in pm.isr
                         and (before.epoch < 0 or pm.epoch > before.epoch)
                         for pm in seen.values())
                return ok, (seen if ok else {n: str(pm) for n, pm in seen.items()})

            seen = wait_for(replaced, 20,
                            f"agents {others} to show a new leader of p{part} (epoch above "
                            f"{before.epoch}) in place of the stopped agent {old}, without {old} "
                            f"in the ISR", interval=0.1)
            t_elected = time.monotonic()
            new_leaders = {pm.leader for pm in seen.values()}
            assert len(new_leaders) == 1, f"agents {others} disagree on the new leader of p{part}: {seen}"
            new_leader = new_leaders.pop()
            t_ack, _ = prod.wait_ack_after(
                part, mark, 20, f"an acknowledged write to p{part} while its old leader, agent "
                                f"{old}, is stopped (new leader: {new_leader})")
            left = PAUSE_MIN_S - (time.monotonic() - t_stop)
            if left > 0:
                time.sleep(left)  # the pause itself: longer than two leases
            # The first request the old leader reads when it resumes: an acks=all write
            # to the partition it led.
            probe.send(topic, part, probe_value)
            paused_for = time.monotonic() - t_stop
        t_cont = time.monotonic()
        try:
            err, off = probe.receive(timeout=15)
            probe_outcome = f"error {err}" if err else f"acknowledged at offset {off}"
            if err == 0:
                probe_acked_at = off
        except (OSError, AssertionError, struct.error) as e:
            probe_outcome = f"no answer ({e!r})"

        mark_after = prod.sent

        def rejoined():
            seen = {n: pview(cluster, n, topic, part) for n in NODES}
            ok = all(pm is not None and old in pm.isr and pm.leader in NODES for pm in seen.values())
            return ok, {n: str(pm) for n, pm in seen.items()}

        wait_for(rejoined, 15, f"the resumed agent {old} back in the ISR of p{part} on every agent",
                 interval=0.1)
        t_rejoined = time.monotonic()
        prod.wait_ack_after(part, mark_after, 20,
                            f"acknowledged writes to p{part} going on after agent {old} resumed")
        prod.wait_acked(prod.n_acked() + 500, 20, "500 more acknowledged records after the resume")
        prod.check()
    finally:
        prod.halt()
        if probe is not None:
            probe.close()

    remaining = prod.finish(60)
    with prod.lock:
        failed = list(prod.failed)
    lows, ends, got = read_topic(cluster.servers(), topic, partitions)
    check = check_log(prod, lows, ends, got, also_allowed={probe_value})
    probe_found = [r.offset for r in got[part] if r.value == probe_value]
    line = (f"p{part}: leader {old} stopped {paused_for:.1f}s; new leader {new_leader} seen "
            f"{t_elected - t_stop:.1f}s after SIGSTOP; first ack during the pause after "
            f"{t_ack - t_stop:.1f}s; back in the ISR {t_rejoined - t_cont:.1f}s after SIGCONT; "
            f"probe at the stale leader: {probe_outcome}, in the log at {probe_found} | "
            f"{check.summary()} failed={len(failed)}")
    report(capsys, record_property, "paused-leader", line)

    check.assert_clean()
    if probe_acked_at is not None:
        assert probe_found == [probe_acked_at], (
            f"the resumed old leader acknowledged a write at p{part}@{probe_acked_at}, which the "
            f"log holds at {probe_found} instead [{line}]")
    elif probe_outcome.startswith("error"):
        assert not probe_found, (
            f"the resumed old leader refused a write ({probe_outcome}) yet it is in the final "
            f"log at p{part}@{probe_found}: its divergent suffix was not truncated [{line}]")
    assert remaining == 0, f"{remaining} records without a delivery report [{line}]"
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:3]} [{line}]"

    # Preferred-leader election: the first replica leads again once it is in sync.
    if before.replicas[0] == old:
        def preferred_back():
            seen = {n: pview(cluster, n, topic, part) for n in NODES}
            return (all(pm is not None and pm.leader == old for pm in seen.values()),
                    {n: str(pm) for n, pm in seen.items()})
        wait_for(preferred_back, preferred_election_timeout(),
                 f"preferred-leader election to give p{part} back to its first replica, agent "
                 f"{old}, in sync again (rebalance interval: "
                 f"{REBALANCE_MS if agent_has_flag(REBALANCE_FLAG) else 'the default'} ms)",
                 interval=0.1)
        print(f"p{part} led by its preferred replica {old} again "
              f"{time.monotonic() - t_rejoined:.1f}s after it rejoined the ISR")


# =========================================================================== 3
def test_paused_follower_leaves_and_rejoins_the_isr(cluster, capsys, record_property):
    """SIGSTOP a follower: within replica.lag.time.max.ms (plus slack) the leader drops it
    from the ISR and acks=all writes go on with the other two; after SIGCONT it catches up
    and the ISR is all three again. The leader never changes."""
    topic = unique_topic("repl-paused-follower")
    leaders = create_replicated_topic(cluster, topic, 1)
    leader = leaders[0].leader
    follower = max(n for n in leaders[0].replicas if n != leader)  # never node 1, the controller
    third = next(n for n in NODES if n not in (leader, follower))
    prod = SeqProducer(cluster.servers(), topic, 1, tag="follower", rate=500).start()
    try:
        prod.wait_acked(500, 30, "500 acknowledged records before the pause")
        with cluster.paused(follower) as t_stop:
            def shrunk():
                seen = {n: pview(cluster, n, topic, 0) for n in (leader, third)}
                ok = all(pm is not None and pm.leader == leader
                         and sorted(pm.isr) == sorted((leader, third)) for pm in seen.values())
                return ok, {n: str(pm) for n, pm in seen.items()}

            wait_for(shrunk, LAG_S + 10,
                     f"the ISR of p0 to shrink to {sorted((leader, third))} (leader {leader}) "
                     f"without the stopped follower {follower}", interval=0.1)
            t_shrunk = time.monotonic()
            acked_at_shrink = prod.n_acked()
            mark = prod.sent
            prod.wait_ack_after(0, mark, 10, f"a write acknowledged by the ISR {sorted((leader, third))} "
                                             f"while follower {follower} is stopped")
            prod.wait_acked(acked_at_shrink + 500, 10,
                            f"500 writes acknowledged while follower {follower} is stopped")
            acked_during = prod.n_acked() - acked_at_shrink
            paused_for = time.monotonic() - t_stop
        t_cont = time.monotonic()

        def expanded():
            seen = {n: pview(cluster, n, topic, 0) for n in NODES}
            ok = all(pm is not None and pm.leader == leader and sorted(pm.isr) == list(NODES)
                     for pm in seen.values())
            return ok, {n: str(pm) for n, pm in seen.items()}

        wait_for(expanded, 20, f"follower {follower} to catch up and the ISR of p0 to be "
                               f"{list(NODES)} again, leader still {leader}", interval=0.1)
        t_expanded = time.monotonic()
        mark = prod.sent
        prod.wait_ack_after(0, mark, 10, "writes acknowledged with the full ISR again")
        prod.check()
    finally:
        prod.halt()

    remaining = prod.finish(30)
    with prod.lock:
        failed = list(prod.failed)
    client_view = client_view_isrs(cluster.servers(), topic)
    lows, ends, got = read_topic(cluster.servers(), topic, 1)
    check = check_log(prod, lows, ends, got)
    line = (f"follower {follower} stopped {paused_for:.1f}s; left the ISR {t_shrunk - t_stop:.1f}s "
            f"after SIGSTOP; {acked_during} acks while out; back in the ISR "
            f"{t_expanded - t_cont:.1f}s after SIGCONT | {check.summary()} failed={len(failed)}")
    report(capsys, record_property, "paused-follower", line)

    check.assert_clean()
    assert remaining == 0, f"{remaining} records without a delivery report [{line}]"
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:3]} [{line}]"
    assert client_view == {0: (leader, list(NODES), list(NODES))}, (
        f"AdminClient.list_topics should show p0 led by {leader} with replicas and isrs "
        f"{list(NODES)}; it shows (leader, replicas, isrs) {client_view}")


# =========================================================================== 4
def poll_new_records(bootstrap: str, topic: str, partition: int, offset: int, seconds: float) -> list:
    """Records a consumer assigned at `offset` receives within `seconds` (bounded wait
    for an absence)."""
    c = Consumer(consumer_conf(bootstrap))
    seen = []
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                seen.append((m.offset(), m.value()))
    finally:
        c.close()
    return seen


def test_two_of_three_stopped_refuses_acks_all(cluster, capsys, record_property):
    """RF 3, min.insync.replicas 2: stop both followers of the only partition (one with
    SIGSTOP, one with SIGKILL); once the leader shows itself alone in the ISR, acks=all
    writes are refused with NOT_ENOUGH_REPLICAS and nothing new becomes readable. With the
    one resumed and the other restarted, writes succeed again and exactly those are read
    back."""
    topic = unique_topic("repl-two-down")
    leaders = create_replicated_topic(cluster, topic, 1)
    leader = leaders[0].leader
    down = [n for n in NODES if n != leader]
    paused, killed = down
    only = cluster.agents[leader].bootstrap

    before = [f"before-{i:03d}".encode() for i in range(100)]
    res = produce_values(cluster.servers(), topic, 0, before, 30, **{"enable.idempotence": True})
    assert [(err, off) for _, err, off in res] == [(None, i) for i in range(100)], (
        f"with all three agents up, 100 writes should be acknowledged at offsets 0..99; "
        f"got (error, offset) {[(e, o) for _, e, o in res][:5]}...")
    base_end = watermarks(only, topic, 0)[1]
    assert base_end == 100, f"high watermark {base_end} after 100 acknowledged writes"

    t_down = cluster.stop(paused)
    try:
        cluster.agents[killed].kill()
        refused, r_direct, r_idem, marks_during, seen_during, t_alone = _refused_while_alone(
            cluster, topic, leader, down, base_end)
    finally:
        cluster.resume(paused)

    def outcome(results):
        return dict(Counter("acknowledged" if err is None else err.name() for _, err, _ in results))

    direct, idem = outcome(r_direct), outcome(r_idem)
    assert direct == {"NOT_ENOUGH_REPLICAS": len(refused)}, (
        f"with the ISR at [{leader}] < min.insync.replicas=2, every acks=all write (retries=0) "
        f"should fail with NOT_ENOUGH_REPLICAS; outcomes: {direct}")
    assert not any(err is None for _, err, _ in r_idem) and all(
        err.code() in (NOT_ENOUGH_REPLICAS, MSG_TIMED_OUT) for _, err, _ in r_idem), (
        f"the idempotent acks=all producer should have every write fail with NOT_ENOUGH_REPLICAS "
        f"or a message timeout; outcomes: {idem}")
    assert marks_during == (0, base_end), (
        f"watermarks while writes are refused should stay (0, {base_end}); they are {marks_during}")
    assert not seen_during, f"a consumer at offset {base_end} received refused records: {seen_during[:5]}"

    # Both come back (the stopped one was resumed above): writes succeed again.
    cluster.agents[killed].start()
    t_back = time.monotonic()
    after = [f"after-{i:03d}".encode() for i in range(100)]
    r_after = produce_values(cluster.servers(), topic, 0, after, 45, **{
        "enable.idempotence": True, "message.timeout.ms": 30000, "socket.timeout.ms": 5000,
        "request.timeout.ms": 4000})
    t_writes = time.monotonic()
    bad = [(v, err) for v, err, _ in r_after if err is not None]
    assert not bad, (f"after resuming agent {paused} and restarting agent {killed}, acks=all "
                     f"writes should succeed within 30 s; {len(bad)} of {len(after)} failed, "
                     f"e.g. {bad[:3]}")
    end = watermarks(cluster.servers(), topic, 0)[1]
    got = consume_confluent(cluster.servers(), topic, {0: 0}, {0: end})[0]
    assert [r.offset for r in got] == list(range(end)), (
        f"offsets read back are not 0..{end - 1}: {[r.offset for r in got][:10]}...")
    values = [r.value for r in got]
    possibly_persisted = {v for v, err, _ in r_idem if err.code() == MSG_TIMED_OUT}
    tail = values[len(before):]
    leaked = [v for v in tail if v in set(refused)]
    line = (f"ISR [{leader}] shown {t_alone - t_down:.1f}s after stopping {paused} and killing "
            f"{killed}; refused: retries=0 {direct}, idempotent {idem}; writes acknowledged "
            f"again {t_writes - t_back:.1f}s after the resume and restart; log end {end}")
    report(capsys, record_property, "two-down", line)

    assert values[:len(before)] == before, f"the 100 records from before the outage changed [{line}]"
    assert not leaked, (f"records refused with NOT_ENOUGH_REPLICAS became readable: "
                        f"{leaked[:5]} [{line}]")
    assert [v for v in tail if v not in possibly_persisted] == after, (
        f"after the outage the log should hold exactly the 100 new records after offset "
        f"{base_end}; it holds {len(tail)} records there, e.g. {tail[:3]}...{tail[-3:]} [{line}]")
    assert [off for _, _, off in r_after] == [values.index(v) for v in after], (
        f"the new records were not acknowledged at the offsets they are read at [{line}]")
    cluster.wait_healthy(topic, 1, 20, f"agents {down} back in the ISR after the outage")


def _refused_while_alone(cluster: Cluster, topic: str, leader: int, down: list[int], base_end: int):
    """With `down` stopped: waits until the leader shows itself alone, then produces with
    acks=all (retries=0, and idempotent) and looks for anything new."""
    only = cluster.agents[leader].bootstrap

    def alone():
        v = cluster.view(leader, topic)
        pm = None if v is None else v.partition(topic, 0)
        ok = (pm is not None and pm.leader == leader and list(pm.isr) == [leader]
              and sorted(v.brokers) == [leader])
        return ok, f"brokers={None if v is None else sorted(v.brokers)} p0 {pm}"

    wait_for(alone, LEASE_S + LAG_S + 10,
             f"agent {leader} to show itself as the only live agent and the ISR of p0 as [{leader}] "
             f"after agents {down} were stopped", interval=0.1)
    t_alone = time.monotonic()

    # acks=all without retries: the broker's answer itself.
    refused = [f"refused-{i:03d}".encode() for i in range(20)]
    r_direct = produce_values(only, topic, 0, refused, 30, **{
        "enable.idempotence": False, "retries": 0, "message.timeout.ms": 10000,
        "socket.timeout.ms": 5000})
    # The idempotent producer retries NOT_ENOUGH_REPLICAS until its messages time out.
    timed = [f"idem-refused-{i:03d}".encode() for i in range(20)]
    r_idem = produce_values(only, topic, 0, timed, 30, **{
        "enable.idempotence": True, "message.timeout.ms": 5000, "socket.timeout.ms": 5000,
        "request.timeout.ms": 4000})
    marks_during = watermarks(only, topic, 0)
    seen_during = poll_new_records(only, topic, 0, base_end, 2.0)
    return refused, r_direct, r_idem, marks_during, seen_during, t_alone


# =========================================================================== 5
class GroupReader:
    """One group member consuming in its own thread; counts every value it receives.
    Commits on request from the same thread (retrying until it succeeds)."""

    def __init__(self, servers: str, topic: str, group: str):
        self.topic = topic
        self.consumer = Consumer({
            "bootstrap.servers": servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "socket.timeout.ms": 10000,
            "enable.partition.eof": False,
            "logger": RDKAFKA_LOG,
        })
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        self.total = 0
        self.assignments: list[list[int]] = []
        self.errors: list[str] = []
        self.commit_offsets: list[TopicPartition] | None = None
        self.commit_errors: list[str] = []
        self.committed = threading.Event()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="group-reader", daemon=True)

    def _on_assign(self, consumer, parts):
        with self.lock:
            self.assignments.append(sorted(tp.partition for tp in parts))

    def _run(self):
        try:
            self.consumer.subscribe([self.topic], on_assign=self._on_assign)
            while not self._stop.is_set():
                if self.commit_offsets is not None and not self.committed.is_set():
                    try:
                        res = self.consumer.commit(offsets=self.commit_offsets, asynchronous=False)
                        bad = [f"p{tp.partition}: {tp.error}" for tp in res or [] if tp.error is not None]
                        if bad:
                            self.commit_errors.append("; ".join(bad))
                        else:
                            self.committed.set()
                    except KafkaException as e:
                        self.commit_errors.append(str(e))
                m = self.consumer.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    with self.lock:
                        self.errors.append(str(m.error()))
                    if m.error().fatal():
                        raise KafkaException(m.error())
                    continue
                with self.lock:
                    self.counts[m.value()] += 1
                    self.total += 1
        except BaseException as e:
            self.error = e

    def start(self) -> "GroupReader":
        self.thread.start()
        return self

    def distinct(self) -> int:
        with self.lock:
            return len(self.counts)

    def wait_distinct(self, n: int, timeout: float, what: str) -> None:
        def check():
            with self.lock:
                state = (f"distinct={len(self.counts)} total={self.total} "
                         f"assignments={self.assignments[-3:]} errors={self.errors[-3:]}")
            return len(self.counts) >= n or self.error is not None, state
        wait_for(check, timeout, what, interval=0.05)
        assert self.error is None, f"the consumer thread failed: {self.error!r}"

    def close(self) -> None:
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=15)
        if not self.thread.is_alive():
            self.consumer.close()


def test_consumer_group_survives_coordinator_and_leader_kills(cluster, capsys, record_property):
    """A group member consumes a RF 3 topic with 3 partitions while an idempotent producer
    writes N records; the group's coordinator and then the leader of a partition (another
    agent if possible) are SIGKILLed and restarted. The same consumer keeps going and ends
    with all N values (re-deliveries allowed, nothing missing); a final commit of the end
    offsets succeeds and AdminClient reads it back."""
    topic = unique_topic("repl-group")
    partitions, n_records = 3, 6000
    create_replicated_topic(cluster, topic, partitions)
    servers = cluster.servers()
    group = f"repl-group-{uuid.uuid4().hex[:8]}"
    reader = GroupReader(servers, topic, group).start()
    prod = None
    a = admin(servers)  # kept alive while its futures run
    try:
        prod = SeqProducer(servers, topic, partitions, tag="grp", rate=300, limit=n_records).start()
        reader.wait_distinct(600, 30, "the group's consumer receiving its first 600 records")

        def coordinator_of():
            try:
                d = a.describe_consumer_groups([group])[group].result(timeout=10)
            except KafkaException as e:
                return False, str(e)
            cid = d.coordinator.id if d.coordinator is not None else None
            return cid in NODES, cid

        coordinator = wait_for(coordinator_of, 15, f"DescribeGroups to name the coordinator of {group}")
        mark = reader.distinct()
        t_kill = time.monotonic()
        cluster.agents[coordinator].kill()
        cluster.agents[coordinator].start()
        reader.wait_distinct(min(n_records, mark + 600), 30,
                             f"the consumer to go on after its coordinator, agent {coordinator}, "
                             f"was SIGKILLed and restarted")
        coordinator_gap = time.monotonic() - t_kill

        leaders = cluster.wait_healthy(topic, partitions, 30, "the cluster after the coordinator kill")
        part = next((p for p in sorted(leaders) if leaders[p].leader != coordinator), 0)
        victim = leaders[part].leader
        mark = reader.distinct()
        t_kill = time.monotonic()
        cluster.agents[victim].kill()
        cluster.agents[victim].start()
        reader.wait_distinct(min(n_records, mark + 600), 30,
                             f"the consumer to go on after the leader of p{part}, agent {victim}, "
                             f"was SIGKILLed and restarted")
        leader_gap = time.monotonic() - t_kill

        wait_for(lambda: (prod.sent >= n_records or prod.error is not None, f"sent={prod.sent}"),
                 n_records / prod.rate + 30, f"the producer to produce all {n_records} records")
        prod.check()
        remaining = prod.finish(60)
        assert remaining == 0, f"{remaining} records without a delivery report 60s after the last kill"
        with prod.lock:
            failed = list(prod.failed)
        assert not failed and prod.n_acked() == n_records, (
            f"{len(failed)} of {n_records} deliveries failed (acknowledged: {prod.n_acked()}), "
            f"e.g. {failed[:3]}")

        reader.wait_distinct(n_records, 45, f"the consumer to have received all {n_records} records")
        ends = {p: watermarks(servers, topic, p)[1] for p in range(partitions)}
        reader.commit_offsets = [TopicPartition(topic, p, ends[p]) for p in range(partitions)]
        assert reader.committed.wait(30), (
            f"committing the end offsets {ends} did not succeed within 30s; errors: "
            f"{reader.commit_errors[-5:]}")

        def committed():
            try:
                res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
                    group, [TopicPartition(topic, p) for p in range(partitions)])])[group].result(timeout=10)
            except KafkaException as e:
                return False, str(e)
            got = {tp.partition: tp.offset for tp in res.topic_partitions}
            return got == ends, got

        wait_for(committed, 15, f"AdminClient to read back the committed offsets {ends}")
    finally:
        reader.close()
        if prod is not None:
            prod.halt()

    with reader.lock:
        counts = dict(reader.counts)
        total = reader.total
        assignments = list(reader.assignments)
    expected = {prod.value(s) for s in range(n_records)}
    missing = sorted(expected - set(counts))
    strangers = sorted(set(counts) - expected)
    lows, ends, got = read_topic(servers, topic, partitions)
    check = check_log(prod, lows, ends, got)
    line = (f"consumed distinct={len(counts)}/{n_records} redelivered={total - len(counts)} "
            f"missing={len(missing)}; coordinator agent {coordinator} killed: +600 records "
            f"{coordinator_gap:.1f}s later; leader of p{part} agent {victim} killed: +600 records "
            f"{leader_gap:.1f}s later; assignments={len(assignments)} "
            f"commit retries={len(reader.commit_errors)} | log: {check.summary()}")
    report(capsys, record_property, "group-kills", line)

    assert not missing, f"{len(missing)} produced records never consumed, e.g. {missing[:5]} [{line}]"
    assert not strangers, f"consumed records nobody produced: {strangers[:5]} [{line}]"
    check.assert_clean()


# =========================================================================== 6
def test_clean_shutdown_hands_leadership_over(cluster, capsys, record_property):
    """SIGTERM (a rolling restart) of the leader of a partition under an idempotent
    acks=all producer: the agent hands its leaderships to in-sync replicas before it
    stops (Kafka's controlled shutdown), so the next write to that partition is
    acknowledged well within the membership lease, and nothing is lost or duplicated."""
    topic = unique_topic("repl-shutdown")
    partitions = 3
    create_replicated_topic(cluster, topic, partitions)
    prod = SeqProducer(cluster.servers(), topic, partitions, tag="term", rate=1000).start()
    try:
        prod.wait_acked(1000, 30, "1000 acknowledged records before the shutdown")
        leaders = cluster.wait_healthy(topic, partitions, 30, "the cluster before the shutdown")
        part = 0
        victim = leaders[part].leader
        agent = cluster.agents[victim]
        t_stop = time.monotonic()
        mark = prod.sent
        agent.stop()
        stopped_after = time.monotonic() - t_stop
        t_ack, _ = prod.wait_ack_after(part, mark, 30,
                                       f"an acknowledged write to p{part} after agent {victim} stopped")
        handover = t_ack - t_stop
        agent.start()
        cluster.wait_healthy(topic, partitions, 30, f"agent {victim} back in the ISR")
        prod.check()
    finally:
        prod.halt()
    remaining = prod.finish(60)
    lows, ends, got = read_topic(cluster.servers(), topic, partitions)
    check = check_log(prod, lows, ends, got)
    line = (f"stop->produce {handover:.2f}s (agent {victim} took {stopped_after:.2f}s to stop; "
            f"lease {LEASE_S:.0f}s) | acknowledged={check.acknowledged} lost={len(check.lost)} "
            f"duplicated={len(check.duplicated)}")
    report(capsys, record_property, "clean-shutdown", line)
    check.assert_clean()
    assert remaining == 0, f"{remaining} records without a delivery report [{line}]"
    assert handover < LEASE_S, (
        f"the next write took {handover:.2f}s, as long as a lease: leadership was not handed "
        f"over before the shutdown [{line}]")
