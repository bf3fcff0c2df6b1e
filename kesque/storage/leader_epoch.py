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
        self.entries: list[tuple[int, int]] = []
        try:
            stored = self.file.read()
        except Exception as e:  # a corrupt checkpoint is rebuilt from the log's batches
            log.warning("Ignoring unreadable leader epoch checkpoint %s: %s", path, e)
            stored = []
        for epoch, start in stored:  # as Kafka: re-assigned, so a non-monotonic file is repaired
            self.assign(epoch, start, flush=False)

    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def earliest_entry(self) -> tuple[int, int] | None:
        return self.entries[0] if self.entries else None

    def assign(self, epoch: int, start_offset: int, flush: bool = True, fsync: bool = True) -> None:
        """Kafka's assign: a new epoch, or the latest epoch starting earlier, is recorded after
        removing every entry (from the end) with an epoch >= it or a start offset >= its
        start. Batches without a leader epoch (-1) are not assigned."""
        if epoch < 0 or start_offset < 0:
            return
        if self.entries:
            latest_epoch, latest_start = self.entries[-1]
            if epoch == latest_epoch and start_offset >= latest_start:
                return
        removed = []
        while self.entries and (self.entries[-1][0] >= epoch or self.entries[-1][1] >= start_offset):
            removed.append(self.entries.pop())
        if len(removed) > 1 or (removed and removed[0][1] != start_offset):
            log.warning(
                "%s: new epoch entry (%d, %d) caused truncation of conflicting entries %s",
                self.tp,
                epoch,
                start_offset,
                removed,
            )
        self.entries.append((epoch, start_offset))
        if flush:
            self.flush(fsync)

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
                    # older than every known epoch: Kafka answers the requested epoch with the
                    # start of the first larger one, so the follower truncates to the leader's start
                    return requested_epoch, start
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
        if end_offset < 0:
            return
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

    def flush(self, fsync: bool = True) -> None:
        self.file.write(self.entries, fsync)
