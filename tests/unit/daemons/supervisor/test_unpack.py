"""Unpacking code bundles: the same refusals with the tarfile data filter and without it
(Debian 12's Python 3.11.2 has no filter), and the same files and modes for what passes."""
import io
import os
import stat
import tarfile

import pytest

from squall.daemons.supervisor import unpack

MODES = [pytest.param(True, id="data-filter"), pytest.param(False, id="rules-written-out")]


def _archive(tmp_path, *members):
    """A tar.gz of (TarInfo, bytes or None) members, opened for reading."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    path = tmp_path / "bundle.tar.gz"
    path.write_bytes(buf.getvalue())
    return tarfile.open(path, "r:gz")


def _file(name, data=b"x = 1\n", mode=0o644, uid=0):
    info = tarfile.TarInfo(name)
    info.mode, info.uid, info.gid = mode, uid, uid
    return info, data


def _special(name, kind, linkname=""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    return info, None


@pytest.mark.parametrize("data_filter", MODES)
@pytest.mark.parametrize("member, why", [
    (_special("code/link", tarfile.SYMTYPE, "inside.py"), "symbolic link"),
    (_special("code/out", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
    (_special("code/hard", tarfile.LNKTYPE, "code/a.py"), "hard link"),
    (_special("code/null", tarfile.CHRTYPE), "device"),
    (_special("code/disk", tarfile.BLKTYPE), "device"),
    (_special("code/fifo", tarfile.FIFOTYPE), "FIFO"),
    (_file("/etc/cron.d/x"), "absolute"),
    (_file("code/../../escape.py"), "'..'"),
    (_file("../escape.py"), "'..'"),
    (_file("code//a.py"), "empty"),
])
def test_a_link_a_device_an_absolute_path_or_dotdot_is_refused_and_nothing_is_written(
        tmp_path, data_filter, member, why):
    dest = tmp_path / "tree"
    with _archive(tmp_path, _file("code/a.py"), member) as tar, \
            pytest.raises(unpack.UnsafeMember, match=why):
        unpack.extract(tar, dest, data_filter=data_filter)
    assert not dest.exists()  # checked before the first member is written
    assert not (tmp_path.parent / "escape.py").exists()


@pytest.mark.parametrize("data_filter", MODES)
def test_files_and_directories_come_out_with_their_bytes_and_tame_modes(tmp_path, data_filter):
    if data_filter and not unpack.HAS_DATA_FILTER:
        pytest.skip("this Python has no tarfile data filter")
    code_dir = tarfile.TarInfo("code")
    code_dir.type, code_dir.mode = tarfile.DIRTYPE, 0o755
    dest = tmp_path / "tree"
    # A member owned by another uid, setuid, world-writable: none of it may survive.
    with _archive(tmp_path, (code_dir, None), _file("code/run.sh", b"#!/bin/sh\n", 0o4777, uid=12345),
                  _file("code/pkg/mod.py", b"y = 2\n", 0o666), _file("conf.json", b"{}")) as tar:
        unpack.extract(tar, dest, data_filter=data_filter)
    assert (dest / "code/pkg/mod.py").read_bytes() == b"y = 2\n"
    assert (dest / "conf.json").read_bytes() == b"{}"
    run = os.stat(dest / "code/run.sh")
    assert run.st_uid == os.getuid()  # never the archive's owner, even for a root supervisor
    assert stat.S_IMODE(run.st_mode) & 0o100  # its owner may still run it
    assert not stat.S_IMODE(run.st_mode) & (stat.S_ISUID | 0o022)
    assert not stat.S_IMODE(os.stat(dest / "code/pkg/mod.py").st_mode) & 0o022
