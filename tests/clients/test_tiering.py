"""Tiering with real clients: closed segments go to an archive (SeaweedFS over S3, or a
local directory) as Parquet, local segments past `local.retention.ms` are deleted, and
clients still read everything from offset 0 (archive first, then the hot log).

How a test drives it: the broker runs with `--tiering-interval-ms 200`; topics get a
small `segment.bytes` so that segments close; "caught up" means the last archived
offset (`archived_upto` in GET /v1/tiering) is the offset just before the active (last)
local segment, i.e. every closed segment is archived. Local deletion is observed in
the data dir ({data_dir}/logs/{topic}-{p}/<base offset>.log): clients keep seeing log
start 0 because the archive starts there. The agent applies local retention every 5 s.

Record timestamps are an hour old: recent enough that the default local retention
(-2 = retention.ms, 7 days) keeps them, so local deletion happens only once a test
sets local.retention.ms=0.

Tests 3 and 4 (faults, boundary) use headers without duplicate keys, so that they test
what they are about; duplicate header keys are covered by the exactness test.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from strata_testlib import (
    CODECS,
    Rec,
    admin,
    assert_dense_per_partition,
    consume_confluent,
    consumer_conf,
    create_topic,
    group_by_partition,
    make_records,
    msg_to_rec,
    produce_confluent,
    unique_topic,
    wait_until,
    watermarks,
)

TIERING_INTERVAL_MS = 200
# The agent applies local retention every 5 s.
LOCAL_RETENTION_PERIOD_S = 5.0
SEGMENT_BYTES = "3000"

# Header sets without duplicate keys (still empty, null-valued and binary values).
HEADER_VARIANTS_UNIQUE_KEYS: list[list[tuple[str, bytes | None]]] = [
    [],
    [("trace-id", b"abc-123")],
    [("a", b""), ("null-header", None), ("bin", bytes([0, 255, 1, 254]))],
]

OBJECT_NAME = re.compile(r"^(\d{20})-(\d{20})-([0-9a-f]+)\.parquet$")


def now_ms() -> int:
    return int(time.time() * 1000)


def hour_ago() -> int:
    return now_ms() - 3_600_000


# --------------------------------------------------------------------------- archive
@dataclass
class Archive:
    kind: str                  # "s3" | "file"
    url: str
    dir: Path | None = None    # file://
    weed: object | None = None  # s3:// (a SeaweedFS)
    prefix: str = ""           # s3:// key prefix

    def objects(self, topic: str, partition: int) -> list[str]:
        """Names of the Parquet objects in the store under one partition (the store
        listing, not the manifest)."""
        rel = f"topic={topic}/partition={partition}/"
        if self.kind == "file":
            d = self.dir / rel
            names = [f.name for f in d.glob("*.parquet")] if d.is_dir() else []
        else:
            keys = self.weed.list_keys(f"{self.prefix}/{rel}")
            names = [k.rsplit("/", 1)[-1] for k in keys]
        return sorted(n for n in names if n.endswith(".parquet"))


def start_tiered_broker(broker_factory, kind: str, weed=None, extra_env=None):
    """A started broker archiving to SeaweedFS (kind "s3") or a local dir ("file")."""
    env = dict(extra_env or {})
    b = broker_factory(extra_args=["--tiering-interval-ms", str(TIERING_INTERVAL_MS)], extra_env=env)
    if kind == "s3":
        assert weed is not None
        prefix = f"archive-{uuid.uuid4().hex[:10]}"
        arch = Archive("s3", f"s3://{weed.BUCKET}/{prefix}", weed=weed, prefix=prefix)
        b.extra_env.update(weed.broker_env())
    else:
        d = b.root / "archive"
        arch = Archive("file", f"file://{d}", dir=d)
    b.extra_args += ["--archive-url", arch.url]
    b.start()
    got = tiering(b)["archive"]
    assert got == arch.url, f"/v1/tiering reports archive {got!r}, started with {arch.url!r}"
    return b, arch


# --------------------------------------------------------------------------- broker state
def tiering(broker) -> dict:
    with urllib.request.urlopen(broker.http_url + "/v1/tiering", timeout=5) as resp:
        return json.load(resp)


def tier_status(broker, topic: str) -> dict[int, dict]:
    return {e["partition"]: e for e in tiering(broker)["partitions"] if e["topic"] == topic}


def local_bases(broker, topic: str, partition: int) -> list[int]:
    """Base offsets of the local segments (the 20-digit .log file names), ascending."""
    d = broker.data_dir / "logs" / f"{topic}-{partition}"
    return sorted(int(f.stem) for f in d.glob("*.log") if f.stem.isdigit())


def wait_caught_up(broker, topic: str, end: dict[int, int], timeout: float = 30) -> dict[int, dict]:
    """Until every closed local segment is archived: archived_upto == base offset of the
    active segment - 1 (at least one segment closed), by a pass that saw the log end
    end[p] and had no error. Returns the status."""
    partitions = sorted(end)
    state = {}

    def done():
        st = tier_status(broker, topic)
        state["status"] = st
        state["bases"] = {p: local_bases(broker, topic, p) for p in partitions}
        for p in partitions:
            bases = state["bases"][p]
            if p not in st or not bases or bases[-1] == 0:
                return False
            if st[p]["archived_upto"] != bases[-1] - 1 or st[p]["log_end_offset"] != end[p]:
                return False
            if st[p]["last_error"] is not None:
                return False
        return st

    try:
        return wait_until(done, timeout, f"tiering of {topic} to catch up", interval=0.1)
    except AssertionError as e:
        raise AssertionError(f"{e}\nlast /v1/tiering: {state.get('status')}\n"
                             f"local segments: {state.get('bases')}") from None


def set_topic_config(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ])
    a = admin(bootstrap)  # keep the client alive until the futures resolve
    for f in a.incremental_alter_configs([res]).values():
        f.result(timeout=15)


def wait_local_deleted(broker, topic: str, status: dict[int, dict], timeout: float = 20) -> None:
    """Until the first local segment of every partition starts right after its archived
    range (every archived segment deleted locally)."""
    def done():
        bases = {p: local_bases(broker, topic, p) for p in status}
        return all(bases[p] and bases[p][0] == status[p]["archived_upto"] + 1 for p in status)

    try:
        wait_until(done, timeout, f"local deletion of the archived segments of {topic}", interval=0.2)
    except AssertionError as e:
        bases = {p: local_bases(broker, topic, p)[:5] for p in status}
        upto = {p: s["archived_upto"] for p, s in status.items()}
        raise AssertionError(f"{e}\nfirst local segments: {bases}; archived_upto: {upto}") from None


# --------------------------------------------------------------------------- comparison
def diff_records(got: list[Rec], expected: list[Rec]) -> list[str]:
    """Readable differences: missing/extra/duplicated offsets, and per field the number
    of records that differ, with the first example."""
    if got == expected:
        return []
    out = [f"got {len(got)} records, expected {len(expected)}"]
    got_offs = [r.offset for r in got]
    dups = sorted({o for o in got_offs if got_offs.count(o) > 1}) if len(set(got_offs)) != len(got_offs) else []
    if dups:
        out.append(f"duplicated offsets: {dups[:20]}")
    if got_offs != sorted(got_offs):
        out.append("offsets not in ascending order")
    exp_by = {r.offset: r for r in expected}
    got_by = {r.offset: r for r in got}
    missing = sorted(set(exp_by) - set(got_by))
    extra = sorted(set(got_by) - set(exp_by))
    if missing:
        out.append(f"missing offsets ({len(missing)}): {missing[:20]}")
    if extra:
        out.append(f"unexpected offsets ({len(extra)}): {extra[:20]}")
    for fld in ("key", "value", "headers", "timestamp"):
        bad = [o for o in sorted(set(exp_by) & set(got_by))
               if getattr(got_by[o], fld) != getattr(exp_by[o], fld)]
        if bad:
            o = bad[0]
            out.append(f"{fld} differs in {len(bad)} records, first at offset {o}:\n"
                       f"    got      {got_by[o].short()}\n    expected {exp_by[o].short()}")
    return out


def check_records(errors: list[str], got: list[Rec], expected: list[Rec], what: str) -> None:
    d = diff_records(got, expected)
    if d:
        errors.append(f"{what}: " + "\n  ".join(d))


def raise_errors(errors: list[str]) -> None:
    if errors:
        raise AssertionError(f"{len(errors)} problem(s):\n" + "\n".join(f"- {e}" for e in errors))


def kp_read(bootstrap: str, topic: str, start: dict[int, int], end: dict[int, int],
            timeout: float = 60) -> dict[int, list[Rec]]:
    """kafka-python: assign + seek to start[p], read until end[p]-1 on every partition."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="none", fetch_max_wait_ms=100, request_timeout_ms=15000)
    got: dict[int, list[Rec]] = {p: [] for p in start}
    try:
        tps = {p: KpTopicPartition(topic, p) for p in start}
        c.assign(list(tps.values()))
        for p, off in start.items():
            c.seek(tps[p], off)
        pending = {p for p in start if start[p] < end[p]}
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, (
                f"kafka-python read of {topic} timed out; waiting on {sorted(pending)}; "
                f"got {[(p, len(v), v[-1].offset if v else None) for p, v in got.items()]}")
            for tp, msgs in c.poll(timeout_ms=200).items():
                for m in msgs:
                    assert m.timestamp_type == 0, f"timestamp type {m.timestamp_type} at {m}"
                    r = Rec(m.partition, m.offset, m.key, m.value,
                            tuple((k, v) for k, v in m.headers), m.timestamp)
                    got[r.partition].append(r)
                    if r.offset >= end[r.partition] - 1:
                        pending.discard(r.partition)
    finally:
        c.close()
    return got


