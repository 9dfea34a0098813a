"""A request body, streamed: ``BodyReader`` decodes it on the server's event loop (Content-Length
or chunked) against its limit and its ``Pace``, and ``InputStream`` is the ``wsgi.input`` an
application reads on its thread, each read bounded by a deadline. Nothing holds more of a body
than one read asked for.

A chunked body may not be made of tiny chunks: past ``FREE_CHUNKS``, its chunks must average
``MIN_CHUNK_AVERAGE`` bytes, so that decoding it costs about what a plain body of its size
costs (a 4 MiB body in 1-byte chunks cost nimbus 11.5 CPU-seconds before this bound).
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from squall.daemons.http.head import MAX_FIELDS, Framing, HeadError, parse_chunk_size
from squall.errors import SquallError

PIECE = 1 << 16          # what a read of unknown size (read(), readline()) takes at a time
MAX_CHUNK_LINE = 4096    # a chunk-size line or trailer field longer than this is malformed
FREE_CHUNKS = 64         # chunks of any size a body may start with
MIN_CHUNK_AVERAGE = 1024 # past those, bytes per chunk on average


@dataclass(frozen=True)
class Pace:
    """When a body must have arrived (times on the event loop's clock): ``grace`` seconds
    after its first read, it must have brought ``min_rate`` bytes for every second past the
    grace; and all of it by ``deadline`` (the whole request's)."""

    grace: float
    min_rate: float
    deadline: float

    def due(self, started: float, received: int) -> tuple[float, str]:
        """When the next byte is due, and the refusal reason if it is late."""
        by_rate = started + self.grace + received / self.min_rate
        return (by_rate, "slow-body") if by_rate < self.deadline else (self.deadline, "request-timeout")


UNPACED = Pace(grace=float("inf"), min_rate=1.0, deadline=float("inf"))


class BodyError(SquallError):
    """The body cannot be read: ``status`` (400 malformed, 408 too slow, 413 too large, 499 the
    client went away) and ``reason`` (the refusal counter it counts in) say why."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class BodyReader:
    """One request's body on the event loop. ``before_first_read`` runs once, before the
    first byte is read (the server answers ``Expect: 100-continue`` there)."""

    def __init__(self, reader: asyncio.StreamReader, framing: Framing, limit: int,
                 before_first_read: Callable[[], Awaitable[None]] | None = None, pace: Pace = UNPACED) -> None:
        self._reader = reader
        self._chunked = framing.chunked
        self._left = framing.length or 0     # bytes left: of the body, or of the current chunk
        self._limit = limit
        self._declared = framing.length
        self._before = before_first_read
        self._started = False                # chunked: a chunk's data was read (its CRLF is due)
        self._pace = pace
        self._began: float | None = None     # when the first read of the body began
        self.chunks = 0
        self.received = 0
        self.done = framing.empty

    async def read(self, n: int) -> bytes:
        """Up to ``n`` bytes: fewer only at the end of the body."""
        if self._before is not None:
            before, self._before = self._before, None
            await before()
        loop = asyncio.get_running_loop()
        if self._began is None:
            self._began = loop.time()
        out = bytearray()
        try:
            while len(out) < n and not self.done:
                due, reason = self._pace.due(self._began, self.received)
                try:
                    async with asyncio.timeout_at(due if due != float("inf") else None):
                        out += await self._piece(n - len(out))
                except TimeoutError:
                    raise self._late(reason, loop.time()) from None
        except asyncio.IncompleteReadError:
            raise BodyError(499, "reset", f"the connection closed after {self.received} bytes of the body") from None
        except asyncio.LimitOverrunError:
            raise BodyError(400, "malformed", "a chunk-size line or trailer of the body is too long") from None
        except HeadError as exc:
            raise BodyError(exc.status, "malformed", str(exc)) from None
        except ConnectionError:
            raise BodyError(499, "reset", f"the connection was reset after {self.received} bytes of the body") from None
        return bytes(out)

    def _late(self, reason: str, now: float) -> BodyError:
        took = now - (self._began or now)
        if reason == "slow-body":
            return BodyError(408, reason, f"the body came slower than {self._pace.min_rate:g} bytes/s: "
                                          f"{self.received} bytes in {took:.0f}s")
        return BodyError(408, reason, f"the request was not whole within its deadline ({self.received} bytes "
                                      f"of the body in {took:.0f}s)")

    async def _piece(self, n: int) -> bytes:
        if self._declared is not None and self._declared > self._limit:
            raise BodyError(413, "too-large", f"request body is {self._declared} bytes, above the "
                                              f"limit of {self._limit} bytes")
        if self._chunked and self._left == 0:
            await self._next_chunk()
            if self.done:
                return b""
        data = await self._reader.readexactly(min(n, self._left, PIECE))
        self._left -= len(data)
        self.received += len(data)
        if not self._chunked and self._left == 0:
            self.done = True
        return data

    async def _next_chunk(self) -> None:
        if self._started:
            if await self._reader.readexactly(2) != b"\r\n":
                raise BodyError(400, "malformed", "a chunk of the body does not end with CRLF")
        size = parse_chunk_size((await self._line())[:-2])
        self.chunks += 1
        if self.chunks > FREE_CHUNKS + self.received // MIN_CHUNK_AVERAGE:
            raise BodyError(400, "malformed", f"a chunked body of {self.chunks} chunks in {self.received} bytes: "
                                              f"past {FREE_CHUNKS}, chunks must average "
                                              f"{MIN_CHUNK_AVERAGE} bytes")
        if size == 0:
            await self._trailers()
            self.done = True
            return
        if self.received + size > self._limit:
            raise BodyError(413, "too-large", f"request body is above the limit of {self._limit} bytes")
        self._left = size
        self._started = True

    async def _line(self) -> bytes:
        line = await self._reader.readuntil(b"\r\n")
        if len(line) > MAX_CHUNK_LINE:
            raise BodyError(400, "malformed", "a chunk-size line or trailer of the body is too long")
        return line

    async def _trailers(self) -> None:
        for _ in range(MAX_FIELDS + 1):
            if await self._line() == b"\r\n":
                return
        raise BodyError(400, "malformed", f"more than {MAX_FIELDS} trailer fields after a chunked body")

    @property
    def held_back(self) -> bool:
        """The client waits for ``100 Continue`` before sending the body, and never got it."""
        return self._before is not None

    async def discard(self, most: int) -> bool:
        """Read and drop what is left of the body, at most ``most`` bytes; True when it ended."""
        try:
            while not self.done and most > 0:
                most -= len(await self.read(min(PIECE, most)))
        except BodyError:
            return False
        return self.done


class InputStream:
    """``wsgi.input``: reads ``body`` from an application's thread. Each call must be
    answered within ``timeout`` seconds (a ``read(n)`` gets its ``n`` bytes or the end of the
    body), or it raises BodyError 408; so a client that sends its body a byte at a time holds
    a thread for at most ``timeout`` per read. The first error is kept in ``error`` and raised
    again by every later read."""

    def __init__(self, body: BodyReader, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._body = body
        self._loop = loop
        self._timeout = timeout
        self._buffer = b""  # read ahead by readline()
        self.error: BodyError | None = None

    def _fetch(self, n: int) -> bytes:
        if self.error is not None:
            raise self.error
        try:
            future = asyncio.run_coroutine_threadsafe(self._timed(n), self._loop)
        except RuntimeError:  # the loop has closed: the server stopped
            self.error = BodyError(499, "reset", "the server stopped while the body was read")
            raise self.error from None
        try:
            return future.result(self._timeout + 5.0)  # the loop's own deadline comes first
        except BodyError as exc:
            self.error = exc
        except FutureTimeout:
            future.cancel()
            self.error = BodyError(408, "body-timeout", f"no {n} bytes of the body within {self._timeout:g}s")
        except asyncio.CancelledError:  # the server is stopping
            self.error = BodyError(499, "reset", "the server stopped while the body was read")
        raise self.error

    async def _timed(self, n: int) -> bytes:
        try:
            async with asyncio.timeout(self._timeout):
                return await self._body.read(n)
        except TimeoutError:
            raise BodyError(408, "body-timeout", f"the body did not bring {n} bytes within "
                                                 f"{self._timeout:g}s (the limit on each read)") from None

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            parts = [self._buffer]
            while piece := self._fetch(PIECE):
                parts.append(piece)
            self._buffer = b""
            return b"".join(parts)
        if len(self._buffer) >= size:
            out, self._buffer = self._buffer[:size], self._buffer[size:]
            return out
        out, self._buffer = self._buffer, b""
        return out + self._fetch(size - len(out)) if size > len(out) else out

    def readline(self, size: int | None = -1) -> bytes:
        limit = PIECE if size is None or size < 0 else size
        while b"\n" not in self._buffer and len(self._buffer) < limit:
            piece = self._fetch(min(PIECE, limit - len(self._buffer)) or 1)
            if not piece:
                break
            self._buffer += piece
        end = self._buffer.find(b"\n") + 1 or len(self._buffer)
        end = min(end, limit)
        line, self._buffer = self._buffer[:end], self._buffer[end:]
        return line

    def readlines(self, hint: int = -1) -> list[bytes]:
        lines, total = [], 0
        while line := self.readline():
            lines.append(line)
            total += len(line)
            if 0 < hint <= total:
                break
        return lines

    def __iter__(self) -> InputStream:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line
