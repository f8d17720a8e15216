"""strata under the limits a new user meets (issue 12, defects 5, 6 and 7): the common
default `ulimit -n 1024`, a setting that cannot work, and clients that declare large
request frames and then send nothing.

- Under `ulimit -n 1024` (soft and hard, so the agent cannot raise it) a topic of 600
  partitions is created and served; one that cannot fit the open-file budget is refused
  up front with INVALID_PARTITIONS, and leaves no topic and no open descriptors behind;
  `kcat -L` logs nothing; connections beyond the limit make the accept loop back off
  (a handful of log lines, not thousands); a SIGKILL and restart on the same data
  directory works.
- `--num-partitions 0` is refused at start, naming the setting (and bad per-address
  connection limits).
- `--max-connections-per-ip` (issue 17): of 500 connections from one address, the
  limit's worth are served and the rest closed at once; overrides apply per address.
- 60 connections declaring 99 MB frames cost the agent neither memory nor address space,
  and a frame that stalls half-sent is dropped after `--request-read-timeout-ms`.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time

import requests
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import NewTopic

from conftest import pick_free_ports, strata_bin
from strata_testlib import RDKAFKA_LOG, admin, unique_topic, wait_until


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def vm_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def warn_lines(broker) -> int:
    return sum(1 for line in broker.log_text().splitlines() if " WARN " in line)


def create(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> KafkaError | None:
    """Creates the topic; returns the error the agent answered, if any."""
    a = admin(bootstrap)
    fs = a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                         operation_timeout=timeout, request_timeout=timeout)
    try:
        fs[topic].result(timeout=timeout)
        return None
    except KafkaException as e:
        return e.args[0]


def topic_partitions(bootstrap: str, topic: str) -> int | None:
    md = admin(bootstrap).list_topics(timeout=20)
    t = md.topics.get(topic)
    return None if t is None or t.error is not None else len(t.partitions)


def test_bad_settings_are_refused_at_start(tmp_path):
    k, h = pick_free_ports(2)
    r = subprocess.run(
        [str(strata_bin()), "agent", "--num-partitions", "0", "--data-dir", str(tmp_path / "d"),
         "--kafka-listen", f"127.0.0.1:{k}", "--http-listen", f"127.0.0.1:{h}"],
        capture_output=True, text=True, timeout=30)
    assert r.returncode != 0, r.stderr
    assert "num_partitions" in r.stderr and "must be between 1 and" in r.stderr, r.stderr
    for flags, says in [(["--max-connections-per-ip", "0"], "max_connections_per_ip"),
                        (["--max-connections-per-ip-overrides", "broker-1.example:5"], "not an IP address"),
                        (["--max-connections-per-ip-overrides", "10.0.0.1:lots"], "not a connection count")]:
        r = subprocess.run(
            [str(strata_bin()), "agent", *flags, "--data-dir", str(tmp_path / "d"),
             "--kafka-listen", f"127.0.0.1:{k}", "--http-listen", f"127.0.0.1:{h}"],
            capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and says in r.stderr, (flags, r.stderr)


def test_many_partitions_under_ulimit_1024(broker_factory):
    b = broker_factory()
    b.nofile = 1024
    b.start()
    bootstrap = b.bootstrap

    big = unique_topic("six-hundred")
    assert create(bootstrap, big, 600, timeout=120) is None
    assert topic_partitions(bootstrap, big) == 600
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "logger": RDKAFKA_LOG})
    errors = []
    for i in range(0, 600, 37):
        p.produce(big, value=b"x", partition=i,
                  on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(60) == 0 and not errors, errors
    fds_before = open_fds(b.pid)
    assert fds_before < 1024 - 200, f"{fds_before} descriptors open for 600 partitions"

    # One that cannot fit is refused before anything is created or opened.
    too_big = unique_topic("does-not-fit")
    err = create(bootstrap, too_big, 5000)
    assert err is not None, "a topic beyond the open-file budget was created"
    assert err.code() == KafkaError.INVALID_PARTITIONS, err
    assert "open-file limit 1024" in err.str(), err.str()
    assert topic_partitions(bootstrap, too_big) is None
    assert not (b.data_dir / "logs" / f"{too_big}-0").exists()
    assert abs(open_fds(b.pid) - fds_before) < 20, (fds_before, open_fds(b.pid))

    # Listing metadata logs nothing.
    warns = warn_lines(b)
    r = subprocess.run(["kcat", "-b", bootstrap, "-L", "-m", "10"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert warn_lines(b) == warns, b.log_tail()

    # Connections past the limit: accept fails for a while and backs off.
    held = []
    try:
        for _ in range(1100 - fds_before):
            held.append(socket.create_connection(("127.0.0.1", b.kafka_port), timeout=5))
        wait_until(lambda: "accept failed" in b.log_text(), 20, "the agent to run out of descriptors")
        time.sleep(2)  # the window over which the log lines are counted
        accept_warns = sum(1 for line in b.log_text().splitlines() if "accept failed" in line)
        assert accept_warns <= 3, f"{accept_warns} 'accept failed' lines in 2 s"
    finally:
        for s in held:
            s.close()
    wait_until(lambda: subprocess.run(["kcat", "-b", bootstrap, "-L", "-m", "10"],
                                      capture_output=True, timeout=30).returncode == 0,
               30, "the agent to accept connections again")

    # A restart on the same data directory works and serves the topic.
    b.kill()
    b.start()
    assert topic_partitions(b.bootstrap, big) == 600


def send_partial_frames(port: int, n: int, declared: int, sent: bytes) -> list[socket.socket]:
    conns = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(struct.pack(">i", declared) + sent)
        conns.append(s)
    return conns


def closed(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_declared_frames_do_not_reserve_memory(broker_factory):
    b = broker_factory(extra_args=["--request-read-timeout-ms", "3000"])
    b.start()
    vm_before, rss_before = vm_kib(b.pid, "VmSize"), vm_kib(b.pid, "VmRSS")
    conns = send_partial_frames(b.kafka_port, 60, 99 * 1024 * 1024, b"\x00\x03\x00\x00")
    try:
        time.sleep(0.5)  # let the agent read what was sent
        vm_after, rss_after = vm_kib(b.pid, "VmSize"), vm_kib(b.pid, "VmRSS")
        print(f"VmSize {vm_before // 1024} -> {vm_after // 1024} MiB, "
              f"VmRSS {rss_before // 1024} -> {rss_after // 1024} MiB with 60 x 99 MB declared")
        assert vm_after - vm_before < 1024 * 1024, "address space grew by a GiB or more"
        assert rss_after - rss_before < 256 * 1024
        # Others are still served meanwhile.
        assert topic_partitions(b.bootstrap, "none-such") is None
        # The stalled frames are dropped once the read timeout passes.
        assert all(closed(s, 15) for s in conns), "a half-sent frame was never timed out"
    finally:
        for s in conns:
            s.close()
    assert b.is_running()


def api_versions_answered(s: socket.socket, within: float = 10.0) -> bool:
    """Sends ApiVersions v0 on `s`: True if answered, False if the agent closed it."""
    body = struct.pack(">hhi", 18, 0, 1) + struct.pack(">h", 4) + b"test"
    s.settimeout(within)
    try:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = s.recv(4)
    except (ConnectionResetError, BrokenPipeError):
        return False
    return len(head) == 4


def connect_from(port: int, source: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def test_connections_per_address_are_limited_and_overrides_apply(broker_factory):
    """max_connections_per_ip=200: of 500 connections from one address, 200 are served
    and 300 closed at once (counted in strata_connections_refused_total); closing 50
    lets exactly 50 more in. An override gives 127.0.0.2 a limit of 5 and 127.0.0.3 none
    at all, while 127.0.0.1 keeps its 200; producers from the address go on working."""
    broker = broker_factory(extra_args=["--max-connections-per-ip", "200",
                                        "--max-connections-per-ip-overrides", "127.0.0.2:5,127.0.0.3:0"])
    broker.start()
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    socks = [connect_from(port, "127.0.0.1") for _ in range(500)]
    try:
        served = [s for s in socks if api_versions_answered(s)]
        assert len(served) == 200, f"{len(served)} of 500 served"
        # The other 300 were closed by the agent, not left waiting.
        metrics = requests.get(f"{broker.http_url}/metrics", timeout=10).text
        refused = [line for line in metrics.splitlines()
                   if line.startswith('strata_connections_refused_total{reason="max_connections_per_ip"}')]
        assert refused and float(refused[0].split()[-1]) == 300, refused

        for s in served[:50]:
            s.close()
        more = []

        def next_admitted() -> bool:
            s = connect_from(port, "127.0.0.1")
            if api_versions_answered(s):
                more.append(s)
                return True
            s.close()
            return False

        wait_until(next_admitted, 15, "a connection admitted after 50 closed")
        while len(more) < 50:
            assert next_admitted(), f"only {len(more)} admitted after 50 closed"
        extra = connect_from(port, "127.0.0.1")
        assert not api_versions_answered(extra), "the 201st connection is refused again"
        extra.close()
        socks.extend(more)

        two = [connect_from(port, "127.0.0.2") for _ in range(6)]
        socks.extend(two)
        assert [api_versions_answered(s) for s in two] == [True] * 5 + [False]
        three = connect_from(port, "127.0.0.3")
        socks.append(three)
        assert not api_versions_answered(three), "a limit of 0 refuses the address"
    finally:
        for s in socks:
            s.close()
    # With the sockets gone, a client from the address works again.
    wait_until(lambda: create(broker.bootstrap, unique_topic("per-ip"), 1) is None, 30,
               "a topic created once the connections closed")
