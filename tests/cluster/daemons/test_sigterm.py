"""Every daemon ends within 10 s of SIGTERM, on its own, while a topology keeps it busy: a
worker, a supervisor, nimbus. (systemd and `squall dev-cluster` SIGKILL what outlives its
stop; a worker with tuples in flight once took longer than its supervisor waits.)"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from support.paths import CLUSTER_TOPOLOGIES

pytestmark = pytest.mark.cluster

STOP_SECS = 10


def ended_within(pid: int, secs: float) -> float | None:
    """Seconds until process ``pid`` (another's child) has ended, a zombie counting as ended
    (None: still running after ``secs``)."""
    started = time.monotonic()
    proc = psutil.Process(pid)
    while time.monotonic() - started < secs:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        return None
    return time.monotonic() - started


def exit_within(proc: subprocess.Popen, secs: float) -> tuple[float | None, int | None]:
    """(seconds until our child ``proc`` exited, its exit code); (None, None) if it did not."""
    started = time.monotonic()
    try:
        code = proc.wait(secs)
    except subprocess.TimeoutExpired:
        return None, None
    return time.monotonic() - started, code


def test_worker_supervisor_and_nimbus_stop_within_10s_of_sigterm(start_cluster, tmp_path: Path) -> None:
    cluster = start_cluster(supervisors=2, slots=1)
    out = tmp_path / "out"
    out.mkdir()
    res = cluster.cli("submit", str(CLUSTER_TOPOLOGIES / "cluster_wordcount.py"), "--name", "busy",
                      "-c", "topology.workers=2", "-c", f"test.output.dir={out}",
                      "-c", "test.sentences=1000000", "-c", "test.rate=3000")
    assert res.returncode == 0, res.stdout + res.stderr
    cluster.wait_for(lambda: len(cluster.worker_pids()) == 2, 90, "two workers")
    acked = lambda: sum(len(f.read_text().split()) for f in out.glob("acked-*.txt"))  # noqa: E731
    cluster.wait_for(lambda: acked() > 2000, 90, "the word count under way")
    took = {}

    # A worker of supervisor 0, with tuples in flight to and from the other.
    (worker,) = cluster.worker_pids(0).values()
    os.kill(worker, signal.SIGTERM)
    took["worker"] = ended_within(worker, STOP_SECS)

    # Supervisor 1, whose worker is busy (it leaves its worker running, as Storm's does).
    supervisor = cluster.supervisors[1]
    assert supervisor is not None
    supervisor.send_signal(signal.SIGTERM)
    took["supervisor"], supervisor_code = exit_within(supervisor, STOP_SECS)

    assert cluster.nimbus is not None
    cluster.nimbus.send_signal(signal.SIGTERM)
    took["nimbus"], nimbus_code = exit_within(cluster.nimbus, STOP_SECS)

    print(f"stopped after SIGTERM (s): {took}")
    assert all(t is not None and t < STOP_SECS for t in took.values()), took
    assert supervisor_code == nimbus_code == 0
    logs = "".join((cluster.base / name).read_text(errors="replace")
                   for name in ("supervisor-0.log", "supervisor-1.log", "nimbus.log"))
    assert "SIGKILL" not in logs
