"""Nimbus's liveness decisions, driven by a FakeClock: the grace after a (re)connection and
the restart grace of a supervisor that stopped cleanly."""
from __future__ import annotations

from squall.daemons.nimbus.liveness import ReconnectGrace, supervisor_alive
from squall.daemons.timers import FakeClock


def test_no_reassignment_for_the_task_timeout_after_every_reconnection() -> None:
    clock = FakeClock()
    grace = ReconnectGrace(30.0, clock)
    assert not grace.active()  # nothing observed yet
    assert grace.observe(1) is True and grace.active() and grace.left() == 30.0
    clock.advance(29.9)
    assert grace.observe(1) is False and grace.active()
    clock.advance(0.2)
    assert not grace.active() and grace.left() == 0.0
    clock.advance(100.0)
    assert grace.observe(2) is True and grace.active()  # reconnected: a new grace
    clock.advance(30.0)
    assert not grace.active()


def test_an_away_supervisor_keeps_its_slots_for_the_restart_grace_only() -> None:
    assert supervisor_alive(False, 5.0, supervisor_timeout=5.0, restart_grace=30.0)
    assert not supervisor_alive(False, 5.1, supervisor_timeout=5.0, restart_grace=30.0)
    assert supervisor_alive(True, 29.0, supervisor_timeout=5.0, restart_grace=30.0)
    assert not supervisor_alive(True, 30.5, supervisor_timeout=5.0, restart_grace=30.0)
    assert not supervisor_alive(True, 0.1, supervisor_timeout=5.0, restart_grace=0.0)
