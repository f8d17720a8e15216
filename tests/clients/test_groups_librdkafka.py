"""Consumer groups (classic protocol) with confluent-kafka / librdkafka.

Group members run as group_consumer.py subprocesses (so that they can be SIGKILLed);
each writes its rebalance callbacks, every record it processed and every commit to a
JSON-lines file that the test reads (group_testlib.GroupConsumerProc). What the broker
did is observed only through what the clients saw: assignments in the rebalance
callbacks, librdkafka's own rebalance counter (statistics), the records processed, and
the committed offsets / group state read back with the AdminClient."""

from __future__ import annotations

import time

import pytest

pytest.register_assert_rewrite("group_testlib")

from confluent_kafka import (  # noqa: E402
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka import Consumer  # noqa: E402

from group_testlib import (  # noqa: E402
    BackgroundProducer,
    GroupConsumerProc,
    assert_consumers_healthy,
    assert_coverage,
    describe_group,
    diagnostics,
    end_offsets,
    kafka_error_code,
    list_groups,
    produce_values,
    topic_offsets,
    wait_all_processed,
    wait_balanced,
    wait_committed,
)
from strata_testlib import NODE_ID, RDKAFKA_LOG, admin, create_topic, unique_topic, wait_until  # noqa: E402


def _cleanup(consumers, producer=None):
    for c in consumers:
        c.cleanup()
    if producer is not None and producer.thread.is_alive():
        producer._stop.set()
        producer.thread.join(timeout=10)


def _add_diagnostics(e: AssertionError, consumers) -> None:
    """Append the consumers' recent events to a failing assertion (re-raised as is,
    so the traceback still points at the failing line)."""
    msg = str(e.args[0]) if e.args else ""
    if "last non-record events" not in msg:  # not already added by a group_testlib wait
        e.args = (f"{msg}\n{diagnostics(consumers)}", *e.args[1:])


def _latest_stats(c: GroupConsumerProc) -> dict | None:
    st = c.of("stats")
    return st[-1]["cgrp"] if st else None


# --------------------------------------------------------------------------- (a)
def test_members_share_partitions_and_rebalance_on_join_and_leave(group_broker, tmp_path):
    """3 members share 6 partitions; a 4th joins (rebalance: some original member gives
    up partitions); one leaves cleanly (LeaveGroup: its partitions are taken over well
    before its session would time out). Every acknowledged record, pre-produced or
    produced throughout, is processed at least once and the final committed offsets are
    the log ends."""
    b = group_broker
    session_ms = 10000
    topic, group = unique_topic("grp-share"), unique_topic("g-share")
    create_topic(b.bootstrap, topic, 6)
    acked = produce_values(b.bootstrap, topic, 6, "pre", 600)

    def member(name):
        return GroupConsumerProc(b.bootstrap, topic, group, tmp_path, name, session_timeout_ms=session_ms)

    c1, c2, c3, c4 = (member(f"c{i}") for i in range(1, 5))
    everyone = [c1, c2, c3, c4]
    prod = BackgroundProducer(b.bootstrap, topic, 6, "live", rate=200)
    try:
        for c in (c1, c2, c3):
            c.start()
        three = wait_balanced([c1, c2, c3], 6, 45, "3 members sharing the 6 partitions")
        print(f"\n3 members: {three}")
        prod.start()
        wait_until(lambda: all(c.records() for c in (c1, c2, c3)), 30,
                   "every member processing records")

        t_join = time.monotonic()
        c4.start()
        four = wait_balanced([c1, c2, c3, c4], 6, 45, "4 members sharing the 6 partitions")
        print(f"4 members: {four} after {time.monotonic() - t_join:.1f}s")
        gave_up = [c.name for c in (c1, c2, c3) if len(four[c.name]) < len(three[c.name])]
        revoked = [c.name for c in (c1, c2, c3) if c.of("revoke", since=t_join)]
        assert gave_up and revoked, (
            f"no rebalance seen when c4 joined: before {three}, after {four}, "
            f"revoked since the join: {revoked}")
        wait_until(lambda: c4.records(), 30, "c4 processing records")

        t_leave = time.monotonic()
        acked_at_leave = prod.acked_count()
        c1.terminate()  # clean close: LeaveGroup
        assert c1.of("closed"), c1.diagnostics()
        rest = [c2, c3, c4]
        after = wait_balanced(rest, 6, 45, "3 remaining members sharing the 6 partitions")
        takeover = time.monotonic() - t_leave
        print(f"after c1 left: {after}, taken over in {takeover:.1f}s")
        assert takeover < session_ms / 1000 - 1, (
            f"c1's partitions {four['c1']} were taken over only after {takeover:.1f}s, about its "
            f"session timeout ({session_ms} ms): was its LeaveGroup ignored?")
        # and production goes on for a while under the new assignment
        prod.wait_acked(acked_at_leave + 400, 30)

        acked += prod.stop()
        cov = wait_all_processed(acked, everyone, 60)
        print(f"acknowledged={len(acked)} processed_twice={cov.processed_twice} "
              f"never_processed={len(cov.never_processed)}")
        assert_coverage(cov)
        assert_consumers_healthy(everyone)

        # every member commits synchronously after processing: the group ends committed
        # at the log ends (polled: the last owner may still be committing)
        a = admin(b.bootstrap)
        ends = end_offsets(acked)
        wait_committed(a, group, topic, ends, 30)
        for c in rest:
            c.terminate()
        assert topic_offsets(a, group, topic) == ends
    except AssertionError as e:
        _add_diagnostics(e, everyone)
        raise
    finally:
        _cleanup(everyone, prod)


# --------------------------------------------------------------------------- (b)
def test_sigkilled_member_is_replaced_after_session_timeout(group_broker, tmp_path):
    """A member is SIGKILLed mid-stream (no LeaveGroup, no last commit): after its
    session timeout its partitions move to the survivors, which resume each of them from
    the committed offset: no earlier than the victim's last successful commit, no later
    than the record after the last one it processed. Records processed twice are
    allowed (counted), records never processed are not."""
    b = group_broker
    session_ms = 6000
    topic, group = unique_topic("grp-kill"), unique_topic("g-kill")
    create_topic(b.bootstrap, topic, 6)
    acked = produce_values(b.bootstrap, topic, 6, "pre", 300)

    cs = [GroupConsumerProc(b.bootstrap, topic, group, tmp_path, f"k{i}", session_timeout_ms=session_ms)
          for i in range(1, 4)]
    victim, survivors = cs[1], [cs[0], cs[2]]
    prod = BackgroundProducer(b.bootstrap, topic, 6, "live", rate=200)
    try:
        for c in cs:
            c.start()
        before = wait_balanced(cs, 6, 45, "3 members sharing the 6 partitions")
        prod.start()
        # mid-stream: the victim has processed and committed live records
        wait_until(lambda: any(e["ok"] for e in victim.of("commit"))
                   and any(v.startswith("live-") for _, _, v in victim.records()), 30,
                   "the victim committing live records")
        victim_parts = before[victim.name]
        t_kill = time.monotonic()
        victim.kill()

        after = wait_balanced(survivors, 6, session_ms / 1000 + 30,
                              "the survivors owning all 6 partitions")
        takeover = time.monotonic() - t_kill
        print(f"\nbefore {before}; victim {victim.name} owned {sorted(victim_parts)}; "
              f"after {after}; taken over {takeover:.1f}s after SIGKILL (session {session_ms} ms)")
        # Kafka keeps a silent member until its session times out (the survivors'
        # heartbeats succeed until then), so the takeover cannot be much faster.
        assert takeover >= session_ms / 1000 * 0.5, (
            f"partitions moved {takeover:.1f}s after the SIGKILL, well before the session "
            f"timeout of {session_ms} ms")
        # production goes on while the survivors own everything
        prod.wait_acked(prod.acked_count() + 300, 30)

        acked += prod.stop()
        cov = wait_all_processed(acked, cs, 60)
        print(f"processed_twice={cov.processed_twice} never_processed={len(cov.never_processed)} "
              f"acknowledged={len(acked)}")
        assert_coverage(cov)
        assert_consumers_healthy(survivors)

        # resumed from the committed offsets
        last_done: dict[int, int] = {}
        for p, o, _ in victim.records():
            last_done[p] = max(last_done.get(p, -1), o)
        last_commit: dict[int, int] = {}
        for e in victim.of("commit"):
            if e["ok"]:
                for p, o in e["offsets"].items():
                    last_commit[int(p)] = max(last_commit.get(int(p), 0), o)
        for p in sorted(victim_parts):
            owner = next(c for c in survivors if p in after[c.name])
            ev = owner.events()
            i = next(i for i, e in enumerate(ev)
                     if e["ev"] == "assign" and e["t"] >= t_kill and p in e["partitions"])
            first = next(e["o"] for e in ev[i:] if e["ev"] == "rec" and e["p"] == p)
            lo, hi = last_commit.get(p, 0), last_done.get(p, -1) + 1
            print(f"p{p}: victim committed up to {lo}, processed up to {hi}; "
                  f"{owner.name} resumed at {first}")
            assert lo <= first <= hi, (
                f"partition {p}: {owner.name} resumed at offset {first}, outside [last commit "
                f"{lo}, victim's next offset {hi}]: not from the committed offset")
    except AssertionError as e:
        _add_diagnostics(e, cs)
        raise
    finally:
        _cleanup(cs, prod)


# --------------------------------------------------------------------------- (c)
def test_static_member_restart_within_session_keeps_assignment(group_broker, tmp_path):
    """Two static members (group.instance.id). One is restarted within its session
    timeout, first by a clean close (librdkafka sends no LeaveGroup for a static
    member) and then by SIGKILL; each time it gets the same partitions back, and the
    other member sees no rebalance: none of its rebalance callbacks runs, librdkafka's
    rebalance counter (statistics) does not move and its assignment is unchanged, over a
    window of several of its heartbeats after the restarted member got its partitions."""
    b = group_broker
    session_ms = 10000
    topic, group = unique_topic("grp-static"), unique_topic("g-static")
    create_topic(b.bootstrap, topic, 4)
    acked = produce_values(b.bootstrap, topic, 4, "pre", 200)

    sa = GroupConsumerProc(b.bootstrap, topic, group, tmp_path, "static-a",
                           instance_id=f"{group}-a", session_timeout_ms=session_ms)
    sb = GroupConsumerProc(b.bootstrap, topic, group, tmp_path, "static-b",
                           instance_id=f"{group}-b", session_timeout_ms=session_ms)
    a = admin(b.bootstrap)
    try:
        sa.start()
        sb.start()
        before = wait_balanced([sa, sb], 4, 45, "2 static members sharing 4 partitions")
        wait_all_processed(acked, [sa, sb], 30)

        # settled: a has reported its state a few times since its last rebalance event
        def settled():
            last_rb = sa.of("assign", "revoke", "lost")[-1]["t"]
            st = sa.of("stats", since=last_rb)
            return len(st) >= 3 and st[-1]["cgrp"].get("join_state") == "steady"
        wait_until(settled, 20, "static-a settled (join_state steady)")
        a_events = len(sa.of("assign", "revoke", "lost"))
        a_rebalances = _latest_stats(sa).get("rebalance_cnt")
        desc = describe_group(a, group)
        assert desc.state == ConsumerGroupState.STABLE, desc.state
        assert sorted(m.group_instance_id for m in desc.members) == [f"{group}-a", f"{group}-b"]
        old_member_b = next(m.member_id for m in desc.members if m.group_instance_id == f"{group}-b")

        for how in ("close", "sigkill"):
            t0 = time.monotonic()
            if how == "close":
                sb.terminate()
            else:
                sb.kill()
            sb.start()
            ev = wait_until(lambda: sb.of("assign", since=t0), session_ms / 1000 - 2,
                            f"static-b assigned again after {how} + restart")[0]
            elapsed = time.monotonic() - t0
            print(f"\n{how}: static-b reassigned {ev['partitions']} {elapsed:.1f}s after the "
                  f"restart began (member id {ev['member_id']})")
            assert set(ev["partitions"]) == before["static-b"], (
                f"after {how} + restart static-b got {ev['partitions']}, had {sorted(before['static-b'])}")

            # the other member, over several of its heartbeats: nothing happened to it
            t_assigned = ev["t"]
            wait_until(lambda: len(sa.of("stats", since=t_assigned)) >= 5, 15,
                       "static-a reporting statistics after the restart")
            assert sa.running(), sa.diagnostics()
            new_events = sa.of("assign", "revoke", "lost")[a_events:]
            assert not new_events, f"static-a saw a rebalance after static-b's {how}: {new_events}"
            st = _latest_stats(sa)
            assert st.get("rebalance_cnt") == a_rebalances, (
                f"static-a's rebalance_cnt moved from {a_rebalances} to {st} after static-b's {how}")
            assert sa.assignment() == before["static-a"]
            assert sb.assignment() == before["static-b"]

            desc = describe_group(a, group)
            assert desc.state == ConsumerGroupState.STABLE, (how, desc.state)
            members = {m.group_instance_id: m for m in desc.members}
            assert sorted(members) == [f"{group}-a", f"{group}-b"], (how, sorted(members))
            tps = {tp.partition for tp in members[f"{group}-b"].assignment.topic_partitions}
            assert tps == before["static-b"], (how, tps)
            print(f"static-b member id {old_member_b} -> {members[f'{group}-b'].member_id}")
            old_member_b = members[f"{group}-b"].member_id
        assert_consumers_healthy([sa, sb])
    except AssertionError as e:
        _add_diagnostics(e, [sa, sb])
        raise
    finally:
        _cleanup([sa, sb])


# --------------------------------------------------------------------------- (d)
def test_cooperative_sticky_join_and_leave(group_broker, tmp_path):
    """cooperative-sticky: a joining member takes partitions by incremental revocation
    (the existing members keep some of theirs, they are never revoked to nothing); when
    a member leaves, the others only gain partitions (no revocation at all). Nothing
    acknowledged is skipped."""
    b = group_broker
    topic, group = unique_topic("grp-coop"), unique_topic("g-coop")
    create_topic(b.bootstrap, topic, 6)
    acked = produce_values(b.bootstrap, topic, 6, "pre", 300)

    cs = [GroupConsumerProc(b.bootstrap, topic, group, tmp_path, f"coop{i}",
                            strategy="cooperative-sticky", session_timeout_ms=10000)
          for i in range(1, 4)]
    x, y, z = cs
    prod = BackgroundProducer(b.bootstrap, topic, 6, "live", rate=200)
    try:
        x.start()
        y.start()
        two = wait_balanced([x, y], 6, 45, "2 cooperative members sharing 6 partitions")
        prod.start()

        t_join = time.monotonic()
        z.start()
        three = wait_balanced([x, y, z], 6, 45, "3 cooperative members sharing 6 partitions")
        print(f"\n2 members: {two}; after coop3 joined: {three}")
        for c in (x, y):
            for e in c.of("revoke", "lost", since=t_join):
                assert e["ev"] == "revoke" and e["assignment"], (
                    f"{c.name}: {e['ev']} of {e['partitions']} left it with {e['assignment']}: "
                    f"not an incremental (cooperative) revocation")
            assert three[c.name] <= two[c.name], (
                f"{c.name} owned {two[c.name]}, now {three[c.name]}: not sticky")
        assert any(x.of("revoke", since=t_join) + y.of("revoke", since=t_join)), "no revocation"

        t_leave = time.monotonic()
        x.terminate()
        final = wait_balanced([y, z], 6, 45, "2 remaining cooperative members sharing 6 partitions")
        print(f"after coop1 left: {final}")
        for c in (y, z):
            assert not c.of("revoke", "lost", since=t_leave), (
                f"{c.name} lost partitions when another member left: {c.of('revoke', 'lost', since=t_leave)}")
            assert three[c.name] <= final[c.name]
        prod.wait_acked(prod.acked_count() + 300, 30)

        acked += prod.stop()
        cov = wait_all_processed(acked, cs, 60)
        print(f"acknowledged={len(acked)} processed_twice={cov.processed_twice} "
              f"never_processed={len(cov.never_processed)}")
        assert_coverage(cov)
        assert_consumers_healthy(cs)
    except AssertionError as e:
        _add_diagnostics(e, cs)
        raise
    finally:
        _cleanup(cs, prod)


# --------------------------------------------------------------------------- (e)
def _group_consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": 10000,
        "logger": RDKAFKA_LOG,
    }
    conf.update(extra)
    return Consumer(conf)


