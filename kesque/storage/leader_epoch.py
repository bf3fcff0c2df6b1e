"""LeaderEpochFileCache: the (epoch, start offset) history of a partition (KIP-101/279).

Each entry says "leader epoch E started writing at offset O". Followers use it to find
where their log diverges from the leader's (OffsetForLeaderEpoch) instead of truncating
to the high watermark, which is how Kafka avoids the data loss described in seed 001
§4.1.5. Persisted in ``leader-epoch-checkpoint`` whenever it changes.
"""

from __future__ import annotations

import logging

from .checkpoint import LeaderEpochCheckpointFile

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochFileCache:
    def __init__(self, path: str, topic_partition: str = ""):
        self.file = LeaderEpochCheckpointFile(path)
        self.tp = topic_partition
        try:
            self.entries: list[tuple[int, int]] = self.file.read()
        except Exception as e:  # a corrupt checkpoint is rebuilt from the log's batches
            log.warning("Ignoring unreadable leader epoch checkpoint %s: %s", path, e)
            self.entries = []

    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def earliest_entry(self) -> tuple[int, int] | None:
        return self.entries[0] if self.entries else None

    def assign(self, epoch: int, start_offset: int, flush: bool = True) -> None:
        if epoch < 0:
            return
        if self.entries and self.entries[-1][0] == epoch:
            return
        if self.entries and epoch < self.entries[-1][0]:
            log.warning("%s: not assigning epoch %d at %d below latest %s", self.tp, epoch, start_offset, self.entries[-1])
            return
        # drop entries made obsolete by the new one (start offset at or after it)
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        if flush:
            self.flush()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetForLeaderEpoch as Kafka does."""
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch == self.latest_epoch():
            return requested_epoch, log_end_offset
        # first entry with epoch > requested: its start is the end of the requested epoch
        for i, (epoch, start) in enumerate(self.entries):
            if epoch > requested_epoch:
                if i == 0:
                    return UNDEFINED_EPOCH, UNDEFINED_OFFSET
                return self.entries[i - 1][0], start
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET

    def epoch_for_offset(self, offset: int) -> int:
        result = UNDEFINED_EPOCH
        for epoch, start in self.entries:
            if start <= offset:
                result = epoch
            else:
                break
        return result

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries whose start offset is >= end_offset (log truncated there)."""
        before = len(self.entries)
        self.entries = [e for e in self.entries if e[1] < end_offset]
        if len(self.entries) != before:
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Log start moved to start_offset: older entries collapse into one at start_offset."""
        keep = [e for e in self.entries if e[1] >= start_offset]
        older = [e for e in self.entries if e[1] < start_offset]
        if older:
            if not keep or keep[0][1] > start_offset:
                keep.insert(0, (older[-1][0], start_offset))
            self.entries = keep
            self.flush()

    def clear(self) -> None:
        self.entries = []
        self.flush()

    def flush(self) -> None:
        self.file.write(self.entries)
