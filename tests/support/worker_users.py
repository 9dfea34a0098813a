"""Running workers as other users in tests: making this interpreter reachable to them.

On many test hosts the interpreter lives under a directory other users cannot enter
(``/root/.pyenv``). ``reachable_python`` gives a command prefix for the supervisor under which
a given uid can run it: none when it already can, else a private mount namespace in which
that closed directory is an open tmpfs holding only the interpreter's tree.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def runs_python(uid: int, gid: int) -> bool:
    """Whether ``uid`` can run this interpreter and import squall."""
    try:
        result = subprocess.run([sys.executable, "-c", "import squall"], user=uid, group=gid, extra_groups=[],
                                cwd="/", capture_output=True, timeout=60)
    except PermissionError:
        return False
    return result.returncode == 0


def reachable_python(uid: int, gid: int, base: Path) -> list[str]:
    """A prefix for the supervisor's command under which ``uid`` can run this interpreter
    (``base``: a directory of the test's own); skips the test when there is none."""
    if runs_python(uid, gid):
        return []
    real = Path(os.path.realpath(sys.executable))
    closed = next((p for p in reversed(real.parents) if p != Path("/") and not p.stat().st_mode & 0o001), None)
    if closed is None or shutil.which("unshare") is None:
        pytest.skip(f"uid {uid} cannot run {sys.executable}")
    keep = closed / real.relative_to(closed).parts[0]
    stash = base / "stash"
    stash.mkdir()
    script = ('set -e; mount --bind "$1" "$2"; mount -t tmpfs -o mode=755,size=1m tmpfs "$3"; '
              'mkdir -p "$1"; mount --bind "$2" "$1"; shift 3; exec "$@"')
    return ["unshare", "--mount", "sh", "-c", script, "sh", str(keep), str(stash), str(closed)]


@pytest.fixture
def open_tmp_path() -> Iterator[Path]:
    """A temporary directory other users may pass through (pytest's tmp_path is 0700), for
    the workers of supervisors running as root; removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="squall-open-"))
    os.chmod(path, 0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
