#!/usr/bin/env python3
"""What TLS, SASL and authorization cost a producer, measured in one run against
plaintext: a librdkafka producer (confluent-kafka) sending 1 KiB values, acks=all, to a
fresh 1-partition topic for each run, on each of these in turn, `--rounds` times (every
other round in reverse order):

  * PLAINTEXT, SSL (client certificates required), SASL_SSL and SASL_PLAINTEXT (both
    SCRAM-SHA-512) listeners of one release strata without an authorizer;
  * the SASL_PLAINTEXT listener of a second release strata with `--authorizer acl`,
    where the producer is `User:bench`, not a super user, allowed WRITE by a PREFIXED
    binding on the bench topics among `--acls` (1000) unrelated bindings: other
    principals, other prefixes, DENYs, and bindings of other principals on prefixes of
    the bench topics' names, so the decision has entries to sift, not an empty index.

It reports records/s and MB/s, the delivery latency percentiles (send to
acknowledgement, at full speed: queueing included), the CPU seconds per GB of the agent
serving the run, and each figure's ratio to plaintext's median (the first agent).

    cargo build --release -p strata-agent --bin strata
    python3 bench/tls_bench.py [--seconds 8] [--rounds 2]

Needs the openssl CLI (certificates are made for the run) and confluent-kafka.
Every run reads back the count it produced; a shortfall fails the benchmark. Before
measuring, it checks that the authorizer is on: `bench` producing to a topic outside
its prefix must be refused.
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

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import REPO, Strata, free_port  # noqa: E402

PASSWORD = "bench-secret"
TOPIC_PREFIX = "tls-bench-"


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


def add_scram_user(a: AdminClient, user: str, password: str) -> None:
    a.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        password.encode())])[user].result(20)


def sasl(bootstrap: str, protocol: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": protocol,
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench",
            "sasl.password": PASSWORD, **extra}


def bench_acls(unrelated: int) -> list[AclBinding]:
    """`User:bench`'s WRITE on the bench topics' prefix, then `unrelated` bindings that
    decide nothing for it: other principals on other prefixes and literal topics,
    consumer groups, DENYs, and (one in ten) other principals on prefixes of the bench
    topics' own names, which the decision for a bench topic must look at and set aside."""
    T, G = ResourceType.TOPIC, ResourceType.GROUP
    PRE, LIT = ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL
    ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
    ops = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL]
    acls = [AclBinding(T, TOPIC_PREFIX, PRE, "User:bench", "*", AclOperation.WRITE, ALLOW)]
    for i in range(unrelated):
        user, op = f"User:app-{i % 97}", ops[i % len(ops)]
        perm = DENY if i % 7 == 0 else ALLOW
        if i % 10 == 0:
            # On the bench topics' own prefixes, for others.
            name = TOPIC_PREFIX[:1 + i // 10 % len(TOPIC_PREFIX)]
            acls.append(AclBinding(T, name, PRE, user, "*", op, perm))
        elif i % 10 < 6:
            acls.append(AclBinding(T, f"svc-{i}-", PRE, user, "*", op, perm))
        elif i % 10 < 8:
            acls.append(AclBinding(T, f"orders-{i}", LIT, user, f"10.0.{i % 250}.1", op, perm))
        else:
            acls.append(AclBinding(G, f"group-{i}", PRE, user, "*", AclOperation.READ, perm))
    return acls


def check_refused(conf: dict, topic: str) -> None:
    """The authorizer is on: `bench` may not write outside its prefix."""
    errors: list = []
    p = Producer({**conf, "acks": "all", "message.timeout.ms": 10000})
    p.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(20)
    if not errors or errors[0] is None or errors[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
        raise SystemExit(f"bench writing to {topic} outside its prefix: {errors}, expected "
                         "TOPIC_AUTHORIZATION_FAILED: the authorizer is not deciding")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--acls", type=int, default=1000,
                    help="bindings besides the producer's own on the authorizing agent")
    ap.add_argument("--strata", type=Path, default=REPO / "target/release/strata")
    ap.add_argument("--out", type=Path, default=None)
    opts = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="strata-tls-bench-"))
    certs = root / "certs"
    certs.mkdir()
    certificates(certs)
    ssl_port, sasl_ssl_port, sasl_port, acl_port = (free_port() for _ in range(4))
    agents: list[Strata] = []
    try:
        strata = Strata(opts.strata, root, [
            "--listeners", f"SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port},"
                           f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "--ssl-certificate-location", str(certs / "server.pem"),
            "--ssl-key-location", str(certs / "server.key"),
            "--ssl-truststore-location", str(certs / "ca.pem"),
            "--ssl-client-auth", "required",
        ])
        agents.append(strata)
        # The second agent authorizes. Its PLAINTEXT listener (User:ANONYMOUS) is a super
        # user for the set-up (users, ACLs, topics, read-back); the producer is not.
        authorized = Strata(opts.strata, root, [
            "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{acl_port}",
            "--authorizer", "acl", "--super-users", "User:admin;User:ANONYMOUS",
        ], name="strata-acl")
        agents.append(authorized)
        plain = {"bootstrap.servers": strata.bootstrap}
        acl_plain = {"bootstrap.servers": authorized.bootstrap}
        a, acl_admin = AdminClient(plain), AdminClient(acl_plain)
        add_scram_user(a, "bench", PASSWORD)
        add_scram_user(acl_admin, "bench", PASSWORD)
        acls = bench_acls(opts.acls)
        for i in range(0, len(acls), 250):
            for f in acl_admin.create_acls(acls[i:i + 250], request_timeout=60).values():
                f.result()
        stored = len(acl_admin.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY), request_timeout=60).result())
        if stored != len(acls):
            raise SystemExit(f"{len(acls)} bindings created, {stored} stored")
        acl_sasl = sasl(f"127.0.0.1:{acl_port}", "SASL_PLAINTEXT")
        acl_admin.create_topics([NewTopic("unbound-topic", 1, 1)])["unbound-topic"].result(20)
        check_refused(acl_sasl, "unbound-topic")

        tls = {"ssl.ca.location": str(certs / "ca.pem")}
        # name: (the agent serving it, its set-up client and admin, the producer's configuration)
        cases = {
            "PLAINTEXT": (strata, plain, a, plain),
            "SSL": (strata, plain, a, {
                "bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL", **tls,
                "ssl.certificate.location": str(certs / "client.pem"),
                "ssl.key.location": str(certs / "client.key")}),
            "SASL_SSL": (strata, plain, a, sasl(f"127.0.0.1:{sasl_ssl_port}", "SASL_SSL", **tls)),
            "SASL_PLAINTEXT (no authorizer)": (strata, plain, a,
                                               sasl(f"127.0.0.1:{sasl_port}", "SASL_PLAINTEXT")),
            "SASL_PLAINTEXT + ACLs": (authorized, acl_plain, acl_admin, acl_sasl),
        }
        runs: dict[str, list[dict]] = {name: [] for name in cases}
        for rnd in range(opts.rounds):
            # Every other round in reverse, so that no case always runs first or last.
            order = list(enumerate(cases.items()))
            for n, (name, (agent, setup, admin, conf)) in order if rnd % 2 == 0 else order[::-1]:
                topic = f"{TOPIC_PREFIX}{n}-{rnd}"
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
                cpu = agent.cpu_seconds()
                r = produce(conf, topic, opts.seconds, opts.size)
                r["agent_cpu_s_per_gb"] = (agent.cpu_seconds() - cpu) / (r["records"] * opts.size / 1e9)
                got = read_back_count(setup, topic)
                if got < r["records"]:
                    raise SystemExit(f"{topic}: produced {r['records']}, the log holds {got}")
                runs[name].append(r)
                print(f"round {rnd + 1} {name:30} {r['records_per_s']:>10,.0f} rec/s "
                      f"{r['mb_per_s']:7.1f} MB/s p99 {r['p99_ms']:7.1f} ms", file=sys.stderr)
                admin.delete_topics([topic])[topic].result(20)
    finally:
        for agent in agents:
            agent.stop()

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    keys = ["records_per_s", "mb_per_s", "p50_ms", "p99_ms", "p999_ms", "agent_cpu_s_per_gb"]
    summary = {name: {k: median(name, k) for k in keys} for name in runs}
    print(f"\n{opts.size} B values, acks=all, 1 partition, {opts.seconds:g} s runs, "
          f"medians of {opts.rounds} rounds; ratio to PLAINTEXT in brackets\n")
    print("| case | records/s | MB/s | p50 ms | p99 ms | p999 ms | agent CPU s/GB |")
    print("|---|---|---|---|---|---|---|")
    base = summary["PLAINTEXT"]
    for name, s in summary.items():
        cells = [f"{s[k]:,.1f} ({s[k] / base[k]:.2f})" if base[k] else f"{s[k]:,.1f}" for k in keys]
        print(f"| {name} | " + " | ".join(cells) + " |")
    out = opts.out or REPO / "bench" / "results" / f"tls-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps({"size": opts.size, "seconds": opts.seconds, "rounds": opts.rounds,
                               "acl_bindings": len(acls), "runs": runs, "summary": summary},
                              indent=2))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
