"""strata-bench (the load generator in bench/) against strata: a short smoke test of its
three modes (produce, consume by assignment and as a group, e2e), of its JSON report and
table, and of its checker: values that are not strata-bench values, or whose checksum
does not match, must fail a run (exit 2), so that a wrong answer cannot pass.

Environment:
  STRATA_BENCH_BIN  path of the strata-bench binary
                    (default <repo>/target/debug/strata-bench; missing = the test fails)

Not covered: an unreachable bootstrap address. strata-bench then waits for librdkafka's
timeouts (about 30 s for `consume`, 60 s for `produce`), too long for a smoke test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from strata_testlib import (
    Out,
    consume_confluent,
    create_topic,
    produce_confluent,
    unique_topic,
    watermarks,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BENCH_BIN = REPO_ROOT / "target" / "debug" / "strata-bench"
# Generous: every run here takes a few seconds against a debug broker.
RUN_TIMEOUT = 120.0
# A consume that hears nothing for this long stops (and fails) instead of waiting 30 s.
IDLE_TIMEOUT_S = "20"


def bench_bin() -> Path:
    return Path(os.environ.get("STRATA_BENCH_BIN", str(DEFAULT_BENCH_BIN)))


@dataclass
class BenchRun:
    cmd: list[str]
    rc: int
    stdout: str
    stderr: str
    # The JSON report, when strata-bench wrote one (it does not on errors: exit 1).
    report: dict | None

    def describe(self) -> str:
        return (f"{' '.join(self.cmd)}\nexit code {self.rc}\n"
                f"----- stdout -----\n{self.stdout}\n----- stderr -----\n{self.stderr}")


def run_bench(bootstrap: str, tmp_path: Path, mode: str, *args: str,
              timeout: float = RUN_TIMEOUT) -> BenchRun:
    """Run `strata-bench --bootstrap B --json FILE <mode> <args>`; parse FILE if written."""
    binary = bench_bin()
    assert binary.exists(), (
        f"strata-bench binary not found at {binary}; build it (cargo build -p strata-bench) "
        f"or set STRATA_BENCH_BIN")
    json_path = tmp_path / f"bench-{mode}-{uuid.uuid4().hex[:8]}.json"
    cmd = [str(binary), "--bootstrap", bootstrap, "--json", str(json_path), mode, *args]
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{' '.join(cmd)} timed out after {timeout}s\n"
                             f"stdout: {e.stdout!r}\nstderr: {e.stderr!r}")
    report = json.loads(json_path.read_text()) if json_path.exists() else None
    return BenchRun(cmd, p.returncode, p.stdout.decode("utf-8", "replace"),
                    p.stderr.decode("utf-8", "replace"), report)


def assert_exit(run: BenchRun, rc: int) -> None:
    assert run.rc == rc, f"expected exit code {rc}\n{run.describe()}"
    if rc in (0, 2):
        assert run.report is not None, f"no JSON report written\n{run.describe()}"


def assert_table_result(run: BenchRun, result: str) -> None:
    """The human table ends with `  result       OK` (or FAILED)."""
    assert re.search(rf"^\s*result\s+{result}\s*$", run.stdout, re.M), (
        f"table does not say 'result {result}'\n{run.describe()}")


def assert_verified(run: BenchRun, n: int) -> None:
    """A clean run: exit 0, ok, and exactly n records expected and received."""
    assert_exit(run, 0)
    r = run.report
    v = r["verification"]
    assert r["ok"] is True, f"report not ok: {v}\n{run.describe()}"
    assert r["records"] == n, f"records {r['records']} != {n}\n{run.describe()}"
    assert (v["expected"], v["received"]) == (n, n), (
        f"expected/received {v['expected']}/{v['received']}, wanted {n}/{n}: {v}")
    bad = {k: v[k] for k in ("lost", "duplicated", "corrupted", "failed_sends") if v[k] != 0}
    assert not bad, f"a clean run reports {bad}: {v}"
    assert r["seconds"] > 0 and r["records_per_s"] > 0 and r["mb_per_s"] > 0, (
        f"no throughput: seconds {r['seconds']} records/s {r['records_per_s']} MB/s {r['mb_per_s']}")
    assert r["records_per_s"] == pytest.approx(n / r["seconds"], rel=1e-6), (
        f"records_per_s {r['records_per_s']} is not records / seconds = {n / r['seconds']}")
    assert_table_result(run, "OK")
    assert (f"expected {n} received {n} lost 0 duplicated 0 corrupted 0 failed sends 0"
            in run.stdout), f"table has no clean 'verified' line\n{run.describe()}"


def assert_latency(run: BenchRun, n: int) -> None:
    lat = run.report["latency"]
    assert lat is not None, f"no latency in the report\n{run.describe()}"
    assert lat["count"] == n, f"latency count {lat['count']} != {n}: {lat}"
    assert 0 < lat["p50_ms"] <= lat["p99_ms"] <= lat["p999_ms"] <= lat["max_ms"], (
        f"latency percentiles out of order: {lat}")
    assert "latency ms" in run.stdout, f"table has no latency line\n{run.describe()}"


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    return [watermarks(bootstrap, topic, p)[1] for p in range(partitions)]


# --------------------------------------------------------------------------- produce
def test_produce_acks_all_idempotent_lz4(broker, tmp_path):
    n, size = 10_000, 100
    run = run_bench(broker.bootstrap, tmp_path, "produce", "--records", str(n), "--partitions", "4",
                    "--size", str(size), "--acks", "all", "--idempotence", "--compression", "lz4")
    assert_verified(run, n)
    assert_latency(run, n)
    r = run.report
    assert r["mode"] == "produce" and r["bootstrap"] == broker.bootstrap, r
    assert r["topic"].startswith("strata-bench-produce-"), f"default topic name: {r['topic']}"
    s = r["settings"]
    assert (s["partitions"], s["acks"], s["compression"], s["idempotence"], s["size"]) == (
        4, "all", "lz4", True, size), f"settings not echoed: {s}"
    assert r["bytes"] == n * size, f"bytes {r['bytes']} != {n} x {size}"
    # Not only strata-bench's word for it: the broker holds exactly n records.
    highs = high_watermarks(broker.bootstrap, r["topic"], 4)
    assert sum(highs) == n, f"high watermarks {highs} sum to {sum(highs)}, not {n}"


# --------------------------------------------------------------------------- consume
def test_consume_by_assignment_and_as_group(group_broker, tmp_path):
    n, topic = 5_000, unique_topic("bench-consume")
    prod = run_bench(group_broker.bootstrap, tmp_path, "produce", "--topic", topic,
                     "--records", str(n), "--partitions", "4")
    assert_verified(prod, n)
    assert prod.report["topic"] == topic

    for group in (None, f"bench-group-{uuid.uuid4().hex[:8]}"):
        args = ["--topic", topic, "--idle-timeout-s", IDLE_TIMEOUT_S]
        if group:
            args += ["--group", group]
        run = run_bench(group_broker.bootstrap, tmp_path, "consume", *args)
        assert_verified(run, n)
        r = run.report
        assert (r["mode"], r["topic"]) == ("consume", topic), r
        assert r["settings"] == {"partitions": 4, "group": group}, f"settings: {r['settings']}"
        assert r["latency"] is None, f"consume has no send times, yet latency {r['latency']}"
        assert r["bytes"] == n * 100, f"bytes {r['bytes']} != {n} x 100 (default --size)"


# --------------------------------------------------------------------------- e2e
def test_e2e_two_consumers_at_a_rate(broker, tmp_path):
    n, rate = 5_000, 2_500
    run = run_bench(broker.bootstrap, tmp_path, "e2e", "--records", str(n), "--partitions", "4",
                    "--consumers", "2", "--rate", str(rate))
    assert_verified(run, n)
    assert_latency(run, n)
    r = run.report
    assert r["mode"] == "e2e" and r["topic"].startswith("strata-bench-e2e-"), r
    assert (r["settings"]["consumers"], r["settings"]["rate"]) == (2, rate), r["settings"]
    # --rate is honoured: n records at `rate`/s take about n / rate seconds.
    assert r["seconds"] >= 0.8 * n / rate, (
        f"{n} records at --rate {rate} took only {r['seconds']:.2f}s ({r['records_per_s']:.0f}/s)")


# --------------------------------------------------------------------------- the checker
def test_consume_fails_on_foreign_values(broker, tmp_path):
    """Values that strata-bench did not write are corrupted to it: exit 2, ok false."""
    topic, n = unique_topic("bench-foreign"), 300
    create_topic(broker.bootstrap, topic, 2)
    produce_confluent(broker.bootstrap, topic, [
        Out(i % 2, f"k{i}".encode(), f"plain value {i} ".encode() + b"not a strata-bench value " * 2)
        for i in range(n)
    ])

    run = run_bench(broker.bootstrap, tmp_path, "consume", "--topic", topic,
                    "--idle-timeout-s", IDLE_TIMEOUT_S)
    assert_exit(run, 2)
    r, v = run.report, run.report["verification"]
    assert r["ok"] is False, f"foreign values passed: {v}\n{run.describe()}"
    assert (v["expected"], v["received"], v["corrupted"], v["lost"]) == (n, n, n, 0), (
        f"want expected = received = corrupted = {n}, lost 0: {v}")
    assert_table_result(run, "FAILED")
    assert "FAILED: records were lost, corrupted" in run.stderr, f"no failure message on stderr\n{run.describe()}"


def test_consume_catches_a_flipped_byte(broker, tmp_path):
    """Genuine strata-bench values copied to a new topic pass; copies with one byte
    changed (in the header, the filler or the checksum) are counted as corrupted."""
    n, size = 200, 64
    prod = run_bench(broker.bootstrap, tmp_path, "produce", "--records", str(n),
                     "--partitions", "1", "--size", str(size))
    assert_verified(prod, n)
    genuine = consume_confluent(broker.bootstrap, prod.report["topic"], {0: 0}, {0: n})[0]
    assert len(genuine) == n and all(len(r.value) == size for r in genuine), (
        f"read back {len(genuine)} values of sizes {sorted({len(r.value) for r in genuine})}")

    copy, flipped = unique_topic("bench-flipped"), 0
    create_topic(broker.bootstrap, copy, 1)
    out = []
    for i, rec in enumerate(genuine):
        value = bytearray(rec.value)
        if i % 10 == 0:
            pos = (0, 9, 20, 40, size - 1)[(i // 10) % 5]  # run id, seq, send time, filler, crc
            value[pos] ^= 0x01
            flipped += 1
        out.append(Out(0, None, bytes(value)))
    produce_confluent(broker.bootstrap, copy, out)

    run = run_bench(broker.bootstrap, tmp_path, "consume", "--topic", copy,
                    "--idle-timeout-s", IDLE_TIMEOUT_S)
    assert_exit(run, 2)
    v = run.report["verification"]
    assert run.report["ok"] is False, f"flipped bytes passed: {v}\n{run.describe()}"
    assert (v["received"], v["corrupted"], v["lost"]) == (n, flipped, 0), (
        f"want received {n}, corrupted {flipped} (exactly the altered copies), lost 0: {v}")


# --------------------------------------------------------------------------- bad input
def test_rejects_values_too_small_for_the_checksum(broker, tmp_path):
    for size in ("10", "31"):
        run = run_bench(broker.bootstrap, tmp_path, "produce", "--records", "5", "--size", size)
        assert_exit(run, 1)
        assert "--size must be at least 32" in run.stderr, f"unclear message\n{run.describe()}"
        assert run.report is None, f"a rejected run wrote a report: {run.report}"
        assert run.stdout == "", f"a rejected run printed a table\n{run.describe()}"
    # the smallest accepted size works end to end
    assert_verified(run_bench(broker.bootstrap, tmp_path, "produce", "--records", "5",
                              "--size", "32"), 5)
