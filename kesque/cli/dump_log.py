"""``kafka-dump-log.sh``: print segment, index and checkpoint files straight from disk.

Output follows Kafka's DumpLogSegments: ``Dumping <file>``, ``Log starting offset: N``,
one ``baseOffset: ... isvalid: true`` line per batch and, with ``--deep-iteration`` /
``--print-data-log``, one ``| offset: ...`` line per record (``payload:`` with the data),
``offset: N position: P`` for ``.index``, ``timestamp: T offset: O`` for ``.timeindex``,
transaction index and producer snapshot entries. ``--cluster-metadata-decoder`` prints
``__cluster_metadata`` records as JSON, ``--offsets-decoder`` the keys and values of
``__consumer_offsets`` records as Kafka's OffsetsMessageParser does (``key: {"type":"1",
"data":{...}} payload: {"version":"3","data":{...}}``), ``--transaction-log-decoder`` those of
``__transaction_state`` as its TransactionLogMessageParser does (``key: {"type":"0","data":
{"transactionalId":"..."}} payload: {"version":"1","data":{"producerId":...}}``).

Beyond Kafka's tool (which rejects them), the text files a log dir holds are dumped too:
``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint`` (``topic: T partition: P
offset: O``), ``leader-epoch-checkpoint`` (``epoch: E startOffset: O``) and
``partition.metadata`` (``version: 0 topicId: ...``).

Everything is read with kesque's own storage and record modules; no broker is needed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import sys
import uuid as _uuid
import zlib

from crc32c import crc32c

from ..coordinator.group import records as gr
from ..coordinator.transaction import records as tr
from ..metadata import records as mr
from ..mirror import links as link_rules
from ..protocol import schema
from ..protocol.primitives import read_uvarint
from ..records import batch as rb
from ..records.records import iter_records
from ..storage import checkpoint as ck
from .plumbing.javautil import kafka_uuid
from .plumbing.jopt import print_usage_and_exit, usage_or_version
from .plumbing.progress import bar

NAME = "dump-log"
SCRIPT = "kafka-dump-log.sh"
DESCRIPTION = (
    "This tool helps to parse a log file and dump its contents to the console, useful for debugging a "
    "seemingly corrupt log segment."
)
HELP = "dump log segments, indexes and checkpoint files (kafka-dump-log.sh)"

INT_MAX = 2**31 - 1
_OFFSET_CHECKPOINTS = {
    ck.REPLICATION_CHECKPOINT,
    ck.RECOVERY_POINT_CHECKPOINT,
    ck.LOG_START_CHECKPOINT,
    ck.CLEANER_CHECKPOINT,
}
_CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}

# KRaft's control records (ControlRecordUtils), printed as Kafka's JSON converters write them:
# type -> (label, fields of the version Kafka writes)
_VOTER_ENDPOINT = [("name", "string", None, ""), ("host", "string", None, ""), ("port", "uint16", None, 0)]
_KRAFT_CONTROL = {
    2: (
        "LeaderChange:",
        [
            ("version", "int16", None, 0),
            ("leader_id", "int32", None, -1),
            ("voters", [("voter_id", "int32", None, 0)], None, []),
            ("granting_voters", [("voter_id", "int32", None, 0)], None, []),
        ],
    ),
    3: ("SnapshotHeader", [("version", "int16", None, 0), ("last_contained_log_timestamp", "int64", None, 0)]),
    4: ("SnapshotFooter", [("version", "int16", None, 0)]),
    5: ("KRaftVersion", [("version", "int16", None, 0), ("k_raft_version", "int16", None, 0)]),
    6: (
        "KRaftVoters",
        [
            ("version", "int16", None, 0),
            (
                "voters",
                [
                    ("voter_id", "int32", None, 0),
                    ("voter_directory_id", "uuid", None, None),
                    ("endpoints", _VOTER_ENDPOINT, None, []),
                    (
                        "k_raft_version_feature",
                        (
                            "struct",
                            [("min_supported_version", "int16", None, 0), ("max_supported_version", "int16", None, 0)],
                        ),
                        None,
                        {},
                    ),
                ],
                None,
                [],
            ),
        ],
    ),
}


def configure(p) -> None:
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="If set, printing the messages content when dumping data logs. Automatically set if any "
        "decoder option is specified.",
    )
    p.add_argument(
        "--verify-index-only",
        action="store_true",
        help="If set, just verify the index log without printing its content.",
    )
    p.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="If set, just checks the index sanity without printing its content. This is the same check "
        "that is executed on broker startup to determine if an index needs rebuilding or not.",
    )
    p.add_argument(
        "--files",
        action="append",
        metavar="file1, file2, ...",
        help="REQUIRED: The comma separated list of data and index log files to be dumped.",
    )
    p.add_argument(
        "--max-message-size", type=int, default=5 * 1024 * 1024, metavar="size", help="Size of largest message."
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=INT_MAX,
        metavar="size",
        help="Limit the amount of total batches read in bytes avoiding reading the whole .log file(s).",
    )
    p.add_argument(
        "--deep-iteration",
        action="store_true",
        help="If set, uses deep instead of shallow iteration. Automatically set if print-data-log is enabled.",
    )
    p.add_argument(
        "--value-decoder-class",
        nargs="?",
        const="org.apache.kafka.tools.api.StringDecoder",
        metavar="value-decoder-class",
        help="If set, used to deserialize the messages. Only the string decoder "
        "(org.apache.kafka.tools.api.StringDecoder) is available.",
    )
    p.add_argument(
        "--key-decoder-class",
        nargs="?",
        const="org.apache.kafka.tools.api.StringDecoder",
        metavar="key-decoder-class",
        help="If set, used to deserialize the keys. Only the string decoder "
        "(org.apache.kafka.tools.api.StringDecoder) is available.",
    )
    p.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="If set, log data will be parsed as offset data from the __consumer_offsets topic.",
    )
    p.add_argument(
        "--transaction-log-decoder",
        action="store_true",
        help="If set, log data will be parsed as transaction metadata from the __transaction_state topic.",
    )
    p.add_argument(
        "--cluster-metadata-decoder",
        action="store_true",
        help="If set, log data will be parsed as cluster metadata records.",
    )
    p.add_argument(
        "--skip-record-metadata", action="store_true", help="Whether to skip printing metadata for each record."
    )
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


class DumpError(Exception):
    """An exception Kafka's tool would die with (printed, exit status 1)."""


