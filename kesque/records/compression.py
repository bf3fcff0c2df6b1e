"""Batch compression codecs (all in C via cramjam).

Kafka's framings: gzip is a gzip member, lz4 is the LZ4 *frame* format with independent
blocks (the only kind Kafka's Java client reads), zstd is a zstd frame, and snappy comes in
two framings — librdkafka sends raw snappy, the Java client and aiokafka send xerial-framed
snappy. We accept both and, because batches are stored as produced, we never need to
re-frame what a producer sent.
"""

from __future__ import annotations

import struct
import threading

import cramjam

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_BLOCK = struct.Struct(">i")
XERIAL_BLOCK_SIZE = 32 * 1024


class CompressionError(ValueError):
    pass


def _snappy_decompress(data) -> bytes | memoryview:
    mv = memoryview(data)
    if mv[:8] == XERIAL_MAGIC:
        if len(mv) < 16:
            raise CompressionError("truncated xerial snappy header")
        pos = 16
        out = []
        while pos < len(mv):
            if pos + 4 > len(mv):
                raise CompressionError("truncated xerial snappy block")
            (n,) = _BLOCK.unpack_from(mv, pos)
            pos += 4
            if n < 0 or pos + n > len(mv):
                raise CompressionError("bad xerial snappy block length")
            out.append(bytes(cramjam.snappy.decompress_raw(mv[pos : pos + n])))
            pos += n
        return b"".join(out)
    return cramjam.snappy.decompress_raw(mv)


def decompress(codec: int, data) -> memoryview:
    try:
        if codec == GZIP:
            out = cramjam.gzip.decompress(data)
        elif codec == SNAPPY:
            out = _snappy_decompress(data)
        elif codec == LZ4:
            out = cramjam.lz4.decompress(data)
        elif codec == ZSTD:
            out = cramjam.zstd.decompress(data)
        else:
            raise CompressionError(f"unknown compression codec {codec}")
    except CompressionError:
        raise
    except Exception as e:  # cramjam raises its own DecompressionError
        raise CompressionError(f"cannot decompress {codec}: {e}") from e
    return memoryview(out)


_INTO = {
    GZIP: cramjam.gzip.decompress_into,
    LZ4: cramjam.lz4.decompress_into,
    ZSTD: cramjam.zstd.decompress_into,
    SNAPPY: cramjam.snappy.decompress_raw_into,
}
SCRATCH_START = 8 * 1024 * 1024
#: a batch may not decompress to more than this (a decompression bomb must not exhaust memory)
MAX_DECOMPRESSED = 256 * 1024 * 1024
# one reused buffer per thread: each node's event loop (several may run in one process, each
# on its own thread) and each worker thread gets its own
_local = threading.local()


def decompress_transient(codec: int, data) -> memoryview:
    """Decompress into a reused buffer: about twice as fast as :func:`decompress`, which
    allocates and grows its output. The view is valid until the calling thread's next call
    (the produce path validates one batch at a time). Refuses batches that expand beyond
    MAX_DECOMPRESSED."""
    if codec == SNAPPY and memoryview(data)[:8] == XERIAL_MAGIC:
        return decompress(codec, data)
    into = _INTO.get(codec)
    if into is None:
        raise CompressionError(f"unknown compression codec {codec}")
    scratch = getattr(_local, "scratch", None)
    if scratch is None:
        scratch = _local.scratch = bytearray(0)
    size = max(len(scratch), SCRATCH_START)
    while True:
        if len(scratch) < size:
            scratch = _local.scratch = bytearray(size)
        try:
            n = into(data, scratch)
            return memoryview(scratch)[:n]
        except Exception as e:
            if "smaller than required" not in str(e) and "failed to write whole buffer" not in str(e):
                raise CompressionError(f"cannot decompress {codec}: {e}") from e
        if size >= MAX_DECOMPRESSED:
            raise CompressionError(f"batch decompresses to more than {MAX_DECOMPRESSED} bytes")
        size = min(size * 4, MAX_DECOMPRESSED)


def compress(codec: int, data, level: int | None = None, xerial: bool = False) -> bytes:
    """Compress a records section. LZ4 uses level 1 unless told otherwise (the default
    level is about ten times slower for a few percent)."""
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=level) if level is not None else cramjam.gzip.compress(data))
    if codec == SNAPPY:
        if not xerial:
            return bytes(cramjam.snappy.compress_raw(data))
        mv = memoryview(data)
        parts = [_XERIAL_HEADER]
        for i in range(0, len(mv), XERIAL_BLOCK_SIZE):
            block = bytes(cramjam.snappy.compress_raw(mv[i : i + XERIAL_BLOCK_SIZE]))
            parts.append(_BLOCK.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == LZ4:
        # Kafka's Java reader (Lz4BlockInputStream) refuses linked blocks ("Dependent block
        # stream is unsupported"), which cramjam's one-shot compress writes: independent
        # blocks, and no content checksum, as Kafka's own Lz4BlockOutputStream writes
        c = cramjam.lz4.Compressor(level=1 if level is None else level, content_checksum=False, block_linked=False)
        c.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(c.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level) if level is not None else cramjam.zstd.compress(data))
    if codec == NONE:
        return bytes(data)
    raise CompressionError(f"unknown compression codec {codec}")
