"""kafkajs 2.2.4 against strata: kafkajs_roundtrip.js creates topics, produces in
every codec and reports offsets; here confluent-kafka reads the records back and they
are compared exactly, as are kafkajs' admin offsets and kafkajs' own Fetch read-back."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

from strata_testlib import (
    CODECS,
    Rec,
    assert_dense_per_partition,
    assert_same_records,
    group_by_partition,
    roundtrip_check,
    unique_topic,
)

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "kafkajs_roundtrip.js"
NODE = shutil.which("node")


def _b(v):
    return None if v is None else base64.b64decode(v)


def _rec(d) -> Rec:
    return Rec(d["partition"], d["offset"], _b(d["key"]), _b(d["value"]),
               tuple((k, _b(v)) for k, v in d["headers"]), d["timestamp"])


def run_script(bootstrap: str, prefix: str, out: Path) -> dict:
    assert NODE, "node not found on PATH"
    assert (HERE / "node_modules" / "kafkajs").is_dir(), (
        f"kafkajs not installed: run `npm ci` in {HERE}")
    cmd = [NODE, str(SCRIPT), bootstrap, prefix, str(out)]
    try:
        p = subprocess.run(cmd, cwd=HERE, capture_output=True, timeout=120)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"kafkajs script timed out; stderr:\n{(e.stderr or b'').decode(errors='replace')}")
    stderr = p.stderr.decode(errors="replace")
    assert p.returncode == 0, f"kafkajs script exited {p.returncode}\nstderr:\n{stderr[-20000:]}"
    return json.loads(out.read_text())


def test_kafkajs_produce_admin_and_fetch(broker, tmp_path):
    prefix = unique_topic("kjs")
    res = run_script(broker.bootstrap, prefix, tmp_path / "kafkajs.json")

    unavailable = {c: s.get("error", "")[:500] for c, s in res["codecStatus"].items() if not s["ok"]}
    assert res["codecs"] == CODECS, f"kafkajs codecs unavailable: {unavailable}"

    sent_all = [_rec(d) for d in res["sent"]]
    by_codec: dict[str, list[Rec]] = {c: [] for c in res["codecs"]}
    for d, r in zip(res["sent"], sent_all):
        by_codec[d["codec"]].append(r)

    for codec, sent in by_codec.items():
        topic = res["topics"][codec]
        assert len(sent) == 100, (codec, len(sent))
        assert_dense_per_partition(sent)
        exp = group_by_partition(sent)
        # kafkajs admin.fetchTopicOffsets (ListOffsets earliest + latest)
        assert res["offsets"][codec] == [
            {"partition": p, "offset": str(len(exp[p])), "high": str(len(exp[p])), "low": "0"}
            for p in sorted(exp)
        ], codec
        # kafkajs admin.fetchTopicOffsetsByTimestamp: first offset with ts >= query,
        # kafkajs substitutes the high watermark when the broker says -1
        for probe in res["byTimestamp"][codec]:
            q = probe["timestamp"]
            want = [{"partition": p,
                     "offset": str(next((r.offset for r in exp[p] if r.timestamp >= q), len(exp[p])))}
                    for p in sorted(exp)]
            assert probe["offsets"] == want, (codec, q)
        # what kafkajs produced, read by librdkafka
        roundtrip_check(broker.bootstrap, topic, sent)

    # what kafkajs produced, read back by kafkajs' own Fetch implementation
    assert res["fetchError"] is None, f"kafkajs fetch failed:\n{res['fetchError']}"
    fetched: dict[tuple[str, int], list[Rec]] = {}
    for d in res["fetched"]:
        fetched.setdefault((d["codec"], d["partition"]), []).append(_rec(d))
    expected_keys = set()
    for codec, sent in by_codec.items():
        for p, recs in group_by_partition(sent).items():
            expected_keys.add((codec, p))
            assert_same_records(fetched.get((codec, p), []), recs,
                                f"kafkajs fetch of {res['topics'][codec]}[{p}]")
    assert set(fetched) == expected_keys
