"""A bare request/response server: the ceiling for a Python event-loop server.

It frames the stream as Kafka does (4-byte big-endian size prefix) and answers each request
with its own write of the same bytes, the least work a server that handles requests one at
a time can do. ``--loop asyncio`` (what kesque runs on) or ``--loop uvloop``.

Prints the port it listens on, then serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.buf = bytearray()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data):
        buf = self.buf
        buf += data
        n = len(buf)
        pos = 0
        write = self.transport.write
        while n - pos >= 4:
            end = pos + 4 + int.from_bytes(buf[pos : pos + 4], "big")
            if end > n:
                break
            write(bytes(buf[pos:end]))  # one answer per request
            pos = end
        if pos:
            del buf[:pos]


async def main(host: str) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, host, 0)
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args()
    if args.loop == "uvloop":
        import uvloop  # only when asked; not a dependency

        uvloop.run(main(args.host)) if hasattr(uvloop, "run") else (uvloop.install(), asyncio.run(main(args.host)))
    else:
        asyncio.run(main(args.host))
    sys.exit(0)
