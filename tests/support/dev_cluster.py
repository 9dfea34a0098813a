"""`squall dev-cluster` as a reader starts it in a terminal: up once its banner says so, and
never left running after a test (every process under it is killed by PID)."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil

READY = "Press Ctrl-C to stop."


@contextmanager
def running(argv: list[str], timeout: float = 120, **popen: Any) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The dev cluster started with ``argv``, once it printed ``READY``: (its process, what it
    printed up to then). A test that ends with it still running kills it and its children."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        while not any(READY in line for line in lines):
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line and time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        yield proc, "".join(lines)
    finally:
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait(10)
