"""Kafka transactions (exactly-once) with real clients against one strata agent.

- librdkafka, kafka-python and kafkajs transactional producers: a committed and an
  aborted transaction (kafkajs: commit, abort, commit); read_committed consumers see
  the committed records exactly once and none of the aborted ones, read_uncommitted
  consumers see all of them; the offsets show the markers (one offset after each
  transaction's records on every partition it wrote to, the high watermark past them).
- ListOffsets at read_committed answers the last stable offset: the first offset of
  the earliest open transaction (also with two producers' transactions interleaved),
  and moves once the transactions end; /v1/transactions and /v1/partitions agree.
- A second producer with the same transactional.id fences the first: the first one's
  commit fails with a fatal fenced error, its records stay invisible, the second
  commits its own.
- A transaction left open past transaction.timeout.ms is aborted by the coordinator
  (--transaction-abort-timed-out-transaction-cleanup-interval-ms 200): the LSO passes
  its records, read_committed never returns them, the state is CompleteAbort, and the
  abandoned producer cannot commit it afterwards.
- DescribeTransactions, ListTransactions (state and producer id filters) and
  DescribeProducers, as kafka-transactions.sh uses them, while a transaction is open
  and after it commits, agreeing with /v1/transactions.
- transaction.timeout.ms above --transaction-max-timeout-ms: INVALID_TRANSACTION_TIMEOUT
  at init (librdkafka and kafka-python); equal to it is accepted.
- consume-transform-produce with send_offsets_to_transaction: an aborted batch's
  offsets are not committed, a committed batch's are; while the transaction is open an
  OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT.
- A hanging transaction (STRATA_FAILPOINT_LOSE_MARKER drops one partition's marker): that
  partition's LSO stays at the transaction's first offset while the other partition's
  advances; /v1/transactions lists it open with hanging=true; POST /v1/transactions/abort
  (KIP-664's abortTransaction) writes the abort marker and the LSO moves; bad bodies
  answer 400, unknown partitions 404.
- Committed and aborted transactions, interleaved, tiered to a local archive and deleted
  locally: read_committed and read_uncommitted from offset 0 give exactly what they gave
  from the local log.

Every wait is a poll of a condition with a deadline (the transaction markers are written
asynchronously after EndTxn is answered, as in Kafka).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

pytest.register_assert_rewrite("txn_testlib")

from strata_testlib import (  # noqa: E402
    RDKAFKA_LOG,
    admin,
    create_topic,
    unique_topic,
    wait_until,
)
from txn_testlib import (  # noqa: E402
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TRANSACTIONAL_ID_NOT_FOUND,
    UNSTABLE_OFFSET_COMMIT,
    admin_end_offsets,
    describe_error,
    describe_producers,
    describe_transactions,
    end_offset,
    end_offsets,
    http_abort,
    http_json,
    kafka_error,
    kp_end_offsets,
    kp_read_all,
    list_transactions,
    offset_fetch,
    open_on,
    read_all,
    transactions,
    txn_producer_conf,
    txn_record,
    values,
)

HERE = Path(__file__).resolve().parent
NODE = shutil.which("node")

CLEANUP_MS = 200
TXN_ARGS = ["--transaction-abort-timed-out-transaction-cleanup-interval-ms", str(CLEANUP_MS),
            "--group-initial-rebalance-delay-ms", "200"]

FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


@pytest.fixture
def txn_broker(broker_factory):
    b = broker_factory(extra_args=list(TXN_ARGS))
    b.start()
    return b


def tid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_stable(bootstrap: str, topic: str, partitions: int, timeout: float = 20,
                what: str = "") -> dict[int, int]:
    """Until ListOffsets read_committed == read_uncommitted on every partition (no open
    transaction: every marker written); returns the end offsets."""
    state = {}

    def stable():
        rc = end_offsets(bootstrap, topic, partitions, READ_COMMITTED)
        ru = end_offsets(bootstrap, topic, partitions, READ_UNCOMMITTED)
        state["rc"], state["ru"] = rc, ru
        return ru if rc == ru else None

    try:
        return wait_until(stable, timeout, f"the LSO of {topic} to reach the high watermark {what}",
                          interval=0.1)
    except AssertionError as e:
        raise AssertionError(f"{e}; read_committed ends {state.get('rc')}, "
                             f"read_uncommitted ends {state.get('ru')}") from None


def wait_state(broker, transactional_id: str, state: str, timeout: float = 20) -> dict:
    last = {}

    def check():
        rec = txn_record(broker, transactional_id)
        last["rec"] = rec
        return rec if rec is not None and rec["state"] == state else None

    try:
        return wait_until(check, timeout, f"transaction {transactional_id} in state {state}",
                          interval=0.1)
    except AssertionError as e:
        raise AssertionError(f"{e}; last record: {last.get('rec')}") from None


def delivery_log():
    reports: dict[bytes, tuple] = {}

    def cb(err, msg):
        reports[msg.value()] = (err, msg.partition(), msg.offset())
    return reports, cb


def delivered(reports: dict, vals: list[bytes]) -> dict[bytes, tuple[int, int]]:
    """{value: (partition, offset)}; asserts every value was delivered without error."""
    out = {}
    for v in vals:
        assert v in reports, f"no delivery report for {v!r}"
        err, p, off = reports[v]
        assert err is None, f"delivery of {v!r} failed: {err}"
        assert off >= 0, f"delivery report of {v!r} without an offset"
        out[v] = (p, off)
    return out


def plain_produce(bootstrap: str, topic: str, partition: int, vals: list[bytes], **conf) -> list[int]:
    """Non-transactional acks=all writes; returns the offsets."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                  "enable.idempotence": False, "logger": RDKAFKA_LOG, **conf})
    reports, cb = delivery_log()
    for v in vals:
        p.produce(topic, value=v, partition=partition, on_delivery=cb)
    assert p.flush(30) == 0, "non-transactional records not delivered within 30s"
    got = delivered(reports, vals)
    return [got[v][1] for v in vals]


