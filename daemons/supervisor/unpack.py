"""Unpacking a code bundle: regular files and directories under the destination, nothing else.

One set of rules on every Python squall supports (``requires-python``): a member that is a
link (symbolic or hard), a device, a FIFO or anything but a file or directory is refused, and
so is a name that is absolute or has a ``..`` (or empty, or ``.``) part. Where the standard
library has the tarfile data filter (3.11.4 and later; Debian 12's Python is 3.11.2) it
extracts as well, a second lock on the same door; where it has not, the members that passed
are extracted without the archive's owners, times and modes (a root supervisor would
otherwise hand files to whatever uid the archive names), each file getting 0644, or 0755
when its owner could run it, as the data filter does.
"""
from __future__ import annotations

import os
import tarfile
from pathlib import Path

from squall.errors import SquallError

HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


class UnsafeMember(SquallError, ValueError):
    """A bundle member that must not be extracted; the message names it and why."""


def check_member(member: tarfile.TarInfo) -> None:
    """Refuse ``member`` unless it is a file or directory with a plain relative name."""
    name = member.name
    if not (member.isfile() or member.isdir()):
        kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk()
                else "a FIFO" if member.isfifo() else "a device" if member.isdev()
                else "not a regular file or directory")
        raise UnsafeMember(f"bundle member {name!r} is {kind}")
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        raise UnsafeMember(f"bundle member {name!r} has an absolute or unsafe path")
    parts = name.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafeMember(f"bundle member {name!r} has an empty, '.' or '..' path part")


def extract(tar: tarfile.TarFile, dest: Path, *, data_filter: bool = HAS_DATA_FILTER) -> None:
    """Extract every member of ``tar`` into ``dest`` after ``check_member`` passed them all.
    ``data_filter=False``: the rules written out, as on a Python without the filter."""
    members = tar.getmembers()
    for member in members:
        check_member(member)
    if data_filter:
        tar.extractall(dest, members=members, filter="data")
        return
    dest.mkdir(parents=True, exist_ok=True)
    for member in members:
        tar.extract(member, dest, set_attrs=False)
        if member.isfile():
            os.chmod(dest / member.name, 0o755 if member.mode & 0o100 else 0o644)
