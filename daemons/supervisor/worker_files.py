"""What a worker running as another user may reach of its supervisor's files.

The supervisor's directories stay root's: the local dir, ``workers/``, ``topologies/`` and the
state dir are 0711 (anyone may pass through to a name they know, nobody may list them), and
everything in them is owner-only unless given here:

- a worker's own directory and what the supervisor writes into it for the worker (its
  config, credentials, launch assignment) belong to the worker's user, 0700/0600;
- a topology's code is readable by its workers' group only: root:<gid>, 0750/0640;
- a topology's state directory (embedded state) belongs to its workers' user, 0700.

Nothing here follows a symlink: a worker owns its directories and may plant one.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from squall.daemons.supervisor.worker_user import WorkerIdentity

PASS_THROUGH = 0o711


def pass_through(path: Path) -> None:
    """``path`` (a directory of the supervisor's) may be crossed, not listed, by workers."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, PASS_THROUGH)


def give(path: Path, who: WorkerIdentity, mode: int) -> None:
    """Hand ``path`` (made by the supervisor just now) to the worker's user with ``mode``."""
    os.lchown(path, who.uid, who.gid)
    os.chmod(path, mode)


def _walk(root: Path) -> Iterator[tuple[Path, bool]]:
    """Every entry under ``root`` (itself included) with whether it is a directory."""
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not follow links
        yield Path(dirpath), True
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if os.path.islink(path) or not path.is_dir():
                yield path, False


def share_code(tree: Path, gid: int) -> None:
    """A topology's code, read-only for its workers' group: directories 0750, files 0640
    (0750 if executable), owner root. Done again only when the group changes."""
    if tree.stat().st_gid == gid and tree.stat().st_mode & 0o777 == 0o750:
        return
    for path, is_dir in _walk(tree):
        info = os.lstat(path)
        os.lchown(path, -1, gid)
        if is_dir:
            os.chmod(path, 0o750)
        elif stat.S_ISREG(info.st_mode):
            os.chmod(path, 0o750 if info.st_mode & stat.S_IXUSR else 0o640)


def own_state_dir(path: Path, who: WorkerIdentity) -> None:
    """The topology's state directory, its workers' own (made if missing). What an earlier
    uid of the topology left there is handed over; links and hard-linked files are not."""
    path.mkdir(exist_ok=True)
    top = os.lstat(path)
    if not stat.S_ISDIR(top.st_mode):
        raise OSError(f"{path} is not a directory")
    if (top.st_uid, top.st_gid) == (who.uid, who.gid):
        return
    for entry, is_dir in _walk(path):
        info = os.lstat(entry)
        if is_dir or (stat.S_ISREG(info.st_mode) and info.st_nlink == 1):
            os.lchown(entry, who.uid, who.gid)
    os.chmod(path, 0o700)


def owners(state_root: Path, but: Path | None = None) -> set[int]:
    """The uids owning topologies' state directories under ``state_root`` (other than
    ``but``): a new topology must not get one of them, nor the files it owns."""
    out: set[int] = set()
    try:
        entries = list(os.scandir(state_root))
    except OSError:
        return out
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and Path(entry.path) != but:
            out.add(entry.stat(follow_symlinks=False).st_uid)
    return out