def _consume_group(c: Consumer, want, timeout: float) -> dict[int, list[tuple[int, str]]]:
    """poll() until want(got) is true; got = {partition: [(offset, value)]}."""
    got: dict[int, list[tuple[int, str]]] = {}
    errors = []
    deadline = time.monotonic() + timeout
    while not want(got):
        assert time.monotonic() < deadline, (
            f"timed out after {timeout}s; got {({p: (len(v), v[0][0], v[-1][0]) for p, v in got.items()})}"
            f"; errors {errors[-5:]}")
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() != KafkaError._PARTITION_EOF:
                errors.append(str(m.error()))
                assert not m.error().fatal(), m.error()
            continue
        got.setdefault(m.partition(), []).append((m.offset(), m.value().decode()))
    return got


def test_committed_offsets_survive_broker_restart(group_broker, tmp_path):
    """Consume part of a topic in a group, commit synchronously, close; SIGTERM-restart
    the broker: the group is listed again, Empty, with its offsets, and a new member
    resumes exactly at the committed offsets (nothing before them again, nothing
    skipped). Then a commit survives a SIGKILL of the broker too."""
    b = group_broker
    topic, group = unique_topic("grp-restart"), unique_topic("g-restart")
    create_topic(b.bootstrap, topic, 2)
    acked = produce_values(b.bootstrap, topic, 2, "r", 200)  # 100 per partition
    value_at = {(p, o): v for p, o, v in acked}
    target = {0: 37, 1: 62}

    c = _group_consumer(b.bootstrap, group)
    c.subscribe([topic])
    got = _consume_group(c, lambda g: all(len(g.get(p, [])) >= target[p] for p in target), 45)
    # the first member of a new group starts at the beginning (auto.offset.reset=earliest)
    for p in target:
        assert [o for o, _ in got[p][:target[p]]] == list(range(target[p])), p
    res = c.commit(offsets=[TopicPartition(topic, p, o) for p, o in target.items()], asynchronous=False)
    assert all(tp.error is None for tp in res), res
    committed = c.committed([TopicPartition(topic, p) for p in target], timeout=10)
    assert {tp.partition: tp.offset for tp in committed} == target
    c.close()

    a = admin(b.bootstrap)
    assert topic_offsets(a, group, topic) == target
    b.stop()
    b.start()
    a = admin(b.bootstrap)
    groups = list_groups(a)
    assert group in groups, f"group {group} not listed after the restart: {sorted(groups)}"
    assert groups[group].state == ConsumerGroupState.EMPTY, groups[group].state
    desc = describe_group(a, group)
    assert desc.state == ConsumerGroupState.EMPTY and not desc.members, (desc.state, desc.members)
    assert topic_offsets(a, group, topic) == target

    c = _group_consumer(b.bootstrap, group)
    try:
        c.subscribe([topic])
        got = _consume_group(c, lambda g: all(g.get(p) and g[p][-1][0] >= 99 for p in target), 45)
        for p in target:
            offs = [o for o, _ in got[p]]
            assert offs == list(range(target[p], 100)), (
                f"partition {p}: after the restart the group read offsets {offs[:5]}...{offs[-3:]}, "
                f"expected {target[p]}..99 (committed {target[p]})")
            assert all(v == value_at[(p, o)] for o, v in got[p])
        ends = {0: 100, 1: 100}
        res = c.commit(offsets=[TopicPartition(topic, p, o) for p, o in ends.items()], asynchronous=False)
        assert all(tp.error is None for tp in res), res
    finally:
        c.close()

    # an acknowledged synchronous commit survives a crash
    b.kill()
    b.start()
    assert topic_offsets(admin(b.bootstrap), group, topic) == {0: 100, 1: 100}


