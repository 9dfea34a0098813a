"""A worker that dies while ZooKeeper is away comes back at once: its supervisor relaunches it
with the assignment it launched it for, it runs its spout and acks without ZooKeeper, and once
ZooKeeper returns nimbus leads again, sees its beat (in its supervisor's report) and nothing
is moved or restarted."""
from __future__ import annotations

import time

import pytest

from squall.daemons import local_state
from squall.testing.cluster import FAST
from support.chaos import NAME, ChaosCluster

pytestmark = pytest.mark.cluster


def test_a_worker_killed_while_zookeeper_is_down_restarts_runs_and_reappears_when_it_returns(tmp_path):
    conf = {"zookeeper.connection.timeout.ms": 3000}  # the worker's wait before it starts without
    with ChaosCluster(tmp_path / "c", ids=10**6, rate=200, supervisors=1, slots=2, conf=conf) as chaos:
        chaos.submit(workers=2)
        chaos.wait_until(lambda: len(chaos.workers()) == 2, 60, "two workers")
        chaos.wait_progress(200, 60, "the first acks")
        before = chaos.assignment()
        (spout_port,) = {row["port"] for comp in chaos.c.client.topology(NAME)["components"]
                         if comp["id"] == "ids" for row in comp["executors"]}
        (victim,) = [w for w in chaos.workers() if w.port == spout_port]

        chaos.zookeeper_down()
        killed_at = time.time()
        chaos.kill_worker(victim)  # the worker holding the only spout: acks stop with it
        stopped = chaos.acked()

        def relaunched() -> list:
            return [w for w in chaos.workers() if w.port == spout_port and w.pid != victim.pid]
        relaunch_secs = chaos.wait_until(lambda: relaunched(), 30, "the worker relaunched while ZooKeeper is down")
        (worker,) = relaunched()
        acks_secs = chaos.wait_until(lambda: chaos.acked() >= stopped + 200, 60, "acks from the relaunched "
                                     "spout while ZooKeeper is down")
        print(f"zk-down relaunch: relaunched {relaunch_secs:.1f}s after the kill, 200 more acks "
              f"{relaunch_secs + acks_secs:.1f}s after it (ZooKeeper wait 3 s)")
        assert not chaos.zk.running
        layout = local_state.LocalLayout(chaos.c.supervisor_dir(0))
        log = layout.worker_log(worker.worker_id).read_text()
        assert log.count("ZooKeeper unreachable at start") == 1
        assert "ZooKeeper unavailable; running on the last assignment" not in log  # one warning

        pids = {w.worker_id: w.pid for w in chaos.workers()}
        chaos.zookeeper_up()

        def nimbus_sees_it() -> bool:  # the relaunched worker's beat, in its supervisor's report
            rows = chaos.c.client.topology(NAME)["workers"]
            return any(r["port"] == spout_port and r["uptime"] is not None
                       and r["uptime"] < time.time() - killed_at for r in rows)
        chaos.wait_until(nimbus_sees_it, 60, "nimbus showing the relaunched worker's beat")
        # Past nimbus's task timeout (it waits that long after reconnecting) and some rounds.
        time.sleep(FAST["nimbus.task.timeout.secs"] + 3)
        after = chaos.assignment()
        assert (after.version, after.executors) == (before.version, before.executors)
        assert {w.worker_id: w.pid for w in chaos.workers()} == pids  # nobody restarted
        assert "ZooKeeper available again" in layout.worker_log(worker.worker_id).read_text()
        chaos.wait_progress(200, 30, "acks after ZooKeeper returned")