def produce_all_shapes(bootstrap: str, topic: str, partitions: int, per_partition: int) -> list[Rec]:
    """make_records' shapes (null/empty keys and values, binary values, headers with
    duplicate keys and null values) in every codec (3 flushed waves each), then from an
    idempotent producer; explicit increasing timestamps an hour old. Returns the
    delivered records."""
    ts = hour_ago()
    sent: list[Rec] = []
    for i, codec in enumerate(CODECS):
        recs = make_records(f"tier-{codec}", partitions, per_partition, ts_base=ts + i * 100_000)
        sent += produce_confluent(bootstrap, topic, recs, codec, waves=3)
    recs = make_records("tier-idempotent", partitions, per_partition,
                        ts_base=ts + len(CODECS) * 100_000)
    sent += produce_confluent(bootstrap, topic, recs, "lz4", waves=3, **{"enable.idempotence": True})
    assert_dense_per_partition(sent)
    return sent


def read_back_everything(errors: list[str], bootstrap: str, topic: str, sent: list[Rec],
                         what: str, kafka_python: bool = True) -> None:
    """Offset 0 to the end with librdkafka (and kafka-python); compared exactly."""
    exp = group_by_partition(sent)
    end = {p: len(v) for p, v in exp.items()}
    start = {p: 0 for p in exp}
    try:
        got = consume_confluent(bootstrap, topic, start, end, timeout=60)
        for p in sorted(exp):
            check_records(errors, got[p], exp[p], f"librdkafka read of {topic}[{p}] from 0 ({what})")
    except Exception as e:  # noqa: BLE001 - reported with the other problems
        errors.append(f"librdkafka read of {topic} from 0 ({what}) failed: {e}")
    if kafka_python:
        try:
            got = kp_read(bootstrap, topic, start, end)
            for p in sorted(exp):
                check_records(errors, got[p], exp[p], f"kafka-python read of {topic}[{p}] from 0 ({what})")
        except Exception as e:  # noqa: BLE001
            errors.append(f"kafka-python read of {topic} from 0 ({what}) failed: {e}")
    for p in sorted(exp):
        wm = watermarks(bootstrap, topic, p)
        if wm != (0, end[p]):
            errors.append(f"{topic}[{p}] watermarks (low, high) = {wm}, expected {(0, end[p])}")


