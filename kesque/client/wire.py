"""A tiny synchronous Kafka protocol client for the few requests confluent-kafka's
AdminClient does not expose (or exposes lossily): DescribeLogDirs, DescribeTopicPartitions
(eligible leader replicas) and DescribeConfigs with every synonym kept.

Requests and responses are encoded/decoded with kio; the version of each API is the
highest one both this client (kio) and the broker (ApiVersions) support.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import socket
import struct
from functools import lru_cache

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from .. import __version__

_I32 = struct.Struct(">i")

CLIENT_SOFTWARE_NAME = "kesque-tools"


class WireError(Exception):
    pass


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def make(cls, **kw):
    """Build a kio message/struct from plain values: fields this version lacks are dropped,
    integer milliseconds become kio's timedelta/datetime where the schema wants them."""
    fields = {f.name: f.metadata.get("kafka_type", "") for f in dataclasses.fields(cls)}
    args = {}
    for k, v in kw.items():
        if k not in fields:
            continue
        kind = fields[k]
        if isinstance(v, int) and not isinstance(v, bool):
            if kind in ("timedelta_i32", "timedelta_i64"):
                v = datetime.timedelta(milliseconds=v)
            elif kind == "datetime_i64":
                v = None if v < 0 else _EPOCH + datetime.timedelta(milliseconds=v)
        args[k] = v
    return cls(**args)


@lru_cache(maxsize=None)
def _kio_versions(api_key: int) -> tuple[int, ...]:
    out = []
    for v in range(0, 20):
        try:
            load_request_schema(api_key, v)
            out.append(v)
        except Exception:
            continue
    return tuple(out)


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for part in servers.split(","):
        part = part.strip()
        if not part:
            continue
        host, _, port = part.rpartition(":")
        out.append((host.strip("[]") or "localhost", int(port)))
    return out


class Connection:
    def __init__(self, host: str, port: int, client_id: str = "kesque-tools", timeout: float = 30.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id
        self._corr = 0
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()

    @classmethod
    def to_any(cls, bootstrap: str, client_id: str = "kesque-tools", timeout: float = 30.0) -> "Connection":
        last: Exception | None = None
        for host, port in parse_bootstrap(bootstrap):
            try:
                return cls(host, port, client_id, timeout)
            except OSError as e:
                last = e
        raise WireError(f"cannot connect to any of {bootstrap}: {last}")

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ framing
    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise WireError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def _send(self, api_key: int, version: int, body_obj) -> None:
        self._corr += 1
        req_cls = type(body_obj)
        header_cls = req_cls.__header_schema__
        header = header_cls(request_api_key=api_key, request_api_version=version, correlation_id=self._corr,
                            client_id=self.client_id)
        out = io.BytesIO()
        entity_writer(header_cls)(out, header)
        entity_writer(req_cls)(out, body_obj)
        payload = out.getvalue()
        self.sock.sendall(_I32.pack(len(payload)) + payload)

    def _roundtrip(self, api_key: int, version: int, body_obj, reader=None) -> object:
        self._send(api_key, version, body_obj)
        size = _I32.unpack(self._recv_exact(4))[0]
        frame = self._recv_exact(size)
        resp_cls = load_response_schema(api_key, version)
        rh_cls = resp_cls.__header_schema__
        if api_key == 18:  # ApiVersions responses always carry header v0
            from kio.schema.response_header.v0.header import ResponseHeader as rh_cls
        mv = memoryview(frame).toreadonly()
        rh, pos = entity_reader(rh_cls)(mv, 0)
        if rh.correlation_id != self._corr:
            raise WireError(f"correlation id mismatch: {rh.correlation_id} != {self._corr}")
        if reader is not None:
            return reader(mv, pos, version)
        obj, _ = entity_reader(resp_cls)(mv, pos)
        return obj

    def _negotiate(self) -> None:
        req_cls = load_request_schema(18, 3)
        resp = self._roundtrip(18, 3, req_cls(client_software_name=CLIENT_SOFTWARE_NAME,
                                              client_software_version=__version__))
        if int(resp.error_code) != 0:
            raise WireError(f"ApiVersions failed with error {int(resp.error_code)}")
        self.versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}

    def version_for(self, api_key: int, max_version: int | None = None) -> int | None:
        rng = self.versions.get(api_key)
        if rng is None:
            return None
        common = [v for v in _kio_versions(api_key) if rng[0] <= v <= rng[1]
                  and (max_version is None or v <= max_version)]
        return max(common) if common else None

    def _build(self, api_key: int, build, max_version: int | None):
        version = self.version_for(api_key, max_version)
        if version is None:
            raise WireError(f"the broker does not support API {api_key}")
        cls = load_request_schema(api_key, version)
        mod = importlib.import_module(cls.__module__.rsplit(".", 1)[0])  # kio.schema.<api>.v<N>
        return version, build(mod, version)

    def request(self, api_key: int, build, max_version: int | None = None, reader=None) -> object:
        """``build(module_of_version, version) -> request object``; returns the response,
        decoded by kio or by ``reader(body_view, pos, version)`` where kio cannot read it."""
        version, body = self._build(api_key, build, max_version)
        return self._roundtrip(api_key, version, body, reader)

    def send_only(self, api_key: int, build, max_version: int | None = None) -> None:
        """A request the broker does not answer (Produce with acks=0)."""
        version, body = self._build(api_key, build, max_version)
        self._send(api_key, version, body)
