"""The supervisor's slot state machine, driven by observations alone (no processes)."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.config import build_config
from squall.daemons.supervisor import verdicts
from squall.daemons.supervisor.adoption import WorkerRecord, recover
from squall.daemons.supervisor.slot import (
    BuildEnvironment,
    CleanupWorker,
    DownloadCode,
    KillWorker,
    LaunchWorker,
    Observation,
    ReportProblem,
    SlotAssignment,
    SlotState,
    State,
    Timeouts,
    step,
)

PORT = 6700
T = Timeouts(start=120, worker=30, shutdown_sleep=3, download_retry=5)
A = SlotAssignment("t1", [(1, 1), (2, 2)], "digest-a")
A2 = SlotAssignment("t1", [(1, 1)], "digest-a")  # same topology, other executors
B = SlotAssignment("t2", [(5, 6)], "digest-b")


def obs(now, assignment=A, **kw) -> Observation:
    kw.setdefault("new_worker_id", f"w@{now}")
    return Observation(now=now, assignment=assignment, timeouts=T, **kw)


def launched(now=0.0, assignment=A) -> SlotState:
    state, actions = step(SlotState(PORT), obs(now, assignment, code_present=True))
    assert state.name is State.WAITING_FOR_WORKER_START
    return state


def running(now=10.0) -> SlotState:
    state = launched()
    state, actions = step(state, obs(now, worker_alive=True, worker_pid=42, heartbeat_time=now))
    assert state.name is State.RUNNING and actions == []
    return state


# --- EMPTY and WAITING_FOR_BLOB ----------------------------------------------------------------

def test_empty_without_assignment_stays_empty():
    assert step(SlotState(PORT), obs(0, None)) == (SlotState(PORT), [])


def test_empty_with_missing_code_downloads_it():
    state, actions = step(SlotState(PORT), obs(0, A))
    assert state.name is State.WAITING_FOR_BLOB and state.assignment == A
    assert actions == [DownloadCode("t1", "digest-a")]


def test_empty_with_code_present_launches_at_once():
    state, actions = step(SlotState(PORT), obs(7, A, code_present=True, new_worker_id="w1"))
    assert actions == [LaunchWorker("t1", "w1", PORT, A.executors, "digest-a", "assigned")]
    assert state == SlotState(PORT, State.WAITING_FOR_WORKER_START, A, worker_id="w1", launch_time=7)


def test_waiting_for_blob_retries_then_launches_when_code_arrives():
    state, _ = step(SlotState(PORT), obs(0, A))
    state, actions = step(state, obs(2, A))
    assert state.name is State.WAITING_FOR_BLOB and actions == []
    state, actions = step(state, obs(5, A))
    assert actions == [DownloadCode("t1", "digest-a")] and state.download_time == 5
    state, actions = step(state, obs(6, A, code_present=True, new_worker_id="w1"))
    assert state.name is State.WAITING_FOR_WORKER_START
    assert [type(a) for a in actions] == [LaunchWorker]


def test_waiting_for_blob_follows_assignment_changes():
    state, _ = step(SlotState(PORT), obs(0, A))
    state_b, actions = step(state, obs(1, B))
    assert state_b.assignment == B and actions == [DownloadCode("t2", "digest-b")]
    assert step(state, obs(1, None)) == (SlotState(PORT), [])


# --- WAITING_FOR_ENV: a topology's own Python environment ------------------------------------

def test_code_whose_environment_is_not_built_waits_for_it_then_launches():
    state, actions = step(SlotState(PORT), obs(0, A, code_present=True, env_ready=False))
    assert state.name is State.WAITING_FOR_ENV and actions == [BuildEnvironment("t1", "digest-a")]
    state, actions = step(state, obs(2, A, code_present=True, env_ready=False))
    assert state.name is State.WAITING_FOR_ENV and actions == []  # asked again only after download_retry
    state, actions = step(state, obs(5, A, code_present=True, env_ready=False))
    assert actions == [BuildEnvironment("t1", "digest-a")]
    state, actions = step(state, obs(6, A, code_present=True, env_ready=True, new_worker_id="w"))
    assert state.name is State.WAITING_FOR_WORKER_START
    assert actions == [LaunchWorker("t1", "w", PORT, A.executors, "digest-a", "environment built")]


def test_downloaded_code_goes_on_to_its_environment():
    state, _ = step(SlotState(PORT), obs(0, A))
    state, actions = step(state, obs(1, A, code_present=True, env_ready=False))
    assert state.name is State.WAITING_FOR_ENV and actions == [BuildEnvironment("t1", "digest-a")]


def test_each_failed_build_is_reported_once_and_the_slot_keeps_asking():
    state, _ = step(SlotState(PORT), obs(0, A, code_present=True, env_ready=False))
    failure = (1.0, "topology environment from requirements.txt could not be built: pip install exited 1")
    state, actions = step(state, obs(1, A, code_present=True, env_ready=False, env_failure=failure))
    assert actions == [ReportProblem("t1", PORT, None, verdicts.Problem(verdicts.ENVIRONMENT, failure[1]))]
    state, actions = step(state, obs(2, A, code_present=True, env_ready=False, env_failure=failure))
    assert actions == []  # the same failure: said once
    later = (70.0, failure[1])
    state, actions = step(state, obs(71, A, code_present=True, env_ready=False, env_failure=later))
    assert actions == [BuildEnvironment("t1", "digest-a"),
                       ReportProblem("t1", PORT, None, verdicts.Problem(verdicts.ENVIRONMENT, failure[1]))]
    assert state.name is State.WAITING_FOR_ENV


def test_waiting_for_env_follows_assignment_changes():
    state, _ = step(SlotState(PORT), obs(0, A, code_present=True, env_ready=False))
    assert step(state, obs(1, None, code_present=False)) == (SlotState(PORT), [])
    state, actions = step(state, obs(1, B, code_present=False))
    assert state.name is State.WAITING_FOR_BLOB and actions == [DownloadCode("t2", "digest-b")]


# --- WAITING_FOR_WORKER_START --------------------------------------------------------------

def test_heartbeat_within_start_timeout_means_running_and_pid_is_recorded():
    state = launched()
    state, actions = step(state, obs(20, worker_alive=True, worker_pid=42, heartbeat_time=19,
                                     heartbeat_executors=frozenset({(1, 1), (2, 2), (-1, -1)})))
    assert state.name is State.RUNNING and state.pid == 42 and actions == []


def test_no_heartbeat_waits_until_the_start_timeout_then_kills_and_relaunches():
    state = launched()
    state, actions = step(state, obs(120, worker_alive=True, worker_pid=42))
    assert state.name is State.WAITING_FOR_WORKER_START and actions == []
    state, actions = step(state, obs(121, worker_alive=True, worker_pid=42))
    assert state.name is State.KILL_AND_RELAUNCH and state.kill_time == 121
    assert actions == [KillWorker(42, False, "w@0.0", "no heartbeat within start timeout")]


def test_worker_dying_while_starting_is_relaunched_at_once():
    state = launched()
    state, actions = step(state, obs(3, code_present=True, new_worker_id="w2"))
    assert actions[0] == CleanupWorker("w@0.0", "worker exited while starting")
    assert actions[1].worker_id == "w2" and isinstance(actions[1], LaunchWorker)
    assert state.name is State.WAITING_FOR_WORKER_START and state.relaunch_count == 1


def test_assignment_change_while_starting_kills():
    state = launched()
    state, actions = step(state, obs(3, B, worker_alive=True, worker_pid=42))
    assert state.name is State.KILL
    assert actions == [KillWorker(42, False, "w@0.0", "assignment changed")]


def test_heartbeat_for_other_executors_is_killed_not_trusted():
    state = launched()
    state, actions = step(state, obs(3, worker_alive=True, worker_pid=42, heartbeat_time=3,
                                     heartbeat_executors=frozenset({(1, 1)})))
    assert state.name is State.KILL_AND_RELAUNCH
    assert actions == [KillWorker(42, False, "w@0.0", "heartbeat reports other executors")]


# --- RUNNING -----------------------------------------------------------------------------------

def test_running_with_fresh_heartbeats_stays_running():
    state = running()
    for now in (20, 40, 60):
        state, actions = step(state, obs(now, worker_alive=True, heartbeat_time=now - 29))
        assert state.name is State.RUNNING and actions == []


def test_running_with_stale_heartbeat_kills_and_relaunches():
    state = running(now=10)
    state, actions = step(state, obs(41, worker_alive=True, heartbeat_time=10))
    assert state.name is State.KILL_AND_RELAUNCH
    assert actions == [KillWorker(42, False, "w@0.0", "heartbeat timed out")]


def test_running_worker_that_exited_is_relaunched_at_once():
    state = running()
    state, actions = step(state, obs(11, code_present=True, new_worker_id="w2"))
    assert actions == [
        CleanupWorker("w@0.0", "worker exited"),
        LaunchWorker("t1", "w2", PORT, A.executors, "digest-a", "worker exited"),
    ]
    assert state.name is State.WAITING_FOR_WORKER_START and state.relaunch_count == 1
    assert state.pid is None and state.launch_time == 11


def test_running_worker_whose_heartbeat_vanished_is_replaced():
    state = running()
    state, actions = step(state, obs(200, worker_alive=True))
    assert state.name is State.KILL_AND_RELAUNCH and actions[0].reason == "no heartbeat"


@pytest.mark.parametrize("new", [None, B, A2, SlotAssignment("t1", A.executors, "digest-new")])
def test_running_worker_is_killed_when_its_assignment_changes(new):
    state = running()
    state, actions = step(state, obs(11, new, worker_alive=True, heartbeat_time=11))
    assert state.name is State.KILL
    assert actions == [KillWorker(42, False, "w@0.0", "assignment changed")]


# --- KILL and KILL_AND_RELAUNCH ------------------------------------------------------------

def killing(now=11.0, new=None) -> SlotState:
    state, _ = step(running(), obs(now, new, worker_alive=True, heartbeat_time=now))
    assert state.name is State.KILL
    return state


def test_kill_escalates_to_force_after_the_shutdown_sleep():
    state = killing(now=11)
    state, actions = step(state, obs(13, None, worker_alive=True))
    assert actions == []
    state, actions = step(state, obs(14, None, worker_alive=True))
    assert actions == [KillWorker(42, True, "w@0.0", "still alive after shutdown sleep")]
    state, actions = step(state, obs(15, None, worker_alive=True))
    assert [a.force for a in actions] == [True]  # repeated until the process is gone
    assert state.name is State.KILL


def test_kill_then_empty_when_nothing_is_assigned():
    state = killing()
    state, actions = step(state, obs(12, None))
    assert actions == [CleanupWorker("w@0.0", "worker stopped")]
    assert state == SlotState(PORT)


def test_kill_then_start_the_new_assignment():
    state = killing(new=B)
    state, actions = step(state, obs(12, B, code_present=True, new_worker_id="wb"))
    assert actions == [CleanupWorker("w@0.0", "worker stopped"),
                       LaunchWorker("t2", "wb", PORT, B.executors, "digest-b", "worker stopped")]
    assert state.assignment == B and state.relaunch_count == 0
    state2, actions2 = step(killing(new=B), obs(12, B))
    assert state2.name is State.WAITING_FOR_BLOB
    assert actions2 == [CleanupWorker("w@0.0", "worker stopped"), DownloadCode("t2", "digest-b")]


def test_kill_and_relaunch_relaunches_the_same_assignment():
    state, _ = step(running(10), obs(41, worker_alive=True, heartbeat_time=10))
    state, actions = step(state, obs(42, worker_alive=True))
    assert actions == []
    state, actions = step(state, obs(43, code_present=True, new_worker_id="w2"))
    assert [type(a) for a in actions] == [CleanupWorker, LaunchWorker]
    assert state.name is State.WAITING_FOR_WORKER_START and state.worker_id == "w2"
    assert state.relaunch_count == 1


def test_kill_and_relaunch_follows_an_assignment_that_changed_meanwhile():
    state, _ = step(running(10), obs(41, worker_alive=True, heartbeat_time=10))
    state, actions = step(state, obs(43, B, code_present=True, new_worker_id="wb"))
    assert actions[-1].topology_id == "t2" and state.relaunch_count == 0


# --- processes a worker leaves behind ------------------------------------------------------

def test_a_dead_worker_whose_children_live_on_has_them_killed_before_anything_else():
    state = running()
    # Its own process exited; a child that ignores SIGTERM (and left the session) lives on.
    state, actions = step(state, obs(11, code_present=True, worker_leftovers=True, new_worker_id="w2"))
    assert state.name is State.KILL_AND_RELAUNCH and state.worker_id == "w@0.0"
    assert actions == [KillWorker(42, True, "w@0.0", "processes the worker left behind")]
    state, actions = step(state, obs(11.5, code_present=True, worker_leftovers=True, new_worker_id="w3"))
    assert [type(a) for a in actions] == [KillWorker] and actions[0].force  # again, until they are gone
    state, actions = step(state, obs(12, code_present=True, new_worker_id="w4"))
    assert actions == [CleanupWorker("w@0.0", "worker stopped"),
                       LaunchWorker("t1", "w4", PORT, A.executors, "digest-a", "worker stopped")]


def test_leftovers_of_a_killed_worker_are_sigkilled_at_once_and_the_next_topology_waits_for_them():
    state = killing(new=B)  # SIGTERM sent at 11
    state, actions = step(state, obs(11.2, B, code_present=True, worker_leftovers=True, new_worker_id="wb"))
    assert state.name is State.KILL  # not the shutdown sleep: the worker itself is gone already
    assert actions == [KillWorker(42, True, "w@0.0", "processes the worker left behind")]
    state, actions = step(state, obs(11.4, B, code_present=True, new_worker_id="wb"))
    assert [type(a) for a in actions] == [CleanupWorker, LaunchWorker] and actions[1].topology_id == "t2"


# --- memory and start verdicts -------------------------------------------------------------

MB = 1 << 20


@pytest.mark.parametrize("starting", [True, False])
def test_a_worker_over_its_memory_limit_is_sigkilled_and_reported(starting):
    state = launched() if starting else running()
    state, actions = step(state, obs(20, worker_alive=True, worker_pid=42, heartbeat_time=20,
                                     memory_bytes=300 * MB, memory_max_bytes=256 * MB))
    assert state.name is State.KILL_AND_RELAUNCH and state.kill_time == 20
    report, kill = actions
    assert kill == KillWorker(42, True, "w@0.0", verdicts.MEMORY)
    assert isinstance(report, ReportProblem) and (report.topology_id, report.port, report.worker_id) == \
        ("t1", PORT, "w@0.0")
    assert report.problem.kind == verdicts.MEMORY and "300 MB" in report.problem.text
    state, actions = step(state, obs(21, code_present=True, new_worker_id="w2"))
    assert [type(a) for a in actions] == [CleanupWorker, LaunchWorker]  # relaunched


@pytest.mark.parametrize("starting", [True, False])
def test_a_worker_holding_zookeepers_connections_is_sigkilled_reported_and_relaunched_with_back_off(starting):
    state = launched() if starting else running()
    state, actions = step(state, obs(20, worker_alive=True, worker_pid=42, heartbeat_time=20, zk_connections=54,
                                     zk_max_connections=4))
    report, kill = actions
    assert kill == KillWorker(42, True, "w@0.0", verdicts.ZOOKEEPER)
    assert report.problem.kind == verdicts.ZOOKEEPER and "held 54 connections" in report.problem.text
    # It keeps doing it: each quick death holds the next relaunch longer.
    holds = []
    for t in range(21, 200):
        state, actions = step(state, obs(t, code_present=True, new_worker_id=f"w{t}", worker_alive=bool(
            state.name in (State.WAITING_FOR_WORKER_START, State.RUNNING)), worker_pid=42, heartbeat_time=t,
            zk_connections=54, zk_max_connections=4))
        if state.hold_until is not None and (not holds or holds[-1] != state.hold_until):
            holds.append(state.hold_until)
    gaps = [b - a for a, b in zip(holds, holds[1:])]
    assert len(holds) >= 4 and gaps == sorted(gaps), holds  # 1, 2, 4 ... seconds apart, growing
    state, actions = step(running(), obs(20, worker_alive=True, heartbeat_time=20, zk_connections=4,
                                         zk_max_connections=4))
    assert state.name is State.RUNNING and actions == []  # its own session and a few more are fine


def test_memory_under_the_limit_is_left_alone():
    state = running()
    state, actions = step(state, obs(20, worker_alive=True, heartbeat_time=20, memory_bytes=256 * MB,
                                     memory_max_bytes=256 * MB))
    assert state.name is State.RUNNING and actions == []


def test_a_worker_the_kernel_ended_at_its_limit_is_reported_and_relaunched():
    state = running()
    state, actions = step(state, obs(20, code_present=True, oom_killed=True, memory_max_bytes=256 * MB,
                                     new_worker_id="w2"))
    assert [type(a) for a in actions] == [ReportProblem, CleanupWorker, LaunchWorker]
    assert actions[0].problem == verdicts.oom_problem(256 * MB)


def test_a_worker_that_beats_but_never_finishes_prepare_is_reported_and_relaunched():
    state = launched()
    beating = dict(worker_alive=True, worker_pid=42, worker_ready=False)
    state, actions = step(state, obs(30, heartbeat_time=30, **beating))
    assert state.name is State.WAITING_FOR_WORKER_START and actions == []  # beating, still starting
    state, actions = step(state, obs(121, heartbeat_time=121, **beating))
    assert state.name is State.KILL_AND_RELAUNCH
    report, kill = actions
    assert report.problem.kind == verdicts.START and kill == KillWorker(42, False, "w@0.0", report.problem.text)
    state, actions = step(state, obs(122, code_present=True, new_worker_id="w2"))
    assert [type(a) for a in actions] == [CleanupWorker, LaunchWorker]


def test_a_worker_that_finishes_starting_runs():
    state = launched()
    state, actions = step(state, obs(30, worker_alive=True, heartbeat_time=30, worker_ready=False))
    state, actions = step(state, obs(31, worker_alive=True, heartbeat_time=31, worker_ready=True))
    assert state.name is State.RUNNING and actions == []


# --- relaunch back-off: it belongs to the topology's worker, not the slot --------------------

def crash(state: SlotState, now: float, assignment=A, new_id=None) -> tuple[SlotState, list]:
    """The worker launched at ``state.launch_time`` dies at ``now``."""
    return step(state, obs(now, assignment, code_present=True, new_worker_id=new_id or f"w@{now}"))


def test_a_crash_looping_worker_is_held_longer_each_time():
    state = launched(0.0)
    state, actions = crash(state, 1)  # first quick death: relaunched at once
    assert [type(a) for a in actions] == [CleanupWorker, LaunchWorker] and state.crashes == 1
    state, actions = crash(state, 2)  # second: held 1 s
    assert actions == [CleanupWorker("w@1", "worker exited while starting")]
    assert state.name is State.EMPTY and state.assignment == A and state.hold_until == 3
    assert step(state, obs(2.9, code_present=True, new_worker_id="x")) == (state, [])
    state, actions = step(state, obs(3, code_present=True, new_worker_id="w@3"))
    assert actions == [LaunchWorker("t1", "w@3", PORT, A.executors, "digest-a", "relaunching after back-off")]
    state, actions = crash(state, 4)  # third: held 2 s
    assert state.hold_until == 6 and state.crashes == 3


def test_the_next_topology_on_a_slot_starts_at_once_whatever_the_last_one_did():
    state = launched(0.0)
    for now in (1, 2):
        state, _ = crash(state, now)
    state, _ = step(state, obs(3, code_present=True, new_worker_id="w@3"))
    for now in (4, 10, 20):  # held 2 s, then 4 s ...
        state, _ = crash(state, now)
        state, _ = step(state, obs(state.hold_until, code_present=True, new_worker_id=f"w@{now}b"))
    state, _ = crash(state, 60)
    assert state.hold_until is not None and state.hold_until - 60 >= 8
    # The topology is killed and another one is placed on the slot: it starts now.
    state, actions = step(state, obs(61, B, code_present=True, new_worker_id="wb"))
    assert actions == [LaunchWorker("t2", "wb", PORT, B.executors, "digest-b", "assigned")]
    assert state.crashes == 0 and state.hold_until is None and state.relaunch_count == 0
    # Its own first crash is relaunched at once, as any topology's first.
    state, actions = crash(state, 62, B, "wb2")
    assert [type(a) for a in actions] == [CleanupWorker, LaunchWorker] and actions[1].topology_id == "t2"


def test_a_held_assignment_that_goes_away_leaves_the_slot_empty():
    state = launched(0.0)
    for now in (1, 2):
        state, _ = crash(state, now)
    assert state.hold_until is not None
    assert step(state, obs(2.5, None)) == (SlotState(PORT), [])


def test_a_worker_that_lived_long_starts_the_count_again():
    state = launched(0.0)
    for now in (1, 2):
        state, _ = crash(state, now)
    state, _ = step(state, obs(3, code_present=True, new_worker_id="w@3"))
    state, _ = step(state, obs(4, worker_alive=True, worker_pid=42, heartbeat_time=4))  # RUNNING
    state, actions = crash(state, 3 + verdicts.CRASH_WINDOW + 10)
    assert [type(a) for a in actions] == [CleanupWorker, LaunchWorker] and state.crashes == 0


# --- a port another process holds ------------------------------------------------------------

def test_a_worker_that_cannot_bind_a_held_port_leaves_the_slot_unusable_until_it_is_free():
    state = launched(0.0)
    state, actions = step(state, obs(1, worker_exit_code=3, port_in_use=True))
    problem = verdicts.port_problem(PORT)
    assert state == SlotState(PORT, name=State.UNUSABLE, unusable=problem.text)
    assert actions == [ReportProblem("t1", PORT, "w@0.0", problem), CleanupWorker("w@0.0", problem.kind)]
    assert "port 6700 is held by another process" in problem.text
    assert step(state, obs(5, A, code_present=True, port_in_use=True)) == (state, [])  # nothing starts
    state, actions = step(state, obs(9, A, code_present=True, port_in_use=False, new_worker_id="w2"))
    assert state.name is State.WAITING_FOR_WORKER_START
    assert actions == [LaunchWorker("t1", "w2", PORT, A.executors, "digest-a", "port free again")]


def test_a_free_port_comes_back_empty_when_nothing_is_assigned_there_any_more():
    state = SlotState(PORT, name=State.UNUSABLE, unusable="held")
    assert step(state, obs(1, None, port_in_use=False)) == (SlotState(PORT), [])


def test_a_worker_saying_its_port_is_held_is_not_believed_without_the_probe():
    state = running()
    state, actions = step(state, obs(20, worker_exit_code=3, port_in_use=False, code_present=True, new_worker_id="w2"))
    assert state.name is State.WAITING_FOR_WORKER_START and state.unusable is None  # an ordinary death
    assert [type(a) for a in actions] == [CleanupWorker, LaunchWorker]


# --- recovery after a supervisor restart ---------------------------------------------------

RECORD = WorkerRecord("w-old", 77, "t1", [(2, 2), (1, 1)], "digest-a", launch_time=100.0)


def test_recover_without_record_is_empty():
    assert recover(PORT, None, A, False, 500) == SlotState(PORT)


def test_recover_adopts_a_live_assigned_worker():
    state = recover(PORT, RECORD, A, True, 500)
    assert state == SlotState(PORT, State.RUNNING, A, worker_id="w-old", pid=77, launch_time=100)
    state, actions = step(state, obs(501, worker_alive=True, heartbeat_time=499))
    assert state.name is State.RUNNING and actions == []


def test_adopted_worker_that_has_not_beaten_yet_gets_the_start_grace():
    state = recover(PORT, RECORD, A, True, 105)
    state, actions = step(state, obs(110, worker_alive=True))
    assert state.name is State.RUNNING and actions == []
    state, actions = step(state, obs(221, worker_alive=True))
    assert state.name is State.KILL_AND_RELAUNCH and actions == [KillWorker(77, False, "w-old", "no heartbeat")]


@pytest.mark.parametrize("assignment", [None, B, A2])
def test_recover_kills_a_worker_no_longer_assigned(assignment):
    state = recover(PORT, RECORD, assignment, True, 500)
    assert state.name is State.KILL and state.kill_time is None
    state, actions = step(state, obs(500, assignment, worker_alive=True))
    assert actions == [KillWorker(77, False, "w-old", "no longer assigned")]
    assert state.kill_time == 500


def test_recover_cleans_a_dead_worker_and_relaunches():
    state = recover(PORT, RECORD, A, False, 500)
    assert state.name is State.KILL
    state, actions = step(state, obs(500, A, code_present=True, new_worker_id="w-new"))
    assert actions == [CleanupWorker("w-old", "worker stopped"),
                       LaunchWorker("t1", "w-new", PORT, A.executors, "digest-a", "worker stopped")]


def test_timeouts_from_conf():
    conf = build_config({"supervisor.worker.timeout.secs": 7}, user_file=False)
    t = Timeouts.from_conf(conf)
    assert t.worker == 7.0 and t.start == conf["supervisor.worker.start.timeout.secs"]
    assert t.shutdown_sleep == conf["supervisor.worker.shutdown.sleep.secs"]


def test_launch_without_a_worker_id_names_the_problem():
    with pytest.raises(ValueError, match="new_worker_id"):
        step(SlotState(PORT), Observation(0, A, code_present=True))


# --- property: a simulated world never sees two workers on one port ---------------------------

tick = st.fixed_dictionaries({
    "dt": st.sampled_from([0.5, 2, 4, 31, 130]),
    "assignment": st.sampled_from([A, A, A, B, None]),
    "code": st.booleans(),
    "crash": st.booleans(),
    "obeys_sigterm": st.booleans(),
    "beats": st.booleans(),
    "forks": st.booleans(),  # the worker starts a child that ignores SIGTERM and outlives it
    "hog": st.booleans(),  # the worker goes over its memory limit
    "env": st.booleans(),  # the code's Python environment is built
    "env_fails": st.booleans(),  # ... and its last build failed
    "held": st.booleans(),  # another process holds the port (a worker then exits 3)
})


@settings(max_examples=300)
@given(st.lists(tick, max_size=40))
def test_simulated_world(ticks):
    ids = (f"w{i}" for i in itertools.count())
    alive: dict[str, dict] = {}  # worker id -> {"pid", "assignment", "beat"}
    children: set[str] = set()  # worker ids with a child that only SIGKILL ends
    cleaned: set[str] = set()
    state, now = SlotState(PORT), 0.0
    for t in ticks:
        now += t["dt"]
        proc = alive.get(state.worker_id) if state.worker_id else None
        if proc and t["forks"]:
            children.add(state.worker_id)
        exit_code = None
        if proc and (t["crash"] or t["held"]):
            del alive[state.worker_id]
            proc = None
            exit_code = 3 if t["held"] else 1
        if proc and t["beats"]:
            proc["beat"] = now
        o = Observation(
            now=now, assignment=t["assignment"], code_present=t["code"],
            worker_alive=proc is not None, worker_pid=proc and proc["pid"],
            heartbeat_time=proc and proc["beat"],
            heartbeat_executors=proc and proc["assignment"].executors,
            timeouts=T, new_worker_id=next(ids),
            worker_leftovers=state.worker_id in children, memory_max_bytes=100,
            memory_bytes=200 if proc and t["hog"] else 50,
            env_ready=t["env"], env_failure=(now, "pip failed") if t["env_fails"] and not t["env"] else None,
            worker_exit_code=exit_code, port_in_use=t["held"],
        )
        prev = state
        state, actions = step(state, o)
        for a in actions:
            if isinstance(a, LaunchWorker):
                assert not alive, "a second worker was launched on the port"
                assert not children, "a worker was launched beside a dead one's child (it holds the port)"
                assert a.worker_id == o.new_worker_id and a.topology_id == o.assignment.topology_id
                alive[a.worker_id] = {"pid": len(cleaned) + 1000, "assignment": state.assignment, "beat": None}
            elif isinstance(a, KillWorker):
                assert a.worker_id == prev.worker_id
                if a.force or t["obeys_sigterm"]:
                    alive.pop(a.worker_id, None)
                if a.force:
                    children.discard(a.worker_id)
            elif isinstance(a, CleanupWorker):
                assert a.worker_id not in alive and a.worker_id not in cleaned
                assert a.worker_id not in children, "cleaned up while its child still runs"
                cleaned.add(a.worker_id)
            elif isinstance(a, ReportProblem) and a.worker_id is None:
                assert a.problem.kind == verdicts.ENVIRONMENT and o.env_failure and not o.env_ready
            elif isinstance(a, ReportProblem):
                assert a.worker_id == prev.worker_id
                assert a.problem.kind in (verdicts.MEMORY, verdicts.START, verdicts.PORT_IN_USE)
            elif isinstance(a, BuildEnvironment):
                assert o.code_present and not o.env_ready
            else:
                assert isinstance(a, DownloadCode) and not o.code_present
            if isinstance(a, LaunchWorker):
                assert o.code_present and o.env_ready and not (prev.name is State.UNUSABLE and o.port_in_use)
        has_worker = state.name in (State.WAITING_FOR_WORKER_START, State.RUNNING,
                                    State.KILL, State.KILL_AND_RELAUNCH)
        assert (state.worker_id is not None) == has_worker
        # EMPTY has no assignment, unless it holds that assignment's relaunch (back-off); UNUSABLE none.
        assert (state.assignment is None) == (state.name in (State.EMPTY, State.UNUSABLE) and state.hold_until is None)
        assert (state.unusable is not None) == (state.name is State.UNUSABLE)
        if state.name is State.RUNNING:
            assert o.assignment == state.assignment and o.worker_alive
