"""CPU per MB of writing into the page cache, by where the pages come from (a machine fact).

A broker's produce path ends in ``pwrite`` of the batches to the active segment, and RF 3 does
that three times per produced byte. What such a write costs depends on the pages it lands in,
and on a VM more than the size of a ``memcpy`` suggests: a page the guest has not touched since
its memory went back to the host (Linux reports free pages to the hypervisor after a few
seconds) is faulted in by the host on first touch. This script writes 1 MiB chunks with
``os.pwrite`` under ``--data-dir`` (the brokers' filesystem) and prints the process's own CPU
per MB (utime + stime) for:

* ``overwrite``: pages already in the page cache (a file written again in place);
* ``new, just freed``: a new file right after deleting one of the same size;
* ``new, freed 5 s ago``: the same after five idle seconds;
* ``new, while another process writes new pages``: as the other brokers do under RF 3;
* ``new, during the fsync``: while another process's ``--writeback`` MiB are written back.

    .venv/bin/python bench/pagecache.py [--mb 512] [--writeback 2048] [--data-dir /tmp]

Nothing asserts; the figures are in bench/README ("Machine limits").
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

CHUNK = 1 << 20


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def write(path: str, mb: int, truncate: bool) -> tuple[float, float]:
    """(MB/s wall, CPU ms per MB) of writing ``mb`` MiB to ``path``."""
    buf = os.urandom(CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else 0), 0o644)
    try:
        t, c = time.perf_counter(), cpu()
        for i in range(mb):
            os.pwrite(fd, buf, i * CHUNK)
        dt, dc = time.perf_counter() - t, cpu() - c
    finally:
        os.close(fd)
    return mb / dt, dc * 1000 / mb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--mb", type=int, default=512, help="MiB written per case")
    ap.add_argument("--writeback", type=int, default=2048, help="MiB the other process writes")
    ap.add_argument("--data-dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-pagecache-", dir=args.data_dir) as d:
        a, b = os.path.join(d, "a"), os.path.join(d, "b")
        write(a, args.mb, True)  # in the page cache (clean), for the overwrite
        fd = os.open(a, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        rows.append(("overwrite", *write(a, args.mb, False)))
        os.unlink(a)
        rows.append(("new, just freed", *write(b, args.mb, True)))
        os.unlink(b)
        time.sleep(5)
        rows.append(("new, freed 5 s ago", *write(a, args.mb, True)))
        os.unlink(a)
        big = os.path.join(d, "other")
        # another process writing new pages meanwhile (as the other brokers do under RF 3)
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, big, str(args.writeback), "0"])
        time.sleep(1)
        rows.append(("new, while another process writes new pages", *write(b, args.mb, True)))
        writer.kill()
        writer.wait()
        os.unlink(b)
        os.unlink(big)
        # the kernel writing dirty pages back, nobody else writing
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, big, str(args.writeback), "1"], stdout=subprocess.PIPE
        )
        writer.stdout.readline()  # written; its fsync runs now
        rows.append((f"new, during the fsync of {args.writeback} MiB", *write(a, args.mb, True)))
        writer.wait()
    print(f"{args.mb} MiB per case in 1 MiB pwrite calls under {args.data_dir}:")
    for name, mb_s, ms in rows:
        print(f"  {name:55s} {mb_s:8.0f} MB/s  {ms:6.3f} ms CPU/MB")


_WRITER = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
buf = os.urandom(1 << 20)
for i in range(int(sys.argv[2])):
    os.pwrite(fd, buf, i << 20)
if sys.argv[3] == "1":
    print("written", flush=True)
    os.fsync(fd)
"""


if __name__ == "__main__":
    main()
