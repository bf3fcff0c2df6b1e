"""DescribeLogDirs."""

from __future__ import annotations

import shutil

from ...errors import ErrorCode
from .kiohelp import Msg


class LogDirApis:
    def __init__(self, server):
        self.server = server

    def register(self) -> None:
        self.server.register(35, 1, 5, self.describe_log_dirs)

    def describe_log_dirs(self, ctx, req):
        m = Msg(35, ctx.api_version)
        lm = self.server.log_manager
        wanted = None
        if req.topics is not None:
            wanted = {(t.topic, p) for t in req.topics for p in t.partitions}
        results = []
        for d in lm.log_dirs:
            by_topic: dict[str, list] = {}
            for (topic, partition), lg in sorted(lm.logs.items()):
                if lm.dir_of(topic, partition) != d:
                    continue
                if wanted is not None and (topic, partition) not in wanted:
                    continue
                lag = max(0, lg.log_end_offset - lg.high_watermark)
                by_topic.setdefault(topic, []).append(
                    m("DescribeLogDirsPartition", partition_index=partition, partition_size=lg.size_in_bytes(),
                      offset_lag=lag, is_future_key=False))
            try:
                usage = shutil.disk_usage(d)
                total, free = usage.total, usage.free
            except OSError:
                total = free = -1
            topics = tuple(m("DescribeLogDirsTopic", name=t, partitions=tuple(ps)) for t, ps in by_topic.items())
            results.append(m("DescribeLogDirsResult", error_code=ErrorCode.none, log_dir=d, topics=topics,
                             total_bytes=total, usable_bytes=free, is_cordoned=False))
        return m(throttle_time=0, error_code=ErrorCode.none, results=tuple(results))
