"""A small raw Kafka protocol client for tests.

It speaks the wire protocol over a plain blocking socket so tests can send exactly the
bytes they mean — valid requests encoded with kio, hand-corrupted ones, several requests
in one ``send`` — and observe exactly what the broker answers (or that it closes the
connection). From kesque it takes only the API key names, the flexible-version table and the record-batch
builder/reader (to build batches and to check what a Fetch returned).

    with WireClient(broker.bootstrap_servers) as c:
        m = Msg(ApiKeys.METADATA, 12)
        resp = c.request(ApiKeys.METADATA, 12, m(topics=None, allow_auto_topic_creation=False,
                                                 include_topic_authorized_operations=False))
        Api(c).produce("topic", build_batch([(b"key", b"value", ())]))

Framing reminders (Kafka's protocol guide):

* request  = int32 size | header | body; header v1 = api_key int16, api_version int16,
  correlation_id int32, client_id nullable string; header v2 = v1 + tagged fields
  (used when the API version is flexible);
* response = int32 size | header | body; header v0 = correlation_id; v1 = v0 + tagged
  fields (flexible versions) — except ApiVersions, whose responses always use v0.
"""

from __future__ import annotations

import datetime
import io
import select
import socket
import struct
import sys
import time
from functools import cache

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from kesque.protocol.api import FLEXIBLE_FROM, decode_request
from kesque.protocol.api_keys import ApiKeys
from kesque.records.records import build_batch  # noqa: F401  (re-exported for tests)

API_VERSIONS = 18
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


class ConnectionClosed(Exception):
    """The broker closed the connection (EOF or reset)."""


def is_flexible(api_key: int, version: int) -> bool:
    first = FLEXIBLE_FROM.get(api_key, ("", None))[1]
    return first is not None and version >= first


# ---------------------------------------------------------------------- primitives


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, pos
        shift += 7


def tagged_fields(fields: dict[int, bytes] | None = None) -> bytes:
    """A tagged-field section: count, then (tag, size, data) in ascending tag order."""
    fields = fields or {}
    out = [uvarint(len(fields))]
    for tag in sorted(fields):
        out += [uvarint(tag), uvarint(len(fields[tag])), fields[tag]]
    return b"".join(out)


def skip_tagged_fields(buf, pos: int) -> int:
    n, pos = read_uvarint(buf, pos)
    for _ in range(n):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    return pos


def string16(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    b = s.encode()
    return _I16.pack(len(b)) + b


# ---------------------------------------------------------------------- kio glue


@cache
def request_class(api_key: int, version: int):
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int):
    return load_response_schema(api_key, version)


class Msg:
    """Build kio objects for one (api, version) by class name: ``m()`` is the top-level
    request, ``m("FetchTopic", ...)`` a nested struct of the same schema module. Plain
    ints are converted for ``timedelta`` fields."""

    def __init__(self, api_key: int, version: int, response: bool = False):
        self.cls = (response_class if response else request_class)(api_key, version)
        self.mod = sys.modules[self.cls.__module__]

    def __call__(self, _name: str | None = None, **kw):
        import dataclasses

        cls = self.cls if _name is None else getattr(self.mod, _name)
        kinds = {f.name: f.metadata.get("kafka_type") for f in dataclasses.fields(cls)}
        unknown = set(kw) - set(kinds)
        if unknown:
            raise TypeError(f"{cls.__name__} has no fields {sorted(unknown)}")
        for k, v in list(kw.items()):
            if kinds[k] in ("timedelta_i32", "timedelta_i64") and isinstance(v, int):
                kw[k] = datetime.timedelta(milliseconds=v)
        return cls(**kw)

    def loose(self, _name: str | None = None, **kw):
        """Like calling the builder, but drops the fields this version does not have (one
        description of a request serves every version of it)."""
        import dataclasses

        cls = self.cls if _name is None else getattr(self.mod, _name)
        names = {f.name for f in dataclasses.fields(cls)}
        return self(_name, **{k: v for k, v in kw.items() if k in names})


def encode_body(obj) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


def request_header(
    api_key: int,
    version: int,
    correlation_id: int,
    client_id: str | None = "kesque-test",
    header_tags: bytes | None = None,
) -> bytes:
    """Header v1, or v2 (with ``header_tags`` or an empty tagged-field section) when flexible."""
    head = _I16.pack(api_key) + _I16.pack(version) + _I32.pack(correlation_id) + string16(client_id)
    if is_flexible(api_key, version):
        head += header_tags if header_tags is not None else b"\x00"
    return head


