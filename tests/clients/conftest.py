"""Shared fixtures for strata's real-client integration tests.

The `broker` fixture starts a real `strata agent` process on free loopback ports
with a fresh data dir, waits for `/readyz`, and always kills it afterwards. On a
test failure the broker's stderr is attached to the pytest report (and the temp
dir holding the data dir and the log is kept, its path printed).

Environment:
  STRATA_BIN            path of the strata binary (default <repo>/target/debug/strata)
  STRATA_READY_TIMEOUT  seconds to wait for /readyz (default 30)
  STRATA_KEEP_DATA=1    keep the temp dir even when the test passed
  STRATA_LOG            passed through to the broker (its tracing filter)
Other STRATA_* variables are not passed to the broker.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

# Detailed assertion messages in the shared helpers too.
pytest.register_assert_rewrite("strata_testlib")

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "strata"
READY_TIMEOUT = float(os.environ.get("STRATA_READY_TIMEOUT", "30"))
STOP_TIMEOUT = 30.0
LOG_TAIL_BYTES = 64 * 1024

# Every broker process started by this session, so that even an interrupted run
# (Ctrl-C, an internal pytest error) does not leave one behind.
_LIVE: set["Broker"] = set()


def strata_bin() -> Path:
    return Path(os.environ.get("STRATA_BIN", str(DEFAULT_BIN)))


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to outgoing connections (Linux: 32768)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports handed out by pick_free_ports, in this test process, from below the ephemeral
# range: a port picked there cannot be taken by some process's outgoing connection
# between picking it and the agent binding it (the agents' own connections to each
# other once did exactly that), and a port is never handed out twice in one session.
# Each pytest process starts at its own offset so that parallel runs rarely meet.
_PORT_FLOOR = 20000
_PORT_SPAN = max(1000, _ephemeral_low() - _PORT_FLOOR)
_next_port = _PORT_FLOOR + (os.getpid() * 97) % _PORT_SPAN
_handed_out: set[int] = set()


def pick_free_ports(n: int) -> list[int]:
    """n distinct loopback TCP ports free now, each handed out once per session."""
    global _next_port
    ports: list[int] = []
    for _ in range(_PORT_SPAN):
        if len(ports) == n:
            break
        port = _next_port
        _next_port = _PORT_FLOOR + (_next_port - _PORT_FLOOR + 1) % _PORT_SPAN
        if port in _handed_out:
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        _handed_out.add(port)
        ports.append(port)
    if len(ports) < n:
        raise BrokerError(f"no {n} free loopback ports below {_PORT_FLOOR + _PORT_SPAN}")
    return ports


class BrokerError(AssertionError):
    pass


class Broker:
    """One `strata agent` process; restartable on the same data dir and ports."""

    def __init__(self, root: Path, binary: Path | None = None, extra_args: list[str] | None = None,
                 extra_env: dict[str, str] | None = None):
        self.binary = Path(binary or strata_bin())
        # Appended to the `strata agent` command line on every (re)start.
        self.extra_args: list[str] = list(extra_args or [])
        # Set in the agent's environment on every (re)start, after the STRATA_* filter
        # (so STRATA_FAILPOINT_* and the like can be passed on purpose).
        self.extra_env: dict[str, str] = dict(extra_env or {})
        # RLIMIT_NOFILE (soft and hard) to start the agent with; None: inherit.
        self.nofile: int | None = None
        self.root = root
        self.data_dir = root / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = root / "strata.log"
        self.kafka_port, self.http_port = pick_free_ports(2)
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.exit_codes: list[int] = []

    # ----------------------------------------------------------------- addresses
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # ----------------------------------------------------------------- lifecycle
    def command(self) -> list[str]:
        return [
            str(self.binary),
            "agent",
            "--kafka-listen", self.bootstrap,
            "--http-listen", f"127.0.0.1:{self.http_port}",
            "--data-dir", str(self.data_dir),
            *self.extra_args,
        ]

    def start(self, timeout: float = READY_TIMEOUT) -> "Broker":
        """Start (or restart) on the same data dir and ports; wait for /readyz."""
        if self.is_running():
            raise BrokerError("strata is already running")
        if not self.binary.exists():
            raise BrokerError(
                f"strata binary not found at {self.binary}; build it (cargo build) or set STRATA_BIN"
            )
        self.starts += 1
        cmd = self.command()
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            # The agent reads STRATA_* variables (config file, node id, partitions...);
            # keep the caller's from leaking in, except the log filter.
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith("STRATA_") or k == "STRATA_LOG"}
            env.setdefault("RUST_BACKTRACE", "1")
            env.update(self.extra_env)
            nofile = self.nofile

            def limits() -> None:
                if nofile is not None:
                    import resource
                    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True, preexec_fn=limits if nofile is not None else None,
            )
        _LIVE.add(self)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_err = "no attempt yet"
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.exit_codes.append(rc)
                raise BrokerError(
                    f"strata exited with code {rc} before becoming ready\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.http_url + "/readyz", timeout=1.0) as resp:
                    if resp.status == 200 and self._kafka_port_accepts():
                        return
                    last_err = f"/readyz returned {resp.status}"
            except urllib.error.HTTPError as e:
                last_err = f"/readyz returned {e.code}"
            except (urllib.error.URLError, OSError) as e:
                last_err = f"/readyz: {e}"
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerError(
                    f"strata not ready within {timeout}s (last: {last_err})\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def _kafka_port_accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.kafka_port), timeout=1.0):
                return True
        except OSError:
            return False

    def stop(self, timeout: float = STOP_TIMEOUT, expect_code: int | None = 0) -> int:
        """SIGTERM and wait. Asserts the exit code (0 = clean shutdown) unless expect_code is None."""
        if not self.is_running():
            raise BrokerError("stop(): strata is not running")
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise BrokerError(f"strata did not exit within {timeout}s of SIGTERM\n{self.log_tail()}")
        self.exit_codes.append(rc)
        _LIVE.discard(self)
        if expect_code is not None and rc != expect_code:
            raise BrokerError(
                f"strata exited with code {rc} after SIGTERM, expected {expect_code}\n{self.log_tail()}"
            )
        return rc

    def kill(self) -> int | None:
        """SIGKILL and wait (no-op if not running). Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
            rc = self.proc.wait(timeout=STOP_TIMEOUT)
            self.exit_codes.append(rc)
        _LIVE.discard(self)
        return self.proc.returncode

    def restart(self, timeout: float = READY_TIMEOUT) -> "Broker":
        self.stop()
        return self.start(timeout)

    # ----------------------------------------------------------------- logs
    def log_text(self) -> str:
        try:
            return self.log_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return "<no log>"

    def log_tail(self, limit: int = LOG_TAIL_BYTES) -> str:
        text = self.log_text()
        if len(text) > limit:
            text = f"<... {len(text) - limit} chars cut ...>\n" + text[-limit:]
        return f"----- strata log ({self.log_path}) -----\n{text}"