def check_marker_layout(per_partition: dict[int, list[tuple[str, list[int]]]], hw: dict[int, int],
                        first: dict[int, int] | None = None) -> None:
    """per_partition[p] = [(txn name, offsets of its records in p)] in transaction order:
    within a transaction the offsets are dense and increasing, each transaction's records
    are followed by exactly one offset for its marker, and the high watermark is right
    after the last marker."""
    for p, txns in per_partition.items():
        nxt = (first or {}).get(p, 0)
        for name, offs in txns:
            assert offs == list(range(nxt, nxt + len(offs))), (
                f"p{p}: records of {name} at offsets {offs}, expected {nxt}..{nxt + len(offs) - 1} "
                f"(the previous transaction's records and marker end at {nxt - 1})")
            nxt += len(offs) + 1  # the marker
        assert hw[p] == nxt, (f"p{p}: high watermark {hw[p]}, expected {nxt} "
                              f"(records plus one marker per transaction: {txns})")


# =========================================================================== 1
N_COMMIT, N_ABORT = 12, 9  # per partition


def test_confluent_kafka_commit_and_abort(txn_broker):
    """librdkafka: commit N records per partition, abort M (flushed first, so they are in
    the log); read_committed sees exactly the N once, read_uncommitted N+M; offsets show
    one marker after each transaction."""
    b = txn_broker
    topic = unique_topic("txn-ck")
    create_topic(b.bootstrap, topic, 2)
    t = tid("ck")
    p = Producer(txn_producer_conf(b.bootstrap, t))
    reports, cb = delivery_log()
    p.init_transactions(30)
    committed = {q: [f"ck-commit-p{q}-{i}".encode() for i in range(N_COMMIT)] for q in (0, 1)}
    aborted = {q: [f"ck-abort-p{q}-{i}".encode() for i in range(N_ABORT)] for q in (0, 1)}

    p.begin_transaction()
    for i in range(N_COMMIT):
        for q in (0, 1):
            p.produce(topic, value=committed[q][i], key=f"k{q}".encode(), partition=q, on_delivery=cb)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(N_ABORT):
        for q in (0, 1):
            p.produce(topic, value=aborted[q][i], key=f"k{q}".encode(), partition=q, on_delivery=cb)
    assert p.flush(30) == 0, "aborted-to-be records not delivered before the abort"
    p.abort_transaction(30)

    off = delivered(reports, [v for q in (0, 1) for v in committed[q] + aborted[q]])
    hw = wait_stable(b.bootstrap, topic, 2, what="after commit and abort")
    check_marker_layout({q: [("commit", [off[v][1] for v in committed[q]]),
                             ("abort", [off[v][1] for v in aborted[q]])] for q in (0, 1)}, hw)

    rc = read_all(b.bootstrap, topic, 2, READ_COMMITTED)
    ru = read_all(b.bootstrap, topic, 2, READ_UNCOMMITTED)
    for q in (0, 1):
        assert values(rc[q]) == committed[q], (
            f"read_committed p{q}: {values(rc[q])}, expected exactly the committed {committed[q]}")
        assert [r.offset for r in rc[q]] == [off[v][1] for v in committed[q]]
        assert values(ru[q]) == committed[q] + aborted[q], (
            f"read_uncommitted p{q}: {values(ru[q])}, expected committed + aborted")
        assert [r.offset for r in ru[q]] == [off[v][1] for v in committed[q] + aborted[q]]
    rec = wait_state(b, t, "CompleteAbort")
    assert rec["producer_id"] >= 0 and rec["producer_epoch"] >= 0, rec
    assert rec["transactional_id"] == t, rec
    p.flush(5)


def test_kafka_python_commit_and_abort(txn_broker):
    """kafka-python KafkaProducer(transactional_id=...): commit, abort; read back by
    librdkafka and by kafka-python at both isolation levels."""
    from kafka import KafkaProducer

    b = txn_broker
    topic = unique_topic("txn-kp")
    create_topic(b.bootstrap, topic, 2)
    t = tid("kp")
    kp = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id=t, linger_ms=5,
                       request_timeout_ms=15000)
    committed = {q: [f"kp-commit-p{q}-{i}".encode() for i in range(N_COMMIT)] for q in (0, 1)}
    aborted = {q: [f"kp-abort-p{q}-{i}".encode() for i in range(N_ABORT)] for q in (0, 1)}
    try:
        futs = {}

        def send(batch: dict[int, list[bytes]]):
            for i in range(len(batch[0])):
                for q in (0, 1):
                    futs[batch[q][i]] = kp.send(topic, value=batch[q][i], key=f"k{q}".encode(), partition=q)

        kp.init_transactions()
        kp.begin_transaction()
        send(committed)
        kp.commit_transaction()
        kp.begin_transaction()
        send(aborted)
        kp.flush(timeout=30)
        off = {v: (md.partition, md.offset) for v, f in futs.items() for md in [f.get(timeout=30)]}
        kp.abort_transaction()
    finally:
        kp.close(timeout=10)

    hw = wait_stable(b.bootstrap, topic, 2, what="after kafka-python's commit and abort")
    check_marker_layout({q: [("commit", [off[v][1] for v in committed[q]]),
                             ("abort", [off[v][1] for v in aborted[q]])] for q in (0, 1)}, hw)
    for reader, read in (("librdkafka", read_all), ("kafka-python", kp_read_all)):
        rc = read(b.bootstrap, topic, 2, READ_COMMITTED)
        ru = read(b.bootstrap, topic, 2, READ_UNCOMMITTED)
        for q in (0, 1):
            assert values(rc[q]) == committed[q], (
                f"{reader} read_committed p{q}: {values(rc[q])}, expected {committed[q]}")
            assert values(ru[q]) == committed[q] + aborted[q], (
                f"{reader} read_uncommitted p{q}: {values(ru[q])}")
    assert kp_end_offsets(b.bootstrap, topic, 2, READ_COMMITTED) == hw
    wait_state(b, t, "CompleteAbort")


