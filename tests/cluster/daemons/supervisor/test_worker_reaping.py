"""A worker the supervisor launched has ended only once it is reaped.

A process exiting under load can show its first thread as a zombie while its other threads
still run; it cannot be reaped yet. A supervisor that took that look for "gone" cleaned the
worker up, dropped it unreaped and, when it stopped next, left it to outlive it as a zombie
that nobody collects (``squall dev-cluster``'s Ctrl-C, on a host whose init does not reap).
"""
from __future__ import annotations

import collections
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import structlog

from squall.daemons import local_state
from squall.daemons.supervisor.containment import Containment
from squall.daemons.supervisor.processes import worker_alive
from squall.daemons.supervisor.workers import LocalWorkers
from squall.daemons.timers import SYSTEM_CLOCK

pytestmark = pytest.mark.cluster

# The first thread ends (pthread_exit, which leaves the others running); a second thread
# lives on until the file ``release`` appears, then the process exits.
LINGERING = """
import ctypes, os, sys, threading, time
release = sys.argv[1]
def linger():
    while not os.path.exists(release):
        time.sleep(0.02)
threading.Thread(target=linger).start()
ctypes.CDLL(None).pthread_exit(None)
"""


def wait_for(predicate, secs: float, what: str) -> None:
    deadline = time.monotonic() + secs
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_worker_whose_first_thread_ended_runs_until_it_is_reaped(tmp_path: Path) -> None:
    workers = LocalWorkers(local_state.LocalLayout(tmp_path / "local"), tmp_path / "logs",
                           tmp_path / "supervisor-state.json", SYSTEM_CLOCK, Containment(),
                           collections.Counter(), structlog.get_logger("test"))
    release = tmp_path / "release"
    worker_id = "w" * 32
    child = subprocess.Popen([sys.executable, "-c", LINGERING, str(release), worker_id])
    try:
        rec = workers.add(worker_id, 6700, "topo-1-1", [[1, 1]], "digest", child, None)
        wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, 30,
                 "the first thread to end")

        # Its first thread shows as a zombie, but the process runs: not gone, not reapable.
        assert workers.view(worker_id).alive
        assert not workers.gone(rec)
        assert worker_alive(rec.pid, rec.create_time, worker_id)  # as a restarted supervisor sees it
        assert child.poll() is None

        release.touch()
        wait_for(lambda: workers.gone(rec), 30, "the worker to end")
        assert not worker_alive(rec.pid, rec.create_time, worker_id)
        workers.cleanup(worker_id, "test")
        assert child.returncode == 0  # reaped: nothing is left for init to collect
        assert child.pid not in {p.pid for p in psutil.Process().children()}
    finally:
        if child.poll() is None:
            release.touch()
            child.kill()
            child.wait(10)
