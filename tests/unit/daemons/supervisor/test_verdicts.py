"""The supervisor's verdicts on one worker: plain functions of what it saw."""
from __future__ import annotations

from squall.daemons.supervisor import verdicts
from squall.daemons.supervisor.verdicts import MEMORY, START

MB = 1 << 20


def test_memory_over_the_limit_is_a_violation_naming_both_figures():
    assert verdicts.memory_problem(512 * MB, 512 * MB) is None  # at the limit: still allowed
    assert verdicts.memory_problem(None, 512 * MB) is None  # not measured
    assert verdicts.memory_problem(4096 * MB, None) is None  # no limit
    problem = verdicts.memory_problem(513 * MB, 512 * MB)
    assert problem.kind == MEMORY
    assert problem.text.startswith("memory violation:") and "513 MB" in problem.text and "(512 MB)" in problem.text


def test_kernel_oom_names_the_limit():
    assert verdicts.oom_problem(256 * MB).text == \
        "memory violation: the worker was killed at worker.memory.max.mb (256 MB)"


def test_a_worker_not_ready_past_the_start_timeout_is_a_start_problem():
    assert verdicts.start_problem(False, 100.0, 219.0, 120) is None
    assert verdicts.start_problem(None, 100.0, 1000.0, 120) is None  # an older worker does not say
    assert verdicts.start_problem(True, 100.0, 1000.0, 120) is None
    problem = verdicts.start_problem(False, 100.0, 221.0, 120)
    assert problem.kind == START and "(120s)" in problem.text and "prepare()" in problem.text


def test_heartbeat_problems():
    assigned = frozenset({(1, 1), (2, 2)})
    assert verdicts.beat_problem(assigned, None, None, 10, 30) == "no heartbeat"
    assert verdicts.beat_problem(assigned, 5, frozenset({(1, 1)}), 10, 30) == "heartbeat reports other executors"
    # The system executor may be reported; it is never assigned.
    assert verdicts.beat_problem(assigned, 5, assigned | {verdicts.SYSTEM_EXECUTOR}, 10, 30) is None
    assert verdicts.beat_problem(assigned, 5, None, 36, 30) == "heartbeat timed out"


def test_quick_deaths_count_and_a_long_life_starts_again():
    assert verdicts.crashes_after(0, 100.0, 110.0) == 1
    assert verdicts.crashes_after(3, 100.0, 110.0) == 4
    assert verdicts.crashes_after(3, 100.0, 100.0 + verdicts.CRASH_WINDOW + 1) == 0
    assert verdicts.crashes_after(3, None, 110.0) == 0


def test_relaunch_delay_doubles_from_the_second_quick_death_and_is_capped():
    assert [verdicts.relaunch_delay(n) for n in range(7)] == [0.0, 0.0, 1.0, 2.0, 4.0, 8.0, 16.0]
    assert verdicts.relaunch_delay(40) == verdicts.MAX_RELAUNCH_DELAY


def test_a_worker_holding_zookeepers_connections_is_killed_and_reported():
    assert verdicts.zookeeper_problem(None, 4) is None and verdicts.zookeeper_problem(54, None) is None
    assert verdicts.zookeeper_problem(4, 4) is None
    problem = verdicts.zookeeper_problem(54, 4)
    assert problem is not None and problem.kind == verdicts.ZOOKEEPER
    assert "held 54 connections to ZooKeeper, over worker.zookeeper.max.connections (4)" in problem.text
