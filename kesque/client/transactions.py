"""Answers kio cannot read, read by hand for the tools and the console."""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.primitives import (
    read_array_len,
    read_compact_string,
    read_int16,
    read_int32,
    read_int64,
    skip_tagged_fields,
)


@dataclass
class _TxnStateV0:
    error_code: int
    transactional_id: str
    transaction_state: str
    transaction_timeout: int
    transaction_start_time: int
    producer_id: int
    producer_epoch: int
    topics: list


@dataclass
class _TxnTopicV0:
    topic: str
    partitions: list


@dataclass
class _DescribeTransactionsV0:
    transaction_states: list


def read_describe_transactions_v0(buf, pos: int, version: int) -> _DescribeTransactionsV0:
    """DescribeTransactionsResponse v0, read by hand: kio's reader refuses the
    ``TransactionStartTimeMs`` -1 that Kafka sends for an unknown or Empty id."""
    _throttle, pos = read_int32(buf, pos)
    n, pos = read_array_len(buf, pos, True)
    states = []
    for _ in range(max(n, 0)):
        err, pos = read_int16(buf, pos)
        tid, pos = read_compact_string(buf, pos)
        state, pos = read_compact_string(buf, pos)
        timeout, pos = read_int32(buf, pos)
        start, pos = read_int64(buf, pos)
        pid, pos = read_int64(buf, pos)
        epoch, pos = read_int16(buf, pos)
        nt, pos = read_array_len(buf, pos, True)
        topics = []
        for _ in range(max(nt, 0)):
            name, pos = read_compact_string(buf, pos)
            np_, pos = read_array_len(buf, pos, True)
            parts = []
            for _ in range(max(np_, 0)):
                p, pos = read_int32(buf, pos)
                parts.append(p)
            pos = skip_tagged_fields(buf, pos)
            topics.append(_TxnTopicV0(name, parts))
        pos = skip_tagged_fields(buf, pos)
        states.append(_TxnStateV0(err, tid, state, timeout, start, pid, epoch, topics))
    return _DescribeTransactionsV0(states)
