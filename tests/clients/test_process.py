"""The strata binary as an operator runs it: a second agent on a locked data dir is
refused, an incompatible data dir is refused, and `strata tiering` archives an agent's
closed segments from its own process."""
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import pick_free_ports, strata_bin


def run_briefly(args, timeout=30):
    return subprocess.run([str(strata_bin()), *args], capture_output=True, text=True, timeout=timeout)


def test_locked_data_dir_is_refused(broker):
    k, h = pick_free_ports(2)
    r = run_briefly(["agent", "--data-dir", str(broker.data_dir), "--kafka-listen", f"127.0.0.1:{k}",
                     "--http-listen", f"127.0.0.1:{h}"])
    assert r.returncode != 0
    assert "locked by another strata process" in r.stderr, r.stderr
    assert broker.is_running(), "the running agent is untouched"


def test_incompatible_data_dir_is_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "strata.format").write_text("format = 99\n")
    k, h = pick_free_ports(2)
    r = run_briefly(["agent", "--data-dir", str(data), "--kafka-listen", f"127.0.0.1:{k}",
                     "--http-listen", f"127.0.0.1:{h}"])
    assert r.returncode != 0
    assert "incompatible strata version" in r.stderr, r.stderr


def test_tiering_runs_as_its_own_process(broker_factory, tmp_path):
    b = broker_factory(extra_args=["--tiering-enabled", "false"])
    b.start()
    archive = tmp_path / "archive"
    log = open(tmp_path / "tiering.log", "w")
    tiering = subprocess.Popen([str(strata_bin()), "tiering", "--data-dir", str(b.data_dir),
                                "--archive-url", f"file://{archive}", "--tiering-interval-ms", "100"],
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("apart", 1, 1, config={"segment.bytes": "1000"})])["apart"].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for i in range(100):
            p.produce("apart", value=b"record-%03d" % i)
            p.flush(10)
        deadline = time.monotonic() + 30
        files = []
        while time.monotonic() < deadline:
            files = sorted(archive.glob("topic=apart/partition=0/*.parquet"))
            if len(files) >= 3:
                break
            time.sleep(0.1)
        assert len(files) >= 3, (tmp_path / "tiering.log").read_text()
        # Contiguous ranges from offset 0, as the file names say.
        ranges = sorted((int(f.name[:20]), int(f.name[21:41])) for f in files)
        assert ranges[0][0] == 0
        assert all(b_[0] == a[1] + 1 for a, b_ in zip(ranges, ranges[1:])), ranges
        # The agent runs no worker of its own and says so.
        status = json.load(urllib.request.urlopen(f"{b.http_url}/v1/tiering", timeout=5))
        assert status["partitions"] == [] and "another process" in status["note"]
    finally:
        tiering.terminate()
        assert tiering.wait(30) == 0
        log.close()
