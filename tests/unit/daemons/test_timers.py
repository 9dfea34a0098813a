"""The daemons' one timer module: halting timers on real threads, and the deadline logic
driven by a fake clock with no sleeping."""
from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

import pytest

from squall.daemons.timers import DeadlineQueue, Every, FakeClock, HaltingTimer, Waker
from squall.testing.waiting import wait_for


class TestHaltingTimer:
    def test_runs_periodically_and_on_trigger(self):
        calls: list[float] = []
        timer = HaltingTimer("t", 0.05, lambda: calls.append(time.monotonic()), lambda *_: None).start()
        try:
            wait_for(lambda: len(calls) >= 3, 5, "three periodic runs")
            slow = HaltingTimer("slow", 60, lambda: calls.append(-1.0), lambda *_: None).start()
            slow.trigger()
            wait_for(lambda: -1.0 in calls, 5, "a triggered run")
            slow.cancel()
        finally:
            timer.cancel()
        assert not timer.alive

    def test_a_raising_callback_halts(self):
        halted: list[tuple[str, BaseException]] = []
        done = threading.Event()

        def boom() -> None:
            raise ValueError("bad state")

        def on_halt(name: str, exc: BaseException) -> None:
            halted.append((name, exc))
            done.set()

        timer = HaltingTimer("refresh", 0.01, boom, on_halt).start()
        assert done.wait(5)
        wait_for(lambda: not timer.alive, 5, "the timer thread to end")
        assert len(halted) == 1 and halted[0][0] == "refresh" and isinstance(halted[0][1], ValueError)

    def test_a_cancelled_timer_does_not_halt(self):
        halted: list[str] = []
        started, release = threading.Event(), threading.Event()

        def slow_then_boom() -> None:
            started.set()
            release.wait(5)
            raise ValueError("after cancel")

        timer = HaltingTimer("t", 0.01, slow_then_boom, lambda name, _e: halted.append(name)).start()
        assert started.wait(5)
        canceller = threading.Thread(target=timer.cancel)
        canceller.start()
        wait_for(lambda: timer._cancelled.is_set(), 5, "cancel to be requested")
        release.set()
        canceller.join(5)
        assert not timer.alive and halted == []


class TestDeadlineQueue:
    def test_keys_come_due_in_order_only_when_the_clock_passes_them(self):
        clock = FakeClock()
        q = DeadlineQueue(clock)
        q.schedule(("remove", "t1"), 30)
        q.schedule(("rebalance", "t2"), 10)
        q.schedule(("sweep", "t3"), 0)
        assert q.pop_due() == ("sweep", "t3")
        assert q.pop_due() is None
        assert q.wait_secs(60) == 10
        clock.advance(10)
        assert q.pop_due() == ("rebalance", "t2")
        assert q.pop_due() is None and q.wait_secs(60) == 20
        clock.advance(25)
        assert q.pop_due() == ("remove", "t1") and len(q) == 0
        assert q.wait_secs(7.5) == 7.5

    def test_rescheduling_replaces_and_cancel_removes(self):
        clock = FakeClock()
        q = DeadlineQueue(clock)
        q.schedule("k", 5)
        q.schedule("k", 50)  # replaces: the key is due once, at the later time
        assert len(q) == 1 and "k" in q
        clock.advance(10)
        assert q.pop_due() is None
        assert q.cancel("k") and not q.cancel("k") and "k" not in q
        clock.advance(100)
        assert q.pop_due() is None


class TestEvery:
    def test_due_once_per_period(self):
        clock = FakeClock()
        every = Every(3.0, clock)
        assert not every.due() and every.left() == 3.0
        clock.advance(3.0)
        assert every.due() and not every.due()
        clock.advance(2.0)
        assert not every.due() and every.left() == pytest.approx(1.0)


class TestHaltingTimerClock:
    def test_the_period_is_measured_on_the_injected_clock(self):
        clock = FakeClock()
        calls: list[float] = []
        timer = HaltingTimer("t", 0.05, lambda: calls.append(clock.monotonic()), lambda *_: None,
                             clock=clock).start()
        try:
            time.sleep(0.3)
            assert calls == []  # the fake clock has not moved: the period has not passed
            clock.advance(0.05)
            wait_for(lambda: len(calls) == 1, 5, "a run once the fake clock passed the period")
        finally:
            timer.cancel()


def test_waker_wakes_a_waiting_thread_and_times_out_otherwise():
    waker = Waker()
    try:
        assert waker.wait(0.01) is False
        woke: list[bool] = []
        t = threading.Thread(target=lambda: woke.append(waker.wait(10)))
        t.start()
        waker.wake()
        t.join(5)
        assert woke == [True]
    finally:
        waker.close()


def test_no_daemon_module_but_timers_reads_or_sleeps_on_the_clock_itself():
    """The module's promise: every daemon reads time through a Clock and sleeps through
    ``timers.sleep``, so tests drive time with a FakeClock (measurements, ``perf_counter``
    and ``thread_time``, are not decisions and stay allowed)."""
    daemons = Path(__file__).resolve().parents[3] / "daemons"
    found = []
    for path in sorted(daemons.rglob("*.py")):
        if path.name == "timers.py" and path.parent == daemons:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr in ("time", "monotonic", "sleep")
                    and isinstance(node.value, ast.Name) and node.value.id in ("time", "_time")):
                found.append(f"{path.relative_to(daemons)}:{node.lineno} time.{node.attr}")
            if (isinstance(node, ast.ImportFrom) and node.module == "time"
                    and {a.name for a in node.names} & {"time", "monotonic", "sleep"}):
                found.append(f"{path.relative_to(daemons)}:{node.lineno} from time import")
    assert not found, found
