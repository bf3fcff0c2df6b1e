"""``__transaction_state`` records (kesque/coordinator/transaction/records.py) against Kafka's layouts,
and ``dump-log --transaction-log-decoder``.

The layouts are Kafka's transaction-coordinator/src/main/resources/common/message/
TransactionLogKey.json (version 0: a legacy string) and TransactionLogValue.json (version 0
legacy, version 1 flexible with tagged fields PreviousProducerId (tag 0, default -1),
NextProducerId (tag 1, default -1) and ClientTransactionVersion (tag 2, int16, default 0)).
CI has no Kafka checkout, so the schemas are not read at test time; two independent references
are written out here instead, by hand from the JSON:

* golden bytes for chosen values of every version;
* ``ref_value``, a plain-struct encoder of TransactionLogValue following the rules of Kafka's
  message generator (nullable array, compact lengths, tagged fields only when not at their
  default, sorted by tag). Hypothesis generates values for both versions; kesque must produce
  the same bytes and decode them back to the same values.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples
from kesque.coordinator.transaction import records as R
from kesque.coordinator.transaction.records import TxnLogValue, TxnState
from kesque.protocol.primitives import ProtocolError, uvarint

SETTINGS = settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])

I8, I16, I32, I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


def s16(s: str | None) -> bytes:
    """A legacy string: int16 length (-1: null)."""
    if s is None:
        return I16.pack(-1)
    b = s.encode()
    return I16.pack(len(b)) + b


def cstr(s: str) -> bytes:
    """A compact string: uvarint(length + 1)."""
    b = s.encode()
    return uvarint(len(b) + 1) + b


def tagged(tag: int, data: bytes) -> bytes:
    return uvarint(tag) + uvarint(len(data)) + data


# ====================================================================== the reference encoder
def ref_value(
    version: int,
    *,
    producer_id: int,
    producer_epoch: int,
    timeout: int,
    status: int,
    partitions: list[tuple[str, list[int]]] | None,
    last_update: int,
    start: int,
    previous_producer_id: int = -1,
    next_producer_id: int = -1,
    client_version: int = 0,
) -> bytes:
    """TransactionLogValue as Kafka's generated ``write`` lays it out, field by field."""
    out = I16.pack(version) + I64.pack(producer_id) + I16.pack(producer_epoch) + I32.pack(timeout) + I8.pack(status)
    if version == 0:
        if partitions is None:
            out += I32.pack(-1)
        else:
            out += I32.pack(len(partitions))
            for topic, ids in partitions:
                out += s16(topic) + I32.pack(len(ids)) + b"".join(I32.pack(i) for i in ids)
        return out + I64.pack(last_update) + I64.pack(start)
    if partitions is None:
        out += uvarint(0)
    else:
        out += uvarint(len(partitions) + 1)
        for topic, ids in partitions:
            out += cstr(topic) + uvarint(len(ids) + 1) + b"".join(I32.pack(i) for i in ids) + b"\x00"
    out += I64.pack(last_update) + I64.pack(start)
    tags = []
    if previous_producer_id != -1:
        tags.append(tagged(0, I64.pack(previous_producer_id)))
    if next_producer_id != -1:
        tags.append(tagged(1, I64.pack(next_producer_id)))
    if client_version != 0:
        tags.append(tagged(2, I16.pack(client_version)))
    return out + uvarint(len(tags)) + b"".join(tags)


def ref_of(v: TxnLogValue, version: int) -> bytes:
    parts = None if v.transaction_status == TxnState.EMPTY else list(v.transaction_partitions.items())
    return ref_value(
        version,
        producer_id=v.producer_id,
        producer_epoch=v.producer_epoch,
        timeout=v.transaction_timeout_ms,
        status=int(v.transaction_status),
        partitions=parts,
        last_update=v.transaction_last_update_timestamp_ms,
        start=v.transaction_start_timestamp_ms,
        previous_producer_id=v.previous_producer_id,
        next_producer_id=v.next_producer_id,
        client_version=v.client_transaction_version,
    )


