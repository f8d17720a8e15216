#!/usr/bin/env python3
"""Replay benchmark: records/s consumed from the local log vs from the Parquet archive.

Starts its own strata (STRATA_BIN, default target/release/strata), produces N records
with librdkafka (confluent-kafka), waits until tiering has archived every closed segment,
and consumes everything from offset 0 three times with a fresh consumer each time:
  1. from the local log,
  2. from the archive after local retention deleted the local segments (cold cache),
  3. from the archive again (warm cache).
Every run checks it saw every offset exactly once and every value intact, so a fast
wrong answer cannot pass. Prints a table and one JSON line.

    python3 bench/replay_bench.py [--records 200000] [--size 100]
"""
import argparse, json, os, shutil, signal, socket, subprocess, sys, tempfile, time, urllib.request
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, AlterConfigOpType, ConfigEntry


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, cond, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    sys.exit(f"timed out waiting for {what}")


def consume_all(bootstrap, topic, n, size):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
    c.assign([TopicPartition(topic, 0, 0)])
    seen, start = 0, time.perf_counter()
    while seen < n:
        for m in c.consume(10000, timeout=10):
            if m.error():
                sys.exit(f"consume error: {m.error()}")
            if m.offset() != seen or len(m.value()) != size or not m.value().startswith(b"%012d" % seen):
                sys.exit(f"wrong record at {seen}: offset {m.offset()}")
            seen += 1
    elapsed = time.perf_counter() - start
    c.close()
    return n / elapsed, elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    binary = os.environ.get("STRATA_BIN", "target/release/strata")
    work = tempfile.mkdtemp(prefix="strata-bench-")
    kport, hport = free_port(), free_port()
    log = open(os.path.join(work, "strata.log"), "w")
    proc = subprocess.Popen([binary, "agent", "--data-dir", os.path.join(work, "data"),
                             "--kafka-listen", f"127.0.0.1:{kport}", "--http-listen", f"127.0.0.1:{hport}",
                             "--tiering-interval-ms", "200"], stderr=log, stdout=log)
    try:
        def ready():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{hport}/readyz", timeout=1).status == 200
            except OSError:
                return False
        wait_for("readiness", ready, 30)
        bs = f"127.0.0.1:{kport}"
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("replay", 1, 1, config={"segment.bytes": str(1 << 20)})])["replay"].result()
        p = Producer({"bootstrap.servers": bs, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20,
                      "queue.buffering.max.messages": 1_000_000})
        pad = b"x" * max(0, args.size - 12)
        for i in range(args.records):
            while True:
                try:
                    p.produce("replay", value=b"%012d" % i + pad)
                    break
                except BufferError:
                    p.poll(0.01)
        # One record more so the last full segment closes behind it.
        p.flush()
        def status():
            st = json.load(urllib.request.urlopen(f"http://127.0.0.1:{hport}/v1/tiering"))
            return st["partitions"][0] if st["partitions"] else None
        wait_for("tiering", lambda: (s := status()) and s["archived_upto"] >= 0 and s["lag_records"] < 2 * (1 << 20) // args.size, 300)
        archived = status()["archived_upto"] + 1
        local = consume_all(bs, "replay", archived, args.size)
        r = ConfigResource("topic", "replay", incremental_configs=[
            ConfigEntry("local.retention.ms", "0", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([r])[r].result()
        seg_dir = os.path.join(work, "data", "logs", "replay-0")
        wait_for("local deletion", lambda: min(int(f[:20]) for f in os.listdir(seg_dir) if f.endswith(".log")) >= archived, 60)
        cold = consume_all(bs, "replay", archived, args.size)
        warm = consume_all(bs, "replay", archived, args.size)
        rows = [("local log", local), ("archive, cold cache", cold), ("archive, warm cache", warm)]
        print(f"replay of {archived} records of {args.size} B (uncompressed batches, 1 MiB segments), one partition, librdkafka consumer")
        print(f"{'source':<22}{'records/s':>12}{'MB/s':>8}{'vs local':>10}")
        for name, (rate, _) in rows:
            print(f"{name:<22}{rate:>12,.0f}{rate * args.size / 1e6:>8.1f}{rate / local[0]:>10.2f}")
        print(json.dumps({"records": archived, "size": args.size,
                          **{name.replace(', ', '_').replace(' ', '_'): round(rate) for name, (rate, _) in rows}}))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
