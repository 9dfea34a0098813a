"""What decoding a request body costs the HTTP server's event loop, by framing: a body of
``--bytes`` sent plain (Content-Length) or chunked in chunks of ``--chunk`` bytes, fed to a
``BodyReader`` at once and read as the WSGI input reads it (64 KiB at a time). Prints the
CPU seconds and, with ``--json``, a JSON line.

Run under ``valgrind --tool=callgrind`` at two sizes, the difference over the bytes is the
instructions per byte, which the machine's load does not change (issue 28, finding 4: a
4 MiB body in 1-byte chunks cost nimbus 11.5 CPU-seconds). ``--chunk 1`` on this tree is
refused at its 65th chunk; ``bench/compare_trees.py`` can run this file from another tree
(``python bench/compare_trees.py`` does so for its own scenarios; here by hand:
``python -c "$BOOTSTRAP" TREE bench/body_cost.py --bytes N --chunk C``).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time

from squall.daemons.http.body import PIECE, BodyError, BodyReader
from squall.daemons.http.head import Framing


def framed(size: int, chunk: int) -> tuple[bytes, Framing]:
    """The bytes on the wire of a ``size``-byte body, and their framing (``chunk`` 0: plain)."""
    if chunk == 0:
        return b"x" * size, Framing(length=size)
    piece = f"{chunk:x}\r\n".encode() + b"x" * chunk + b"\r\n"
    whole, rest = divmod(size, chunk)
    tail = f"{rest:x}\r\n".encode() + b"x" * rest + b"\r\n" if rest else b""
    return piece * whole + tail + b"0\r\n\r\n", Framing(chunked=True)


async def decode(wire: bytes, framing: Framing, size: int) -> tuple[int, str]:
    reader = asyncio.StreamReader(limit=1 << 16)
    reader.feed_data(wire)
    reader.feed_eof()
    body = BodyReader(reader, framing, limit=size + 1)
    got = 0
    try:
        while not body.done:
            got += len(await body.read(PIECE))
    except BodyError as exc:
        return got, f"{exc.status} {exc}"
    return got, "ok"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=1 << 20)
    parser.add_argument("--chunk", type=int, default=0, help="bytes per chunk; 0: a plain body")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    wire, framing = framed(args.bytes, args.chunk)
    cpu = time.process_time()
    got, outcome = asyncio.run(decode(wire, framing, args.bytes))
    spent = time.process_time() - cpu
    result = {"bytes": args.bytes, "chunk": args.chunk, "read": got, "outcome": outcome, "cpu_s": round(spent, 4)}
    print(json.dumps(result) if args.json else f"{got} of {args.bytes} bytes read ({outcome}) in {spent:.3f} CPU-s")


if __name__ == "__main__":
    main()
