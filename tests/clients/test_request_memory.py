"""A small flood of large produce requests against a tight request-memory bound
(`queued_max_request_bytes`, issue 17): 8 idempotent librdkafka producers, 256 KiB
values, acks=all, up to 5 requests of up to 2 MiB in flight each (80 MiB asked for at
once) against an agent that holds 8 MiB of requests. The agent must stay up and keep
every acknowledged record, at the offset its acknowledgement gave, once, intact.

The flood and the check are bench/flood_bench.py's (`flood`, `verify`), which measures
the same thing at scale on a release agent, memory included (docs/BENCHMARKS.md). No
timing or memory figure is asserted here: this is a debug agent on a shared machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

from strata_testlib import create_topic, unique_topic

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from flood_bench import MiB, RssSampler, flood, verify  # noqa: E402

PARTITIONS = 3
SIZE = 256 * 1024


def bounded_agent(broker_factory, tmp_path, max_request: int, bound: int):
    """A started agent reading requests of up to `max_request` bytes and holding at most
    `bound` bytes of them at once."""
    settings = tmp_path / "strata.toml"
    # A bound below the default 100 MiB frame limit needs a smaller limit (refused otherwise).
    settings.write_text(f"max_request_bytes = {max_request}\n")
    b = broker_factory(extra_args=["--config", str(settings),
                                   "--queued-max-request-bytes", str(bound)])
    b.start()
    return b


def test_a_flood_of_large_produce_requests_under_a_tight_bound_loses_nothing(broker_factory, tmp_path):
    b = bounded_agent(broker_factory, tmp_path, 4 * MiB, 8 * MiB)
    topic = unique_topic("flood")
    create_topic(b.bootstrap, topic, PARTITIONS, config={"max.message.bytes": str(2 * MiB)})

    sampler = RssSampler(b.pid)
    sampler.start()
    f = flood(b.bootstrap, topic, producers=8, seconds=3, size=SIZE,
              batch_bytes=MiB, request_bytes=2 * MiB)
    sampler.stop()
    assert not sampler.vanished and b.is_running(), f"the agent died under the flood\n{b.log_tail()}"
    print(f"acknowledged {f['records']} records ({f['mb_per_s']:.0f} MB/s), agent VmRSS peak "
          f"{sampler.peak_mib():.0f} MiB; failed sends {f['failed']}")
    assert f["records"] > 0 and f["undelivered"] == 0 and not f["fatal"], \
        {k: v for k, v in f.items() if k != "acked"}
    v = verify(b.bootstrap, topic, PARTITIONS, f["acked"], SIZE)
    assert (v["lost"], v["corrupted"], v["duplicated"], v["out_of_order"]) == (0, 0, 0, 0), v
    assert v["log_records"] == f["records"] + v["unacknowledged_in_log"], v
    assert b.is_running(), b.log_tail()
    b.stop()  # a clean exit (0) on SIGTERM


def test_a_batch_that_decompresses_past_the_largest_request_is_refused(broker_factory, tmp_path):
    """A compression bomb: one record of 8 MiB of zeros is a few hundred bytes once zstd-
    or gzip-compressed, under every size limit, but decompresses (to be validated) to more
    than the largest request the agent reads (`max_request_bytes`, 2 MiB here). It is
    refused with MESSAGE_TOO_LARGE, as a record over the size limits is, while it is
    decompressed, not after; the agent stays up and a batch within the bound (1 MiB of
    zeros, compressed too) is written and read back."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    b = bounded_agent(broker_factory, tmp_path, 2 * MiB, 4 * MiB)
    topic = unique_topic("bomb")
    create_topic(b.bootstrap, topic, 1)
    for codec in ("zstd", "gzip"):
        outcomes: list = []
        p = Producer({"bootstrap.servers": b.bootstrap, "compression.type": codec,
                      "message.max.bytes": 16 * MiB, "batch.size": 16 * MiB,
                      "linger.ms": 0, "acks": "all"})
        for size in (8 * MiB, MiB):
            p.produce(topic, bytes(size), key=f"{codec}-{size}".encode(),
                      on_delivery=lambda err, msg: outcomes.append(
                          (len(msg.value()), err.code() if err else None, msg.offset())))
            assert p.flush(30) == 0, codec
        assert outcomes[0][:2] == (8 * MiB, KafkaError.MSG_SIZE_TOO_LARGE), (codec, outcomes)
        assert outcomes[1][:2] == (MiB, None), (codec, outcomes)
        assert b.is_running(), b.log_tail()
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique_topic("g"),
                      "fetch.max.bytes": 4 * MiB})
        c.assign([TopicPartition(topic, 0, outcomes[1][2])])
        m = c.poll(15)
        c.close()
        assert m is not None and m.error() is None, (codec, m and m.error())
        assert (m.key(), m.value()) == (f"{codec}-{MiB}".encode(), bytes(MiB)), codec
    b.stop()
