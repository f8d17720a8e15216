"""Helpers for test_transactions.py and test_eos_chaos.py: transactional producer
configuration, end offsets and full reads at either isolation level (librdkafka and
kafka-python), the broker's /v1/transactions HTTP API, and two raw wire requests no
client library lets a test shape: FindCoordinator (to name a transactional id's
coordinator) and OffsetFetch with require_stable (UNSTABLE_OFFSET_COMMIT is retried
away inside librdkafka, so only the raw answer shows it).

Reading "everything" at read_committed: the end of a partition is its last stable
offset (ListOffsets with isolation_level=1), and the last offsets below it are often
a commit or abort marker, which no client returns. A read is therefore done when
librdkafka reports partition EOF at an offset >= the end (its fetch position moves
past control batches), not when a record at end-1 arrives.
"""

from __future__ import annotations

import json
import struct
import time
import urllib.error
import urllib.request

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from kafka_wire import Reader, Wire, _compact_str, _str, _uvarint
from strata_testlib import RDKAFKA_LOG, Rec, admin, consumer_conf, msg_to_rec

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"

API_OFFSET_FETCH = 9
API_FIND_COORDINATOR = 10

COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1

UNSTABLE_OFFSET_COMMIT = 88


# --------------------------------------------------------------------------- producers
def txn_producer_conf(bootstrap: str, transactional_id: str, **extra) -> dict:
    """A librdkafka transactional producer (idempotence and acks=all are implied)."""
    conf = {
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "linger.ms": 5,
        "logger": RDKAFKA_LOG,
    }
    conf.update(extra)
    return conf


def kafka_error(e: BaseException) -> KafkaError | None:
    """The KafkaError inside a KafkaException (None for anything else)."""
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return e.args[0]
    return None


def describe_error(e: BaseException) -> str:
    err = kafka_error(e)
    if err is None:
        return repr(e)
    return (f"{err.name()} (code {err.code()}, fatal={err.fatal()}, retriable={err.retriable()}, "
            f"txn_requires_abort={err.txn_requires_abort()}): {err.str()}")


# --------------------------------------------------------------------------- end offsets
def end_offset(bootstrap: str, topic: str, partition: int, isolation: str, timeout: float = 10) -> int:
    """ListOffsets(latest) as librdkafka's get_watermark_offsets asks it: with the
    consumer's isolation.level (read_committed: the last stable offset)."""
    c = Consumer(consumer_conf(bootstrap, **{"isolation.level": isolation}))
    try:
        _low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout,
                                             cached=False)
        return high
    finally:
        c.close()


def end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict[int, int]:
    return {p: end_offset(bootstrap, topic, p, isolation) for p in range(partitions)}


def admin_end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str,
                      timeout: float = 10) -> dict[int, int]:
    """The same through AdminClient.list_offsets (KIP-396) with an explicit IsolationLevel."""
    a = admin(bootstrap)
    level = IsolationLevel.READ_COMMITTED if isolation == READ_COMMITTED else IsolationLevel.READ_UNCOMMITTED
    fs = a.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
                        isolation_level=level, request_timeout=timeout)
    return {tp.partition: f.result(timeout=timeout).offset for tp, f in fs.items()}


