"""A request body streamed against its limit: Content-Length and chunked bodies decoded from
an in-memory stream (no socket), refused as soon as they pass the limit, malformed chunks
refused, and the ``wsgi.input`` of an application thread bounded by a deadline per read."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.daemons.http.body import FREE_CHUNKS, MIN_CHUNK_AVERAGE, BodyError, BodyReader, InputStream, Pace
from squall.daemons.http.head import Framing


def chunked(*pieces: bytes, trailer: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n" + trailer + b"\r\n"


async def read_all(data: bytes, frame: Framing, limit: int = 1 << 20, n: int = 7, eof: bool = True) -> bytes:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    body = BodyReader(reader, frame, limit)
    out = bytearray()
    while piece := await body.read(n):
        out += piece
    assert body.done
    return bytes(out)


def run(coro):
    return asyncio.run(coro)


def test_bodies_by_length_and_chunked():
    assert run(read_all(b"hello worldEXTRA", Framing(length=11))) == b"hello world"
    assert run(read_all(chunked(b"hello ", b"wor", b"ld"), Framing(chunked=True))) == b"hello world"
    assert run(read_all(chunked(b"x", trailer=b"X-Sum: 1\r\n"), Framing(chunked=True))) == b"x"
    assert run(read_all(b"5;ext=1\r\nhello\r\n0\r\n\r\n", Framing(chunked=True))) == b"hello"
    assert run(read_all(b"", Framing())) == b""


@settings(max_examples=50)
@given(st.lists(st.binary(min_size=1, max_size=300), max_size=20), st.integers(1, 500))
def test_chunked_bodies_decode_whatever_the_chunks_and_reads(pieces, n):
    assert run(read_all(chunked(*pieces), Framing(chunked=True), n=n)) == b"".join(pieces)


@pytest.mark.parametrize("data, status", [
    (b"5\r\nhelloXX0\r\n\r\n", 400),                 # a chunk without its CRLF
    (b"zz\r\nhello\r\n0\r\n\r\n", 400),              # not a size
    (b"5\r\nhel", 499),                              # the client went away
    (b"1" + b"0" * 5000 + b"\r\n", 400),             # an endless size line
    (b"0\r\n" + b"X: y\r\n" * 200 + b"\r\n", 400),   # endless trailers
])
def test_malformed_chunked_bodies_are_refused(data, status):
    with pytest.raises(BodyError) as info:
        run(read_all(data, Framing(chunked=True)))
    assert info.value.status == status, str(info.value)


def test_a_body_is_refused_as_soon_as_it_passes_its_limit():
    # Declared above the limit: nothing is read.
    with pytest.raises(BodyError) as info:
        run(read_all(b"", Framing(length=101), limit=100, eof=False))
    assert (info.value.status, info.value.reason) == (413, "too-large")

    # Chunked: refused at the chunk that would pass it, before its data, with the stream
    # still open (a client that never stops sending is not read to its end).
    async def endless() -> int:
        reader = asyncio.StreamReader()
        reader.feed_data(chunked(b"a" * 60)[:-5] + b"40\r\n")  # 60 bytes, then a 64-byte chunk's size
        body = BodyReader(reader, Framing(chunked=True), limit=100)
        assert await body.read(60) == b"a" * 60
        with pytest.raises(BodyError) as info:
            await body.read(60)
        assert info.value.status == 413
        return body.received
    assert run(endless()) == 60


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop on a thread of its own, as the server runs one."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def stream_of(loop: asyncio.AbstractEventLoop, frame: Framing,
              timeout: float = 5.0) -> tuple[InputStream, asyncio.StreamReader]:
    reader = asyncio.run_coroutine_threadsafe(_reader(), loop).result(5)
    return InputStream(BodyReader(reader, frame, 1 << 20), loop, timeout), reader


async def _reader() -> asyncio.StreamReader:
    return asyncio.StreamReader()


def test_wsgi_input_reads_lines_and_sizes(loop):
    stream, reader = stream_of(loop, Framing(chunked=True))
    loop.call_soon_threadsafe(reader.feed_data, chunked(b"first line\nsec", b"ond\nthird"))
    assert stream.readline() == b"first line\n"
    assert stream.read(3) == b"sec"
    assert list(stream) == [b"ond\n", b"third"]
    assert stream.read() == b""


def test_wsgi_input_read_has_a_deadline(loop):
    stream, reader = stream_of(loop, Framing(length=1000), timeout=0.3)
    loop.call_soon_threadsafe(reader.feed_data, b"a" * 10)  # then nothing: a trickle that stopped
    with pytest.raises(BodyError) as info:
        stream.read(100)
    assert (info.value.status, info.value.reason) == (408, "body-timeout")
    with pytest.raises(BodyError):  # and so does every later read
        stream.read(1)
    assert stream.error is info.value


def test_a_chunked_body_of_tiny_chunks_is_refused_early():
    """Past FREE_CHUNKS, chunks must average MIN_CHUNK_AVERAGE bytes: a 4 MiB body in 1-byte
    chunks is refused at its 65th chunk, having cost 65 chunks, not four million."""
    async def tiny() -> BodyReader:
        reader = asyncio.StreamReader()
        reader.feed_data(b"1\r\nx\r\n" * 100_000)
        body = BodyReader(reader, Framing(chunked=True), limit=1 << 30)
        with pytest.raises(BodyError) as info:
            await body.read(1 << 16)
        assert (info.value.status, info.value.reason) == (400, "malformed")
        assert "chunks must average" in str(info.value)
        return body
    body = run(tiny())
    assert body.chunks == FREE_CHUNKS + 1 and body.received == FREE_CHUNKS
    # Chunks of the minimum average (and a few small ones among them) go through.
    pieces = [b"y" * MIN_CHUNK_AVERAGE] * 300 + [b"z"] * 10
    assert run(read_all(chunked(*pieces), Framing(chunked=True), n=1 << 16)) == b"".join(pieces)


def test_a_body_below_the_minimum_rate_is_refused_and_the_request_has_a_deadline():
    async def trickle(pace: Pace, total: int) -> BodyError:
        reader = asyncio.StreamReader()
        body = BodyReader(reader, Framing(length=total), limit=1 << 20, pace=pace)

        async def feed() -> None:
            while True:  # 100 bytes every 20 ms: 5,000 bytes/s
                reader.feed_data(b"b" * 100)
                await asyncio.sleep(0.02)
        feeding = asyncio.create_task(feed())
        try:
            with pytest.raises(BodyError) as info:
                while await body.read(100):
                    pass
            return info.value
        finally:
            feeding.cancel()

    async def slow() -> BodyError:
        now = asyncio.get_running_loop().time()
        return await trickle(Pace(grace=0.1, min_rate=20_000, deadline=now + 60), 1 << 20)
    error = run(slow())
    assert (error.status, error.reason) == (408, "slow-body"), str(error)

    async def long() -> BodyError:  # fast enough, but the whole request's deadline comes
        now = asyncio.get_running_loop().time()
        return await trickle(Pace(grace=0.1, min_rate=1_000, deadline=now + 0.3), 1 << 20)
    error = run(long())
    assert (error.status, error.reason) == (408, "request-timeout"), str(error)
    # At the pace it needs, the same trickle is read whole.
    assert run(read_all(b"c" * 3000, Framing(length=3000))) == b"c" * 3000


def test_the_pace_moves_the_deadline_by_the_bytes_received():
    pace = Pace(grace=10.0, min_rate=32 * 1024, deadline=300.0)
    assert pace.due(0.0, 0) == (10.0, "slow-body")
    assert pace.due(0.0, 64 * 1024) == (12.0, "slow-body")   # 64 KiB bought two seconds
    assert pace.due(0.0, 100 << 20) == (300.0, "request-timeout")
