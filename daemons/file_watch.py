"""Noticing that files read at start have changed (the API's token file, TLS material), so
they can be read again without a restart.

The files are stat'ed at most once a period. A change is acted on only once it has
settled: seen the same at two checks in a row. A file still being written, or a certificate
replaced a moment before its key, is then not read half-way (the caller still checks what it
reads: a settled change can be garbage too).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from squall.daemons.timers import SYSTEM_CLOCK, Clock, Every

FileStamp = tuple[int, int, int] | None  # (mtime ns, size, inode); None when it cannot be stat'ed
Stamps = tuple[FileStamp, ...]
RELOAD_CHECK_SECS = 2.0  # how often the daemons look at the files they reload


def file_stamp(path: str | os.PathLike[str]) -> FileStamp:
    """What changes when a file is rewritten or replaced by a rename."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def settled_change(in_force: Stamps, previous: Stamps, now: Stamps) -> bool:
    """Read the files again? When they differ from what is in force and looked the same at
    the previous check."""
    return now != in_force and now == previous


class FileWatch:
    """``changed()`` is true once for each settled change of ``paths``; it stats them at
    most once a ``period``. Not thread-safe: the owner holds its own lock."""

    def __init__(self, paths: Iterable[str | os.PathLike[str]], period: float,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.paths = tuple(Path(p) for p in paths)
        # Stamped before the owner reads the files: a change during that read is seen later.
        self._in_force = self._previous = self.stamps()
        self._check = Every(period, clock)

    def stamps(self) -> Stamps:
        return tuple(file_stamp(p) for p in self.paths)

    def changed(self) -> bool:
        if not self._check.due():
            return False
        now = self.stamps()
        change = settled_change(self._in_force, self._previous, now)
        self._previous = now
        if change:
            self._in_force = now  # read once per change, whether or not it can be used
        return change

    def changed_now(self) -> bool:
        """Stat the files now, unsettled: true once if they differ from what is in force. For
        a caller that must not wait for the period, e.g. a token file just replaced by a
        rename; a half-written file read this way is read again once it settles."""
        now = self.stamps()
        if now == self._in_force:
            return False
        self._in_force = self._previous = now
        return True