# ====================================================================== states and versions
def test_state_ids_and_names_are_kafkas():
    assert [(s.value, s.kafka_name) for s in TxnState] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    assert TxnState.from_kafka_name("PrepareEpochFence") is TxnState.PREPARE_EPOCH_FENCE
    with pytest.raises(ValueError):
        TxnState.from_kafka_name("Stable")
    # Dead is written as a tombstone, PrepareEpochFence never leaves memory
    assert R.PERSISTED_STATES == set(TxnState) - {TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE}


def test_write_version_is_the_one_kafka_4_writes():
    # TransactionVersion.transactionLogValueVersion: TV_0 -> 0, TV_1 and TV_2 -> 1 (flexible)
    assert [R.value_version(tv) for tv in (0, 1, 2)] == [0, 1, 1]
    assert R.WRITE_VERSION == 1
    assert R.VALUE_VERSIONS == (0, 1)


# ====================================================================== golden bytes
def test_key_layout():
    key = R.encode_key("my-txn")
    assert key == I16.pack(0) + s16("my-txn")
    assert R.decode_key(key) == "my-txn"
    assert R.encode_key("") == b"\x00\x00\x00\x00"
    assert R.encode_key("é") == I16.pack(0) + I16.pack(2) + "é".encode()  # the length counts UTF-8 bytes
    assert R.decode_key(R.encode_key("é")) == "é"
    key, value = R.tombstone("my-txn")
    assert key == I16.pack(0) + s16("my-txn") and value is None


def test_key_errors():
    with pytest.raises(R.UnknownRecordType):
        R.decode_key(I16.pack(1) + s16("x"))
    with pytest.raises(ProtocolError):
        R.decode_key(I16.pack(0) + s16(None))
    with pytest.raises(ProtocolError):
        R.decode_key(b"\x00")
    with pytest.raises(ProtocolError):
        R.decode_key(I16.pack(0) + I16.pack(5) + b"ab")


ONGOING = TxnLogValue(
    producer_id=1000,
    producer_epoch=3,
    transaction_timeout_ms=60000,
    transaction_status=TxnState.ONGOING,
    transaction_partitions={"orders": [0, 2], "audit": [1]},
    transaction_last_update_timestamp_ms=1_700_000_000_500,
    transaction_start_timestamp_ms=1_700_000_000_400,
    client_transaction_version=2,
)


def test_value_v1_golden():
    expected = (
        I16.pack(1)
        + I64.pack(1000)
        + I16.pack(3)
        + I32.pack(60000)
        + b"\x01"
        + b"\x03"  # 2 topics, compact
        + b"\x07orders"
        + b"\x03"
        + I32.pack(0)
        + I32.pack(2)
        + b"\x00"
        + b"\x06audit"
        + b"\x02"
        + I32.pack(1)
        + b"\x00"
        + I64.pack(1_700_000_000_500)
        + I64.pack(1_700_000_000_400)
        + b"\x01"
        + b"\x02\x02"
        + I16.pack(2)
    )  # one tagged field: ClientTransactionVersion
    assert R.encode_value(ONGOING) == expected
    assert R.encode_value(ONGOING, 1) == expected
    assert R.decode_value(expected) == ONGOING


def test_value_v1_empty_is_a_null_array_and_all_tags_in_order():
    v = TxnLogValue(
        producer_id=7,
        previous_producer_id=6,
        next_producer_id=8,
        producer_epoch=0,
        transaction_timeout_ms=900000,
        transaction_status=TxnState.EMPTY,
        transaction_last_update_timestamp_ms=5,
        transaction_start_timestamp_ms=-1,
        client_transaction_version=2,
    )
    expected = (
        I16.pack(1)
        + I64.pack(7)
        + I16.pack(0)
        + I32.pack(900000)
        + b"\x00"
        + b"\x00"
        + I64.pack(5)
        + I64.pack(-1)
        + b"\x03"
        + b"\x00\x08"
        + I64.pack(6)
        + b"\x01\x08"
        + I64.pack(8)
        + b"\x02\x02"
        + I16.pack(2)
    )
    assert R.encode_value(v) == expected
    assert R.decode_value(expected) == v
    assert R.decode_value_fields(expected)["transaction_partitions"] is None
    # tagged fields at their defaults are not written at all
    plain = TxnLogValue(
        producer_id=7,
        producer_epoch=0,
        transaction_timeout_ms=1,
        transaction_status=TxnState.EMPTY,
        transaction_last_update_timestamp_ms=5,
        transaction_start_timestamp_ms=-1,
    )
    assert R.encode_value(plain) == (
        I16.pack(1) + I64.pack(7) + I16.pack(0) + I32.pack(1) + b"\x00" + b"\x00" + I64.pack(5) + I64.pack(-1) + b"\x00"
    )