def kp_end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict[int, int]:
    """kafka-python KafkaConsumer(isolation_level=...).end_offsets."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      isolation_level=isolation, request_timeout_ms=15000)
    try:
        got = c.end_offsets([KpTP(topic, p) for p in range(partitions)])
        return {tp.partition: off for tp, off in got.items()}
    finally:
        c.close()


# --------------------------------------------------------------------------- full reads
def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float = 30,
             start: dict[int, int] | None = None, **extra) -> dict[int, list[Rec]]:
    """librdkafka: every record of every partition from `start` (default 0) up to the
    end offset at `isolation` (taken first), as the consumer returns them."""
    start = start or {p: 0 for p in range(partitions)}
    end = end_offsets(bootstrap, topic, partitions, isolation)
    conf = consumer_conf(bootstrap, **{"isolation.level": isolation, "enable.partition.eof": True,
                                       **extra})
    c = Consumer(conf)
    got: dict[int, list[Rec]] = {p: [] for p in start}
    errors: list[str] = []
    try:
        c.assign([TopicPartition(topic, p, off) for p, off in start.items()])
        pending = {p for p in start if start[p] < end[p]}
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{isolation} read of {topic} timed out after {timeout}s; ends {end}; still "
                    f"waiting on {sorted(pending)}; got "
                    f"{[(p, len(v), v[-1].offset if v else None) for p, v in got.items()]}; "
                    f"client errors {errors[-5:]}")
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                err = m.error()
                if err.code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= end[m.partition()]:
                        pending.discard(m.partition())
                    continue
                if m.topic() is None:
                    errors.append(str(err))
                    if err.fatal():
                        raise KafkaException(err)
                    continue
                raise AssertionError(f"{isolation} consume error on {m.topic()}[{m.partition()}]: {err}")
            r = msg_to_rec(m)
            got[r.partition].append(r)
    finally:
        c.close()
    return got


def kp_read_all(bootstrap: str, topic: str, partitions: int, isolation: str,
                timeout: float = 30) -> dict[int, list[Rec]]:
    """kafka-python: assign, seek to 0, poll until position >= the end offset at
    `isolation` on every partition."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="none", isolation_level=isolation, fetch_max_wait_ms=100,
                      request_timeout_ms=15000)
    got: dict[int, list[Rec]] = {p: [] for p in range(partitions)}
    try:
        tps = {p: KpTP(topic, p) for p in range(partitions)}
        end = {tp.partition: off for tp, off in c.end_offsets(list(tps.values())).items()}
        c.assign(list(tps.values()))
        for tp in tps.values():
            c.seek(tp, 0)
        deadline = time.monotonic() + timeout
        while True:
            pending = [p for p in tps if c.position(tps[p]) < end[p]]
            if not pending:
                break
            assert time.monotonic() < deadline, (
                f"kafka-python {isolation} read of {topic} timed out; ends {end}; positions "
                f"{ {p: c.position(tps[p]) for p in tps} }")
            for tp, msgs in c.poll(timeout_ms=200).items():
                for m in msgs:
                    got[tp.partition].append(Rec(m.partition, m.offset, m.key, m.value,
                                                 tuple((k, v) for k, v in m.headers), m.timestamp))
    finally:
        c.close()
    return got


def values(recs: dict[int, list[Rec]] | list[Rec]) -> list[bytes]:
    if isinstance(recs, dict):
        return [r.value for p in sorted(recs) for r in recs[p]]
    return [r.value for r in recs]


