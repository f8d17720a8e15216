#!/usr/bin/env python3
"""What TLS and SASL cost a producer, measured in one run against plaintext on the same
agent: one release strata with a PLAINTEXT, an SSL (client certificates required) and a
SASL_SSL (SCRAM-SHA-512) listener, and a librdkafka producer (confluent-kafka) sending
1 KiB values, acks=all, to a fresh 1-partition topic for each run, the three listeners
in turn, `--rounds` times. It reports records/s and MB/s, the delivery latency
percentiles (send to acknowledgement, at full speed: queueing included), the agent's CPU
seconds per GB, and each figure's ratio to plaintext's median.

    cargo build --release -p strata-agent --bin strata
    python3 bench/tls_bench.py [--seconds 8] [--rounds 2]

Needs the openssl CLI (certificates are made for the run) and confluent-kafka.
Every run reads back the count it produced; a shortfall fails the benchmark.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import REPO, Strata, free_port  # noqa: E402

PASSWORD = "bench-secret"


def openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def certificates(d: Path) -> None:
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl(d, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=bench-ca")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")):
        openssl(d, "req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}")
        (d / f"{name}.ext").write_text("basicConstraints=CA:FALSE\n" + ext)
        openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-set_serial", str(time.time_ns() % 2**62), "-days", "1", "-out", f"{name}.pem",
                "-extfile", f"{name}.ext")


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def produce(conf: dict, topic: str, seconds: float, size: int) -> dict:
    value = b"x" * size
    latencies: list[float] = []
    failed = 0

    def delivered(err, started_at: float) -> None:
        nonlocal failed
        latencies.append(time.perf_counter() - started_at)
        if err is not None:
            failed += 1

    p = Producer({**conf, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                  "queue.buffering.max.kbytes": 65536})
    started = time.perf_counter()
    sent = 0
    while time.perf_counter() - started < seconds:
        t = time.perf_counter()
        try:
            p.produce(topic, value, on_delivery=lambda err, _msg, t=t: delivered(err, t))
            sent += 1
        except BufferError:
            p.poll(0.001)
            continue
        if sent % 1000 == 0:
            p.poll(0)
    remaining = p.flush(60)
    elapsed = time.perf_counter() - started
    if remaining or failed:
        raise SystemExit(f"{topic}: {remaining} undelivered, {failed} failed")
    latencies.sort()
    return {"records": sent, "seconds": elapsed, "records_per_s": sent / elapsed,
            "mb_per_s": sent * size / elapsed / 1e6,
            "p50_ms": percentile(latencies, 0.50) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000,
            "p999_ms": percentile(latencies, 0.999) * 1000}


def read_back_count(conf: dict, topic: str) -> int:
    c = Consumer({**conf, "group.id": f"count-{topic}", "enable.auto.commit": False})
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
    c.close()
    return high - low


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--strata", type=Path, default=REPO / "target/release/strata")
    ap.add_argument("--out", type=Path, default=None)
    opts = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="strata-tls-bench-"))
    certs = root / "certs"
    certs.mkdir()
    certificates(certs)
    ssl_port, sasl_port = free_port(), free_port()
    strata = Strata(opts.strata, root, [
        "--listeners", f"SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_port}",
        "--ssl-certificate-location", str(certs / "server.pem"),
        "--ssl-key-location", str(certs / "server.key"),
        "--ssl-truststore-location", str(certs / "ca.pem"),
        "--ssl-client-auth", "required",
    ])
    try:
        plain = {"bootstrap.servers": strata.bootstrap}
        a = AdminClient(plain)
        a.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
            PASSWORD.encode())])["bench"].result(20)
        tls = {"ssl.ca.location": str(certs / "ca.pem")}
        listeners = {
            "PLAINTEXT": plain,
            "SSL": {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL", **tls,
                    "ssl.certificate.location": str(certs / "client.pem"),
                    "ssl.key.location": str(certs / "client.key")},
            "SASL_SSL": {"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_SSL",
                         **tls, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench",
                         "sasl.password": PASSWORD},
        }
        runs: dict[str, list[dict]] = {name: [] for name in listeners}
        for rnd in range(opts.rounds):
            for name, conf in listeners.items():
                topic = f"tls-bench-{name.lower()}-{rnd}"
                a.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
                cpu = strata.cpu_seconds()
                r = produce(conf, topic, opts.seconds, opts.size)
                r["agent_cpu_s_per_gb"] = (strata.cpu_seconds() - cpu) / (r["records"] * opts.size / 1e9)
                got = read_back_count(plain, topic)
                if got < r["records"]:
                    raise SystemExit(f"{topic}: produced {r['records']}, the log holds {got}")
                runs[name].append(r)
                print(f"round {rnd + 1} {name:9} {r['records_per_s']:>10,.0f} rec/s "
                      f"{r['mb_per_s']:7.1f} MB/s p99 {r['p99_ms']:7.1f} ms", file=sys.stderr)
                a.delete_topics([topic])[topic].result(20)
    finally:
        strata.stop()

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    keys = ["records_per_s", "mb_per_s", "p50_ms", "p99_ms", "p999_ms", "agent_cpu_s_per_gb"]
    summary = {name: {k: median(name, k) for k in keys} for name in runs}
    print(f"\n{opts.size} B values, acks=all, 1 partition, {opts.seconds:g} s runs, "
          f"medians of {opts.rounds} rounds; ratio to PLAINTEXT in brackets\n")
    print("| listener | records/s | MB/s | p50 ms | p99 ms | p999 ms | agent CPU s/GB |")
    print("|---|---|---|---|---|---|---|")
    base = summary["PLAINTEXT"]
    for name, s in summary.items():
        cells = [f"{s[k]:,.1f} ({s[k] / base[k]:.2f})" if base[k] else f"{s[k]:,.1f}" for k in keys]
        print(f"| {name} | " + " | ".join(cells) + " |")
    out = opts.out or REPO / "bench" / "results" / f"tls-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps({"size": opts.size, "seconds": opts.seconds, "runs": runs,
                               "summary": summary}, indent=2))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