def encode_request(
    api_key: int,
    version: int,
    body,
    correlation_id: int,
    client_id: str | None = "kesque-test",
    header_tags: bytes | None = None,
) -> bytes:
    """A complete size-prefixed request; ``body`` is a kio object or raw bytes."""
    payload = body if isinstance(body, (bytes, bytearray)) else encode_body(body)
    frame = request_header(api_key, version, correlation_id, client_id, header_tags) + bytes(payload)
    return _I32.pack(len(frame)) + frame


def decode_request_frame(data: bytes):
    """(api_key, version, kio request) of a size-prefixed request, read the way a broker
    reads it (header v1/v2, then the body). Raises on anything malformed."""
    size = _I32.unpack_from(data, 0)[0]
    if size < 10 or 4 + size > len(data):
        raise ValueError("incomplete frame")
    frame = data[4 : 4 + size]
    api_key, version = _I16.unpack_from(frame, 0)[0], _I16.unpack_from(frame, 2)[0]
    n = _I16.unpack_from(frame, 8)[0]
    pos = 10 + max(n, 0)
    if is_flexible(api_key, version):
        pos = skip_tagged_fields(frame, pos)
    # kesque's decoder: it bounds array counts before kio reserves room for them
    return api_key, version, decode_request(api_key, version, memoryview(frame)[pos:])


def decode_response(api_key: int, version: int, frame: bytes):
    """(correlation_id, kio response object) from a response frame without its size."""
    corr = _I32.unpack_from(frame, 0)[0]
    pos = 4
    if api_key != API_VERSIONS and is_flexible(api_key, version):
        pos = skip_tagged_fields(frame, pos)
    obj, _size = entity_reader(response_class(api_key, version))(frame[pos:], 0)
    return corr, obj


# ---------------------------------------------------------------------- client


