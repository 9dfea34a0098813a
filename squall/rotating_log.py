"""A log file that rotates itself by size: ``worker.log``, ``worker.log.1`` ... ``.N``.

The writer rotates (not the supervisor that started the process), so nothing has to
signal it and no line is split between files. With ``capture_std`` the process's
``sys.stdout`` and ``sys.stderr`` (user ``print``, tracebacks) write through it line by
line, and file descriptors 1 and 2 (C libraries, the interpreter's last words) point at
the current file and follow it through every rotation: what a worker writes is bounded by
about ``max_bytes * (backups + 1)``. The files are its owner's alone (0600): a log names
topologies, users and ids, and holds what the code printed.
"""
from __future__ import annotations

import io
import os
import sys
import threading
from pathlib import Path

FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC


class RotatingLogFile:
    """A text sink with ``write``/``flush`` (what structlog and ``logging`` write to)."""

    def __init__(self, path: Path, max_bytes: int, backups: int, capture_std: bool = False) -> None:
        if max_bytes < 1 or backups < 0:
            raise ValueError(f"max_bytes must be at least 1 and backups at least 0, "
                             f"got {max_bytes} and {backups}")
        self.path = Path(path)
        self.max_bytes, self.backups, self.capture_std = max_bytes, backups, capture_std
        self.rotations = 0
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = self._open()
        if capture_std:
            sys.stdout = _LineStream(self, "<stdout>")
            sys.stderr = _LineStream(self, "<stderr>")

    def _open(self) -> int:
        fd = os.open(self.path, FLAGS, 0o600)
        os.fchmod(fd, 0o600)  # one left by an older version, or by another umask
        if self.capture_std:
            os.dup2(fd, 1)
            os.dup2(fd, 2)
        return fd

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "replace")
        with self._lock:
            # The real size: stdout and stderr write to the same file behind our back.
            size = os.fstat(self._fd).st_size
            if size and size + len(data) > self.max_bytes:
                self._rotate()
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
        return len(text)

    def flush(self) -> None:
        """Writes go straight to the file; nothing is buffered here."""

    def _rotate(self) -> None:
        self.rotations += 1
        if self.backups == 0:
            os.ftruncate(self._fd, 0)  # O_APPEND: the next write lands at the new end
            return
        for i in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        old, self._fd = self._fd, self._open()
        os.close(old)

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


class _LineStream(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` over a RotatingLogFile: whole lines go through its
    ``write`` (so prints count toward rotation); a partial line waits for its newline or
    ``flush`` (or until it passes MAX_PARTIAL characters)."""

    MAX_PARTIAL = 64 * 1024

    def __init__(self, sink: RotatingLogFile, name: str) -> None:
        super().__init__()
        self._sink, self._name = sink, name
        self._partial = ""
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    @property
    def encoding(self) -> str:  # type: ignore[override]  # typeshed says attribute; io's is read-only
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._sink.fileno()

    def write(self, text: str) -> int:
        with self._lock:
            data = self._partial + text
            cut = data.rfind("\n") + 1
            if len(data) - cut > self.MAX_PARTIAL:
                cut = len(data)  # a line without end: write what there is
            self._partial = data[cut:]
        if cut:
            self._sink.write(data[:cut])
        return len(text)

    def flush(self) -> None:
        with self._lock:
            data, self._partial = self._partial, ""
        if data:
            self._sink.write(data)
