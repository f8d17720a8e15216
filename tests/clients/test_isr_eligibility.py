"""The ISR does not flap around a departed follower (issue 32): three strata processes,
one idle partition with RF=3. A follower is SIGKILLed (and, in the second case, stopped
cleanly with SIGTERM); for three leases nothing is written. The leader must drop it from
the ISR once and not add it back while its agent is gone (it used to re-add it every
250 ms, because the follower's last fetch offset still equalled the log end: 121
metastore commits in 30 s), and add it back once it returns and fetches.

Counted from the leader's own `strata_isr_shrinks_total` / `strata_isr_expands_total`,
and from Metadata sampled every 50 ms (the ISR it shows never names the gone agent
after its removal).
"""

from __future__ import annotations

import time

import pytest

pytest.register_assert_rewrite("replication_testlib", "cattle_testlib")

from cattle_testlib import LeadershipSampler, metric  # noqa: E402
from replication_testlib import create_replicated_topic, produce_values, wait_for  # noqa: E402
from strata_testlib import unique_topic  # noqa: E402
from test_replication import report, started_cluster  # noqa: E402

LEASE_MS = 3000
LEASE_S = LEASE_MS / 1000


@pytest.fixture
def idle_cluster(broker_factory, request):
    yield from started_cluster(broker_factory, request, "strata-isr-", [
        "--lease-ms", str(LEASE_MS),
        # Long, as by default: only the agent's departure may take it out.
        "--replica-lag-time-max-ms", "30000",
    ], rebalance_ms=0)


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_a_departed_follower_leaves_the_isr_once_and_stays_out(idle_cluster, how, capsys,
                                                                 record_property):
    cluster = idle_cluster
    topic = unique_topic("isr-flap")
    views = create_replicated_topic(cluster, topic, 1)
    leader = views[0].leader
    follower = next(n for n in cluster.nodes if n != leader)
    produce_values(cluster.servers(), topic, 0, [b"a", b"b", b"c"], flush_timeout=30)
    url = cluster.agents[leader].http_url
    shrinks0 = metric(url, "strata_isr_shrinks_total")
    expands0 = metric(url, "strata_isr_expands_total")
    sampler = LeadershipSampler(cluster, topic).start()
    try:
        t_gone = time.monotonic()
        if how == "sigkill":
            cluster.agents[follower].kill()
        else:
            cluster.agents[follower].stop()
        wait_for(lambda: (follower not in (cluster.view(leader, topic).partition(topic, 0).isr), None),
                 LEASE_S * 3, f"agent {follower} out of the ISR after {how}")
        t_out = time.monotonic()
        # Three leases idle while it is gone.
        time.sleep(3 * LEASE_S)
        shrinks = metric(url, "strata_isr_shrinks_total") - shrinks0
        expands = metric(url, "strata_isr_expands_total") - expands0
        readded = [s for s in sampler.samples
                   if s.t > t_out and follower in s.partitions.get(0, (0, 0, ()))[2]]
        t_back = time.monotonic()
        cluster.agents[follower].start()
        wait_for(lambda: (follower in cluster.view(leader, topic).partition(topic, 0).isr, None),
                 30, f"agent {follower} back in the ISR once it returned")
        expands_after = metric(url, "strata_isr_expands_total") - expands0
    finally:
        sampler.stop()
    line = (f"{how}: out of the ISR after {t_out - t_gone:.2f}s; while gone: shrinks={shrinks:.0f} "
            f"expands={expands:.0f} re-added in Metadata={len(readded)}; back in the ISR "
            f"{time.monotonic() - t_back:.2f}s after its restart (expands={expands_after:.0f})")
    report(capsys, record_property, f"isr-flap-{how}", line)
    assert shrinks == 1, f"the ISR should shrink once while the follower is gone [{line}]"
    assert expands == 0, f"a gone follower was added back to the ISR [{line}]"
    assert not readded, f"Metadata showed the gone follower in the ISR [{line}]"
    assert expands_after == 1, f"the follower should be added back once after it returned [{line}]"
