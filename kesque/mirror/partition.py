"""One mirror partition's copying, sans-IO: where the next Fetch from the source starts, what a
source's answer means, and the lag to report.

The mirror's log is the source partition's log from the mirror's start: the next fetch offset is
always the local log end (so a destination leader that changes, or restarts, goes on where its
log ends: no gap, no duplicate), and the batches of an answer are appended as they came, whole
batches only, at their own offsets (``UnifiedLog.append_raw``: the follower's path).

What an answer's error asks for (``on_response`` returns one of these actions):

- ``APPEND``: records came; append them (the driver checks they start at the log end).
- ``IDLE``: no records; fetch again (the source's long poll waited already).
- ``REFRESH``: the source's leader moved (NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH,
  UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID...): look the leader up again, then fetch.
- ``OUT_OF_RANGE``: the fetch offset is outside the source's log; the driver asks the source's
  log start and end (ListOffsets) and calls ``on_out_of_range``.
- ``BACKOFF``: any other error; retried after the link's backoff.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ErrorCode, error_name

APPEND, IDLE, REFRESH, OUT_OF_RANGE, BACKOFF = "append", "idle", "refresh", "out_of_range", "backoff"

_REFRESH = frozenset(
    int(c)
    for c in (
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.leader_not_available,
        ErrorCode.replica_not_available,
        ErrorCode.offset_not_available,
    )
)


@dataclass
class MirrorLag:
    source_high_watermark: int
    lag: int  # offsets behind the source's high watermark at its last answer
    time_lag_ms: int  # how long since the mirror last held everything the source had
    error: str | None
    lost_records: int


class MirrorPartitionState:
    """The copy state of one mirror partition on its destination leader (kept while it is paused)."""

    # test-only switch (the simulator's --bug uncounted_mirror_loss): records the source deleted
    # before they were copied are skipped without being counted
    uncounted_mirror_loss = False

    def __init__(self, now_ms: int):
        self.source_high_watermark = -1
        self.source_last_stable_offset = -1  # below the HW while a source transaction is open
        self.source_log_start = -1
        self.caught_up_ms = now_ms  # when the mirror last held all the source had (its creation at first)
        self.error: str | None = None  # the last failure, until an answer succeeds
        self.lost_records = 0  # records the source deleted before they were copied (retention)

    def on_response(
        self, error_code: int, high_watermark: int, log_start: int, has_records: bool, last_stable: int = -1
    ) -> str:
        if error_code:
            self.error = error_name(error_code)
            if error_code == ErrorCode.offset_out_of_range:
                return OUT_OF_RANGE
            return REFRESH if error_code in _REFRESH else BACKOFF
        self.error = None
        self.source_high_watermark = high_watermark
        self.source_last_stable_offset = last_stable
        self.source_log_start = log_start
        return APPEND if has_records else IDLE

    def after_append(self, log_end: int, now_ms: int) -> None:
        """Called after an answer was applied (with or without records): the mirror caught up
        when its log ends at the source's high watermark of that answer."""
        if log_end >= self.source_high_watermark:
            self.caught_up_ms = now_ms

    def on_failure(self, why: str) -> None:
        """The source did not answer (unreachable, timed out, refused the request)."""
        self.error = why

    def on_out_of_range(self, log_end: int, source_start: int, source_end: int) -> int | None:
        """The source's log start and end after OFFSET_OUT_OF_RANGE at ``log_end``: the offset the
        mirror's log must restart at (it lost the records in between, counted and reported; a
        mirror that has copied nothing yet, ``log_end`` 0, starts at the source's log start and
        lost nothing), or None when the mirror fetches on from ``log_end`` (the source truncated
        below it: the mirror waits, never truncates, see docs/mirror.md)."""
        self.source_log_start = source_start
        if log_end == 0 and source_start > 0:
            return source_start
        if log_end < source_start:
            if not self.uncounted_mirror_loss:
                self.lost_records += source_start - log_end
            self.error = f"lost {source_start - log_end} records deleted at the source before they were mirrored"
            return source_start
        if log_end > source_end:
            self.error = f"the source's log ends at {source_end}, below the mirror's {log_end}"
        return None

    def caught_up(self, log_end: int) -> bool:
        """Has the mirror all the source had at its last answer, with no source transaction open
        (what a promotion waits for)?"""
        hw = self.source_high_watermark
        return hw >= 0 and log_end >= hw and self.source_last_stable_offset >= hw

    def lag(self, log_end: int, now_ms: int) -> MirrorLag:
        behind = max(self.source_high_watermark - log_end, 0) if self.source_high_watermark >= 0 else -1
        time_lag = 0 if behind == 0 else max(now_ms - self.caught_up_ms, 0)
        return MirrorLag(self.source_high_watermark, behind, time_lag, self.error, self.lost_records)
