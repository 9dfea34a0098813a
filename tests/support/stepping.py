"""A worker's executors run by hand on a FakeClock: no threads, no sleeping.

``SteppedWorker(topology, conf)`` makes the real WorkerRuntime of a one-worker local
topology, sets its executors up and steps them in run order when the test says so, with
time moving only by ``clock.advance``. What its bolts and spouts record is exactly what
each step did, so a test can assert what happens at each moment (a tick, a timeout, a
checkpoint) rather than wait for it.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from squall import config as _config
from squall.clock import FakeClock
from squall.messaging.local import LocalContext
from squall.model import executors as executors_of
from squall.model import system_topology, task_ids
from squall.runtime.executor import Executor
from squall.runtime.worker_runtime import WorkerRuntime
from squall.topology import Topology

_ids = itertools.count(1)


class SteppedWorker:
    """One worker running every executor of ``topology``, stepped by ``step``/``run``."""

    def __init__(self, topology: Topology, conf: Mapping[str, Any] | None = None,
                 clock: FakeClock | None = None, name: str = "stepped") -> None:
        self.clock = clock or FakeClock()
        self.name = f"{name}-{next(_ids)}"
        # Interval 0: a spout's turn ends when it has nothing more to emit or its batch is
        # full, never because the machine was slow (the flush deadline is real time), and
        # what it emitted is sent at the end of its turn; a spout that ran dry is asked again
        # at the next turn (wait strategy time 0; squall.runtime.spout_pacing holds it on the
        # worker's clock, which moves only by ``advance``): steps are the same on a loaded machine.
        settled = {"topology.batch.flush.interval.millis": 0, "topology.sleep.spout.wait.strategy.time.ms": 0,
                   **(conf or {})}
        self.conf = _config.build_config({**settled, "topology.name": self.name},
                                         {"squall.messaging.transport": "local"})
        system = system_topology(topology, self.conf)
        execs = sorted(executors_of(system, task_ids(system)))
        self.errors: list[tuple[str, int, str]] = []
        self.runtime = WorkerRuntime(self.name, topology, self.conf, execs, 1, LocalContext(), host="local",
                                     error_sink=lambda c, t, text: self.errors.append((c, t, text)),
                                     clock=self.clock)
        self.runtime.set_active(True)
        self.executors: list[Executor] = [e for group in self.runtime.create_executors() for e in group]
        for ex in self.executors:
            ex.setup()

    def executor(self, component: str) -> Executor:
        return next(e for e in self.executors if e.component == component)

    def step(self) -> None:
        """One turn: every executor steps once, in run order, at the clock's time."""
        for ex in self.executors:
            ex.step(self.clock.monotonic())

    def run(self, until: Callable[[], bool] | None = None, turns: int = 200) -> int:
        """Step until ``until()`` holds (or, without it, until no queue holds anything);
        the turns it took. Raises if that does not happen within ``turns``."""
        for n in range(1, turns + 1):
            self.step()
            if until is not None and until():
                return n
            if until is None and not any(len(e.queue) for e in self.executors):
                return n
        raise AssertionError(f"not done after {turns} turns")

    def advance(self, secs: float) -> None:
        """Move time on, then take one turn."""
        self.clock.advance(secs)
        self.step()

    def close(self) -> None:
        for ex in self.executors:
            ex.teardown()

    def __enter__(self) -> SteppedWorker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
