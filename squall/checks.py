"""Checks of a topology against its final configuration, made when it is submitted
(``LocalCluster.submit``, ``squall submit``) before anything runs: what ``build`` cannot
check because the configuration comes later.

- Windows hold their tuples un-acked: ``topology.message.timeout.secs`` must exceed what a
  time window holds them for (length + slide + lateness, plus a checkpoint interval when
  checkpointed), as Storm checks; a count window must fit in what the spouts may have
  pending. A time window's size is bounded by ``topology.max.spout.pending`` only, so it
  must be set (with acking on) and keep every spout's pending tuples within
  ``topology.window.max.tuples``.
- Checkpoints travel as tracked tuple trees: a stateful topology needs ackers and
  message timeouts.
- Every metrics consumer registered (``topology.metrics.consumer.register``) names a class
  that imports and has ``handle_data_points``; a Java class other than Storm's
  LoggingMetricsConsumer is refused by name.

What is allowed but may stall is returned as warnings: an event-time window fires only once
a tuple stamped past its end arrives, while its own tuples stay pending, so spouts held at
``topology.max.spout.pending`` by one window's tuples wait for a tuple they may not send,
until the message timeout fails them all. Whether that happens depends on the input rate,
which only the warning can name.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.metrics_consumer import consumer_class, registrations
from squall.model import acker_count
from squall.state.wiring import is_checkpointed
from squall.topology import Topology, TopologyError
from squall.windowing.runner import MAX_KEY, WindowedBoltRunner


def window_specs(topology: Topology) -> dict[str, Any]:
    """bolt id -> WindowSpec of every windowed bolt (unpickles the bolts: client side only)."""
    out = {}
    for spec in topology.bolts():
        obj = spec.instantiate()
        if isinstance(obj, WindowedBoltRunner):
            out[spec.id] = obj.spec
    return out


def check_runnable(topology: Topology, conf: Mapping[str, Any]) -> list[str]:
    """Raise TopologyError naming the first problem of ``topology`` under ``conf``; return
    warnings of what may stall (see the module's docstring)."""
    acking = acker_count(conf) > 0
    timeouts = bool(conf.get("topology.enable.message.timeouts", True))
    checkpointed = is_checkpointed(topology)
    if checkpointed and not acking:
        raise TopologyError("a topology with stateful components needs ackers (checkpoints are tracked "
                            "tuple trees): topology.acker.executors must not be 0")
    if checkpointed and not timeouts:
        raise TopologyError("a topology with stateful components needs topology.enable.message.timeouts: "
                            "a checkpoint lost with a dead worker is noticed by its timeout")
    for reg in registrations(conf):
        try:
            consumer_class(reg.class_path)
        except ValueError as exc:
            raise TopologyError(f"topology.metrics.consumer.register: {exc}") from None
    windows = window_specs(topology)
    warnings: list[str] = []
    if not windows:
        return warnings
    timeout = float(conf["topology.message.timeout.secs"])
    pending = conf.get("topology.max.spout.pending")
    spout_tasks = sum(s.num_tasks for s in topology.spouts() if not s.id.startswith("__"))
    tasks = f"{spout_tasks} task{'s' if spout_tasks != 1 else ''}"
    in_flight = None if pending is None or not acking else int(pending) * spout_tasks
    limit = int(conf[MAX_KEY])
    interval = float(conf.get("topology.state.checkpoint.interval.ms", 0)) / 1000 if checkpointed else 0.0
    for bolt, w in sorted(windows.items()):
        where = f"windowed bolt {bolt!r}"
        if w.counted:
            need = w.length.n + w.slide.n
            if need > limit:
                raise TopologyError(f"{where}: its count window holds up to {need} tuples, more than "
                                    f"{MAX_KEY} ({limit})")
            if in_flight is not None and in_flight < need:
                raise TopologyError(f"{where}: its count window needs {need} tuples in flight, but the "
                                    f"spouts may have only {in_flight} pending (topology.max.spout.pending "
                                    f"{pending} x {tasks}): the window would never fill")
            continue
        hold = w.span() + interval
        if acking and timeouts and timeout <= hold:
            raise TopologyError(f"{where}: topology.message.timeout.secs ({timeout:g}) must exceed the "
                                f"{hold:g} s a tuple may wait in its window (length + slide + lateness"
                                f"{' + checkpoint interval' if interval else ''}), or tuples time out "
                                "before their window is done")
        if in_flight is None:
            raise TopologyError(f"{where}: a time window holds every tuple of its length; bound it with "
                                f"acking on and topology.max.spout.pending set so that all spouts' pending "
                                f"tuples stay within {MAX_KEY} ({limit})")
        if in_flight > limit:
            raise TopologyError(f"{where}: the spouts may have {in_flight} tuples pending "
                                f"(topology.max.spout.pending {pending} x {tasks}), and its "
                                f"time window may hold them all: more than {MAX_KEY} ({limit})")
        if w.event_time:
            warnings.append(stall_warning(where, hold, in_flight, pending, spout_tasks, timeout))
    return warnings


def stall_warning(where: str, hold: float, in_flight: int, pending: Any, spout_tasks: int,
                  timeout: float) -> str:
    """Why an event-time window may stall, with the input rate at which it does."""
    rate = in_flight / hold
    return (f"{where} may stall: an event-time window fires only when a tuple stamped past its end "
            f"arrives, and holds its tuples pending until then; the spouts may have {in_flight:,} pending "
            f"(topology.max.spout.pending {pending} x {spout_tasks} spout task{'s' if spout_tasks != 1 else ''}), "
            "so above about "
            f"{rate:,.0f} tuples/s ({in_flight:,} in the {hold:g} s a tuple may wait) they stop, no window "
            f"fires, and every pending tuple fails after topology.message.timeout.secs ({timeout:g} s): "
            "raise topology.max.spout.pending to cover a window's tuples at the input rate")