def test_kesque_ongoing_epoch_tag():
    """kesque's own tagged field (1000): the epoch a KIP-939 keepPreparedTxn kept open."""
    v = TxnLogValue(
        producer_id=7,
        producer_epoch=4,
        transaction_timeout_ms=2**31 - 1,
        transaction_status=TxnState.ONGOING,
        transaction_partitions={"a": [0]},
        transaction_last_update_timestamp_ms=5,
        transaction_start_timestamp_ms=5,
        ongoing_txn_producer_epoch=2,
    )
    data = R.encode_value(v)
    assert data.endswith(b"\x01" + uvarint(1000) + b"\x02" + I16.pack(2))
    assert R.decode_value(data) == v
    with pytest.raises(ValueError):
        R.encode_value(v, 0)  # like every tagged field, not at version 0


def test_value_v0_golden():
    done = TxnLogValue(
        producer_id=1000,
        producer_epoch=3,
        transaction_timeout_ms=60000,
        transaction_status=TxnState.COMPLETE_COMMIT,
        transaction_partitions={},
        transaction_last_update_timestamp_ms=20,
        transaction_start_timestamp_ms=10,
    )
    # a completed transaction has no partitions left: an empty array, not null
    expected = (
        I16.pack(0)
        + I64.pack(1000)
        + I16.pack(3)
        + I32.pack(60000)
        + b"\x04"
        + I32.pack(0)
        + I64.pack(20)
        + I64.pack(10)
    )
    assert R.encode_value(done, 0) == expected
    assert R.decode_value(expected) == done
    prepare = TxnLogValue(
        producer_id=1,
        producer_epoch=2,
        transaction_timeout_ms=3,
        transaction_status=TxnState.PREPARE_ABORT,
        transaction_partitions={"t": [4]},
        transaction_last_update_timestamp_ms=5,
        transaction_start_timestamp_ms=6,
    )
    expected = (
        I16.pack(0)
        + I64.pack(1)
        + I16.pack(2)
        + I32.pack(3)
        + b"\x03"
        + I32.pack(1)
        + s16("t")
        + I32.pack(1)
        + I32.pack(4)
        + I64.pack(5)
        + I64.pack(6)
    )
    assert R.encode_value(prepare, 0) == expected
    assert R.decode_value(expected) == prepare
    empty = TxnLogValue(
        producer_id=1,
        producer_epoch=0,
        transaction_timeout_ms=3,
        transaction_status=TxnState.EMPTY,
        transaction_last_update_timestamp_ms=5,
        transaction_start_timestamp_ms=-1,
    )
    assert R.encode_value(empty, 0) == (
        I16.pack(0) + I64.pack(1) + I16.pack(0) + I32.pack(3) + b"\x00" + I32.pack(-1) + I64.pack(5) + I64.pack(-1)
    )


def test_version_0_cannot_carry_the_tagged_fields():
    """Kafka's generated writer refuses a non-default field the version does not have."""
    for change in ({"client_transaction_version": 2}, {"previous_producer_id": 1}, {"next_producer_id": 1}):
        v = TxnLogValue(**{**ONGOING.__dict__, "client_transaction_version": 0, **change})
        with pytest.raises(ValueError, match="non-default"):
            R.encode_value(v, 0)
    with pytest.raises(R.UnknownRecordType):
        R.encode_value(ONGOING, 2)


