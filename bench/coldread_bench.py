#!/usr/bin/env python3
"""Produce latency while a consumer catches up on records that are not in the page
cache (issue 33: no file read on a request thread).

One release agent (its defaults: acks after fsync; tiering off, measured on its own in
catchup_bench.py). First a backlog of `--backlog-gib` GiB of 1 KiB records is written to
an 8-partition topic. Then, `--rounds` times, the agent is stopped, the page cache is
dropped (`echo 3 > /proc/sys/vm/drop_caches`, as root), the agent started again, and a
producer holds `--rate` records/s of 1 KiB (acks=all, another topic) for `--seconds`:

  * alone: the reference of this run;
  * cold:  while a consumer reads the backlog from its start, every byte from the disk.

Printed for each run: produce latency p50/p99/p99.9 (librdkafka delivery reports,
`strata-bench produce --rate`), the rate reached, the agent's CPU seconds, what the
the fetches the agent answered, and its `strata_disk_reads_total` (reads that waited
for the disk, on the blocking pool); then median p99 cold / alone. Compare two binaries
with `--strata` (the same rate and backlog).

    cargo build --release -p strata-agent -p strata-bench --bin strata --bin strata-bench
    sudo python3 bench/coldread_bench.py [--backlog-gib 4] [--rate 50000] [--seconds 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import REPO, Strata, bench, delete_topics, machine  # noqa: E402


def counted(agent: Strata, series: str) -> int:
    """The sum of a counter's series on the agent's /metrics (0 where it has none)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{agent.http}/metrics", timeout=10).read()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.decode().splitlines()
               if line.startswith(series))


def disk_reads(agent: Strata) -> tuple[int, int]:
    """(`strata_disk_reads_total`, `strata_fetch_requests_total`): partition reads that
    waited for the disk (0 for a build without the counter), and fetches answered."""
    return counted(agent, "strata_disk_reads_total"), counted(agent, "strata_fetch_requests_total")


def drop_page_cache() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def run(args, root: Path, cold: bool) -> dict:
    drop_page_cache()
    agent = Strata(args.strata, root, name="agent")
    consumer = None
    try:
        before = disk_reads(agent)
        if cold:
            out = root / "consume.json"
            out.unlink(missing_ok=True)
            consumer = subprocess.Popen(
                [str(args.bench), "--bootstrap", agent.bootstrap, "--json", str(out),
                 "consume", "--topic", "backlog", "--idle-timeout-s", "5"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)  # the consumer is fetching before the producer starts
        topic = f"steady-{'cold' if cold else 'alone'}-{time.time_ns()}"
        report = bench(args.bench, agent, [
            "produce", "--topic", topic, "--size", "1024", "--rate", str(args.rate),
            "--duration-s", str(args.seconds), "--no-verify"], root)
        after = disk_reads(agent)
        report["disk_reads"], report["fetches"] = after[0] - before[0], after[1] - before[1]
        if consumer is not None:
            consumer.terminate()
            consumer.wait()
        delete_topics(agent, [topic])
        return report
    finally:
        if consumer is not None and consumer.poll() is None:
            consumer.kill()
        agent.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", type=Path, default=REPO / "target/release/strata")
    ap.add_argument("--bench", type=Path, default=REPO / "target/release/strata-bench")
    ap.add_argument("--backlog-gib", type=float, default=4.0)
    ap.add_argument("--rate", type=int, default=50_000)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=3,
                    help="alone and cold runs, alternately; the ratio is of the medians")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="strata-coldread-", dir=args.dir))
    print(f"machine: {machine()}; work in {root}", flush=True)

    agent = Strata(args.strata, root, name="agent")
    try:
        records = int(args.backlog_gib * 2**30 / 1024)
        bench(args.bench, agent, ["produce", "--topic", "backlog", "--partitions", "8",
                                  "--size", "1024", "--records", str(records),
                                  "--no-verify"], root)
    finally:
        agent.stop()

    results = {"machine": machine(), "strata": str(args.strata), "rate": args.rate,
               "seconds": args.seconds, "backlog_gib": args.backlog_gib,
               "alone": [], "cold": []}
    for _ in range(args.rounds):
        results["alone"].append(run(args, root, cold=False))
        results["cold"].append(run(args, root, cold=True))
    print()
    print("| round | consumer | rate reached (rec/s) | p50 ms | p99 ms | p99.9 ms | agent CPU s "
          "| fetches | reads that waited for the disk |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i in range(args.rounds):
        for name in ("alone", "cold"):
            r = results[name][i]
            lat = r["latency"]
            print(f"| {i + 1} | {'catching up, cold' if name == 'cold' else 'none'} | "
                  f"{r['records_per_s']:,.0f} | {lat['p50_ms']:.1f} | {lat['p99_ms']:.1f} | "
                  f"{lat['p999_ms']:.1f} | {r['broker_cpu_s']} | {r['fetches']:,} | "
                  f"{r['disk_reads']:,} |")
    alone = statistics.median(r["latency"]["p99_ms"] for r in results["alone"])
    cold = statistics.median(r["latency"]["p99_ms"] for r in results["cold"])
    results["p99_cold_over_alone"] = round(cold / alone, 2) if alone else None
    print(f"\nmedian p99 with a cold consumer / alone: {cold:.1f} / {alone:.1f} ms = "
          f"{results['p99_cold_over_alone']}")
    stamp = time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())
    out = args.out or REPO / "bench" / "results" / f"coldread-{stamp}.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
