"""Which files of a topology's folder go into its code bundle.

Left out, always: dotfiles and dot-directories (``.env``, ``.git/``, ``.venv/``, editor
state: secrets live there more often than code), VCS and cache folders, virtualenvs,
squall's own local state, ``*.egg-info`` and compiled files. Left out on request: what the
folder's ``.squallignore`` names, one pattern a line (``#`` comments)::

    data/           a directory named data, anywhere (a trailing / matches directories only)
    *.csv           any file or directory whose name matches
    /notes.txt      a path from the folder's top (any pattern holding a / is matched so)
"""
from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

IGNORE_FILE = ".squallignore"
MAX_IGNORE_PATTERNS = 1000
SKIP_DIRS = frozenset({"__pycache__", "CVS", "venv", "squall-local", "squall-dev-cluster",
                       "node_modules"})
SKIP_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class Pattern:
    glob: str
    anchored: bool  # matched against the whole relative path, not just the name
    dir_only: bool


def parse_ignore(text: str) -> list[Pattern]:
    """The patterns of a ``.squallignore`` text."""
    out = []
    for raw in text.splitlines()[:MAX_IGNORE_PATTERNS]:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        line = line.lstrip("/")
        if line:
            out.append(Pattern(line, anchored, dir_only))
    return out


def skipped(rel: str, is_dir: bool, patterns: list[Pattern]) -> bool:
    """Is the file or directory at ``rel`` (POSIX path under the folder) left out?"""
    name = rel.rsplit("/", 1)[-1]
    if name.startswith("."):
        return True
    if is_dir and (name in SKIP_DIRS or name.endswith(".egg-info")):
        return True
    if not is_dir and name.endswith(SKIP_SUFFIXES):
        return True
    for p in patterns:
        if p.dir_only and not is_dir:
            continue
        if fnmatch.fnmatchcase(rel if p.anchored else name, p.glob):
            return True
    return False


def code_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """(path relative to ``folder``, file) for every file shipped, sorted; never follows
    directory symlinks."""
    try:
        patterns = parse_ignore((folder / IGNORE_FILE).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        patterns = []
    for dirpath, dirnames, filenames in os.walk(folder):
        base = Path(dirpath).relative_to(folder).as_posix()
        prefix = "" if base == "." else base + "/"
        dirnames[:] = sorted(d for d in dirnames if not skipped(prefix + d, True, patterns))
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if skipped(prefix + name, False, patterns) or not path.is_file():
                continue  # also sockets and dangling links
            yield prefix + name, path
