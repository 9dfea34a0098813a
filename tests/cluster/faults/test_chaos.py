"""The chaos suite: a durable stream of ids through a real cluster while faults hit it in turn.

Three workers on two supervisors carry ids from a spout whose acks survive its worker (a
SQLite ledger) through a relay bolt to a store bolt. The harness SIGKILLs a worker, sends
hostile frames to every slot port, SIGKILLs a supervisor with its workers, restarts it, and
pauses ZooKeeper (SIGSTOP) for 30 s; the long form (``--chaos-long``) sends more ids and also
stops ZooKeeper for 60 s and starts it again on the same data. It passes when every id is
acked and stored, no worker died from a frame or from ZooKeeper being away, and the run ends
on its own; it prints ``chaos: ids=N lost=0 duplicates=D worker_restarts=R seconds=S``.
"""
from __future__ import annotations

import time

import pytest

from squall.testing.cluster import FAST
from support.chaos import ChaosCluster, chaos_line, longest_stall, machine_state

pytestmark = pytest.mark.cluster


def pids(chaos: ChaosCluster) -> set[int]:
    return {w.pid for w in chaos.workers()}


def zookeeper_outage(chaos: ChaosCluster, secs: float, stop: bool) -> None:
    """Pause (SIGSTOP) or stop ZooKeeper for ``secs``: no worker may end, acks go on throughout,
    nimbus reassigns nothing afterwards."""
    before, version = pids(chaos), chaos.assignment().version
    samples = chaos.stop_zookeeper(secs) if stop else chaos.pause_zookeeper(secs)
    stall = longest_stall(samples, chaos.ids)
    assert stall < 5, f"acks stopped for {stall:.1f}s while ZooKeeper was away"
    # Past the nimbus's grace and a few monitor rounds: nothing moved, nobody restarted.
    time.sleep(FAST["nimbus.task.timeout.secs"] + 4)
    assert pids(chaos) == before, "a worker ended because ZooKeeper was away"
    assert chaos.assignment().version == version, "nimbus reassigned after the outage"


@pytest.mark.timeout(900)  # the long form; the short one takes 1-2 minutes, every wait bounded
def test_chaos(tmp_path, request, capsys):
    long = request.config.getoption("--chaos-long")
    ids, rate = (200_000, 1500) if long else (50_000, 800)
    started = time.monotonic()
    with ChaosCluster(tmp_path / "chaos", ids=ids, rate=rate) as chaos:
        chaos.submit(workers=3)
        chaos.wait_until(lambda: len(chaos.workers()) == 3, 60, "three workers")
        chaos.wait_progress(1000, 60, "the first acks")
        initial_launches = chaos.launches()

        # 1. SIGKILL a worker: its supervisor relaunches it, processing resumes.
        victim = next(w for w in chaos.workers() if w.supervisor == 0)
        chaos.kill_worker(victim)
        chaos.wait_progress(2000, 60, "progress after a worker SIGKILL")

        # 2. Hostile frames to every slot port: no worker may end.
        chaos.wait_until(lambda: len(chaos.workers()) == 3, 60, "three workers again")
        before = pids(chaos)
        sent = chaos.send_hostile_frames()
        time.sleep(3)
        assert pids(chaos) == before, f"a hostile frame ended a worker (sent {sent})"
        chaos.wait_progress(1000, 60, "progress after hostile frames")

        # 3. SIGKILL supervisor 1 and its workers: executors move to supervisor 0.
        chaos.kill_supervisor(1)
        chaos.wait_until(lambda: len(chaos.workers()) == 3 and {w.supervisor for w in chaos.workers()} == {0},
                         60, "executors moved to the surviving supervisor")
        chaos.wait_progress(2000, 60, "progress after a supervisor died")

        # 4. Restart it: it registers and takes no one's work.
        chaos.restart_supervisor(1)
        chaos.wait_until(lambda: len(chaos.c.client.cluster().get("supervisors", [])) == 2, 60,
                         "the supervisor back")

        # 5. ZooKeeper paused for 30 s (and, in the long form, stopped for 60 s).
        zookeeper_outage(chaos, 30, stop=False)
        if long:
            zookeeper_outage(chaos, 60, stop=True)

        chaos.wait_until(lambda: chaos.acked() >= ids, 300 if long else 120, "every id acked")
        chaos.wait_until(lambda: chaos.tally().missing == 0, 30, "every id stored")
        tally = chaos.tally()
        restarts = chaos.launches() - initial_launches
        line = chaos_line(ids, tally, restarts, time.monotonic() - started)
    with capsys.disabled():
        print(f"\n{line} machine={machine_state()}")
    assert tally.missing == 0 and tally.acked == ids
    # The worker SIGKILL relaunches one; the dead supervisor's workers (one or two) move.
    assert 1 <= restarts <= 4, line