def test_empty_with_partitions_is_refused():
    v = TxnLogValue(**{**ONGOING.__dict__, "transaction_status": TxnState.EMPTY})
    with pytest.raises(ValueError, match="not expected to have any partitions"):
        R.encode_value(v)


def test_reader_follows_kafkas_read_txn_record_value():
    # an Empty transaction's partitions are ignored; a topic listed twice is merged, ids once
    data = ref_value(
        1, producer_id=1, producer_epoch=0, timeout=1, status=0, partitions=[("t", [1])], last_update=0, start=0
    )
    assert R.decode_value(data).transaction_partitions == {}
    assert R.decode_value_fields(data)["transaction_partitions"] == [{"topic": "t", "partition_ids": [1]}]
    data = ref_value(
        1,
        producer_id=1,
        producer_epoch=0,
        timeout=1,
        status=1,
        partitions=[("t", [1, 0]), ("u", [3]), ("t", [0, 2])],
        last_update=0,
        start=0,
    )
    assert R.decode_value(data).transaction_partitions == {"t": [1, 0, 2], "u": [3]}
    # Dead and PrepareEpochFence decode (Kafka's fromId knows them); an unknown id is an error
    for status in (6, 7):
        data = ref_value(
            0, producer_id=1, producer_epoch=0, timeout=1, status=status, partitions=[], last_update=0, start=0
        )
        assert R.decode_value(data).transaction_status == status
    data = ref_value(0, producer_id=1, producer_epoch=0, timeout=1, status=8, partitions=[], last_update=0, start=0)
    with pytest.raises(ProtocolError, match="Unknown transaction state id 8"):
        R.decode_value(data)
    assert R.decode_value_fields(data)["transaction_status"] == 8
    assert R.decode_value(None) is None and R.encode_value(None) is None


def test_unknown_tagged_fields_are_skipped():
    """A newer writer may add tagged fields (KIP-915: only tagged fields are added)."""
    base = ref_value(
        1, producer_id=1, producer_epoch=0, timeout=1, status=1, partitions=[], last_update=0, start=0, client_version=2
    )
    assert base.endswith(b"\x01\x02\x02\x00\x02")
    newer = base[:-5] + b"\x02" + tagged(2, I16.pack(2)) + tagged(9, b"xyz")
    assert R.decode_value(newer) == R.decode_value(base)


def test_bad_values():
    with pytest.raises(R.UnknownRecordType, match="Can't read version 2 of TransactionLogValue"):
        R.decode_value(I16.pack(2) + b"\x00" * 40)
    with pytest.raises(R.UnknownRecordType):
        R.decode_value(I16.pack(-1))
    good = R.encode_value(ONGOING)
    for cut in (1, 5, 20, len(good) - 3):
        with pytest.raises(ProtocolError):
            R.decode_value(good[:cut])


# ====================================================================== hypothesis
_I64 = st.integers(-(2**63), 2**63 - 1)
_PID = st.one_of(st.just(-1), st.integers(0, 2**63 - 1))


@st.composite
def txn_values(draw, version: int):
    state = draw(st.sampled_from(sorted(R.PERSISTED_STATES)))
    partitions = (
        {}
        if state == TxnState.EMPTY
        else draw(
            st.dictionaries(
                st.text(max_size=12), st.lists(st.integers(0, 2**31 - 1), unique=True, max_size=5), max_size=4
            )
        )
    )
    tagged_fields = (
        {}
        if version == 0
        else {
            "previous_producer_id": draw(_PID),
            "next_producer_id": draw(_PID),
            "client_transaction_version": draw(st.integers(0, 2)),
        }
    )
    return TxnLogValue(
        producer_id=draw(_PID),
        producer_epoch=draw(st.integers(-1, 2**15 - 1)),
        transaction_timeout_ms=draw(st.integers(1, 2**31 - 1)),
        transaction_status=state,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=draw(_I64),
        transaction_start_timestamp_ms=draw(_I64),
        **tagged_fields,
    )


@SETTINGS
@given(st.data())
def test_values_match_the_reference_and_round_trip(data):
    version = data.draw(st.sampled_from(R.VALUE_VERSIONS))
    v = data.draw(txn_values(version))
    encoded = R.encode_value(v, version)
    assert encoded == ref_of(v, version)
    back = R.decode_value(encoded)
    assert back == v
    assert R.encode_value(back, version) == encoded