# --------------------------------------------------------------------------- HTTP API
def http_json(url: str, method: str = "GET", body=None, raw: bytes | None = None,
              timeout: float = 10) -> tuple[int, object]:
    """(status, parsed JSON body or the text if it is not JSON)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, text = resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def transactions(broker) -> dict:
    status, body = http_json(broker.http_url + "/v1/transactions")
    assert status == 200, f"GET /v1/transactions answered {status}: {body}"
    assert isinstance(body, dict) and "transactions" in body and "open" in body, body
    return body


def txn_record(broker, transactional_id: str) -> dict | None:
    """GET /v1/transactions/<id>: the record, or None on 404."""
    status, body = http_json(f"{broker.http_url}/v1/transactions/{transactional_id}")
    if status == 404:
        return None
    assert status == 200, f"GET /v1/transactions/{transactional_id} answered {status}: {body}"
    return body


def open_on(broker, topic: str) -> list[dict]:
    return [e for e in transactions(broker)["open"] if e["topic"] == topic]


def http_abort(broker, body=None, raw: bytes | None = None) -> tuple[int, object]:
    return http_json(broker.http_url + "/v1/transactions/abort", "POST", body=body, raw=raw)


# --------------------------------------------------------------------------- raw wire
def _rcompact_str(r: Reader) -> str | None:
    n = r.uvarint()
    if n == 0:
        return None
    s = r.data[r.pos:r.pos + n - 1].decode()
    r.pos += n - 1
    return s


def find_coordinator(bootstrap: str, key: str, key_type: int) -> tuple[int, int, str]:
    """FindCoordinator asked of the agent at `bootstrap`: (error_code, node_id, host:port)."""
    w = Wire.connect(bootstrap)
    try:
        v = w.pick(API_FIND_COORDINATOR, [4, 5, 6, 3, 2, 1])
        if v >= 4:
            body = struct.pack(">b", key_type) + _uvarint(2) + _compact_str(key) + _uvarint(0)
            r = w.request(API_FIND_COORDINATOR, v, body, flexible=True)
            r.take(">i")  # throttle
            n = r.uvarint() - 1
            assert n == 1, f"FindCoordinator v{v}: {n} coordinators for one key"
            _rcompact_str(r)  # key
            node = r.take(">i")
            host = _rcompact_str(r)
            port = r.take(">i")
            err = r.take(">h")
            _rcompact_str(r)  # error message
            return err, node, f"{host}:{port}"
        if v == 3:
            body = _compact_str(key) + struct.pack(">b", key_type) + _uvarint(0)
            r = w.request(API_FIND_COORDINATOR, v, body, flexible=True)
            r.take(">i")
            err = r.take(">h")
            _rcompact_str(r)
            node = r.take(">i")
            host = _rcompact_str(r)
            port = r.take(">i")
            return err, node, f"{host}:{port}"
        body = _str(key) + struct.pack(">b", key_type)
        r = w.request(API_FIND_COORDINATOR, v, body)
        r.take(">i")
        err = r.take(">h")
        r.string()
        node = r.take(">i")
        host = r.string()
        port = r.take(">i")
        return err, node, f"{host}:{port}"
    finally:
        w.close()


def offset_fetch(bootstrap: str, group: str, topic: str, partitions: list[int],
                 require_stable: bool) -> dict[int, tuple[int, int]]:
    """OffsetFetch (v7..v9, the versions with require_stable) of one group's offsets
    for `partitions` of `topic`, sent to the group's coordinator:
    {partition: (committed_offset, error_code)}; a group-level error is reported on
    every partition."""
    err, _node, coord = find_coordinator(bootstrap, group, COORDINATOR_GROUP)
    assert err == 0, f"FindCoordinator(group {group}) error {err}"
    w = Wire.connect(coord)
    try:
        v = w.pick(API_OFFSET_FETCH, [7, 8, 9])
        topics = (_uvarint(2) + _compact_str(topic) + _uvarint(len(partitions) + 1)
                  + b"".join(struct.pack(">i", p) for p in partitions) + _uvarint(0))
        if v == 7:
            body = _compact_str(group) + topics + struct.pack(">?", require_stable) + _uvarint(0)
        else:
            grp = _compact_str(group)
            if v >= 9:
                grp += _compact_str(None) + struct.pack(">i", -1)  # member id, member epoch
            body = _uvarint(2) + grp + topics + _uvarint(0) + struct.pack(">?", require_stable) + _uvarint(0)
        r = w.request(API_OFFSET_FETCH, v, body, flexible=True)
        r.take(">i")  # throttle

        def read_topics() -> dict[int, tuple[int, int]]:
            out = {}
            for _ in range(r.uvarint() - 1):
                _rcompact_str(r)  # topic
                for _ in range(r.uvarint() - 1):
                    p = r.take(">i")
                    off = r.take(">q")
                    r.take(">i")  # leader epoch
                    _rcompact_str(r)  # metadata
                    perr = r.take(">h")
                    r.skip_tags()
                    out[p] = (off, perr)
                r.skip_tags()
            return out

        if v == 7:
            out = read_topics()
            gerr = r.take(">h")
        else:
            n = r.uvarint() - 1
            assert n == 1, f"OffsetFetch v{v}: {n} groups in the answer"
            _rcompact_str(r)
            out = read_topics()
            gerr = r.take(">h")
        if gerr:
            out = {p: (out.get(p, (-1, gerr))[0], gerr) for p in partitions}
        return out
    finally:
        w.close()


# --------------------------------------------------------------------------- admin APIs
API_DESCRIBE_PRODUCERS = 61
API_DESCRIBE_TRANSACTIONS = 65
API_LIST_TRANSACTIONS = 66

TRANSACTIONAL_ID_NOT_FOUND = 105


def describe_transactions(bootstrap: str, transactional_ids: list[str]) -> dict[str, dict]:
    """DescribeTransactions v0 (KIP-664), sent to the first id's transaction coordinator:
    {transactional_id: {error_code, state, timeout_ms, start_ms, producer_id,
    producer_epoch, partitions: sorted [(topic, partition)]}}."""
    err, _node, coord = find_coordinator(bootstrap, transactional_ids[0], COORDINATOR_TRANSACTION)
    assert err == 0, f"FindCoordinator(transaction {transactional_ids[0]}) error {err}"
    w = Wire.connect(coord)
    try:
        w.pick(API_DESCRIBE_TRANSACTIONS, [0])
        body = (_uvarint(len(transactional_ids) + 1) + b"".join(_compact_str(t) for t in transactional_ids)
                + _uvarint(0))
        r = w.request(API_DESCRIBE_TRANSACTIONS, 0, body, flexible=True)
        r.take(">i")  # throttle
        out = {}
        for _ in range(r.uvarint() - 1):
            e = r.take(">h")
            tid = _rcompact_str(r)
            state = _rcompact_str(r)
            timeout = r.take(">i")
            start = r.take(">q")
            pid = r.take(">q")
            epoch = r.take(">h")
            parts = []
            for _ in range(r.uvarint() - 1):
                topic = _rcompact_str(r)
                parts += [(topic, r.take(">i")) for _ in range(r.uvarint() - 1)]
                r.skip_tags()
            r.skip_tags()
            out[tid] = {"error_code": e, "state": state, "timeout_ms": timeout, "start_ms": start,
                        "producer_id": pid, "producer_epoch": epoch, "partitions": sorted(parts)}
        return out
    finally:
        w.close()


def list_transactions(bootstrap: str, states: list[str] = (), producer_ids: list[int] = ()) -> dict[str, tuple[int, str]]:
    """ListTransactions v0 from the agent at `bootstrap`: {transactional_id: (producer_id,
    state)}; asserts no error."""
    w = Wire.connect(bootstrap)
    try:
        w.pick(API_LIST_TRANSACTIONS, [0, 1])
        body = (_uvarint(len(states) + 1) + b"".join(_compact_str(s) for s in states)
                + _uvarint(len(producer_ids) + 1) + b"".join(struct.pack(">q", p) for p in producer_ids)
                + _uvarint(0))
        r = w.request(API_LIST_TRANSACTIONS, 0, body, flexible=True)
        r.take(">i")
        err = r.take(">h")
        unknown = [_rcompact_str(r) for _ in range(r.uvarint() - 1)]
        out = {}
        for _ in range(r.uvarint() - 1):
            tid = _rcompact_str(r)
            pid = r.take(">q")
            state = _rcompact_str(r)
            r.skip_tags()
            out[tid] = (pid, state)
        assert err == 0 and not unknown, f"ListTransactions error {err}, unknown state filters {unknown}"
        return out
    finally:
        w.close()


def describe_producers(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, tuple[int, list[dict]]]:
    """DescribeProducers v0 (the partition leader at `bootstrap`): {partition: (error_code,
    [{producer_id, producer_epoch, last_sequence, last_timestamp, coordinator_epoch,
    current_txn_start_offset}])}."""
    w = Wire.connect(bootstrap)
    try:
        w.pick(API_DESCRIBE_PRODUCERS, [0])
        body = (_uvarint(2) + _compact_str(topic) + _uvarint(len(partitions) + 1)
                + b"".join(struct.pack(">i", p) for p in partitions) + _uvarint(0) + _uvarint(0))
        r = w.request(API_DESCRIBE_PRODUCERS, 0, body, flexible=True)
        r.take(">i")
        out = {}
        for _ in range(r.uvarint() - 1):
            _rcompact_str(r)
            for _ in range(r.uvarint() - 1):
                p = r.take(">i")
                e = r.take(">h")
                _rcompact_str(r)  # error message
                producers = []
                for _ in range(r.uvarint() - 1):
                    pid, epoch, seq, ts, ce, start = r.take(">qiiqiq")
                    r.skip_tags()
                    producers.append({"producer_id": pid, "producer_epoch": epoch, "last_sequence": seq,
                                      "last_timestamp": ts, "coordinator_epoch": ce,
                                      "current_txn_start_offset": start})
                r.skip_tags()
                out[p] = (e, producers)
            r.skip_tags()
        return out
    finally:
        w.close()