class WireClient:
    def __init__(self, address, timeout: float = 10.0, client_id: str | None = "kesque-test"):
        if isinstance(address, str):
            host, _, port = address.rpartition(":")
            address = (host, int(port))
        self.address = address
        self.timeout = timeout
        self.client_id = client_id
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()
        self._next_corr = 1

    # -- lifecycle
    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def next_correlation_id(self) -> int:
        c = self._next_corr
        self._next_corr += 1
        return c

    # -- sending
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def encode(
        self, api_key: int, version: int, body, correlation_id: int | None = None, header_tags: bytes | None = None
    ) -> tuple[int, bytes]:
        corr = self.next_correlation_id() if correlation_id is None else correlation_id
        return corr, encode_request(api_key, version, body, corr, self.client_id, header_tags)

    def send(
        self, api_key: int, version: int, body, correlation_id: int | None = None, header_tags: bytes | None = None
    ) -> int:
        corr, data = self.encode(api_key, version, body, correlation_id, header_tags)
        self.send_raw(data)
        return corr

    # -- receiving
    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no response from broker")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(1 << 20)
        except TimeoutError:
            raise TimeoutError("no response from broker") from None
        except (ConnectionResetError, BrokenPipeError) as e:
            raise ConnectionClosed(str(e)) from None
        if not chunk:
            raise ConnectionClosed("connection closed by broker")
        self._buf += chunk

    def recv_frame(self, timeout: float | None = None) -> bytes:
        """The next response frame (without its size prefix)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while len(self._buf) < 4:
            self._fill(deadline)
        size = _I32.unpack_from(self._buf, 0)[0]
        while len(self._buf) < 4 + size:
            self._fill(deadline)
        frame = bytes(self._buf[4 : 4 + size])
        del self._buf[: 4 + size]
        return frame

    def recv(self, api_key: int, version: int, timeout: float | None = None):
        """(correlation_id, response) of the next frame, decoded as (api_key, version)."""
        return decode_response(api_key, version, self.recv_frame(timeout))

    def request(self, api_key: int, version: int, body, header_tags: bytes | None = None, timeout: float | None = None):
        corr = self.send(api_key, version, body, header_tags=header_tags)
        got, resp = self.recv(api_key, version, timeout)
        assert got == corr, f"correlation id {got} != {corr}"
        return resp

    def pipeline(self, requests: list[tuple], timeout: float | None = None) -> list[tuple[int, object]]:
        """Write every request in ONE send, then read the responses in order.

        ``requests`` items are ``(api_key, version, body)`` or ``(api_key, version, body,
        correlation_id)``. A Produce with acks=0 expects no response. Returns
        ``[(correlation_id, response)]`` for the requests that expect one, checking that
        each response carries the correlation id of the request it answers."""
        data = bytearray()
        expected = []
        for item in requests:
            api_key, version, body = item[:3]
            corr, frame = self.encode(api_key, version, body, item[3] if len(item) > 3 else None)
            data += frame
            if not (api_key == ApiKeys.PRODUCE and getattr(body, "acks", 1) == 0):
                expected.append((corr, api_key, version))
        self.send_raw(bytes(data))
        out = []
        for corr, api_key, version in expected:
            got, resp = self.recv(api_key, version, timeout)
            if got != corr:
                raise AssertionError(f"response carries correlation id {got}, expected {corr} (api {api_key})")
            out.append((got, resp))
        return out

    def is_closed(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection within ``timeout`` (pending response
        bytes are discarded); False if it is still open when the time is up."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            r, _, _ = select.select([self.sock], [], [], remaining)
            if not r:
                return False
            try:
                chunk = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True
            self._buf += chunk


# ---------------------------------------------------------------------- record batches


def set_crc(batch: bytearray) -> bytearray:
    """Recompute the CRC32C of a v2 batch after editing bytes covered by it."""
    from crc32c import crc32c

    _U32.pack_into(batch, 17, crc32c(bytes(batch[21:])))
    return batch


def legacy_message_set(value: bytes, key: bytes | None = None, magic: int = 1) -> bytes:
    """One uncompressed v0/v1 message in a message set (offset 0), with its CRC32."""
    import zlib

    body = bytes([magic, 0])
    if magic == 1:
        body += _I64.pack(int(time.time() * 1000))
    body += _I32.pack(-1) if key is None else _I32.pack(len(key)) + key
    body += _I32.pack(len(value)) + value
    msg = _U32.pack(zlib.crc32(body) & 0xFFFFFFFF) + body
    return _I64.pack(0) + _I32.pack(len(msg)) + msg


# ---------------------------------------------------------------------- request helpers


class Api:
    """Convenience calls on a :class:`WireClient` (fixed, current versions)."""

    def __init__(self, client: WireClient):
        self.c = client

    def api_versions(self, version: int = 3):
        m = Msg(ApiKeys.API_VERSIONS, version)
        body = m(client_software_name="kesque-test", client_software_version="1.0") if version >= 3 else m()
        return self.c.request(ApiKeys.API_VERSIONS, version, body)

    def metadata(self, topics: list[str] | None, allow_auto: bool = False, version: int = 12):
        m = Msg(ApiKeys.METADATA, version)
        req = m(
            topics=None if topics is None else tuple(m("MetadataRequestTopic", topic_id=None, name=t) for t in topics),
            allow_auto_topic_creation=allow_auto,
            include_topic_authorized_operations=False,
        )
        return self.c.request(ApiKeys.METADATA, version, req)

    def create_topics(self, topics: list[dict], validate_only: bool = False, version: int = 7):
        """``topics``: dicts with name, num_partitions=1, replication_factor=1, configs={}."""
        m = Msg(ApiKeys.CREATE_TOPICS, version)
        items = tuple(
            m(
                "CreatableTopic",
                name=t["name"],
                num_partitions=t.get("num_partitions", 1),
                replication_factor=t.get("replication_factor", 1),
                assignments=(),
                configs=tuple(m("CreatableTopicConfig", name=k, value=v) for k, v in t.get("configs", {}).items()),
            )
            for t in topics
        )
        return self.c.request(
            ApiKeys.CREATE_TOPICS, version, m(topics=items, timeout=10000, validate_only=validate_only)
        )

    def create_topic(self, name: str, partitions: int = 1, configs: dict | None = None):
        r = self.create_topics([{"name": name, "num_partitions": partitions, "configs": configs or {}}])
        assert r.topics[0].error_code == 0, r.topics[0]
        return r.topics[0]

    def produce_request(
        self, topic: str, records: bytes | None, partition: int = 0, acks: int = -1, version: int = 9, topic_id=None
    ):
        m = Msg(ApiKeys.PRODUCE, version)
        return m.loose(
            transactional_id=None,
            acks=acks,
            timeout=10000,
            topic_data=(
                m.loose(
                    "TopicProduceData",
                    name=topic,
                    topic_id=topic_id,
                    partition_data=(m("PartitionProduceData", index=partition, records=records),),
                ),
            ),
        )

    def produce(self, topic: str, records: bytes | None, partition: int = 0, acks: int = -1, version: int = 9):
        """The single partition response of a one-partition produce."""
        r = self.c.request(ApiKeys.PRODUCE, version, self.produce_request(topic, records, partition, acks, version))
        return r.responses[0].partition_responses[0]

    def fetch_request(
        self,
        topic: str,
        offset: int,
        partition: int = 0,
        max_wait: int = 0,
        min_bytes: int = 0,
        current_leader_epoch: int = -1,
        session_id: int = 0,
        session_epoch: int = -1,
        max_bytes: int = 1 << 20,
        version: int = 12,
        topic_id=None,
    ):
        m = Msg(ApiKeys.FETCH, version)
        part = m.loose(
            "FetchPartition",
            partition=partition,
            current_leader_epoch=current_leader_epoch,
            fetch_offset=offset,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=max_bytes,
        )
        return m.loose(
            cluster_id=None,
            replica_id=-1,
            max_wait=max_wait,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=0,
            session_id=session_id,
            session_epoch=session_epoch,
            topics=(m.loose("FetchTopic", topic=topic, topic_id=topic_id, partitions=(part,)),),
            forgotten_topics_data=(),
            rack_id="",
        )

    def fetch(self, topic: str, offset: int, **kw):
        """The whole Fetch v12 response."""
        return self.c.request(ApiKeys.FETCH, 12, self.fetch_request(topic, offset, **kw))

    def alter_client_quotas(self, entries: list[tuple[dict, dict]], validate_only: bool = False, version: int = 1):
        """``entries``: (entity {type: name or None for the default}, {key: value or None to remove})."""
        m = Msg(ApiKeys.ALTER_CLIENT_QUOTAS, version)
        items = tuple(
            m(
                "EntryData",
                entity=tuple(m("EntityData", entity_type=t, entity_name=n) for t, n in e.items()),
                ops=tuple(
                    m("OpData", key=k, value=0.0 if v is None else float(v), remove=v is None) for k, v in ops.items()
                ),
            )
            for e, ops in entries
        )
        return self.c.request(ApiKeys.ALTER_CLIENT_QUOTAS, version, m(entries=items, validate_only=validate_only))

    def describe_client_quotas(
        self, components: list[tuple[str, int, str | None]] = (), strict: bool = False, version: int = 1
    ):
        """``components``: (entity type, match type 0 exact / 1 default / 2 any, match)."""
        m = Msg(ApiKeys.DESCRIBE_CLIENT_QUOTAS, version)
        comps = tuple(m("ComponentData", entity_type=t, match_type=mt, match=n) for t, mt, n in components)
        return self.c.request(ApiKeys.DESCRIBE_CLIENT_QUOTAS, version, m(components=comps, strict=strict))

    def list_offsets_request(self, topic: str, timestamp: int, partition: int = 0, version: int = 7):
        m = Msg(ApiKeys.LIST_OFFSETS, version)
        part = m.loose("ListOffsetsPartition", partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)
        return m.loose(
            replica_id=-1,
            isolation_level=0,
            timeout=10000,
            topics=(m("ListOffsetsTopic", name=topic, partitions=(part,)),),
        )

    def list_offsets(self, topic: str, timestamp: int, partition: int = 0, version: int = 7):
        req = self.list_offsets_request(topic, timestamp, partition, version)
        return self.c.request(ApiKeys.LIST_OFFSETS, version, req).topics[0].partitions[0]


def records_of(data: bytes | None) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of every record in complete, CRC-valid batches."""
    from kesque.records import batch as rb
    from kesque.records.records import iter_records

    out = []
    if not data:
        return out
    for pos, h in rb.iter_headers(data):
        assert rb.is_crc_valid(data, pos, h.size), f"batch at offset {h.base_offset} has a bad CRC"
        if h.is_control:
            continue
        for r in iter_records(data, pos, h):
            out.append((r.offset, r.key, r.value, r.timestamp))
    return out