@SETTINGS
@given(st.text(max_size=40))
def test_keys_round_trip(tid):
    key = R.encode_key(tid)
    assert key == I16.pack(0) + s16(tid)
    assert R.decode_key(key) == tid


@SETTINGS
@given(st.data())
def test_field_dicts_round_trip_exactly(data):
    """The dump tool's view: whatever Kafka could have written (a null or empty array, any state
    id, a topic twice) decodes to the same fields and re-encodes to the same bytes."""
    version = data.draw(st.sampled_from(R.VALUE_VERSIONS))
    parts = data.draw(
        st.one_of(
            st.none(),
            st.lists(
                st.tuples(st.text(max_size=6), st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4)), max_size=4
            ),
        )
    )
    tags = (
        {}
        if version == 0
        else {
            "previous_producer_id": data.draw(_I64),
            "next_producer_id": data.draw(_I64),
            "client_version": data.draw(st.integers(-(2**15), 2**15 - 1)),
        }
    )
    raw = ref_value(
        version,
        producer_id=data.draw(_I64),
        producer_epoch=data.draw(st.integers(-(2**15), 2**15 - 1)),
        timeout=data.draw(st.integers(-(2**31), 2**31 - 1)),
        status=data.draw(st.integers(-128, 127)),
        partitions=parts,
        last_update=data.draw(_I64),
        start=data.draw(_I64),
        **tags,
    )
    fields = R.decode_value_fields(raw)
    assert fields.pop("_version") == version
    assert fields["transaction_partitions"] == (
        None if parts is None else [{"topic": t, "partition_ids": ids} for t, ids in parts]
    )
    assert R.encode_value_fields(fields, version) == raw


# ====================================================================== dump-log --transaction-log-decoder
def _record_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("| ")]


