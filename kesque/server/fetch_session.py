"""Fetch sessions (KIP-227): incremental fetch requests and responses.

A client that opens a session (epoch 0) sends its partitions once; later requests (epoch
1, 2, ...) list only partitions whose fetch position changed plus "forgotten" ones to drop,
and responses carry only partitions with something new: records, a moved high watermark or
log start offset, or an error. Partitions that returned records rotate to the back of the
session's order so a busy partition cannot starve the others.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0


@dataclass(slots=True)
class CachedPartition:
    fetch_offset: int
    max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    # what the client was last told
    high_watermark: int = -1
    last_stable_offset: int = -1
    sent_log_start_offset: int = -1

    def must_respond(self, has_records: bool, error: int, hw: int, lso: int, log_start: int) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData, updating what was sent."""
        respond = has_records
        if hw != self.high_watermark:
            respond = True
            self.high_watermark = hw
        if lso != self.last_stable_offset:
            respond = True
            self.last_stable_offset = lso
        if log_start != self.sent_log_start_offset:
            respond = True
            self.sent_log_start_offset = log_start
        if error:
            self.high_watermark = -1  # resend once the error clears
            respond = True
        return respond


class FetchSession:
    def __init__(self, session_id: int, uses_topic_ids: bool, now: float):
        self.id = session_id
        self.epoch = 1  # next expected epoch
        self.uses_topic_ids = uses_topic_ids
        self.partitions: OrderedDict[tuple, CachedPartition] = OrderedDict()
        self.last_used = now

    def update(
        self, key: tuple, fetch_offset: int, max_bytes: int, log_start: int, current_epoch: int, last_fetched_epoch: int
    ) -> None:
        cp = self.partitions.get(key)
        if cp is None:
            self.partitions[key] = CachedPartition(
                fetch_offset, max_bytes, log_start, current_epoch, last_fetched_epoch
            )
        else:
            cp.fetch_offset = fetch_offset
            cp.max_bytes = max_bytes
            cp.log_start_offset = log_start
            cp.current_leader_epoch = current_epoch
            cp.last_fetched_epoch = last_fetched_epoch

    def forget(self, key: tuple) -> None:
        self.partitions.pop(key, None)

    def rotate(self, key: tuple) -> None:
        self.partitions.move_to_end(key)


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000):
        self.max_slots = max_slots
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()

    def new_session(self, uses_topic_ids: bool, now: float) -> FetchSession | None:
        if self.max_slots <= 0:
            return None
        while len(self.sessions) >= self.max_slots:
            self.sessions.popitem(last=False)  # evict the least recently used
        sid = INVALID_SESSION_ID
        while sid == INVALID_SESSION_ID or sid in self.sessions:
            sid = random.randint(1, 2**31 - 1)
        s = FetchSession(sid, uses_topic_ids, now)
        self.sessions[sid] = s
        return s

    def get(self, session_id: int, now: float) -> FetchSession | None:
        s = self.sessions.get(session_id)
        if s is not None:
            s.last_used = now
            self.sessions.move_to_end(session_id)
        return s

    def remove(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)
