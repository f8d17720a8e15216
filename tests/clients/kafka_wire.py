"""A minimal Kafka wire client for the requests no client library lets a test shape
exactly: ApiVersions, InitProducerId and Produce with hand-set producer id, epoch and
sequence (record batches are built with kafka-python's DefaultRecordBatchBuilder), and
IncrementalAlterConfigs on the cluster-default broker resource (an empty name, which
librdkafka's and kafka-python's admin clients refuse to send; Java's sends it)."""

from __future__ import annotations

import socket
import struct

from kafka.record.default_records import DefaultRecordBatchBuilder

API_PRODUCE = 0
API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22
API_ALTER_CLIENT_QUOTAS = 49
API_INCREMENTAL_ALTER_CONFIGS = 44

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
UNKNOWN_PRODUCER_ID = 59


def _str(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _compact_str(s: str | None) -> bytes:
    if s is None:
        return _uvarint(0)
    b = s.encode()
    return _uvarint(len(b) + 1) + b


class Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        v = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


class Wire:
    """One connection; requests are sent one at a time."""

    def __init__(self, host: str, port: int, timeout: float = 15):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.corr = 0
        self.versions: dict[int, tuple[int, int]] = {}

    @classmethod
    def connect(cls, bootstrap: str) -> "Wire":
        host, port = bootstrap.rsplit(":", 1)
        w = cls(host, int(port))
        w.versions = w.api_versions()
        return w

    def close(self) -> None:
        self.sock.close()

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def request(self, api_key: int, version: int, body: bytes, flexible: bool = False) -> Reader:
        self.corr += 1
        header = struct.pack(">hhi", api_key, version, self.corr) + _str("strata-wire-test")
        if flexible:
            header += _uvarint(0)  # request header v2: no tagged fields
        msg = header + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        size = struct.unpack(">i", self._recv(4))[0]
        r = Reader(self._recv(size))
        corr = r.take(">i")
        assert corr == self.corr, f"correlation id {corr}, expected {self.corr}"
        if flexible and api_key != API_VERSIONS:
            r.skip_tags()  # response header v1
        return r

    def incremental_alter_configs(self, resource_type: int, name: str, ops: list[tuple[str, int, str | None]],
                                  validate_only: bool = False) -> tuple[int, str | None]:
        """IncrementalAlterConfigs v0 of one resource with (config, operation, value)
        changes; returns (error code, error message)."""
        body = struct.pack(">i", 1) + struct.pack(">b", resource_type) + _str(name)
        body += struct.pack(">i", len(ops))
        for config, op, value in ops:
            body += _str(config) + struct.pack(">b", op) + _str(value)
        body += struct.pack(">?", validate_only)
        r = self.request(API_INCREMENTAL_ALTER_CONFIGS, 0, body)
        r.take(">i")  # throttle_time_ms
        assert r.take(">i") == 1, "one resource answered"
        code = r.take(">h")
        message = r.string()
        return code, message

    def alter_client_quotas(self, entity: list[tuple[str, str | None]],
                            ops: list[tuple[str, float | None]],
                            validate_only: bool = False) -> tuple[int, str | None]:
        """AlterClientQuotas v0 of one entity ((type, name or None for the default)
        pairs) with (key, value or None to remove) changes: (error code, message)."""
        body = struct.pack(">i", 1) + struct.pack(">i", len(entity))
        for kind, name in entity:
            body += _str(kind) + _str(name)
        body += struct.pack(">i", len(ops))
        for key, value in ops:
            body += _str(key) + struct.pack(">d?", value or 0.0, value is None)
        body += struct.pack(">?", validate_only)
        r = self.request(API_ALTER_CLIENT_QUOTAS, 0, body)
        r.take(">i")  # throttle_time_ms
        assert r.take(">i") == 1, "one entry answered"
        code = r.take(">h")
        return code, r.string()

    def api_versions(self) -> dict[int, tuple[int, int]]:
        r = self.request(API_VERSIONS, 0, b"")
        err = r.take(">h")
        assert err == NONE, f"ApiVersions error {err}"
        out = {}
        for _ in range(r.take(">i")):
            key, lo, hi = r.take(">hhh")
            out[key] = (lo, hi)
        return out

    def pick(self, api_key: int, wanted: list[int]) -> int:
        lo, hi = self.versions.get(api_key, (None, None))
        assert lo is not None, f"the broker does not advertise API key {api_key}"
        for v in wanted:
            if lo <= v <= hi:
                return v
        raise AssertionError(f"API key {api_key}: broker supports {lo}..{hi}, the test speaks {wanted}")

    def init_producer_id(self, timeout_ms: int = 60000) -> tuple[int, int, int]:
        """InitProducerId without a transactional id: (error_code, producer_id, epoch)."""
        v = self.pick(API_INIT_PRODUCER_ID, [4, 3, 2, 1, 0])
        if v < 2:
            r = self.request(API_INIT_PRODUCER_ID, v, _str(None) + struct.pack(">i", timeout_ms))
            throttle, err, pid, epoch = r.take(">ihqh")
        else:
            body = _compact_str(None) + struct.pack(">i", timeout_ms)
            if v >= 3:
                body += struct.pack(">qh", -1, -1)
            r = self.request(API_INIT_PRODUCER_ID, v, body + _uvarint(0), flexible=True)
            throttle, err, pid, epoch = r.take(">ihqh")
        return err, pid, epoch

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1,
                timeout_ms: int = 15000) -> tuple[int, int]:
        """Produce v3 of one record batch: (error_code, base_offset)."""
        v = self.pick(API_PRODUCE, [3])
        body = (_str(None) + struct.pack(">hi", acks, timeout_ms)
                + struct.pack(">i", 1) + _str(topic)
                + struct.pack(">i", 1) + struct.pack(">i", partition)
                + struct.pack(">i", len(batch)) + batch)
        r = self.request(API_PRODUCE, v, body)
        n_topics = r.take(">i")
        assert n_topics == 1, n_topics
        assert r.string() == topic
        assert r.take(">i") == 1
        index, err, base_offset, _append_time = r.take(">ihqq")
        assert index == partition
        return err, base_offset


def idempotent_batch(producer_id: int, epoch: int, base_sequence: int, values: list[bytes],
                     timestamp: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=producer_id, producer_epoch=epoch,
                                  base_sequence=base_sequence, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=timestamp + i, key=None, value=v, headers=[])
    return bytes(b.build())
