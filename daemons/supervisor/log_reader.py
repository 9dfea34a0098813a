"""Bounded reads of a worker's rotated log files (``worker.log``, ``worker.log.1``, ...).

Plain file reading, no HTTP: the logviewer calls these with paths it made itself from
known worker ids, never from request text. A worker owns its directory and may put a link
or a FIFO where its log should be: only regular files are read, and no link is followed
(the supervisor would otherwise serve any file it can read to the topology's owner).
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

CHUNK = 64 * 1024


@dataclass(frozen=True)
class LogRead:
    """What one read returns: the text, where the next read of the current file starts
    and that file's identity (so a follower asks for what comes after ``next_offset`` and
    notices a rotation by ``inode``), and whether the read stopped at the byte bound."""

    text: str
    next_offset: int
    inode: int
    truncated: bool


def rotated_files(path: Path, backups: int) -> list[Path]:
    """The current file and its backups, newest first, those that exist."""
    names = [path] + [path.with_name(f"{path.name}.{i}") for i in range(1, backups + 1)]
    return [p for p in names if os.path.lexists(p)]


def open_log(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (no link followed); OSError else."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return os.fdopen(fd, "rb")


def _tail_of(path: Path, lines: int, max_bytes: int) -> tuple[bytes, int, bool]:
    """The last ``lines`` lines of one file, at most ``max_bytes``: (data, newlines, cut)."""
    with open_log(path) as fh:
        end = fh.seek(0, os.SEEK_END)
        pos, data = end, b""
        while pos > 0 and data.count(b"\n") <= lines and len(data) < max_bytes:
            step = min(CHUNK, pos, max_bytes - len(data))
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    cut = False
    parts = data.split(b"\n")
    # A file ends with a newline: the last part is empty and is no line.
    body = parts[:-1] if parts and parts[-1] == b"" else parts
    if len(body) > lines:
        body = body[-lines:]
    elif pos > 0:
        cut = True  # stopped at the byte bound, not at the start of the file
        if len(body) > 1:
            body = body[1:]  # the first part is the tail of a line cut in the middle
    text = b"\n".join(body) + (b"\n" if body else b"")
    return text, len(body), cut


def tail(path: Path, backups: int, lines: int, max_bytes: int) -> LogRead:
    """The last ``lines`` lines across the current file and its backups, at most
    ``max_bytes`` bytes (whole lines only)."""
    chunks: list[bytes] = []
    wanted, budget, truncated = lines, max_bytes, False
    files = rotated_files(path, backups)
    for p in files:
        if wanted <= 0 or budget <= 0:
            break
        try:
            data, count, cut = _tail_of(p, wanted, budget)
        except OSError:
            continue  # rotated away between listing and opening
        chunks.insert(0, data)
        wanted -= count
        budget -= len(data)
        if cut:
            truncated = True
            break
    size, inode = _identity(path)
    return LogRead(b"".join(chunks).decode("utf-8", "replace"), size, inode, truncated)


def read_from(path: Path, offset: int, max_bytes: int, inode: int | None = None) -> LogRead:
    """Whole lines of the current file from byte ``offset`` on, at most ``max_bytes``;
    from 0 when the file was rotated since (another ``inode``, or shorter than ``offset``)."""
    try:
        with open_log(path) as fh:
            st = os.fstat(fh.fileno())
            same = inode is None or inode == st.st_ino
            start = offset if same and 0 <= offset <= st.st_size else 0
            fh.seek(start)
            data = fh.read(max_bytes)
    except OSError:  # absent, or not a regular file
        return LogRead("", 0, 0, False)
    truncated = False
    if b"\n" in data:
        keep = data.rfind(b"\n") + 1
        truncated = keep < len(data) and len(data) == max_bytes
        data = data[:keep]  # a partial last line comes with the next read
    elif len(data) == max_bytes:
        truncated = True  # one line longer than the bound: give it as it is
    else:
        data = b""
    return LogRead(data.decode("utf-8", "replace"), start + len(data), st.st_ino, truncated)


def _identity(path: Path) -> tuple[int, int]:
    try:
        st = os.lstat(path)
    except OSError:
        return 0, 0
    return st.st_size, st.st_ino