# --------------------------------------------------------------------------- (f)
def test_admin_client_group_operations(group_broker, tmp_path):
    """AdminClient: ListGroups (also filtered by state), DescribeGroups (state, members
    with client ids, member ids and assignments as the members themselves report them,
    assignor, coordinator), OffsetFetch, DeleteGroups (NON_EMPTY_GROUP while members are
    active, success once Empty), AlterConsumerGroupOffsets (OffsetCommit by an admin),
    and OffsetDelete through kafka-python (confluent-kafka's Python API has none):
    GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to the topic, success once
    Empty."""
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    import kafka.errors as Errors

    b = group_broker
    topic, group = unique_topic("grp-admin"), unique_topic("g-admin")
    create_topic(b.bootstrap, topic, 3)
    acked = produce_values(b.bootstrap, topic, 3, "adm", 90)
    ends = end_offsets(acked)
    a = admin(b.bootstrap)
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=15000)
    cs = [GroupConsumerProc(b.bootstrap, topic, group, tmp_path, f"adm{i}") for i in (1, 2)]
    try:
        for c in cs:
            c.start()
        own = wait_balanced(cs, 3, 45, "2 members sharing 3 partitions")
        wait_all_processed(acked, cs, 30)
        wait_committed(a, group, topic, ends, 30)

        # ListGroups
        wait_until(lambda: getattr(list_groups(a).get(group), "state", None) == ConsumerGroupState.STABLE,
                   20, f"{group} listed as Stable")
        listing = list_groups(a)[group]
        assert listing.is_simple_consumer_group is False
        assert group in list_groups(a, states={ConsumerGroupState.STABLE})
        assert group not in list_groups(a, states={ConsumerGroupState.EMPTY})

        # DescribeGroups, compared with what the members themselves report
        desc = describe_group(a, group)
        assert desc.group_id == group
        assert desc.state == ConsumerGroupState.STABLE, desc.state
        assert desc.is_simple_consumer_group is False
        assert desc.partition_assignor in ("range", "roundrobin"), desc.partition_assignor
        assert desc.coordinator.id == NODE_ID, desc.coordinator
        members = {m.client_id: m for m in desc.members}
        assert sorted(members) == ["adm1", "adm2"], sorted(members)
        for c in cs:
            m = members[c.name]
            assert m.member_id == c.of("assign")[-1]["member_id"], (c.name, m.member_id)
            assert m.group_instance_id is None
            assert m.host, m.host
            tps = {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
            assert tps == {(topic, p) for p in own[c.name]}, (c.name, tps, own[c.name])

        # OffsetFetch
        assert topic_offsets(a, group, topic) == ends

        # DeleteGroups while members are active
        with pytest.raises(KafkaException) as ei:
            a.delete_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
        assert kafka_error_code(ei.value) == KafkaError.NON_EMPTY_GROUP, ei.value

        # OffsetDelete of a partition of a topic the active members subscribe to
        res = kp.delete_group_offsets(group, [KTP(topic, 0)])
        assert res == {KTP(topic, 0): Errors.GroupSubscribedToTopicError}, res
        assert topic_offsets(a, group, topic) == ends

        for c in cs:
            c.terminate()
        wait_until(lambda: describe_group(a, group).state == ConsumerGroupState.EMPTY, 20,
                   f"{group} Empty after its members left")
        desc = describe_group(a, group)
        assert not desc.members, [m.member_id for m in desc.members]
        assert list_groups(a)[group].state == ConsumerGroupState.EMPTY
        assert group in list_groups(a, states={ConsumerGroupState.EMPTY})

        # AlterConsumerGroupOffsets on the Empty group
        new = {0: 5, 1: 7}
        res = a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, p, o) for p, o in new.items()])], request_timeout=15)[group]
        res = res.result(timeout=20)
        assert all(tp.error is None for tp in res.topic_partitions), res.topic_partitions
        assert topic_offsets(a, group, topic) == {**ends, **new}

        # OffsetDelete on the Empty group
        res = kp.delete_group_offsets(group, [KTP(topic, 2)])
        assert res == {KTP(topic, 2): Errors.NoError}, res
        assert topic_offsets(a, group, topic) == new

        # DeleteGroups once Empty
        a.delete_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
        assert group not in list_groups(a)
        assert topic_offsets(a, group, topic) == {}
        try:
            gone = describe_group(a, group)
            assert gone.state == ConsumerGroupState.DEAD and not gone.members, (gone.state, gone.members)
        except KafkaException as e:
            assert kafka_error_code(e) == KafkaError.GROUP_ID_NOT_FOUND, e
        # deleting it again: GROUP_ID_NOT_FOUND
        with pytest.raises(KafkaException) as ei:
            a.delete_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
        assert kafka_error_code(ei.value) == KafkaError.GROUP_ID_NOT_FOUND, ei.value
    except AssertionError as e:
        _add_diagnostics(e, cs)
        raise
    finally:
        kp.close()
        _cleanup(cs)
