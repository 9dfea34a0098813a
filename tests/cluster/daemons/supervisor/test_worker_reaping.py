"""A worker the supervisor launched has ended only once it is reaped.

A process exiting under load can show its first thread as a zombie while its other threads
still run; it cannot be reaped yet. A supervisor that took that look for "gone" cleaned the
worker up, dropped it unreaped and, when it stopped next, left it to outlive it as a zombie
that nobody collects (``squall dev-cluster``'s Ctrl-C, on a host whose init does not reap).
"""
from __future__ import annotations

import collections
import json
import os
import signal
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


# A worker whose child leaves its session, ignores SIGTERM and outlives it. The child writes
# its pid to argv[1]; the worker exits once it has.
FORKING_WORKER = """
import os, signal, sys, time
out = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # not the test's pipes: it may outlive its reader
        os.dup2(null, fd)
    with open(out + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(out + ".tmp", out)
    time.sleep(60)
    os._exit(0)
while not os.path.exists(out):
    time.sleep(0.01)
"""

# A supervisor in miniature (a process of its own, so only it becomes a subreaper): it
# launches the worker, and looks only after the worker has died and its child was handed
# to it, with no adoption pass in between (a tick's reap ran just before the worker died).
SUPERVISOR = """
import collections, json, os, subprocess, sys, time
from pathlib import Path
import structlog
from squall.daemons import local_state
from squall.daemons.supervisor.containment import WORKER_ID_ENV, Containment, become_subreaper
from squall.daemons.supervisor.workers import LocalWorkers
from squall.daemons.timers import SYSTEM_CLOCK
base, worker_code = Path(sys.argv[1]), sys.argv[2]
assert become_subreaper()
workers = LocalWorkers(local_state.LocalLayout(base / "local"), base / "logs", base / "state.json",
                       SYSTEM_CLOCK, Containment(), collections.Counter(), structlog.get_logger("test"))
worker_id = "w" * 32
child = subprocess.Popen([sys.executable, "-c", worker_code, str(base / "orphan.pid")],
                         env={**os.environ, WORKER_ID_ENV: worker_id})
rec = workers.add(worker_id, 6700, "topo-1-1", [[1, 1]], "digest", child, None)
child.wait(30)
orphan = int((base / "orphan.pid").read_text())
view = workers.view(worker_id)
found = [p.pid for p in workers.containment.processes(rec)]
workers.signal(worker_id, True, 6700, "processes the worker left behind")
deadline = time.monotonic() + 10
while not workers.gone(rec) and time.monotonic() < deadline:
    workers.reap()
    time.sleep(0.02)
print(json.dumps({"orphan": orphan, "alive": view.alive, "leftovers": view.leftovers, "found": found,
                  "gone": workers.gone(rec)}))
"""


def test_a_child_handed_over_after_the_ticks_adoption_still_counts_with_its_dead_worker(tmp_path: Path) -> None:
    """Without cgroups, a worker's orphan is traced to it on the first look after the worker
    died, not a tick later: else the slot would see a dead worker with nothing left, clean
    it up, and the child would end only as a stray, with no word of why."""
    proc = subprocess.run([sys.executable, "-c", SUPERVISOR, str(tmp_path), FORKING_WORKER],
                          capture_output=True, text=True, timeout=60)
    orphan = int((tmp_path / "orphan.pid").read_text()) if (tmp_path / "orphan.pid").exists() else None
    try:
        assert proc.returncode == 0, proc.stderr
        said = json.loads(proc.stdout.splitlines()[-1])
        assert (said["alive"], said["leftovers"], said["found"]) == (False, True, [orphan]), said
        assert said["gone"], said  # SIGKILLed with the worker, though it ignores SIGTERM
        assert not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE
    finally:
        if orphan is not None and psutil.pid_exists(orphan):
            try:
                if os.getsid(orphan) == orphan:  # still the child we made, not a reused pid
                    os.kill(orphan, signal.SIGKILL)
            except OSError:
                pass