# ---------------------------------------------------------------------- confluent-kafka helpers


def consume_all(
    bootstrap: str,
    topic: str,
    partitions=(0,),
    timeout: float = 20.0,
    start: int = 0,
    until: dict[int, int] | None = None,
) -> dict[int, list[tuple[int, bytes | None]]]:
    """Read every partition from ``start`` to its high watermark (or ``until[p]``) with a
    real confluent-kafka consumer; returns {partition: [(offset, value)]}. Fails on any
    consumer error (a corrupt batch, an offset out of range)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kesque-test-unused",
            "enable.auto.commit": False,
            "check.crcs": True,
            "fetch.wait.max.ms": 20,
            "enable.partition.eof": True,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    try:
        ends = {}
        for p in partitions:
            if until is not None and p in until:
                ends[p] = until[p]
            else:
                _lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                ends[p] = hi
        out: dict[int, list] = {p: [] for p in partitions}
        todo = {p for p in partitions if ends[p] > start}
        if not todo:
            return out
        c.assign([TopicPartition(topic, p, start) for p in todo])
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {[(p, len(v)) for p, v in out.items()]} of {ends}")
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= ends[msg.partition()]:
                        todo.discard(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            p = msg.partition()
            if msg.offset() < ends[p]:
                out[p].append((msg.offset(), msg.value()))
            if msg.offset() + 1 >= ends[p]:
                todo.discard(p)
        return out
    finally:
        c.close()
