#!/usr/bin/env python3
"""Produce latency while the archive catches up (issue 33): does background work starve
the foreground?

One release agent (its defaults: acks after fsync, 1 GiB segments). First a backlog of
`--backlog-gib` GiB of 1 KiB records is written to a one-partition topic with tiering
off, so that several closed segments wait for the archive. Then, twice, the agent is
restarted and a producer holds `--rate` records/s of 1 KiB (acks=all, one partition,
another topic) for `--seconds`:

  * off: tiering off, as the reference of this run;
  * on:  tiering on: the worker reads and encodes the backlog as Parquet into the
         `file://` archive while the producer runs: on the same disk, or with
         `--archive-dir` in a directory on another device, as object storage would be.

Run `--rounds` times, alternately (these machines are noisy). Printed for each run:
produce latency p50/p99/p99.9 (librdkafka delivery reports, `strata-bench produce
--rate`), the rate reached, the agent's CPU seconds, and (on) what the archive took in
during the run: segment bytes encoded (the issue asks for at least 5 GB in a run) and
the Parquet bytes written; then median p99 on / off, the issue's acceptance figure (at
most 1.5).

    cargo build --release -p strata-agent -p strata-bench --bin strata --bin strata-bench
    python3 bench/catchup_bench.py [--backlog-gib 5] [--rate 149000] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import REPO, Strata, bench, delete_topics, machine  # noqa: E402


def archive_size(archive: Path) -> int:
    """Bytes in the agent's archive: the backlog's objects, and those of the topics the
    earlier runs wrote (their closed segments are archive work too)."""
    return sum(f.stat().st_size for f in archive.rglob("*") if f.is_file())


def encoded_bytes(agent: Strata) -> int:
    """Segment bytes the agent's tiering worker has read and encoded since it started
    (`strata_background_bytes_total{kind="tiering"}`): the archive's progress in the
    log's own bytes (the Parquet objects are far smaller: these values compress)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{agent.http}/metrics", timeout=10).read()
    for line in text.decode().splitlines():
        if line.startswith("strata_background_bytes_total") and 'kind="tiering"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def run(args, root: Path, tiering: bool) -> dict:
    archive = args.archive_dir or root / "agent" / "archive"
    extra = ["--archive-url", f"file://{archive}"] if args.archive_dir else []
    agent = Strata(args.strata, root, name="agent", tiering=tiering,
                   extra=[*extra, *args.agent_flag] if tiering else [])
    try:
        before = archive_size(archive)
        topic = f"steady-{'on' if tiering else 'off'}-{time.time_ns()}"
        report = bench(args.bench, agent, [
            "produce", "--topic", topic,
            "--size", "1024", "--rate", str(args.rate), "--duration-s", str(args.seconds),
            "--no-verify"], root)
        report["archived_during_run_mb"] = round(
            (archive_size(archive) - before) / 1e6, 1)
        report["encoded_during_run_gb"] = round(encoded_bytes(agent) / 1e9, 2)
        if not tiering:
            # Not archive work (so no run's backlog depends on it), and a minute at
            # these rates is gigabytes of disk.
            delete_topics(agent, [topic])
        return report
    finally:
        agent.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", type=Path, default=REPO / "target/release/strata")
    ap.add_argument("--bench", type=Path, default=REPO / "target/release/strata-bench")
    ap.add_argument("--backlog-gib", type=float, default=5.0)
    ap.add_argument("--rate", type=int, default=149_000,
                    help="records/s the producer holds (default: Kafka 4.4's 50%% rate "
                         "for 1 x 1 KiB on this machine, issue 33)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=3,
                    help="off and on runs, alternately; the ratio is of the medians")
    ap.add_argument("--agent-flag", action="append", default=[],
                    help="a flag for the agent of the tiering-on run (repeat; e.g. "
                         "--agent-flag=--tiering-max-bytes-per-second --agent-flag=50000000)")
    ap.add_argument("--archive-dir", type=Path, default=None,
                    help="the file:// archive's directory (default: in the agent's data "
                         "directory, on the log's disk). In production the archive is object "
                         "storage, not the log's disk: a directory on another device (or "
                         "tmpfs, /dev/shm) models that")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="strata-catchup-", dir=args.dir))
    print(f"machine: {machine()}; work in {root}", flush=True)

    agent = Strata(args.strata, root, name="agent", tiering=False)
    try:
        records = int(args.backlog_gib * 2**30 / 1024)
        bench(args.bench, agent, ["produce", "--topic", "backlog", "--size", "1024",
                                  "--records", str(records), "--no-verify"], root)
    finally:
        agent.stop()

    results = {"machine": machine(), "rate": args.rate, "seconds": args.seconds,
               "backlog_gib": args.backlog_gib, "off": [], "on": [],
               "archive": str(args.archive_dir or "the agent's data directory")}
    for _ in range(args.rounds):
        results["off"].append(run(args, root, tiering=False))
        results["on"].append(run(args, root, tiering=True))
    print()
    print("| round | tiering | rate reached (rec/s) | p50 ms | p99 ms | p99.9 ms | agent CPU s "
          "| segments encoded | archive grew by |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i in range(args.rounds):
        for name in ("off", "on"):
            r = results[name][i]
            lat = r["latency"]
            print(f"| {i + 1} | {name} | {r['records_per_s']:,.0f} | {lat['p50_ms']:.1f} | "
                  f"{lat['p99_ms']:.1f} | {lat['p999_ms']:.1f} | {r['broker_cpu_s']} | "
                  f"{r['encoded_during_run_gb']} GB | {r['archived_during_run_mb']} MB |")
    off = statistics.median(r["latency"]["p99_ms"] for r in results["off"])
    on = statistics.median(r["latency"]["p99_ms"] for r in results["on"])
    results["p99_on_over_off"] = round(on / off, 2) if off else None
    print(f"\nmedian p99 with the archive catching up / without: {on:.1f} / {off:.1f} ms = "
          f"{results['p99_on_over_off']}")
    out = args.out or REPO / "bench" / "results" / f"catchup-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