def _out(s: str = "") -> None:
    sys.stdout.write(s + "\n")


# ----------------------------------------------------------------- record payloads


def _string_decoder(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def _camel(name: str) -> str:
    special = {"endpoints": "endPoints"}
    if name in special:
        return special[name]
    head, *rest = name.split("_")
    return head + "".join(x[:1].upper() + x[1:] for x in rest)


def _json_value(v):
    if isinstance(v, _uuid.UUID):
        return kafka_uuid(v)
    if isinstance(v, bytes):  # Jackson writes binary fields in base64
        return base64.b64encode(v).decode()
    if isinstance(v, dict):
        return {_camel(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_value(x) for x in v]
    return v


def cluster_metadata_json(value: bytes) -> str:
    """``{"type":"TOPIC_RECORD","version":0,"data":{...}}`` as Kafka's MetadataJsonConverters."""

    _frame, pos = read_uvarint(value, 0)
    _key, pos = read_uvarint(value, pos)
    version, pos = read_uvarint(value, pos)
    rec = mr.decode(value)
    kind = rec.pop("type")
    if kind.startswith("Unknown"):
        raise ValueError(f"Unknown metadata id {_key}")
    if kind == "ClusterLinkRecord":  # a link's secrets are never printed (kesque-only record)
        rec["configs"] = [
            {**c, "value": link_rules.REDACTED if link_rules.is_sensitive(c["name"]) else c["value"]}
            for c in rec["configs"]
        ]
    fields = mr.fields_for(kind, version)
    data = {}
    for name, _typ, tag, default in fields:
        if name not in rec:
            continue
        if tag is not None and rec[name] == default:
            continue
        data[_camel(name)] = _json_value(rec[name])
    type_name = re.sub(r"(?<!^)(?=[A-Z])", "_", kind).upper()
    return json.dumps({"type": type_name, "version": version, "data": data}, separators=(",", ":"))


# ----------------------------------------------------------------- __consumer_offsets

# JSON field names of the group coordinator records (Kafka's *JsonConverter use the schema
# names in camelCase); kesque's record module names the same fields in snake_case
_OFFSETS_NAMES = {"group_id": "groupId", "member_id": "memberId"}
_KIP848_KEY = {"group": "groupId", "member_id": "memberId", "regular_expression": "regularExpression"}
_OFFSETS_VALUES = {
    0: "OffsetCommitValue",
    1: "OffsetCommitValue",
    2: "GroupMetadataValue",
    3: "ConsumerGroupMetadataValue",
    4: "ConsumerGroupPartitionMetadataValue",
    5: "ConsumerGroupMemberMetadataValue",
    6: "ConsumerGroupTargetAssignmentMetadataValue",
    7: "ConsumerGroupTargetAssignmentMemberValue",
    8: "ConsumerGroupCurrentMemberAssignmentValue",
    16: "ConsumerGroupRegularExpressionValue",
}


def _offsets_json(v):
    """A decoded __consumer_offsets value as Jackson writes it: camelCase names, Kafka Uuid
    strings, bytes in base64."""

    if isinstance(v, _uuid.UUID):
        return kafka_uuid(v)
    if isinstance(v, bytes):  # Jackson writes binary fields in base64
        return base64.b64encode(v).decode()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, dict):
        return {_OFFSETS_NAMES.get(k) or _camel(k): _offsets_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_offsets_json(x) for x in v]
    return v


def _consumer_protocol(data: bytes, kind: str):
    """ConsumerProtocolSubscription / ConsumerProtocolAssignment (versions 0-3) as JSON, or
    None when the bytes do not parse (the tool then keeps them as base64)."""

    pos = 0

    def i16():
        nonlocal pos
        v = struct.unpack_from(">h", data, pos)[0]
        pos += 2
        return v

    def i32():
        nonlocal pos
        v = struct.unpack_from(">i", data, pos)[0]
        pos += 4
        return v

    def string(nullable=False):
        nonlocal pos
        n = i16()
        if n < 0:
            if nullable:
                return None
            raise ValueError("null string")
        if pos + n > len(data):
            raise ValueError("truncated")
        v = bytes(data[pos : pos + n]).decode()
        pos += n
        return v

    def nbytes():
        nonlocal pos
        n = i32()
        if n < 0:
            return None
        if pos + n > len(data):
            raise ValueError("truncated")
        v = base64.b64encode(bytes(data[pos : pos + n])).decode()
        pos += n
        return v

    def topic_partitions():
        out = []
        for _ in range(i32()):
            topic = string()
            parts = [i32() for _ in range(max(i32(), 0))]
            out.append({"topic": topic, "partitions": parts})
        return out

    try:
        version = i16()
        if not 0 <= version <= 3:
            return None
        if kind == "subscription":
            out = {"topics": [string() for _ in range(max(i32(), 0))], "userData": nbytes()}
            if version >= 1:
                out["ownedPartitions"] = topic_partitions()
            if version >= 2:
                out["generationId"] = i32()
            if version >= 3:
                out["rackId"] = string(nullable=True)
            return out
        assigned = topic_partitions()
        return {"assignedPartitions": assigned, "userData": nbytes()}
    except (struct.error, ValueError, UnicodeDecodeError):
        return None


def offsets_key_value(r) -> tuple[str | None, str | None]:
    """Kafka's OffsetsMessageParser: ``{"type":"<key version>","data":{...}}`` for the key and
    ``{"version":"<value version>","data":{...}}`` (or ``<DELETE>`` for a tombstone) for the
    payload; a classic group's consumer-protocol subscriptions and assignments are decoded."""

    if r.key is None:
        raise DumpError(
            f"java.lang.RuntimeException: Failed to decode message at offset {r.offset} using offset "
            "topic decoder (message had a missing key)"
        )
    key_bytes = bytes(r.key)
    key_version = struct.unpack_from(">h", key_bytes, 0)[0] if len(key_bytes) >= 2 else -1
    try:
        key_version, key = gr.decode_key(key_bytes)
    except gr.UnknownRecordType:
        return f"Unknown record type {key_version} at offset {r.offset}, skipping.", None
    except Exception as e:  # noqa: BLE001 - Kafka reports and goes on
        return (
            f"Error at offset {r.offset}, skipping. Could not read record with version {key_version} from "
            f"key's buffer due to: {e}"
        ), None
    value_bytes = bytes(r.value) if r.value is not None else None
    try:
        value = gr.decode_value(key_version, value_bytes)
    except Exception as e:  # noqa: BLE001
        version = struct.unpack_from(">h", value_bytes, 0)[0] if len(value_bytes) >= 2 else -1
        why = (
            f"Can't read version {version} of {_OFFSETS_VALUES[key_version]}"
            if isinstance(e, gr.UnknownRecordType)
            else str(e)
        )
        return (
            f"Error at offset {r.offset}, skipping. Could not read record with version {version} from value's "
            f"buffer due to: {why}"
        ), None
    names = _KIP848_KEY if key_version >= 3 else {}
    key_json = json.dumps(
        {"type": str(key_version), "data": {names.get(k, k): v for k, v in key.items()}},
        separators=(",", ":"),
        ensure_ascii=False,
    )
    if value is None:
        return key_json, "<DELETE>"
    version = value.pop("_version")
    fields = gr.VALUES[key_version][version][0]
    data = {}
    for name, _typ, tag, default in fields:
        if name not in value or (tag is not None and value[name] == default):
            continue  # tagged fields are written only when they differ from their default
        data[name] = value[name]
    data = _offsets_json(data)
    if key_version == gr.GROUP_METADATA and data.get("protocolType") == "consumer":
        for raw_member, member in zip(value.get("members") or [], data.get("members") or [], strict=False):
            for fname in ("subscription", "assignment"):
                raw = raw_member.get(fname)
                decoded = _consumer_protocol(raw, fname) if raw is not None else None
                if decoded is not None:
                    member[fname] = decoded
    value_json = json.dumps({"version": str(version), "data": data}, separators=(",", ":"), ensure_ascii=False)
    return key_json, value_json


# ----------------------------------------------------------------- __transaction_state


def transaction_log_key_value(r) -> tuple[str | None, str | None]:
    """Kafka's TransactionLogMessageParser (a CoordinatorRecordMessageParser, Kafka 4):
    ``{"type":"0","data":{"transactionalId":"..."}}`` for the key and ``{"version":"<value
    version>","data":{...}}`` for the payload, the TransactionLogValue fields in schema order
    with camelCase names, tagged fields only when not at their default, ``<DELETE>`` for a
    tombstone. Records it cannot read are reported in place of the key, as Kafka's serde does."""

    if r.key is None:
        raise DumpError(
            f"java.lang.RuntimeException: Failed to decode message at offset {r.offset} using the "
            "specified decoder (message had a missing key)"
        )
    key_bytes = bytes(r.key)
    skip = f"Error at offset {r.offset}, skipping."
    if len(key_bytes) < 2:
        return f"{skip} Could not read version from key's buffer.", None
    key_version = struct.unpack_from(">h", key_bytes, 0)[0]
    try:
        tid = tr.decode_key(key_bytes)
    except tr.UnknownRecordType:
        return f"Unknown record type {key_version} at offset {r.offset}, skipping.", None
    except Exception as e:  # noqa: BLE001 - Kafka reports and goes on
        return f"{skip} Could not read record with version {key_version} from key's buffer due to: {e}.", None
    key_json = json.dumps(
        {"type": str(key_version), "data": {"transactionalId": tid}}, separators=(",", ":"), ensure_ascii=False
    )
    if r.value is None:
        return key_json, "<DELETE>"
    value_bytes = bytes(r.value)
    if len(value_bytes) < 2:
        return f"{skip} Could not read version from value's buffer.", None
    version = struct.unpack_from(">h", value_bytes, 0)[0]
    try:
        value = tr.decode_value_fields(value_bytes)
    except Exception as e:  # noqa: BLE001
        return f"{skip} Could not read record with version {version} from value's buffer due to: {e}.", None
    data = {}
    for name in tr.VALUE_FIELD_ORDER[version]:
        v = value[name]
        if name in tr.TAGGED_DEFAULTS and v == tr.TAGGED_DEFAULTS[name]:
            continue
        data[_camel(name)] = _json_value(v)
    value_json = json.dumps({"version": str(version), "data": data}, separators=(",", ":"), ensure_ascii=False)
    return key_json, value_json


# ----------------------------------------------------------------- .log


def _seq(base_sequence: int, delta: int) -> int:
    if base_sequence < 0:
        return -1
    return (base_sequence + delta) & 0x7FFFFFFF


class Dumper:
    def __init__(self, a):
        self.a = a
        self.print_data = bool(
            a.print_data_log
            or a.cluster_metadata_decoder
            or a.offsets_decoder
            or a.transaction_log_decoder
            or a.value_decoder_class
            or a.key_decoder_class
        )
        self.deep = bool(a.deep_iteration or self.print_data)
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.nonconsecutive: dict[str, list[tuple[int, int]]] = {}
        self.ts_mismatch: dict[str, list[tuple[int, int]]] = {}
        self.ts_out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.ts_not_found: dict[str, list[tuple[int, int]]] = {}

    def payload(self, r) -> tuple[str | None, str | None]:
        if self.a.offsets_decoder:
            return offsets_key_value(r)
        if self.a.transaction_log_decoder:
            return transaction_log_key_value(r)
        if self.a.cluster_metadata_decoder:
            try:
                return None, cluster_metadata_json(r.value or b"")
            except Exception as e:  # noqa: BLE001 - Kafka reports and goes on
                return None, f"Error at {r.offset}, skipping. {e}"
        return _string_decoder(r.key), _string_decoder(r.value)

    def dump_log(self, path: str) -> None:
        name = os.path.basename(path)
        if name.endswith(".log"):
            _out(f"Log starting offset: {int(name.split('.')[0])}")
        elif name.endswith(".checkpoint"):
            if name == "bootstrap.checkpoint":
                _out("KRaft bootstrap snapshot")
            else:
                m = re.match(r"^(\d+)-(\d+)\.checkpoint$", name)
                if m:
                    _out(f"Snapshot end offset: {int(m.group(1))}, epoch: {int(m.group(2))}")
        with open(path, "rb") as f:
            data = f.read()
        file_size = len(data)
        if self.a.max_bytes < len(data):
            data = data[: self.a.max_bytes]
        progress = bar(len(data), name, "B", quiet=False, unit_scale=True)  # a terminal's only (issue 29)
        try:
            self._batches(path, data, file_size, progress)
        finally:
            progress.close()

    def _batches(self, path: str, data, file_size: int, progress) -> None:
        """Every batch of a segment's bytes (``data``, the first ``--max-bytes`` of its
        ``file_size``), a line each (and its records')."""
        valid = 0
        last_offset = -1
        pos = 0
        end = len(data)
        while pos + rb.LOG_OVERHEAD <= end:
            _base, size = rb.offset_and_size(data, pos)
            if size < rb.LOG_OVERHEAD + 5:
                raise DumpError(
                    f"org.apache.kafka.common.errors.CorruptRecordException: Found record size "
                    f"{size - rb.LOG_OVERHEAD} smaller than minimum record overhead (14) in file {path}."
                )
            if pos + size > end:
                break
            magic = data[pos + rb.MAGIC_OFFSET]
            if magic != rb.MAGIC_V2 or size < rb.HEADER_SIZE:
                self._legacy(data, pos, size, valid)
            else:
                h = rb.read_header(data, pos)
                self._batch_line(data, pos, h, valid)
                if self.deep:
                    last_offset = self._records(path, data, pos, h, last_offset)
            valid += size
            pos += size
            progress.update(size)
        trailing = file_size - valid
        if trailing > 0 and self.a.max_bytes == INT_MAX:
            _out(f"Found {trailing} invalid bytes at the end of {os.path.basename(path)}")

    def _batch_line(self, data, pos: int, h: rb.BatchHeader, position: int) -> None:
        ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
        horizon = f"OptionalLong[{h.base_timestamp}]" if h.attributes & rb.DELETE_HORIZON_FLAG else "OptionalLong.empty"
        codec = rb.COMPRESSION_NAMES.get(h.compression, "unknown")
        valid = h.size >= rb.HEADER_SIZE and rb.is_crc_valid(data, pos, h.size)
        _out(
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
            f"deleteHorizonMs: {horizon} position: {position} {ts_type}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {codec} crc: {h.crc} isvalid: {str(valid).lower()}"
        )

    def _legacy(self, data, pos: int, size: int, position: int) -> None:
        """Magic v0/v1 message (shallow): what Kafka prints for old message sets."""
        offset = struct.unpack_from(">q", data, pos)[0]
        crc = struct.unpack_from(">I", data, pos + 12)[0]
        magic = data[pos + 16]
        attrs = data[pos + 17]
        ts_part = "NO_TIMESTAMP_TYPE: -1"
        if magic == 1 and size >= 26:
            ts = struct.unpack_from(">q", data, pos + 18)[0]
            ts_part = f"{'LogAppendTime' if attrs & 0x08 else 'CreateTime'}: {ts}"
        valid = (zlib.crc32(bytes(data[pos + 16 : pos + size])) & 0xFFFFFFFF) == crc
        codec = rb.COMPRESSION_NAMES.get(attrs & 0x07, "unknown")
        _out(
            f"offset: {offset} position: {position} {ts_part} size: {size} magic: {magic} "
            f"compresscodec: {codec} crc: {crc} isvalid: {str(valid).lower()}"
        )

    def _records(self, path: str, data, pos: int, h: rb.BatchHeader, last_offset: int) -> int:
        ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
        try:
            records = list(iter_records(data, pos, h))
        except Exception as e:  # noqa: BLE001 - any decoding failure is a corrupt record
            raise DumpError(f"org.apache.kafka.common.errors.CorruptRecordException: {e}") from None
        for r in records:
            if last_offset == -1:
                last_offset = r.offset
            elif r.offset != last_offset + 1:
                self.nonconsecutive.setdefault(os.path.abspath(path), []).insert(0, (last_offset, r.offset))
            last_offset = r.offset
            prefix = "| "
            line = ""
            if not self.a.skip_record_metadata:
                ksize = -1 if r.key is None else len(r.key)
                vsize = -1 if r.value is None else len(r.value)
                keys = ",".join(k for k, _v in r.headers)
                line += (
                    f"{prefix}offset: {r.offset} {ts_type}: {r.timestamp} keySize: {ksize} valueSize: {vsize} "
                    f"sequence: {_seq(h.base_sequence, r.offset - h.base_offset)} headerKeys: [{keys}]"
                )
                prefix = " "
                if h.is_control:
                    line += self._control(r)
            if self.print_data and not h.is_control:
                key, value = self.payload(r)
                if key is not None:
                    line += f"{prefix}key: {key}"
                    prefix = " "
                if value is not None:  # after the prefix, as Kafka 4.4 ("| payload: ..." without metadata)
                    line += f"{prefix}payload: {value}"
            _out(line)
        return last_offset

    @staticmethod
    def _control(r) -> str:
        if r.key is None or len(r.key) < 4:
            return " controlType: UNKNOWN(-1)"
        _version, ctype = struct.unpack_from(">hh", r.key)
        name = _CONTROL_TYPES.get(ctype, "UNKNOWN")
        if ctype in (0, 1):
            coordinator_epoch = struct.unpack_from(">i", r.value, 2)[0] if r.value and len(r.value) >= 6 else -1
            return f" endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}"
        if ctype in _KRAFT_CONTROL:
            label, fields = _KRAFT_CONTROL[ctype]
            rec = schema.decode(fields, r.value or b"", 0, flexible=True)
            return f" {label} {json.dumps(_json_value(rec), separators=(',', ':'))}"
        return f" controlType: {name}({ctype})"

    # ------------------------------------------------------------------ indexes
    @staticmethod
    def _log_for(path: str) -> str:
        name = os.path.basename(path)
        return os.path.join(os.path.dirname(os.path.abspath(path)), name.split(".")[0] + ".log")

    @staticmethod
    def _read(path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def _batch_at(self, log: bytes, position: int, limit: int | None = None):
        end = len(log) if limit is None else min(len(log), position + limit)
        for p, h in rb.iter_headers(log, position, end):
            return p, h
        return None

    def dump_index(self, path: str) -> None:
        name = os.path.basename(path)
        base = int(name.split(".")[0])
        raw = self._read(path)
        n = len(raw) // 8
        if self.a.index_sanity_check:
            if len(raw) % 8:
                raise DumpError(
                    f"org.apache.kafka.common.errors.CorruptIndexException: Index file {name} is "
                    f"corrupt, found {len(raw)} bytes which is neither positive nor a multiple of 8."
                )
            if n:
                last = base + struct.unpack_from(">i", raw, (n - 1) * 8)[0]
                if last < base:
                    raise DumpError(
                        f"org.apache.kafka.common.errors.CorruptIndexException: Corrupt index found, "
                        f"index file ({os.path.abspath(path)}) has non-zero size but the last offset is "
                        f"{last} which is less than the base offset {base}."
                    )
        if n == 0:
            _out(f"{path} is empty.")
            return
        if self.a.index_sanity_check:
            _out(f"{path} passed sanity check.")
            return
        log = self._read(self._log_for(path))
        for i in range(n):
            rel, position = struct.unpack_from(">ii", raw, i * 8)
            offset = base + rel
            if offset == base and i > 0:
                return
            found = self._batch_at(log, position, self.a.max_message_size)
            if found is None:
                raise DumpError("java.util.NoSuchElementException")
            last = found[1].last_offset
            if last != offset:
                self.index_mismatches.setdefault(os.path.abspath(path), []).insert(0, (offset, last))
            if not self.a.verify_index_only:
                _out(f"offset: {offset} position: {position}")

    def dump_time_index(self, path: str) -> None:
        name = os.path.basename(path)
        base = int(name.split(".")[0])
        raw = self._read(path)
        if self.a.index_sanity_check:
            if len(raw) % 12:
                raise DumpError(
                    f"org.apache.kafka.common.errors.CorruptIndexException: Time index file {name} is "
                    f"corrupt, found {len(raw)} bytes which is neither positive nor a multiple of 12."
                )
            _out(f"{path} passed sanity check.")
            return
        index_raw = self._read(os.path.join(os.path.dirname(os.path.abspath(path)), name.split(".")[0] + ".index"))
        idx = [(base + r, p) for r, p in struct.iter_unpack(">ii", index_raw[: len(index_raw) // 8 * 8])]
        log = self._read(self._log_for(path))
        prev_ts = -1
        apath = os.path.abspath(path)
        for i in range(len(raw) // 12):
            ts, rel = struct.unpack_from(">qi", raw, i * 12)
            offset = base + rel
            if offset == base and i > 0:
                return
            position = 0
            for o, p in idx:
                if o <= offset:
                    position = p
                else:
                    break
            batch = None
            for bpos, h in rb.iter_headers(log, position):
                if h.last_offset >= offset:
                    batch = (bpos, h)
                    break
            if batch is None:
                self.ts_not_found.setdefault(apath, []).append((offset, -1))
            elif batch[1].last_offset != offset:
                self.ts_not_found.setdefault(apath, []).append((offset, batch[1].last_offset))
            else:
                max_ts = max((r.timestamp for r in iter_records(log, batch[0], batch[1])), default=-1)
                if max_ts != ts:
                    self.ts_mismatch.setdefault(apath, []).append((ts, max_ts))
                if prev_ts >= ts:
                    self.ts_out_of_order.setdefault(apath, []).append((ts, prev_ts))
            if not self.a.verify_index_only:
                _out(f"timestamp: {ts} offset: {offset}")
            prev_ts = ts

    # ------------------------------------------------------------------ other files
    def dump_txn_index(self, path: str) -> None:
        raw = self._read(path)
        for version, pid, first, last, lso in struct.iter_unpack(">hqqqq", raw[: len(raw) // 34 * 34]):
            _out(
                f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} lastStableOffset: {lso}"
            )

    def dump_producer_snapshot(self, path: str) -> None:
        raw = self._read(path)
        try:
            version = struct.unpack_from(">h", raw, 0)[0]
            if version != 1:
                raise DumpError(f"Snapshot contained an unknown file version {version}")
            crc, count = struct.unpack_from(">Ii", raw, 2)
            entries = [struct.unpack_from(">qhiqiqiq", raw, 10 + 46 * i) for i in range(count)]
        except struct.error as e:
            print(f"Snapshot failed schema validation: {e}", file=sys.stderr)
            return
        except DumpError as e:
            print(f"Snapshot failed schema validation: {e}", file=sys.stderr)
            return
        computed = crc32c(raw[6:])
        if computed != crc:
            print(
                f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. Computed crc: {computed}",
                file=sys.stderr,
            )
            return
        for pid, epoch, last_seq, last_off, delta, ts, coord_epoch, txn_first in entries:
            txn = f"OptionalLong[{txn_first}]" if txn_first >= 0 else "OptionalLong.empty"
            line = (
                f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coord_epoch} "
                f"currentTxnFirstOffset: {txn} lastTimestamp: {ts} "
            )
            if last_off >= 0:
                first_seq = (last_seq - delta) & 0x7FFFFFFF if last_seq >= 0 else last_seq
                line += (
                    f"firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: {last_off} "
                    f"offsetDelta: {delta} timestamp: {ts}"
                )
            _out(line)

    def dump_offset_checkpoint(self, path: str) -> None:
        entries = ck.OffsetCheckpointFile(path).read()
        _out(f"version: 0 entries: {len(entries)}")
        for (topic, partition), offset in entries.items():
            _out(f"topic: {topic} partition: {partition} offset: {offset}")

    def dump_leader_epoch_checkpoint(self, path: str) -> None:
        entries = ck.LeaderEpochCheckpointFile(path).read()
        _out(f"version: 0 entries: {len(entries)}")
        for epoch, start in entries:
            _out(f"epoch: {epoch} startOffset: {start}")

    def dump_partition_metadata(self, path: str) -> None:
        topic_id = ck.PartitionMetadataFile(path).read()
        _out(f"version: 0 topicId: {kafka_uuid(topic_id)}")

    # ------------------------------------------------------------------ dispatch
    def dump(self, path: str) -> None:
        _out(f"Dumping {path}")
        name = os.path.basename(path)
        suffix = name[name.rfind(".") :] if "." in name else ""
        if not os.path.exists(path):
            raise DumpError(f"java.nio.file.NoSuchFileException: {path}")
        if suffix in (".log", ".checkpoint"):
            self.dump_log(path)
        elif suffix == ".index":
            self.dump_index(path)
        elif suffix == ".timeindex":
            self.dump_time_index(path)
        elif suffix == ".snapshot":
            self.dump_producer_snapshot(path)
        elif suffix == ".txnindex":
            self.dump_txn_index(path)
        elif name in _OFFSET_CHECKPOINTS:
            self.dump_offset_checkpoint(path)
        elif name == ck.LEADER_EPOCH_CHECKPOINT:
            self.dump_leader_epoch_checkpoint(path)
        elif name == ck.PARTITION_METADATA:
            self.dump_partition_metadata(path)
        else:
            sys.stdout.flush()
            print(f"Ignoring unknown file {path}", file=sys.stderr)

    def report(self) -> None:
        sys.stdout.flush()
        err = sys.stderr
        for f, items in self.index_mismatches.items():
            print(f"Mismatches in :{f}", file=err)
            for i, v in items:
                print(f"  Index offset: {i}, log offset: {v}", file=err)
        for f, items in self.ts_mismatch.items():
            print(f"Found timestamp mismatch in :{f}", file=err)
            for i, v in items:
                print(f"  Index timestamp: {i}, log timestamp: {v}", file=err)
        for f, items in self.ts_out_of_order.items():
            print(f"Found out of order timestamp in :{f}", file=err)
            for i, v in items:
                print(f"  Index timestamp: {i}, Previously indexed timestamp: {v}", file=err)
        for items in self.ts_not_found.values():
            print("The following indexed offsets are not found in the log.", file=err)
            for i, v in items:
                print(f"Indexed offset: {i}, found log offset: {v}", file=err)
        for f, items in self.nonconsecutive.items():
            print(f"Non-consecutive offsets in {f}", file=err)
            for first, second in items:
                print(f"  {first} is followed by {second}", file=err)


def run(a) -> int:
    p = a._parser
    usage_or_version(a, p, DESCRIPTION)
    if not a.files:
        print_usage_and_exit(p, 'Missing required argument "[files]"')
    for name in (a.value_decoder_class, a.key_decoder_class):
        if name and name.rsplit(".", 1)[-1] != "StringDecoder":
            print(f'Exception in thread "main" java.lang.ClassNotFoundException: {name}', file=sys.stderr)
            return 1
    files = [f for item in a.files for f in item.split(",")]
    d = Dumper(a)
    try:
        for f in files:
            d.dump(f)
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except (DumpError, ck.CheckpointError, OSError, ValueError) as e:
        sys.stdout.flush()
        print(f'Exception in thread "main" {e}', file=sys.stderr)
        return 1
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _silence_stdout()
    d.report()
    return 0


def _silence_stdout() -> None:
    """Reader went away (``| head``): drop what is left instead of failing at exit."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except OSError:
        pass
