"""The metadata log: ``__cluster_metadata-0``, an append-only log of metadata records.

Each committed change is one RecordBatch (atomic: a topic and all its partitions land
together), fsynced before the change is applied to the image. This is the writer kesque used
before the metadata quorum; the server now runs ``__cluster_metadata-0`` with KRaft
(:mod:`kesque.server.raft_manager`, whose ``FileRaftLog`` reads the logs written here). It stays
as a local, synchronous commit for unit tests of the controller's rules and for tests that
write metadata records behind a stopped broker's back.
"""

from __future__ import annotations

import logging
import os

from ..config.topic import LogConfig
from ..records.records import build_batch, iter_records
from ..storage.unified_log import UnifiedLog
from . import records as mr
from .image import Delta, MetadataImage

log = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"


class MetadataLog:
    def __init__(self, metadata_dir: str, clock, had_clean_shutdown: bool = False):
        self.clock = clock
        path = os.path.join(metadata_dir, f"{METADATA_TOPIC}-0")
        cfg = LogConfig(segment_bytes=64 * 1024 * 1024, retention_ms=-1, cleanup_policy=("delete",))
        self.log = UnifiedLog(
            path, METADATA_TOPIC, 0, cfg, had_clean_shutdown=had_clean_shutdown, recovery_point=0, now_ms=clock.now_ms()
        )
        self.epoch = max(self.log.latest_epoch(), 0)

    def replay_all(self, image: MetadataImage) -> Delta:
        delta = Delta()
        count = 0
        for h, data in self.log.read_batches(self.log.log_start_offset):
            if h.is_control:
                continue
            for r in iter_records(data, 0, h):
                if r.value is None:
                    continue
                image.replay(mr.decode(r.value), delta)
                count += 1
            image.offset = h.last_offset
        log.info("Replayed %d metadata records up to offset %d", count, image.offset)
        self.log.update_high_watermark(self.log.log_end_offset)
        return delta

    def append(self, recs: list[dict]) -> int:
        """Durably append one atomic batch; returns its last offset."""
        batch = build_batch([(None, mr.encode(r), ()) for r in recs], timestamp=self.clock.now_ms())
        info = self.log.append_new_batch(batch, self.epoch, self.clock.now_ms())
        self.log.flush()
        self.log.update_high_watermark(self.log.log_end_offset)
        return info.last_offset

    def close(self) -> None:
        self.log.flush()
        self.log.close()
