"""Lines of a file as raw bytes, split one way everywhere: live spouts and backfills.

A line ends at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (Python's universal newlines and
Hadoop's LineRecordReader agree on this); the terminator is not part of the line, and a
last line without one still counts. A line longer than ``max_bytes`` is not kept: the
reader yields ``TOO_LONG`` in its place (so memory stays bounded on a file with no line
breaks) and goes on after its end.

``LineReader`` can start at any byte offset and stop at another, so a file can be cut
into byte ranges and read by several tasks: each line belongs to the range holding its
first byte, and every line is read exactly once whatever the cut.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

DEFAULT_MAX_LINE_BYTES = 16 << 20
CHUNK = 1 << 20


class _TooLong:
    __slots__ = ()

    def __repr__(self) -> str:
        return "TOO_LONG"


TOO_LONG: Any = _TooLong()


def first_line_start(fh: BinaryIO, start: int) -> int:
    """The offset of the first line that begins at or after ``start``."""
    if start <= 0:
        return 0
    fh.seek(start - 1)
    pair = fh.read(2)
    if not pair:
        return start
    before = pair[:1]
    if before == b"\n":
        return start
    if before == b"\r":
        return start + 1 if pair[1:2] == b"\n" else start
    # Mid-line: the line belongs to an earlier range; begin after its end.
    fh.seek(start)
    pos = start
    while True:
        block = fh.read(CHUNK)
        if not block:
            return pos
        cut = _first_terminator(block)
        if cut >= 0:
            end = pos + cut + 1
            if block[cut:cut + 1] == b"\r":
                nxt = block[cut + 1:cut + 2]
                if not nxt and cut + 1 == len(block):
                    fh.seek(end)
                    nxt = fh.read(1)
                if nxt == b"\n":
                    end += 1
            return end
        pos += len(block)


def _first_terminator(block: bytes) -> int:
    n, r = block.find(b"\n"), block.find(b"\r")
    if n < 0:
        return r
    if r < 0:
        return n
    return min(n, r)


class LineReader:
    """Raw lines of ``fh`` (opened in binary mode) from byte ``start`` on; with ``stop``,
    only the lines that begin before ``stop``. Iterating yields bytes or ``TOO_LONG``;
    ``offset`` is the byte offset where the line last yielded began."""

    def __init__(self, fh: BinaryIO, start: int = 0, stop: int | None = None,
                 max_bytes: int = DEFAULT_MAX_LINE_BYTES, chunk: int = CHUNK) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        self.fh, self.stop, self.max_bytes, self.chunk = fh, stop, max_bytes, chunk
        self.start = first_line_start(fh, start) if start > 0 else 0
        self.offset = self.start

    def __iter__(self) -> Iterator[Any]:
        fh, stop, limit = self.fh, self.stop, self.max_bytes
        fh.seek(self.start)
        pos = self.start      # offset of the first byte of ``carry``
        carry = b""           # a line whose end is not read yet
        skipping = False      # dropping the rest of a line already reported as too long
        cr_pending = False    # a dropped over-long line ended in "\r": a "\n" may follow
        while True:
            block = fh.read(self.chunk)
            if not block:
                break
            if cr_pending:
                cr_pending = False
                if block[:1] == b"\n":
                    block = block[1:]
                    pos += 1
                    if not block:
                        continue
            data = carry + block if carry else block
            pieces = data.splitlines(True)
            # The last piece may go on in the next block (no terminator yet, or a "\r" that
            # a "\n" may follow): keep it for later.
            tail = b"" if pieces[-1][-1:] == b"\n" else pieces.pop()
            for piece in pieces:
                at = pos
                pos += len(piece)
                if skipping:
                    skipping = False  # the over-long line ends here
                    continue
                if stop is not None and at >= stop:
                    return
                self.offset = at
                cut = 2 if piece[-2:] == b"\r\n" else 1
                yield TOO_LONG if len(piece) - cut > limit else piece[:-cut]
            carry = tail
            if len(carry) > limit + 1:
                # No end in sight: report the line once and drop its bytes until it ends.
                if not skipping:
                    if stop is not None and pos >= stop:
                        return
                    self.offset = pos
                    yield TOO_LONG
                # A "\r" at its end ends it after all (and a "\n" may follow).
                skipping = carry[-1:] != b"\r"
                cr_pending = not skipping
                pos += len(carry)
                carry = b""
        if carry and not skipping and (stop is None or pos < stop):
            self.offset = pos
            line = carry[:-1] if carry[-1:] == b"\r" else carry
            yield TOO_LONG if len(line) > limit else line