def test_dump_log_transaction_log_decoder(tmp_path, capsys):
    from kesque.cli.main import main
    from kesque.records.records import build_batch

    empty = TxnLogValue(
        producer_id=1000,
        producer_epoch=0,
        transaction_timeout_ms=60000,
        transaction_status=TxnState.EMPTY,
        transaction_last_update_timestamp_ms=1_700_000_000_000,
        transaction_start_timestamp_ms=-1,
        client_transaction_version=2,
    )
    prepare = TxnLogValue(
        **{**ONGOING.__dict__, "transaction_status": TxnState.PREPARE_COMMIT, "next_producer_id": 1001}
    )
    old = TxnLogValue(
        producer_id=7,
        producer_epoch=1,
        transaction_timeout_ms=10000,
        transaction_status=TxnState.COMPLETE_ABORT,
        transaction_last_update_timestamp_ms=3,
        transaction_start_timestamp_ms=2,
    )
    k = R.encode_key("txn-a")
    first = build_batch(
        [(k, R.encode_value(empty), []), (k, R.encode_value(ONGOING), []), (k, R.encode_value(prepare), [])],
        base_offset=0,
        timestamp=1_700_000_000_000,
    )
    second = build_batch(
        [
            (R.encode_key("old"), R.encode_value(old, 0), []),
            (*R.tombstone("old"), []),
            (I16.pack(3) + s16("x"), b"\x00\x01", []),  # a key version Kafka does not know
            (k, I16.pack(9) + b"\x00", []),  # a value version it does not know
            (k, I16.pack(1) + b"\x00\x00", []),  # a truncated value
            (b"\x00", b"", []),
        ],
        base_offset=3,
        timestamp=1_700_000_000_001,
    )
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(first + second)

    assert main(["dump-log", "--transaction-log-decoder", "--files", str(seg)]) == 0
    stdout = capsys.readouterr().out
    lines = _record_lines(stdout)
    assert stdout.splitlines()[:2] == [f"Dumping {seg}", "Log starting offset: 0"]
    assert len(lines) == 9
    key_a = ' key: {"type":"0","data":{"transactionalId":"txn-a"}}'
    assert lines[0] == (
        f"| offset: 0 CreateTime: 1700000000000 keySize: {len(k)} valueSize: {len(R.encode_value(empty))} "
        f"sequence: -1 headerKeys: []{key_a} payload: "
        '{"version":"1","data":{"producerId":1000,"producerEpoch":0,"transactionTimeoutMs":60000,'
        '"transactionStatus":0,"transactionPartitions":null,"transactionLastUpdateTimestampMs":1700000000000,'
        '"transactionStartTimestampMs":-1,"clientTransactionVersion":2}}'
    )
    assert lines[1].endswith(
        key_a + ' payload: {"version":"1","data":{"producerId":1000,"producerEpoch":3,"transactionTimeoutMs":60000,'
        '"transactionStatus":1,"transactionPartitions":[{"topic":"orders","partitionIds":[0,2]},'
        '{"topic":"audit","partitionIds":[1]}],"transactionLastUpdateTimestampMs":1700000000500,'
        '"transactionStartTimestampMs":1700000000400,"clientTransactionVersion":2}}'
    )
    # tagged fields in schema order, only when set
    assert lines[2].endswith(
        key_a + ' payload: {"version":"1","data":{"producerId":1000,"nextProducerId":1001,"producerEpoch":3,'
        '"transactionTimeoutMs":60000,"transactionStatus":2,"transactionPartitions":[{"topic":"orders",'
        '"partitionIds":[0,2]},{"topic":"audit","partitionIds":[1]}],'
        '"transactionLastUpdateTimestampMs":1700000000500,"transactionStartTimestampMs":1700000000400,'
        '"clientTransactionVersion":2}}'
    )
    # version 0: no tagged fields at all
    assert lines[3].endswith(
        ' key: {"type":"0","data":{"transactionalId":"old"}} payload: {"version":"0","data":{"producerId":7,'
        '"producerEpoch":1,"transactionTimeoutMs":10000,"transactionStatus":5,"transactionPartitions":[],'
        '"transactionLastUpdateTimestampMs":3,"transactionStartTimestampMs":2}}'
    )
    assert lines[4].endswith(
        ' valueSize: -1 sequence: -1 headerKeys: [] key: {"type":"0","data":'
        '{"transactionalId":"old"}} payload: <DELETE>'
    )
    assert lines[5].endswith(" headerKeys: [] key: Unknown record type 3 at offset 5, skipping.")
    assert lines[6].endswith(
        " headerKeys: [] key: Error at offset 6, skipping. Could not read record with version 9 "
        "from value's buffer due to: Can't read version 9 of TransactionLogValue."
    )
    assert lines[7].endswith(
        " headerKeys: [] key: Error at offset 7, skipping. Could not read record with version 1 "
        "from value's buffer due to: truncated record."
    )
    assert lines[8].endswith(
        " headerKeys: [] key: Error at offset 8, skipping. Could not read version from key's buffer."
    )
    # the record metadata is that of a plain deep iteration
    assert main(["dump-log", "--deep-iteration", "--files", str(seg)]) == 0
    assert [line.split(" key: ")[0] for line in lines] == _record_lines(capsys.readouterr().out)

    # --skip-record-metadata: only the decoded records
    assert main(["dump-log", "--transaction-log-decoder", "--skip-record-metadata", "--files", str(seg)]) == 0
    lines = _record_lines(capsys.readouterr().out)
    assert lines[4] == '| key: {"type":"0","data":{"transactionalId":"old"}} payload: <DELETE>'


def test_dump_log_transaction_log_decoder_missing_key(tmp_path, capsys):
    """A record without a key stops Kafka's tool (RuntimeException from the parser)."""
    from kesque.cli.main import main
    from kesque.records.records import build_batch

    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(build_batch([(None, b"v", [])], timestamp=1))
    assert main(["dump-log", "--transaction-log-decoder", "--files", str(seg)]) == 1
    assert capsys.readouterr().err == (
        'Exception in thread "main" java.lang.RuntimeException: Failed to decode message at offset 0 using the '
        "specified decoder (message had a missing key)\n"
    )
