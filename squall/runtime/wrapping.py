"""Spouts and bolts that wrap a user's component, and what an executor lends them.

The runtime runs ordinary spouts and bolts. A feature that changes how a component runs
(squall.state: checkpoint barriers, state, acks deferred until a commit) wraps it in a
spout or bolt of its own, as Storm's ``StatefulBoltExecutor`` and
``CheckpointTupleForwarder`` wrap a bolt, and names the wrapper in the topology
(``ComponentSpec.runnable``). The executor runs the wrapper like any component, with two
more calls made once per task, before ``open``/``prepare``:

- a :class:`BoltWrapper` is ``attach``\\ ed to ``run`` (executes tuples on the wrapped bolt
  with the executor's rules: a BasicBolt's acks, errors reported and the tuple failed,
  counts and latency) and to a collector for the component's system streams; then it gets
  each batch of its task's input through ``feed`` and decides what runs when;
- a :class:`SpoutWrapper` is ``attach``\\ ed to that collector and to its task's
  :class:`~squall.runtime.acker.SpoutBook`; it gets everything that arrives for the task
  (acker traffic included) through ``receive``, and owns acking its spout. Once per turn
  the executor asks ``may_emit()``, and while it holds calls the wrapped spout's
  ``next_tuple`` itself (no extra call per tuple).

Both may report figures in the executor's stats (``executor_stats``). The runtime never
imports the features that wrap.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall.components import Bolt, Spout
from squall.runtime.acker import SpoutBook
from squall.runtime.collectors import BoltCollector

Run = Callable[[list], None]


class StatsSections:
    """A component with figures of its own in its executor's stats: ``{section: {name:
    value}}``; numbers of one section add up over the executor's tasks."""

    def executor_stats(self) -> dict[str, dict[str, Any]]:
        return {}


class BoltWrapper(StatsSections, Bolt):
    """A bolt around ``bolt``: its input goes through ``feed``, and ``run`` executes the
    wrapped bolt. ``prepare``, ``cleanup`` and ``execute`` reach the wrapped bolt unless
    overridden."""

    def __init__(self, bolt: Bolt) -> None:
        self.bolt = bolt
        self.run: Run = self._not_attached
        self.system: BoltCollector | None = None

    @staticmethod
    def _not_attached(tuples: list) -> None:
        raise RuntimeError("a wrapping bolt runs tuples only once its executor has attached it")

    def attach(self, run: Run, system: BoltCollector) -> None:
        """Called by the executor before ``prepare``."""
        self.run = run
        self.system = system

    def feed(self, tuples: list) -> None:
        """A batch of this task's input, in arrival order (tick tuples included)."""
        self.run(tuples)

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.bolt.prepare(conf, context, collector)

    def execute(self, tuple: Any) -> None:
        self.bolt.execute(tuple)

    def cleanup(self) -> None:
        self.bolt.cleanup()


class SpoutWrapper(StatsSections, Spout):
    """A spout around ``spout`` that takes over its task's reliability bookkeeping: the
    executor hands ``receive`` what arrives for the task (acks, fails, system streams)
    and fails timed-out tuples through ``fail``. ``next_tuple``, ``open`` and the rest
    reach the wrapped spout unless overridden."""

    def __init__(self, spout: Spout) -> None:
        self.spout = spout
        self.book: SpoutBook | None = None
        self.system: BoltCollector | None = None

    def attach(self, system: BoltCollector, book: SpoutBook) -> None:
        """Called by the executor before ``open``."""
        self.system = system
        self.book = book

    def receive(self, tuples: list, now: float) -> None:
        """Everything that arrived for this task since the last step, in order."""
        raise NotImplementedError

    def may_emit(self) -> bool:
        """May the wrapped spout's ``next_tuple`` run this turn? Asked once per turn; the
        executor then calls ``spout.next_tuple`` directly."""
        return True

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.spout.open(conf, context, collector)

    def next_tuple(self) -> None:
        self.spout.next_tuple()

    def ack(self, msg_id: Any) -> None:
        self.spout.ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.spout.fail(msg_id)

    def undeliverable(self, msg_id: Any, reason: str) -> None:
        self.spout.undeliverable(msg_id, reason)

    def activate(self) -> None:
        self.spout.activate()

    def deactivate(self) -> None:
        self.spout.deactivate()

    def close(self) -> None:
        self.spout.close()