@atexit.register
def _kill_leftovers() -> None:
    for b in list(_LIVE):
        try:
            b.kill()
        except Exception:
            pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
    if rep.failed:
        for b in getattr(item, "_strata_brokers", []):
            rep.sections.append((f"strata stderr [{rep.when}]", b.log_tail()))


def _make_broker(request, extra_args: list[str] | None = None,
                 extra_env: dict[str, str] | None = None) -> Broker:
    root = Path(tempfile.mkdtemp(prefix="strata-client-test-"))
    b = Broker(root, extra_args=extra_args, extra_env=extra_env)
    if not hasattr(request.node, "_strata_brokers"):
        request.node._strata_brokers = []
    request.node._strata_brokers.append(b)

    def finalize():
        b.kill()
        failed = any(
            getattr(getattr(request.node, "rep_" + w, None), "failed", False)
            for w in ("setup", "call")
        )
        if failed or os.environ.get("STRATA_KEEP_DATA") == "1":
            print(f"\n[strata] kept data dir and log for {request.node.nodeid}: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    request.addfinalizer(finalize)
    return b


@pytest.fixture
def broker(request) -> Broker:
    """A started single-node strata broker with a fresh data dir."""
    b = _make_broker(request)
    b.start()
    return b


@pytest.fixture
def broker_factory(request):
    """Make extra (not yet started) brokers; call .start() yourself.
    broker_factory(extra_args=[...]) appends arguments to the agent command line;
    extra_env={...} sets variables in its environment (STRATA_* included)."""
    return lambda extra_args=None, extra_env=None: _make_broker(request, extra_args, extra_env)


# Kafka's group.initial.rebalance.delay.ms is 3000 by default: a new (Empty) group
# waits that long for more members before its first rebalance. The group tests use a
# short delay so that they do not spend most of their time waiting for it.
GROUP_INITIAL_REBALANCE_DELAY_MS = 200


@pytest.fixture
def group_broker(request) -> Broker:
    """Like `broker`, started with a short --group-initial-rebalance-delay-ms."""
    b = _make_broker(request, ["--group-initial-rebalance-delay-ms",
                               str(GROUP_INITIAL_REBALANCE_DELAY_MS)])
    b.start()
    return b


@pytest.fixture
def seaweedfs(request):
    """A started SeaweedFS (`weed mini`) S3 server on free loopback ports with a fresh
    data dir and the bucket `SeaweedFS.BUCKET` created; `stop()`/`start()` restart it on
    the same dir. Its log is attached to a failing test's report. See seaweedfs_testlib."""
    from seaweedfs_testlib import SeaweedFS  # boto3 only where S3 is used

    root = Path(tempfile.mkdtemp(prefix="strata-weed-"))
    w = SeaweedFS(root)
    # the report hook attaches log_tail() of everything in this list
    if not hasattr(request.node, "_strata_brokers"):
        request.node._strata_brokers = []
    request.node._strata_brokers.append(w)

    def finalize():
        w.kill()
        failed = any(
            getattr(getattr(request.node, "rep_" + when, None), "failed", False)
            for when in ("setup", "call")
        )
        if failed or os.environ.get("STRATA_KEEP_DATA") == "1":
            print(f"\n[strata] kept SeaweedFS dir and log for {request.node.nodeid}: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    request.addfinalizer(finalize)
    w.start()
    return w