def check_offsets_for_times(errors: list[str], bootstrap: str, topic: str, sent: list[Rec],
                            archived_upto: dict[int, int]) -> None:
    """ListOffsets by timestamp answers from the archive and from the local log: the
    first offset whose timestamp is >= the one asked for."""
    c = Consumer(consumer_conf(bootstrap))
    try:
        for p, recs in group_by_partition(sent).items():
            probes = [recs[0].timestamp - 1000, recs[0].timestamp, recs[1].timestamp,
                      recs[archived_upto[p] // 2].timestamp, recs[archived_upto[p]].timestamp,
                      recs[archived_upto[p] + 1].timestamp, recs[-1].timestamp]
            for ts in probes:
                want = next(r.offset for r in recs if r.timestamp >= ts)
                res = c.offsets_for_times([TopicPartition(topic, p, ts)], timeout=10)[0]
                if res.error is not None or res.offset != want:
                    errors.append(f"offsets_for_times({topic}[{p}], {ts}) = {res.offset} "
                                  f"(error {res.error}), expected {want} "
                                  f"(archived_upto={archived_upto[p]})")
    finally:
        c.close()


# =========================================================================== tests
@pytest.mark.parametrize("kind", ["s3", "file"])
def test_tiered_records_read_back_exactly(request, broker_factory, kind):
    """Every record shape and codec, plus an idempotent producer; archived, deleted
    locally; librdkafka and kafka-python read everything back from offset 0 exactly."""
    weed = request.getfixturevalue("seaweedfs") if kind == "s3" else None
    b, arch = start_tiered_broker(broker_factory, kind, weed)
    topic = unique_topic(f"tier-exact-{kind}")
    create_topic(b.bootstrap, topic, 2, {"segment.bytes": SEGMENT_BYTES})
    sent = produce_all_shapes(b.bootstrap, topic, 2, 30)
    end = {p: len(v) for p, v in group_by_partition(sent).items()}

    st = wait_caught_up(b, topic, end)
    errors: list[str] = []
    for p in (0, 1):
        s = st[p]
        if s["log_end_offset"] != end[p] or s["lag_records"] != end[p] - s["archived_upto"] - 1:
            errors.append(f"/v1/tiering for {topic}[{p}] inconsistent: {s}, produced {end[p]}")
        if s["archived_upto"] < end[p] // 2:
            errors.append(f"{topic}[{p}]: only {s['archived_upto'] + 1} of {end[p]} records archived: "
                          f"segments did not close as expected ({s})")
        objs = arch.objects(topic, p)
        if len(objs) != s["objects"]:
            errors.append(f"{topic}[{p}]: {len(objs)} objects in the store, manifest has {s['objects']}: {objs}")
        # nothing deleted locally before local.retention.ms is lowered
        if local_bases(b, topic, p)[0] != 0:
            errors.append(f"{topic}[{p}]: local segments deleted before local.retention.ms=0: "
                          f"{local_bases(b, topic, p)[:5]}")
    raise_errors(errors)

    set_topic_config(b.bootstrap, topic, {"local.retention.ms": "0"})
    wait_local_deleted(b, topic, st)

    read_back_everything(errors, b.bootstrap, topic, sent, f"{kind} archive")
    check_offsets_for_times(errors, b.bootstrap, topic, sent,
                            {p: st[p]["archived_upto"] for p in st})
    raise_errors(errors)


# --------------------------------------------------------------------------- analytics
def httpfs_extension_path() -> tuple[str, str]:
    """The httpfs extension file shipped by the PyPI package duckdb-ext-httpfs for this
    duckdb version, and that package's version."""
    from importlib.metadata import PackageNotFoundError, files, version

    import duckdb

    try:
        pkg_version = version("duckdb-ext-httpfs")
    except PackageNotFoundError:
        raise AssertionError("duckdb-ext-httpfs is not installed (tests/clients/requirements.txt)")
    want = f"v{duckdb.__version__}/"
    found = [f for f in files("duckdb-ext-httpfs") or [] if f.name == "httpfs.duckdb_extension"]
    match = [f for f in found if want in str(f)]
    assert match, (f"duckdb-ext-httpfs {pkg_version} has no httpfs extension for duckdb "
                   f"{duckdb.__version__}: {[str(f) for f in found]}")
    return str(match[0].locate()), pkg_version


def duckdb_on_seaweedfs(weed):
    """A DuckDB connection with httpfs loaded from its local file (no extension
    download) and an S3 secret for the SeaweedFS server."""
    import duckdb

    path, _ = httpfs_extension_path()
    con = duckdb.connect(config={"autoinstall_known_extensions": "false",
                                 "autoload_known_extensions": "false"})
    con.execute(f"LOAD '{path}'")
    host = weed.endpoint.removeprefix("http://")
    con.execute(f"""
        CREATE SECRET seaweedfs (
            TYPE s3, KEY_ID '{weed.ACCESS_KEY}', SECRET '{weed.SECRET_KEY}',
            REGION '{weed.REGION}', ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false)
    """)
    return con


def _md5(b: bytes | None) -> str:
    return "null" if b is None else hashlib.md5(b).hexdigest()


def row_digest(r: Rec) -> str:
    return f"{r.offset}:{_md5(r.key)}:{_md5(r.value)}:{r.timestamp}"


def test_duckdb_reads_archive_from_s3(broker_factory, seaweedfs):
    """DuckDB (httpfs) reads the Parquet archive straight from SeaweedFS: per partition
    the row count, offset range and a checksum of offsets, keys, values and timestamps
    equal the produced records that are archived (offset <= archived_upto)."""
    import duckdb

    b, arch = start_tiered_broker(broker_factory, "s3", seaweedfs)
    topic = unique_topic("tier-duckdb")
    create_topic(b.bootstrap, topic, 2, {"segment.bytes": SEGMENT_BYTES})
    sent = produce_all_shapes(b.bootstrap, topic, 2, 20)
    exp = group_by_partition(sent)
    st = wait_caught_up(b, topic, {p: len(v) for p, v in exp.items()})

    con = duckdb_on_seaweedfs(seaweedfs)
    src = f"read_parquet('s3://{seaweedfs.BUCKET}/{arch.prefix}/**/*.parquet', hive_partitioning=true)"
    rows = con.execute(f"""
        SELECT "partition", count(*), min("offset"), max("offset"),
               md5(string_agg(
                   "offset"::VARCHAR || ':' || coalesce(md5(key), 'null') || ':'
                   || coalesce(md5(value), 'null') || ':' || epoch_ms("timestamp")::VARCHAR,
                   ',' ORDER BY "offset")),
               count(DISTINCT "offset"),
               sum(CASE WHEN timestamp_type = 0 THEN 0 ELSE 1 END),
               sum(len(headers))
        FROM {src}
        WHERE topic = ?
        GROUP BY "partition" ORDER BY "partition"
    """, [topic]).fetchall()
    got = {r[0]: r[1:] for r in rows}

    errors: list[str] = []
    assert sorted(got) == [0, 1], f"DuckDB sees partitions {sorted(got)} of {topic}: {rows}"
    for p in (0, 1):
        upto = st[p]["archived_upto"]
        archived = [r for r in exp[p] if r.offset <= upto]
        digest = hashlib.md5(",".join(row_digest(r) for r in archived).encode()).hexdigest()
        want = (len(archived), 0, upto, digest, len(archived), 0)
        if got[p][:6] != want:
            errors.append(f"{topic}[{p}] in DuckDB (count, min, max, md5, distinct offsets, "
                          f"non-CreateTime rows) = {got[p][:6]}, expected {want}")
        headers = sum(len(r.headers) for r in archived)
        if got[p][6] != headers:
            errors.append(f"{topic}[{p}]: DuckDB counts {got[p][6]} headers in the archive, "
                          f"{headers} were produced in those records")
    # without faults every object in the store is one the manifest references
    n_objects = con.execute(f"SELECT count(DISTINCT filename) FROM read_parquet("
                            f"'s3://{seaweedfs.BUCKET}/{arch.prefix}/**/*.parquet', filename=true)"
                            ).fetchone()[0]
    if n_objects != st[0]["objects"] + st[1]["objects"]:
        errors.append(f"DuckDB reads {n_objects} objects, the manifest has "
                      f"{st[0]['objects']} + {st[1]['objects']}")
    print(f"duckdb {duckdb.__version__}, duckdb-ext-httpfs {httpfs_extension_path()[1]}")
    raise_errors(errors)


# --------------------------------------------------------------------------- faults
def test_s3_outage_keeps_hot_data_and_local_segments(broker_factory, seaweedfs):
    """SeaweedFS down: produce and consume of hot data work, /v1/tiering reports the
    error and a growing lag, no local segment is deleted (local.retention.ms=0). Back
    up: tiering catches up, then the archived segments are deleted locally, and
    everything reads back from offset 0."""
    b, arch = start_tiered_broker(broker_factory, "s3", seaweedfs)
    topic = unique_topic("tier-outage")
    create_topic(b.bootstrap, topic, 1, {"segment.bytes": SEGMENT_BYTES})
    ts = hour_ago()
    hv = HEADER_VARIANTS_UNIQUE_KEYS

    # before the outage: archived and deleted locally
    sent = produce_confluent(b.bootstrap, topic, make_records("before", 1, 40, ts_base=ts,
                                                              header_variants=hv), "none", waves=4)
    st = wait_caught_up(b, topic, {0: len(sent)})
    set_topic_config(b.bootstrap, topic, {"local.retention.ms": "0"})
    wait_local_deleted(b, topic, st)
    archived_before = st[0]["archived_upto"]

    seaweedfs.stop()
    # hot data while S3 is down: produce, consume
    during = produce_confluent(b.bootstrap, topic, make_records("down1", 1, 40, ts_base=ts + 100_000,
                                                                header_variants=hv), "none", waves=4)
    sent += during
    assert_dense_per_partition(sent)
    got = consume_confluent(b.bootstrap, topic, {0: during[0].offset}, {0: len(sent)})
    errors: list[str] = []
    check_records(errors, got[0], during, "hot records read while S3 is down")
    raise_errors(errors)

    def failing_with_lag():
        s = tier_status(b, topic).get(0)
        return s if s and s["last_error"] and s["lag_records"] > 0 else False
    s1 = wait_until(failing_with_lag, 30, "/v1/tiering to report the S3 failure", interval=0.2)
    assert s1["archived_upto"] == archived_before, s1
    bases_down = local_bases(b, topic, 0)
    assert bases_down[0] == archived_before + 1 and len(bases_down) > 1, (
        f"expected unarchived closed segments after {archived_before}: {bases_down}")

    more = produce_confluent(b.bootstrap, topic, make_records("down2", 1, 40, ts_base=ts + 200_000,
                                                              header_variants=hv), "none", waves=4)
    sent += more
    assert_dense_per_partition(sent)
    bases_down = local_bases(b, topic, 0)
    watch_since = time.monotonic()

    # lag grows; and for more than a local-retention period nothing local goes
    state = {}

    def lag_grew_no_deletion():
        bases = local_bases(b, topic, 0)
        missing = sorted(set(bases_down) - set(bases))
        assert not missing, (f"local segments {missing} deleted while S3 is down "
                             f"(not archived; archived_upto={archived_before}); now {bases}")
        s = tier_status(b, topic)[0]
        state["s"] = s
        return (s["lag_records"] > s1["lag_records"] and s["last_error"] is not None
                and s["archived_upto"] == archived_before
                and time.monotonic() - watch_since > LOCAL_RETENTION_PERIOD_S + 1.0)
    wait_until(lag_grew_no_deletion, 45, "lag_records to grow while S3 is down", interval=0.2)
    s2 = state["s"]
    assert s2["log_end_offset"] == len(sent), s2
    print(f"while down: {s1} -> {s2}")

    seaweedfs.start()
    st = wait_caught_up(b, topic, {0: len(sent)}, timeout=90)
    assert st[0]["lag_records"] < len(sent) - archived_before - 1, st
    assert st[0]["last_error"] is None, st
    wait_local_deleted(b, topic, st)

    read_back_everything(errors, b.bootstrap, topic, sent, "after the S3 outage")
    raise_errors(errors)


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_upload_failing_before_publish_leaves_orphan(request, broker_factory, kind):
    """STRATA_FAILPOINT_TIERING_BEFORE_PUBLISH=2: the first two uploads write their
    object and fail before the manifest publishes it; the retry uploads another. The
    store then holds 2 objects more than the manifest references (orphans covering the
    same offsets as a published one), and readers from offset 0 see every record once."""
    weed = request.getfixturevalue("seaweedfs") if kind == "s3" else None
    b, arch = start_tiered_broker(broker_factory, kind, weed,
                                  extra_env={"STRATA_FAILPOINT_TIERING_BEFORE_PUBLISH": "2"})
    topic = unique_topic(f"tier-orphan-{kind}")
    create_topic(b.bootstrap, topic, 2, {"segment.bytes": SEGMENT_BYTES})
    ts = hour_ago()
    sent = produce_confluent(b.bootstrap, topic, make_records("orphan", 2, 60, ts_base=ts,
                             header_variants=HEADER_VARIANTS_UNIQUE_KEYS), "snappy", waves=6)
    assert_dense_per_partition(sent)
    st = wait_caught_up(b, topic, {p: len(v) for p, v in group_by_partition(sent).items()})

    errors: list[str] = []
    orphans = 0
    listing = {}
    for p in (0, 1):
        names = arch.objects(topic, p)
        listing[p] = names
        ranges: dict[tuple[int, int], int] = {}
        for n in names:
            m = OBJECT_NAME.match(n)
            if not m:
                errors.append(f"{topic}[{p}]: object name {n!r} is not <first:020>-<last:020>-<uuid>.parquet")
                continue
            key = (int(m.group(1)), int(m.group(2)))
            ranges[key] = ranges.get(key, 0) + 1
        if len(names) < st[p]["objects"]:
            errors.append(f"{topic}[{p}]: {len(names)} objects in the store < {st[p]['objects']} in the manifest")
        orphans += len(names) - st[p]["objects"]
        # the published ranges are contiguous from 0 to archived_upto; orphans repeat one
        spans = sorted(ranges)
        if len(spans) != st[p]["objects"] or spans[0][0] != 0 or spans[-1][1] != st[p]["archived_upto"] \
                or any(a[1] + 1 != c[0] for a, c in zip(spans, spans[1:])):
            errors.append(f"{topic}[{p}]: object ranges {spans} do not tile 0..{st[p]['archived_upto']} "
                          f"with {st[p]['objects']} published objects")
    if orphans != 2:
        errors.append(f"expected 2 orphaned objects (store - manifest), found {orphans}: "
                      f"store {listing}, manifest {[st[p]['objects'] for p in (0, 1)]}")
    if "tiering failed; will retry" not in b.log_text():
        errors.append("the broker log shows no failed tiering attempt (was the failpoint armed?)")
    raise_errors(errors)

    set_topic_config(b.bootstrap, topic, {"local.retention.ms": "0"})
    wait_local_deleted(b, topic, st)
    read_back_everything(errors, b.bootstrap, topic, sent, f"{kind} archive with orphans")
    raise_errors(errors)


# --------------------------------------------------------------------------- boundary
def test_consumer_crosses_from_archive_into_hot_log(broker_factory):
    """One librdkafka consumer starts at offset 0 (archive only: the early segments are
    deleted locally), with a small fetch size so that many fetches cross segment and
    archive/local boundaries, reads to the end, then keeps reading records produced
    while it runs: offsets exactly 0..N-1, records exact."""
    b, arch = start_tiered_broker(broker_factory, "file")
    topic = unique_topic("tier-boundary")
    create_topic(b.bootstrap, topic, 1, {"segment.bytes": SEGMENT_BYTES})
    ts = hour_ago()
    hv = HEADER_VARIANTS_UNIQUE_KEYS
    sent = produce_confluent(b.bootstrap, topic, make_records("cold", 1, 120, ts_base=ts,
                                                              header_variants=hv), "lz4", waves=8)
    st = wait_caught_up(b, topic, {0: len(sent)})
    set_topic_config(b.bootstrap, topic, {"local.retention.ms": "0"})
    wait_local_deleted(b, topic, st)
    local_start = local_bases(b, topic, 0)[0]
    assert 0 < local_start < len(sent), (local_start, len(sent))

    # the part produced after the deletion: some now, some while the consumer runs
    sent += produce_confluent(b.bootstrap, topic, make_records("hot1", 1, 30, ts_base=ts + 100_000,
                                                               header_variants=hv), "none", waves=3)
    c = Consumer(consumer_conf(b.bootstrap, **{"fetch.message.max.bytes": 1024}))
    got: list[Rec] = []
    live: list[Rec] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        target = len(sent)
        while True:
            assert time.monotonic() < deadline, (
                f"consumer stuck at {got[-1].offset if got else None}; target {target - 1}")
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consume error: {m.error()}")
            got.append(msg_to_rec(m))
            if got[-1].offset >= target - 1:
                if live:
                    break
                # caught up with everything produced so far: produce more while reading
                live = produce_confluent(b.bootstrap, topic,
                                         make_records("hot2", 1, 30, ts_base=ts + 200_000,
                                                      header_variants=hv), "zstd", waves=3)
                sent += live
                target = len(sent)
    finally:
        c.close()

    offsets = [r.offset for r in got]
    assert offsets == list(range(len(sent))), (
        f"offsets read from 0 across the archive/local boundary (local log starts at "
        f"{local_start}) are not 0..{len(sent) - 1}: " + "; ".join(diff_records(got, sent)))
    errors: list[str] = []
    check_records(errors, got, sent, f"{topic}[0] from 0 across the boundary at {local_start}")
    raise_errors(errors)
