"""The unit tier: squall's code and its in-memory pieces, no server and no child process.

A unit test that starts a child process fails here naming the command: such a test belongs
in tests/cluster/. Allowed: ``openssl``, which the security code runs to make certificates,
and this interpreter running one of the repository's own tools in scripts/ (a lint).
"""
from __future__ import annotations

import multiprocessing.process
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.paths import REPO

ALLOWED_COMMANDS = {"openssl"}
SCRIPTS = REPO / "scripts"


class ChildProcessInUnitTest(AssertionError):
    """A unit test started a child process."""


def allowed(args: Any) -> bool:
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    if not argv:
        return False
    if os.path.basename(os.fsdecode(argv[0]).split()[0]) in ALLOWED_COMMANDS:
        return True
    return (os.fsdecode(argv[0]) == sys.executable and len(argv) > 1
            and Path(os.fsdecode(argv[1])).resolve().parent == SCRIPTS)


@pytest.fixture(autouse=True)
def _no_child_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real_init = subprocess.Popen.__init__

    def guarded_init(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
        if not allowed(args):
            raise ChildProcessInUnitTest(
                f"unit tests start no child process (this one ran {str(args)[:120]}); move the test to tests/cluster/")
        real_init(self, args, *rest, **kwargs)

    def guarded_start(self: multiprocessing.process.BaseProcess) -> None:
        raise ChildProcessInUnitTest("unit tests start no child process (multiprocessing); "
                                     "move the test to tests/cluster/")

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded_init)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", guarded_start)
    yield