def test_kafkajs_commit_abort_commit(txn_broker, tmp_path):
    """kafkajs producer.transaction(): commit, abort, commit (kafkajs_transactions.js);
    kafkajs' own read_committed / read_uncommitted group consumers, and librdkafka, read
    it back; offsets from kafkajs' RecordMetadata show the markers."""
    assert NODE, "node not found on PATH"
    assert (HERE / "node_modules" / "kafkajs").is_dir(), f"kafkajs not installed: run `npm ci` in {HERE}"
    b = txn_broker
    topic = unique_topic("txn-js")
    create_topic(b.bootstrap, topic, 2)
    t = tid("js")
    out = tmp_path / "kafkajs.json"
    cmd = [NODE, str(HERE / "kafkajs_transactions.js"), b.bootstrap, topic, "2", t,
           f"js-group-{uuid.uuid4().hex[:8]}", str(out)]
    try:
        proc = subprocess.run(cmd, cwd=HERE, capture_output=True, timeout=90)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"kafkajs script timed out; stderr:\n{(e.stderr or b'').decode(errors='replace')[-20000:]}")
    stderr = proc.stderr.decode(errors="replace")
    res = json.loads(out.read_text()) if out.exists() else {}
    assert proc.returncode == 0, (f"kafkajs script exited {proc.returncode}: {res.get('error')}\n"
                                  f"stderr:\n{stderr[-20000:]}")

    by: dict[tuple[int, str], list[dict]] = {}
    for x in res["sent"]:  # in send order
        by.setdefault((x["partition"], x["txn"]), []).append(x)
    layout = {q: [(name, [x["offset"] for x in by[(q, name)]]) for name in ("t1", "t2", "t3")] for q in (0, 1)}
    sentinel = {s["partition"]: s["offset"] for s in res["sentinels"]}
    hw = wait_stable(b.bootstrap, topic, 2, what="after kafkajs' transactions")
    # Records and markers, then the sentinel: one offset more than the layout. (The
    # sentinel may come before t3's commit marker: markers are written after EndTxn is
    # answered, as in Kafka.)
    check_marker_layout(layout, {q: hw[q] - 1 for q in (0, 1)})
    for q in (0, 1):
        assert sentinel[q] in (hw[q] - 1, hw[q] - 2), (
            f"p{q}: the sentinel at {sentinel[q]}, high watermark {hw[q]}: expected it right "
            f"after t3's records (offset {layout[q][-1][1][-1]}) or after t3's marker")

    want_c = {q: [x["value"] for name in ("t1", "t3") for x in by[(q, name)]] for q in (0, 1)}
    want_u = {q: [x["value"] for name in ("t1", "t2", "t3") for x in by[(q, name)]] for q in (0, 1)}
    for label, key, want in (("read_committed", "readCommitted", want_c),
                             ("read_uncommitted", "readUncommitted", want_u)):
        got = {q: [r["value"] for r in res[key] if r["partition"] == q] for q in (0, 1)}
        assert got == want, f"kafkajs {label} consumer read {got}, expected {want}"
    rc = read_all(b.bootstrap, topic, 2, READ_COMMITTED)
    ru = read_all(b.bootstrap, topic, 2, READ_UNCOMMITTED)
    for q in (0, 1):
        assert [v.decode() for v in values(rc[q])] == want_c[q] + [f"sentinel-p{q}"]
        assert [v.decode() for v in values(ru[q])] == want_u[q] + [f"sentinel-p{q}"]
    wait_state(b, t, "CompleteCommit")


# =========================================================================== 2
def test_list_offsets_read_committed_is_the_lso(txn_broker):
    """While a transaction is open, ListOffsets read_committed (librdkafka watermarks,
    AdminClient.list_offsets, kafka-python end_offsets) answers its first offset and
    read_uncommitted the high watermark; with two producers' transactions interleaved,
    the earliest open one holds the LSO even after the later one commits; after both
    end it is the high watermark. /v1/transactions and /v1/partitions agree."""
    b = txn_broker
    topic = unique_topic("txn-lso")
    create_topic(b.bootstrap, topic, 1)
    plain_produce(b.bootstrap, topic, 0, [b"plain-0", b"plain-1", b"plain-2"])

    tx, ty = tid("lso-x"), tid("lso-y")
    px, py = Producer(txn_producer_conf(b.bootstrap, tx)), Producer(txn_producer_conf(b.bootstrap, ty))
    rx, cbx = delivery_log()
    ry, cby = delivery_log()
    px.init_transactions(30)
    py.init_transactions(30)

    def ends():
        return {
            "librdkafka rc": end_offset(b.bootstrap, topic, 0, READ_COMMITTED),
            "librdkafka ru": end_offset(b.bootstrap, topic, 0, READ_UNCOMMITTED),
            "admin rc": admin_end_offsets(b.bootstrap, topic, 1, READ_COMMITTED)[0],
            "admin ru": admin_end_offsets(b.bootstrap, topic, 1, READ_UNCOMMITTED)[0],
            "kafka-python rc": kp_end_offsets(b.bootstrap, topic, 1, READ_COMMITTED)[0],
            "kafka-python ru": kp_end_offsets(b.bootstrap, topic, 1, READ_UNCOMMITTED)[0],
        }

    def expect(rc: int, ru: int, what: str):
        got = ends()
        want = {k: (rc if k.endswith("rc") else ru) for k in got}
        assert got == want, f"{what}: end offsets {got}, expected read_committed={rc} read_uncommitted={ru}"

    def lso_over_http():
        status, body = http_json(b.http_url + "/v1/partitions")
        assert status == 200, (status, body)
        st = [r for r in body["partitions"] if r["topic"] == topic]
        assert len(st) == 1, st
        assert "last_stable_offset" in st[0], f"/v1/partitions without last_stable_offset: {st[0]}"
        return st[0]["last_stable_offset"]

    expect(3, 3, "before any transaction")
    px.begin_transaction()
    xs1 = [f"x1-{i}".encode() for i in range(3)]
    for v in xs1:
        px.produce(topic, value=v, partition=0, on_delivery=cbx)
    assert px.flush(30) == 0
    x_first = delivered(rx, xs1)[xs1[0]][1]
    assert x_first == 3, f"the first transactional record is at {x_first}, expected 3"
    expect(3, 6, "X open with 3 records")
    assert lso_over_http() == 3, "/v1/partitions last_stable_offset with X open"

    rec = wait_state(b, tx, "Ongoing")
    assert {"topic": topic, "partition": 0} in rec["partitions"], rec
    entries = open_on(b, topic)
    assert len(entries) == 1, entries
    e = entries[0]
    assert (e["partition"], e["producer_id"], e["producer_epoch"], e["first_offset"], e["hanging"]) == \
        (0, rec["producer_id"], rec["producer_epoch"], 3, False), (e, rec)

    # Y starts later, commits first: the LSO stays at X's first offset.
    py.begin_transaction()
    ys = [f"y-{i}".encode() for i in range(2)]
    for v in ys:
        py.produce(topic, value=v, partition=0, on_delivery=cby)
    assert py.flush(30) == 0
    xs2 = [f"x2-{i}".encode() for i in range(2)]
    for v in xs2:
        px.produce(topic, value=v, partition=0, on_delivery=cbx)
    assert px.flush(30) == 0
    py.commit_transaction(30)
    wait_state(b, ty, "CompleteCommit")
    hw = end_offset(b.bootstrap, topic, 0, READ_UNCOMMITTED)
    assert hw == 3 + 3 + 2 + 2 + 1, f"high watermark {hw} after 3 plain, 7 transactional records and Y's marker"
    wait_until(lambda: len(open_on(b, topic)) == 1, 10, "only X's transaction open on the partition")
    expect(3, hw, "Y committed, X still open")
    rc = read_all(b.bootstrap, topic, 1, READ_COMMITTED)
    assert values(rc) == [b"plain-0", b"plain-1", b"plain-2"], (
        f"read_committed with X open returned {values(rc)}: nothing at or past X's first offset "
        f"may be returned, Y's committed records included")

    px.abort_transaction(30)
    ends_after = wait_stable(b.bootstrap, topic, 1, what="after X's abort")
    expect(ends_after[0], ends_after[0], "no transaction open")
    assert ends_after[0] == hw + 1, f"high watermark {ends_after[0]}, expected {hw + 1} (X's abort marker)"
    assert lso_over_http() == ends_after[0], "/v1/partitions last_stable_offset after both ended"
    assert open_on(b, topic) == [], "open transactions listed after both ended"
    rc = read_all(b.bootstrap, topic, 1, READ_COMMITTED)
    assert values(rc) == [b"plain-0", b"plain-1", b"plain-2"] + ys, (
        f"read_committed: {values(rc)}; expected the plain records and Y's, none of X's")
    ru = read_all(b.bootstrap, topic, 1, READ_UNCOMMITTED)
    assert sorted(values(ru)) == sorted([b"plain-0", b"plain-1", b"plain-2"] + xs1 + ys + xs2)


