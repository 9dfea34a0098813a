"""The workers' runtime: a copy of this Python and its environment that a worker's user can run
when the original is closed to it (this suite's interpreter may sit under /root)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from squall.daemons.supervisor import launcher, worker_runtime
from squall.daemons.supervisor.worker_user import WorkerIdentity

pytestmark = pytest.mark.cluster

UID = 1900000007  # in supervisor.worker.uids' default range, no account


def _as_worker(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-c", code], user=UID, group=UID, extra_groups=[], cwd="/",
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120)


def test_a_worker_user_runs_the_laid_out_python_and_squall_and_an_unchanged_install_is_reused(open_tmp_path):
    if os.geteuid() != 0:
        pytest.skip("workers run as users of their own only under a root supervisor")
    where = open_tmp_path / "runtime"
    python = worker_runtime.prepare(where)
    assert python.is_relative_to(where)
    out = _as_worker(python, "import sys, squall, squall.daemons.worker.main, zmq, kazoo; "
                             "print(sys.version_info[:2], squall.__file__)")
    assert out.returncode == 0, out.stderr
    version, location = out.stdout.rsplit(" ", 1)
    assert version == str(sys.version_info[:2]) and Path(location.strip()).is_relative_to(where), out.stdout
    # What the supervisor asks before it relies on it: the probe passes for the runtime.
    who = WorkerIdentity(UID, UID, f"squall-{UID}")
    assert launcher.probe([str(python), "-m", "squall.daemons.worker.main"], who, open_tmp_path) is None
    # A second supervisor start finds it laid out: the same runtime, nothing copied again.
    (python.parent.parent / "marker").write_text("kept")
    assert worker_runtime.prepare(where) == python
    assert (python.parent.parent / "marker").read_text() == "kept"
    # Nothing in it is writable by the worker's user.
    out = _as_worker(python, f"open({str(python.parent.parent / 'env' / 'pyvenv.cfg')!r}, 'a')")
    assert out.returncode != 0 and "PermissionError" in out.stderr


def test_a_local_dir_under_a_closed_directory_is_named_before_any_worker_starts(tmp_path, open_tmp_path):
    if os.geteuid() != 0:
        pytest.skip("workers run as users of their own only under a root supervisor")
    closed = tmp_path / "closed"  # pytest's tmp_path: 0700, as /root is
    closed.mkdir(mode=0o700)
    who = WorkerIdentity(UID, UID, f"squall-{UID}")
    prefix, problem = launcher.resolve_worker_command({"supervisor.worker.command": None,
                                                       "supervisor.worker.runtime.dir": str(open_tmp_path / "rt")},
                                                      who, closed / "supervisor")
    assert problem is not None and f"uid {UID} cannot pass through" in problem and str(tmp_path) in problem
