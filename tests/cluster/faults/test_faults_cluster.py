"""Daemons under faults, on a real cluster with its own ZooKeeper: a supervisor restarted within
its grace adopts its workers, and every daemon told to stop stops in bounded time while
ZooKeeper does not answer. (ZooKeeper outages under load are in test_chaos.py.)"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from squall.testing.cluster import FAST
from support.chaos import ChaosCluster

pytestmark = pytest.mark.cluster


def test_a_supervisor_restarted_within_its_grace_keeps_the_assignment_and_its_workers(tmp_path):
    with ChaosCluster(tmp_path / "c", ids=10**6, rate=300) as chaos:
        chaos.submit(workers=3)
        chaos.wait_until(lambda: len(chaos.workers()) == 3, 60, "three workers")
        chaos.wait_progress(300, 60, "the first acks")
        before = chaos.assignment()
        workers = {w.worker_id: w.pid for w in chaos.workers()}
        mine = [w.worker_id for w in chaos.workers() if w.supervisor == 0]
        assert mine, "supervisor 0 runs a worker"

        proc = chaos.c.supervisors[0]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        rows = chaos.c.client.cluster()["supervisors"]
        assert sorted(r["away"] for r in rows) == [False, True]  # kept, and shown as away
        # Away for longer than nimbus's task timeout: its workers' beats come through it, so
        # their silence is not held against them while it is within its restart grace.
        time.sleep(FAST["nimbus.task.timeout.secs"] + 2)
        chaos.restart_supervisor(0)
        # Past nimbus's supervisor and task timeouts and several monitor rounds.
        time.sleep(FAST["nimbus.supervisor.timeout.secs"] + FAST["nimbus.task.timeout.secs"] + 3)
        after = chaos.assignment()
        assert after.version == before.version and after.executors == before.executors
        assert {w.worker_id: w.pid for w in chaos.workers()} == workers
        log = (chaos.c.base / "supervisor-0.log").read_text()
        assert log.count('"worker adopted"') == len(mine)
        chaos.wait_progress(300, 30, "acks after the restart")


def test_every_daemon_stops_within_a_bound_while_zookeeper_does_not_answer(tmp_path):
    # A long session timeout, as in production: requests would wait that long for an answer.
    conf = {"zookeeper.session.timeout.ms": 20000}
    with ChaosCluster(tmp_path / "c", ids=10**6, rate=300, supervisors=1, conf=conf) as chaos:
        chaos.submit(workers=2)
        chaos.wait_until(lambda: len(chaos.workers()) == 2, 60, "two workers")
        worker = chaos.workers()[0]
        daemons = {"nimbus": chaos.c.nimbus, "supervisor": chaos.c.supervisors[0]}
        os.kill(chaos.zk.pid, signal.SIGSTOP)  # ZooKeeper stops answering (stop() resumes it)
        time.sleep(1)
        sent = time.monotonic()
        for proc in daemons.values():
            proc.send_signal(signal.SIGTERM)
        os.kill(worker.pid, signal.SIGTERM)
        took = {}
        for name, proc in daemons.items():
            try:
                proc.wait(max(0.1, 20 - (time.monotonic() - sent)))
            except subprocess.TimeoutExpired:
                pass
            took[name] = time.monotonic() - sent if proc.poll() is not None else None
        while time.monotonic() - sent < 20 and any(w.pid == worker.pid for w in chaos.workers()):
            time.sleep(0.1)
        took["worker"] = None if any(w.pid == worker.pid for w in chaos.workers()) else time.monotonic() - sent
        assert all(t is not None and t < 20 for t in took.values()), f"seconds to stop: {took}"