# =========================================================================== 3
def test_second_producer_fences_the_first(txn_broker):
    """A begins and writes; B inits with the same transactional.id; A's commit fails with
    a fatal fenced error; A's records never reach read_committed; B commits its own."""
    b = txn_broker
    topic = unique_topic("txn-fence")
    create_topic(b.bootstrap, topic, 1)
    t = tid("fence")
    pa = Producer(txn_producer_conf(b.bootstrap, t))
    ra, cba = delivery_log()
    pa.init_transactions(30)
    epoch_a = wait_state(b, t, "Empty")["producer_epoch"]
    pa.begin_transaction()
    a_vals = [f"a-{i}".encode() for i in range(5)]
    for v in a_vals:
        pa.produce(topic, value=v, partition=0, on_delivery=cba)
    assert pa.flush(30) == 0
    delivered(ra, a_vals)

    pb = Producer(txn_producer_conf(b.bootstrap, t))
    pb.init_transactions(30)
    rec = txn_record(b, t)
    assert rec["producer_epoch"] > epoch_a, f"B's epoch {rec['producer_epoch']} not above A's {epoch_a}: {rec}"

    with pytest.raises(KafkaException) as ei:
        pa.commit_transaction(20)
    err = kafka_error(ei.value)
    assert err is not None and err.code() in FENCED_CODES and err.fatal(), (
        f"A's commit after B's init failed with {describe_error(ei.value)}, expected a fatal "
        f"_FENCED / PRODUCER_FENCED / INVALID_PRODUCER_EPOCH")

    rb, cbb = delivery_log()
    pb.begin_transaction()
    b_vals = [f"b-{i}".encode() for i in range(4)]
    for v in b_vals:
        pb.produce(topic, value=v, partition=0, on_delivery=cbb)
    pb.commit_transaction(30)
    delivered(rb, b_vals)
    wait_stable(b.bootstrap, topic, 1, what="after B's commit")
    rc = read_all(b.bootstrap, topic, 1, READ_COMMITTED)
    assert values(rc) == b_vals, f"read_committed: {values(rc)}; expected only B's records {b_vals}"
    ru = read_all(b.bootstrap, topic, 1, READ_UNCOMMITTED)
    assert values(ru) == a_vals + b_vals, f"read_uncommitted: {values(ru)}"
    wait_state(b, t, "CompleteCommit")


# =========================================================================== 4
def test_timed_out_transaction_is_aborted_by_the_coordinator(txn_broker):
    """transaction.timeout.ms=2000, begin, write, then nothing (the producer stays alive
    and untouched, so it aborts nothing itself): the coordinator aborts it after the
    timeout: the LSO passes the records, read_committed never returns them, the state is
    CompleteAbort; a late commit by the abandoned producer fails."""
    b = txn_broker
    topic = unique_topic("txn-timeout")
    create_topic(b.bootstrap, topic, 1)
    plain_produce(b.bootstrap, topic, 0, [b"before-0", b"before-1"])
    t = tid("timeout")
    p = Producer(txn_producer_conf(b.bootstrap, t, **{"transaction.timeout.ms": 2000}))
    reports, cb = delivery_log()
    p.init_transactions(30)
    rec = wait_state(b, t, "Empty")
    assert rec["timeout_ms"] == 2000, rec
    t0 = time.monotonic()
    p.begin_transaction()
    vals = [f"abandoned-{i}".encode() for i in range(5)]
    for v in vals:
        p.produce(topic, value=v, partition=0, on_delivery=cb)
    assert p.flush(30) == 0
    offs = [o for _, o in delivered(reports, vals).values()]
    assert end_offset(b.bootstrap, topic, 0, READ_COMMITTED) == 2, "LSO with the transaction open"

    hw_marker = max(offs) + 2
    wait_until(lambda: end_offset(b.bootstrap, topic, 0, READ_COMMITTED) >= hw_marker, 20,
               f"the coordinator to abort the timed-out transaction (LSO past offset {max(offs)})",
               interval=0.05)
    aborted_after = time.monotonic() - t0
    assert aborted_after >= 1.9, f"the transaction was aborted {aborted_after:.2f}s after it began, before its 2s timeout"
    rec = wait_state(b, t, "CompleteAbort")
    listed = [x for x in transactions(b)["transactions"] if x["transactional_id"] == t]
    assert [x["state"] for x in listed] == ["CompleteAbort"], f"GET /v1/transactions lists {listed}"
    print(f"aborted {aborted_after:.2f}s after begin (timeout 2s, cleanup every {CLEANUP_MS} ms): {rec}")
    assert aborted_after < 2.0 + CLEANUP_MS / 1000 + 8, f"aborted only after {aborted_after:.1f}s"

    assert end_offset(b.bootstrap, topic, 0, READ_UNCOMMITTED) == hw_marker
    rc = read_all(b.bootstrap, topic, 1, READ_COMMITTED)
    assert values(rc) == [b"before-0", b"before-1"], f"read_committed returned {values(rc)}"
    ru = read_all(b.bootstrap, topic, 1, READ_UNCOMMITTED)
    assert values(ru) == [b"before-0", b"before-1"] + vals

    with pytest.raises(KafkaException) as ei:
        p.commit_transaction(15)
    print(f"the abandoned producer's late commit: {describe_error(ei.value)}")
    plain_produce(b.bootstrap, topic, 0, [b"after"])
    wait_stable(b.bootstrap, topic, 1, what="after the late commit attempt")
    rc = read_all(b.bootstrap, topic, 1, READ_COMMITTED)
    assert values(rc) == [b"before-0", b"before-1", b"after"], (
        f"read_committed after the abandoned producer's late commit: {values(rc)}")
    assert txn_record(b, t)["state"] == "CompleteAbort", txn_record(b, t)
    assert open_on(b, topic) == []


