"""Log cleaner throughput: MB/s of log read by one cleaning, against a plain sequential read
of the same log in the same run (the machine limit).

    .venv/bin/python bench/cleaner.py                 # 1 GiB log, 10 % distinct keys
    .venv/bin/python bench/cleaner.py --mib 128       # smaller
    .venv/bin/python bench/cleaner.py --child         # in a forked child, as the broker cleans

The log is built with the storage API (no broker): 100-byte values, batches of 1000 records,
keys ``k<i mod distinct>``, 128 MiB segments. Both reads come from the page cache (the plain
read runs first and warms it), so the ratio is the cleaner's CPU cost per byte.
"""

from __future__ import annotations

import argparse
import array
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kesque.config.topic import LogConfig  # noqa: E402
from kesque.records.records import encode_columns, wrap_batch  # noqa: E402
from kesque.storage import cleaner_process  # noqa: E402
from kesque.storage.cleaner import Cleaner, first_uncleanable_offset, last_batches_of_producers  # noqa: E402
from kesque.storage.unified_log import UnifiedLog  # noqa: E402

NOW = 1_700_000_000_000
BATCH = 1000
VALUE = 100


def column(values: list[bytes]):
    offsets = array.array("i", [0])
    for v in values:
        offsets.append(offsets[-1] + len(v))
    return None, offsets.tobytes(), b"".join(values), 0


def build(path: str, mib: int, distinct_ratio: float) -> UnifiedLog:
    lg = UnifiedLog(path, "bench", 0, LogConfig(cleanup_policy=("compact",), segment_bytes=128 << 20), now_ms=NOW)
    total = (mib << 20) // (VALUE + 20)
    distinct = max(1, int(total * distinct_ratio))
    values = column([os.urandom(VALUE // 2).hex().encode() for _ in range(BATCH)])
    rows = array.array("i", range(BATCH)).tobytes()
    i = 0
    while lg.size_in_bytes() < mib << 20:
        keys = column([b"k%d" % ((i + j) % distinct) for j in range(BATCH)])
        body = encode_columns(keys, values, rows)
        lg.append_new_batch(wrap_batch(body, BATCH, NOW, NOW), 0, NOW)
        i += BATCH
    lg.roll(NOW)
    lg.update_high_watermark(lg.log_end_offset)
    return lg


def plain_read(lg: UnifiedLog) -> tuple[int, float]:
    t0 = time.perf_counter()
    total = 0
    for seg in lg.segments:
        pos = 0
        while pos < seg.size:
            chunk = os.pread(seg.fd, 8 << 20, pos)
            total += len(chunk)
            pos += len(chunk)
    return total, time.perf_counter() - t0


def clean(lg: UnifiedLog, child: bool):
    end = first_uncleanable_offset(lg, NOW)
    if not child:
        return Cleaner().clean(lg, 0, end, NOW)
    proc = cleaner_process.fork_cleaner(Cleaner(), lg, 0, end, NOW, last_batches_of_producers(lg))
    try:
        return cleaner_process.serve(
            proc, lg, NOW, lambda _nbytes: 0.0, lambda lg, new, old, now: lg.replace_segments(new, old, now)
        )
    finally:
        proc.reap()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--distinct", type=float, default=0.1)
    ap.add_argument("--child", action="store_true", help="clean in a forked child (the broker's way)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        lg = build(os.path.join(d, "bench-0"), args.mib, args.distinct)
        built = time.perf_counter() - t0
        plain_read(lg)  # warm the page cache
        nbytes, plain_s = plain_read(lg)
        t0 = time.perf_counter()
        stats = clean(lg, args.child)
        clean_s = time.perf_counter() - t0
        plain = nbytes / plain_s / 1e6
        cleaner = stats.bytes_read / clean_s / 1e6
        print(f"log {nbytes / 1e6:.0f} MB ({args.distinct:.0%} distinct keys) built in {built:.1f} s")
        print(f"plain sequential read  {plain:10.1f} MB/s")
        label = "cleaner, child (read)" if args.child else "cleaner (read)"
        print(
            f"{label:<22} {cleaner:10.1f} MB/s   ratio {cleaner / plain:.4f}   "
            f"({stats.bytes_read / 1e6:.0f} MB read, {stats.bytes_written / 1e6:.0f} MB written, "
            f"{clean_s:.1f} s)"
        )
        lg.close()


if __name__ == "__main__":
    main()