# =========================================================================== 5
def test_timeout_above_max_is_refused(broker_factory):
    """--transaction-max-timeout-ms 5000: transaction.timeout.ms 10000 is refused at init
    with INVALID_TRANSACTION_TIMEOUT (librdkafka, kafka-python) and leaves no record;
    5000 is accepted and commits."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KpKafkaError

    b = broker_factory(extra_args=TXN_ARGS + ["--transaction-max-timeout-ms", "5000"])
    b.start()
    topic = unique_topic("txn-maxtimeout")
    create_topic(b.bootstrap, topic, 1)

    bad = tid("too-long")
    p = Producer(txn_producer_conf(b.bootstrap, bad, **{"transaction.timeout.ms": 10000}))
    with pytest.raises(KafkaException) as ei:
        p.init_transactions(20)
    err = kafka_error(ei.value)
    assert err is not None and err.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT, (
        f"init_transactions with transaction.timeout.ms above the maximum: {describe_error(ei.value)}")
    assert txn_record(b, bad) is None, f"a record for the refused id: {txn_record(b, bad)}"

    kbad = tid("too-long-kp")
    kp = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id=kbad,
                       transaction_timeout_ms=10000, max_block_ms=20000)
    try:
        # kafka-python wraps it: KafkaError("Unexpected error in InitProducerIdResponse:
        # InvalidTransactionTimeoutError ...")
        with pytest.raises(KpKafkaError) as kei:
            kp.init_transactions()
        assert "InvalidTransactionTimeout" in repr(kei.value) + str(kei.value), (
            f"kafka-python init_transactions: {kei.value!r}")
    finally:
        kp.close(timeout=5)

    ok = tid("at-max")
    p = Producer(txn_producer_conf(b.bootstrap, ok, **{"transaction.timeout.ms": 5000}))
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, value=b"within-max", partition=0)
    p.commit_transaction(20)
    wait_stable(b.bootstrap, topic, 1)
    assert values(read_all(b.bootstrap, topic, 1, READ_COMMITTED)) == [b"within-max"]
    assert wait_state(b, ok, "CompleteCommit")["timeout_ms"] == 5000


# =========================================================================== 5b
def test_describe_and_list_transactions_and_producers(txn_broker):
    """KIP-664's admin requests over the wire while a transaction over two partitions is
    open and after it commits: DescribeTransactions (state, timeout, start time,
    producer id and epoch, partitions), ListTransactions with and without filters,
    DescribeProducers (the open transaction's first offset per partition, then none),
    and TRANSACTIONAL_ID_NOT_FOUND for an unknown id."""
    b = txn_broker
    topic = unique_topic("txn-admin")
    create_topic(b.bootstrap, topic, 2)
    plain_produce(b.bootstrap, topic, 0, [b"plain"])
    t = tid("admin")
    p = Producer(txn_producer_conf(b.bootstrap, t, **{"transaction.timeout.ms": 30000}))
    p.init_transactions(30)
    before = int(time.time() * 1000)
    p.begin_transaction()
    for q in (0, 1):
        for i in range(2):
            p.produce(topic, value=f"admin-p{q}-{i}".encode(), partition=q)
    assert p.flush(30) == 0
    rec = wait_state(b, t, "Ongoing")
    pid, epoch = rec["producer_id"], rec["producer_epoch"]

    d = describe_transactions(b.bootstrap, [t])[t]
    want = {"error_code": 0, "state": "Ongoing", "timeout_ms": 30000, "producer_id": pid,
            "producer_epoch": epoch, "partitions": [(topic, 0), (topic, 1)]}
    assert {k: d[k] for k in want} == want, f"DescribeTransactions: {d}, expected {want}"
    assert before - 5000 <= d["start_ms"] <= int(time.time() * 1000) + 5000, (d, before)
    assert d["start_ms"] == rec["start_ms"], f"DescribeTransactions {d} vs /v1/transactions {rec}"

    assert list_transactions(b.bootstrap).get(t) == (pid, "Ongoing"), list_transactions(b.bootstrap)
    assert t in list_transactions(b.bootstrap, states=["Ongoing"])
    assert t not in list_transactions(b.bootstrap, states=["CompleteCommit", "CompleteAbort"])
    assert list(list_transactions(b.bootstrap, producer_ids=[pid])) == [t]
    assert t not in list_transactions(b.bootstrap, producer_ids=[pid + 1_000_003])

    dp = describe_producers(b.bootstrap, topic, [0, 1])
    for q, first in ((0, 1), (1, 0)):
        err, producers = dp[q]
        mine = [x for x in producers if x["producer_id"] == pid]
        assert err == 0 and len(mine) == 1, f"DescribeProducers p{q}: {dp[q]}"
        assert (mine[0]["producer_epoch"], mine[0]["current_txn_start_offset"]) == (epoch, first), (
            f"DescribeProducers p{q}: {mine[0]}, expected epoch {epoch} and the open transaction "
            f"starting at {first}")

    p.commit_transaction(30)
    wait_state(b, t, "CompleteCommit")
    d = describe_transactions(b.bootstrap, [t])[t]
    assert (d["error_code"], d["state"], d["producer_id"], d["partitions"]) == (0, "CompleteCommit", pid, []), (
        f"DescribeTransactions after the commit: {d}")
    assert list_transactions(b.bootstrap, states=["CompleteCommit"]).get(t, (None,))[0] == pid
    dp = describe_producers(b.bootstrap, topic, [0, 1])
    for q in (0, 1):
        mine = [x for x in dp[q][1] if x["producer_id"] == pid]
        assert len(mine) == 1 and mine[0]["current_txn_start_offset"] == -1, (
            f"DescribeProducers p{q} after the commit: {dp[q]}")
    unknown = tid("never-used")
    d = describe_transactions(b.bootstrap, [unknown])[unknown]
    assert d["error_code"] == TRANSACTIONAL_ID_NOT_FOUND, f"DescribeTransactions of an unknown id: {d}"


# =========================================================================== 6
def committed_offset(bootstrap: str, group: str, topic: str, partition: int) -> int:
    a = admin(bootstrap)
    res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, partition)])], require_stable=True)[group].result(timeout=15)
    return res.topic_partitions[0].offset


def test_consume_transform_produce_commits_offsets_with_the_transaction(txn_broker):
    """A group consumer (read_committed, no auto commit) and a transactional producer:
    batch [0,10) transformed, offsets sent, aborted -> the group's offset stays unset and
    the app rewinds; [0,10) again, committed -> 10; [10,20) committed -> 20; [20,30)
    aborted -> stays 20. The output's read_committed view holds each input once. While a
    transaction holds offsets, OffsetFetch require_stable answers UNSTABLE_OFFSET_COMMIT
    and without require_stable the last committed offset. A new member starts at 20."""
    b = txn_broker
    src, dst = unique_topic("ctp-in"), unique_topic("ctp-out")
    create_topic(b.bootstrap, src, 1)
    create_topic(b.bootstrap, dst, 1)
    inputs = [f"in-{i:03d}".encode() for i in range(30)]
    plain_produce(b.bootstrap, src, 0, inputs)
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    t = tid("ctp")

    def new_consumer():
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                      "logger": RDKAFKA_LOG})
        c.subscribe([src])
        return c

    def take(c, n: int, timeout: float = 30):
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < n:
            assert time.monotonic() < deadline, f"only {len(got)} of {n} input records within {timeout}s: {got}"
            for m in c.consume(num_messages=n - len(got), timeout=0.2):
                if m.error():
                    raise AssertionError(f"consumer error: {m.error()}")
                got.append(m)
        return got

    consumer = new_consumer()
    producer = Producer(txn_producer_conf(b.bootstrap, t))
    producer.init_transactions(30)
    tp = TopicPartition(src, 0)

    def run_batch(msgs, commit: bool, check_open=None):
        producer.begin_transaction()
        for m in msgs:
            producer.produce(dst, value=b"out-" + m.value(), partition=0)
        nxt = msgs[-1].offset() + 1
        producer.send_offsets_to_transaction([TopicPartition(src, 0, nxt)],
                                             consumer.consumer_group_metadata(), 30)
        assert producer.flush(30) == 0
        if check_open:
            check_open()
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    def unstable_while_open():
        stable = offset_fetch(b.bootstrap, group, src, [0], require_stable=True)
        assert stable[0][1] == UNSTABLE_OFFSET_COMMIT, (
            f"OffsetFetch require_stable while a transaction holds offsets: {stable}, "
            f"expected error {UNSTABLE_OFFSET_COMMIT} (UNSTABLE_OFFSET_COMMIT)")
        loose = offset_fetch(b.bootstrap, group, src, [0], require_stable=False)
        assert loose[0][1] == 0, f"OffsetFetch without require_stable: {loose}"
        return loose[0][0]

    def stable_committed():
        got = offset_fetch(b.bootstrap, group, src, [0], require_stable=True)[0]
        return got if got[1] == 0 else None

    try:
        batch = take(consumer, 10)
        assert [m.offset() for m in batch] == list(range(10))
        seen_open = {}
        run_batch(batch, commit=False,
                  check_open=lambda: seen_open.setdefault("loose", unstable_while_open()))
        assert seen_open["loose"] < 0, f"a committed offset {seen_open['loose']} before any commit"
        after_abort = wait_until(stable_committed, 15, "a stable offset after the abort")
        assert after_abort[0] < 0, f"the aborted batch's offset was committed: {after_abort}"
        assert committed_offset(b.bootstrap, group, src, 0) < 0

        consumer.seek(TopicPartition(src, 0, 0))  # rewind to the committed offset (none: the beginning)
        batch = take(consumer, 10)
        assert [m.offset() for m in batch] == list(range(10)), [m.offset() for m in batch]
        run_batch(batch, commit=True)
        wait_until(lambda: (stable_committed() or (None,))[0] == 10, 15, "committed offset 10")

        batch = take(consumer, 10)
        assert [m.offset() for m in batch] == list(range(10, 20))
        run_batch(batch, commit=True, check_open=lambda: seen_open.setdefault("second", unstable_while_open()))
        assert seen_open["second"] == 10, f"OffsetFetch without require_stable answered {seen_open['second']}, expected 10"
        wait_until(lambda: (stable_committed() or (None,))[0] == 20, 15, "committed offset 20")

        batch = take(consumer, 10)
        assert [m.offset() for m in batch] == list(range(20, 30))
        run_batch(batch, commit=False)
        wait_until(stable_committed, 15, "a stable offset after the second abort")
        assert stable_committed()[0] == 20, f"committed offset after aborting [20,30): {stable_committed()}"
        assert committed_offset(b.bootstrap, group, src, 0) == 20
        assert consumer.committed([tp], timeout=15)[0].offset == 20
    finally:
        consumer.close()

    wait_stable(b.bootstrap, dst, 1)
    rc = values(read_all(b.bootstrap, dst, 1, READ_COMMITTED))
    assert rc == [b"out-" + v for v in inputs[:20]], f"committed output {rc}"
    ru = values(read_all(b.bootstrap, dst, 1, READ_UNCOMMITTED))
    assert ru == [b"out-" + v for v in inputs[:10] + inputs[:20] + inputs[20:30]], f"uncommitted output {ru}"

    c2 = new_consumer()
    try:
        first = take(c2, 1)[0]
        assert first.offset() == 20, f"a new member started at {first.offset()}, the committed offset is 20"
    finally:
        c2.close()


# =========================================================================== 7
def test_hanging_transaction_found_and_aborted_over_http(broker_factory):
    """STRATA_FAILPOINT_LOSE_MARKER=<topic>:0: a transaction over partitions 0 and 1 commits,
    but partition 0 gets no marker. Partition 1's LSO advances, partition 0's stays at the
    transaction's first offset (later plain writes too); /v1/transactions lists it open
    with hanging=true; POST /v1/transactions/abort writes its abort marker, the LSO moves
    and the entry goes. Bad bodies: 400 with an error message; unknown topic or
    partition: 404."""
    topic = unique_topic("txn-hang")
    b = broker_factory(extra_args=list(TXN_ARGS),
                       extra_env={"STRATA_FAILPOINT_LOSE_MARKER": f"{topic}:0"})
    b.start()
    create_topic(b.bootstrap, topic, 2)
    for q in (0, 1):
        plain_produce(b.bootstrap, topic, q, [f"plain-p{q}".encode()])
    t = tid("hang")
    p = Producer(txn_producer_conf(b.bootstrap, t))
    reports, cb = delivery_log()
    p.init_transactions(30)
    p.begin_transaction()
    txv = {q: [f"txn-p{q}-{i}".encode() for i in range(3)] for q in (0, 1)}
    for i in range(3):
        for q in (0, 1):
            p.produce(topic, value=txv[q][i], partition=q, on_delivery=cb)
    p.commit_transaction(30)
    offs = delivered(reports, txv[0] + txv[1])
    assert [offs[v][1] for v in txv[0]] == [1, 2, 3], offs

    rec = wait_state(b, t, "CompleteCommit")
    wait_until(lambda: end_offset(b.bootstrap, topic, 1, READ_COMMITTED) == 5, 15,
               "partition 1's LSO past its commit marker (offset 4)")
    assert values(read_all(b.bootstrap, topic, 2, READ_COMMITTED)[1]) == [b"plain-p1"] + txv[1]

    def hanging_entry():
        es = open_on(b, topic)
        return es if len(es) == 1 and es[0]["hanging"] else None

    entries = wait_until(hanging_entry, 15, "a hanging entry for partition 0 in /v1/transactions")
    e = entries[0]
    # (the record's epoch may be one higher: Kafka 4's transaction version 2 bumps it
    # when a transaction ends)
    assert (e["partition"], e["producer_id"], e["first_offset"]) == (0, rec["producer_id"], 1) \
        and e["producer_epoch"] in (rec["producer_epoch"], rec["producer_epoch"] - 1), (e, rec)
    plain_produce(b.bootstrap, topic, 0, [b"plain-p0-after"])
    assert end_offset(b.bootstrap, topic, 0, READ_UNCOMMITTED) == 5
    assert end_offset(b.bootstrap, topic, 0, READ_COMMITTED) == 1, "partition 0's LSO with its marker lost"
    assert values(read_all(b.bootstrap, topic, 2, READ_COMMITTED)[0]) == [b"plain-p0"]

    # bad input
    full = {"topic": topic, "partition": 0, "producer_id": e["producer_id"],
            "producer_epoch": e["producer_epoch"]}
    for body in ({"topic": topic}, {k: v for k, v in full.items() if k != "producer_epoch"}, {}):
        status, answer = http_abort(b, body)
        # RFC 9457 problem details, as every error of the HTTP API (docs/http.md).
        assert status == 400 and isinstance(answer, dict) and answer.get("status") == 400 \
            and isinstance(answer.get("detail"), str) and answer["detail"], \
            f"POST /v1/transactions/abort {body}: {status} {answer!r}, expected a 400 problem"
    status, answer = http_abort(b, raw=b"{not json")
    assert status == 400, f"POST /v1/transactions/abort with a body that is not JSON: {status} {answer!r}"
    status, answer = http_abort(b, {**full, "topic": unique_topic("no-such-topic")})
    assert status == 404, f"abort on an unknown topic: {status} {answer!r}"
    status, answer = http_abort(b, {**full, "partition": 7})
    assert status == 404, f"abort on partition 7 of a 2-partition topic: {status} {answer!r}"
    assert end_offset(b.bootstrap, topic, 0, READ_UNCOMMITTED) == 5, "a refused abort wrote something"

    status, answer = http_abort(b, full)
    assert status == 200 and answer == {"marker_offset": 5}, (
        f"POST /v1/transactions/abort {full}: {status} {answer!r}, expected 200 {{marker_offset: 5}}")
    ends = wait_stable(b.bootstrap, topic, 2, what="after the HTTP abort")
    assert ends == {0: 6, 1: 5}, ends
    assert open_on(b, topic) == [], f"still listed open: {open_on(b, topic)}"
    rc = read_all(b.bootstrap, topic, 2, READ_COMMITTED)
    assert values(rc[0]) == [b"plain-p0", b"plain-p0-after"], (
        f"read_committed p0 after the abort: {values(rc[0])}; its transactional records are aborted")
    assert values(rc[1]) == [b"plain-p1"] + txv[1]
    ru = read_all(b.bootstrap, topic, 2, READ_UNCOMMITTED)
    assert values(ru[0]) == [b"plain-p0"] + txv[0] + [b"plain-p0-after"]

    # The transaction service audits each operator abort, refused ones too (a bad body
    # reaches no service, so it is not an entry).
    status, log = http_json(b.http_url + "/v1/audit?limit=100")
    assert status == 200, log
    aborts = [(e["resource"], e["ok"], e["outcome"]) for e in log["entries"]
              if e["action"] == "transaction.abort"]
    assert aborts[-1] == (f"partition:{topic}-0", True, {"marker_offset": 5}), aborts
    assert [ok for _, ok, _ in aborts[:-1]] == [False, False], aborts


# =========================================================================== 8
# The committed rows of an archived partition, in DuckDB: a row is committed unless it is
# transactional and the next marker (control batch) of its producer after it is an abort
# (the marker's key is version 0, then type 0 abort / 1 commit). Kept in step with
# docs/transactions.md.
ARCHIVE_COMMITTED_VIEW = """
    WITH rows AS (SELECT "offset", value, key, producer_id, batch_attributes FROM read_parquet('{glob}')),
    markers AS (
        SELECT producer_id, "offset" AS marker_offset, hex(key) = '00000000' AS aborted
        FROM rows WHERE batch_attributes & 32 <> 0
    ),
    data AS (SELECT * FROM rows WHERE batch_attributes & 32 = 0)
    SELECT d.value FROM data d
    WHERE d.batch_attributes & 16 = 0
       OR NOT (SELECT m.aborted FROM markers m
               WHERE m.producer_id = d.producer_id AND m.marker_offset > d."offset"
               ORDER BY m.marker_offset LIMIT 1)
    ORDER BY d."offset"
"""


def test_read_committed_from_the_archive(broker_factory):
    """Committed and aborted transactions interleaved (two producers, transactions over
    several batches and segments) plus plain records, with hour-old timestamps; read at
    both isolation levels from the local log; then tiered to a local directory and
    deleted locally: read_committed and read_uncommitted from offset 0 (librdkafka, and
    kafka-python at read_committed) give exactly the same records."""
    from test_tiering import SEGMENT_BYTES, set_topic_config, start_tiered_broker, wait_caught_up, \
        wait_local_deleted

    def factory(extra_args=None, extra_env=None):
        return broker_factory(extra_args=TXN_ARGS + list(extra_args or []), extra_env=extra_env)

    b, _arch = start_tiered_broker(factory, "file")
    topic = unique_topic("txn-tier")
    create_topic(b.bootstrap, topic, 1, {"segment.bytes": SEGMENT_BYTES})
    ts = [int(time.time() * 1000) - 3_600_000]

    def nxt_ts():
        ts[0] += 1
        return ts[0]

    small = {"linger.ms": 0, "batch.num.messages": 4}
    pad = b"." * 100
    committed: list[bytes] = []
    everything: list[bytes] = []

    def plain(tag, n):
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": False,
                      "logger": RDKAFKA_LOG, **small})
        vs = [f"{tag}-{i}".encode() + pad for i in range(n)]
        for v in vs:
            p.produce(topic, value=v, partition=0, timestamp=nxt_ts())
            p.flush(10)  # one batch per record: segments close
        assert p.flush(30) == 0
        committed.extend(vs)
        everything.extend(vs)

    px = Producer(txn_producer_conf(b.bootstrap, tid("tier-x"), **small))
    py = Producer(txn_producer_conf(b.bootstrap, tid("tier-y"), **small))
    px.init_transactions(30)
    py.init_transactions(30)

    def txn(prod, tag, n, commit):
        prod.begin_transaction()
        write(prod, tag, n, commit)
        (prod.commit_transaction if commit else prod.abort_transaction)(30)

    def write(prod, tag, n, commit):
        vs = [f"{tag}-{i}".encode() + pad for i in range(n)]
        for v in vs:
            prod.produce(topic, value=v, partition=0, timestamp=nxt_ts())
        assert prod.flush(30) == 0
        everything.extend(vs)
        if commit:
            committed.extend(vs)

    plain("plain-a", 5)
    txn(px, "c1", 10, True)
    txn(px, "a1", 10, False)
    # interleaved: X open across Y's whole transaction
    px.begin_transaction()
    write(px, "x-aborted-1", 5, False)
    py.begin_transaction()
    write(py, "y-committed", 6, True)
    write(px, "x-aborted-2", 5, False)
    py.commit_transaction(30)
    px.abort_transaction(30)
    txn(py, "c2", 30, True)
    txn(px, "a2", 30, False)
    plain("plain-b", 8)
    txn(py, "c3", 12, True)
    plain("tail", 40)  # closes the segments holding the transactions

    hw = wait_stable(b.bootstrap, topic, 1, what="after the interleaved transactions")
    before_c = read_all(b.bootstrap, topic, 1, READ_COMMITTED)[0]
    before_u = read_all(b.bootstrap, topic, 1, READ_UNCOMMITTED)[0]
    assert sorted(values(before_c)) == sorted(committed), (
        f"read_committed from the local log: {len(before_c)} records, expected {len(committed)}")
    assert sorted(values(before_u)) == sorted(everything), (
        f"read_uncommitted from the local log: {len(before_u)} records, expected {len(everything)}")

    st = wait_caught_up(b, topic, hw, timeout=45)
    last_txn_offset = next(r.offset for r in reversed(before_u) if r.value.startswith(b"c3-"))
    assert st[0]["archived_upto"] > last_txn_offset + 1, (
        f"archived up to {st[0]['archived_upto']}, the last transaction's marker is at "
        f"{last_txn_offset + 1}: the tail did not close its segment")
    set_topic_config(b.bootstrap, topic, {"local.retention.ms": "0"})
    wait_local_deleted(b, topic, st)

    after_c = read_all(b.bootstrap, topic, 1, READ_COMMITTED)[0]
    after_u = read_all(b.bootstrap, topic, 1, READ_UNCOMMITTED)[0]
    kp_c = kp_read_all(b.bootstrap, topic, 1, READ_COMMITTED)[0]
    assert after_c == before_c, (
        f"read_committed from the archive differs from the local read: {len(after_c)} vs "
        f"{len(before_c)} records; first difference "
        f"{next(((a.short(), c.short()) for a, c in zip(after_c, before_c) if a != c), None)}; "
        f"aborted values returned: {[v for v in values(after_c) if v not in set(committed)][:5]}")
    assert after_u == before_u, f"read_uncommitted from the archive: {len(after_u)} vs {len(before_u)} records"
    assert [(r.offset, r.value) for r in kp_c] == [(r.offset, r.value) for r in before_c], (
        f"kafka-python read_committed from the archive: {len(kp_c)} records, expected {len(before_c)}")

    # An analyst's view of the same archive: DuckDB over the Parquet tells committed rows
    # from aborted ones by each transactional row's next marker of its producer (the
    # query in docs/transactions.md).
    import duckdb
    glob = str(_arch.dir / f"topic={topic}" / "partition=0" / "*.parquet")
    rows = duckdb.sql(ARCHIVE_COMMITTED_VIEW.format(glob=glob)).fetchall()
    archived_upto = st[0]["archived_upto"]
    want = sorted(r.value for r in before_c if r.offset <= archived_upto)
    assert sorted(bytes(v) for (v,) in rows) == want, (
        f"DuckDB's committed view of the archive: {len(rows)} rows, expected {len(want)}")
