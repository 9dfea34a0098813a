"""The bolt a windowed bolt runs in (Storm's WindowedBoltExecutor; "executor" means
something else in squall). A WindowedBolt's ``runner()`` wraps it in one when it is
declared (``TopologyBuilder.set_bolt``).

Per input tuple it finds the timestamp (or takes the arrival time, from the task's
clock), hands the tuple to the WindowManager, runs the user's ``execute(window)`` for each
window that fires, with emits anchored to the window's tuples, and acks tuples as they
leave their last window. Late tuples go to the late-tuple stream if there is one, and are
acked. A task holds at most ``topology.window.max.tuples`` tuples; beyond that a tuple is
failed (and reported).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from squall.components import Bolt, StreamDeclaration
from squall.config import load_defaults
from squall.state.components import Stateful
from squall.tuple import Source, Tuple
from squall.windowing.manager import Fired, WindowManager
from squall.windowing.spec import WindowSpec
from squall.windowing.window import Window

if TYPE_CHECKING:
    from squall.windowing.bolt import StatefulWindowedBolt, WindowedBolt

WINDOW_KEY = "__window__"
TICK_KEY = "topology.tick.tuple.freq.secs"
MAX_KEY = "topology.window.max.tuples"


def window_max(conf: Mapping[str, Any]) -> int:
    value = conf.get(MAX_KEY)
    return int(load_defaults()[MAX_KEY] if value is None else value)


class WindowCollector:
    """The collector a windowed bolt's ``execute(window)`` emits through: emits without
    anchors are anchored to the window's tuples, as in Storm; the rest passes through."""

    def __init__(self, collector: Any) -> None:
        self._collector = collector
        self.window: list | None = None  # the tuples of the window being executed

    def emit(self, values: Sequence[Any], stream: str = "default", anchors: Any = None) -> tuple[int, ...]:
        return self._collector.emit(values, stream, self.window if anchors is None else anchors)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default",
                    anchors: Any = None) -> tuple[int, ...]:
        return self._collector.emit_direct(task, values, stream, self.window if anchors is None else anchors)

    def ack(self, tup: Tuple) -> None:
        self._collector.ack(tup)

    def fail(self, tup: Tuple) -> None:
        self._collector.fail(tup)

    def report_error(self, error: BaseException | str) -> None:
        self._collector.report_error(error)


class WindowedBoltRunner(Bolt):
    def __init__(self, bolt: WindowedBolt, spec: WindowSpec) -> None:
        self.bolt, self.spec = bolt, spec

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.bolt).__name__})"

    # -- building ---------------------------------------------------------------------------
    def declare_output_fields(self, declarer: Any) -> None:
        self.bolt.declare_output_fields(declarer)

    def component_config(self) -> dict[str, Any]:
        conf = dict(self.bolt.component_config() or {})
        tick = self.spec.tick_period()
        if tick:
            conf[TICK_KEY] = tick
        return conf

    def check_in_topology(self, id: str, inputs: Sequence[Any], streams: dict[str, dict],
                          config: Mapping[str, Any]) -> None:
        """Build-time checks that need the inputs: the timestamp field, the late stream's
        fields (declared here), and a count window's size against the bound."""
        spec = self.spec
        seen = []
        for sub in inputs:
            decl = streams.get(sub.component, {}).get(sub.stream)
            if decl is None:
                continue  # the builder reports the unknown subscription
            if spec.event_time and spec.timestamp_field not in decl.fields:
                raise ValueError(f"timestamp field {spec.timestamp_field!r} is not a field of its input "
                                 f"{sub.component}/{sub.stream} (fields: {list(decl.fields)})")
            seen.append(decl.fields)
        if spec.late_stream is not None:
            if spec.late_stream in streams[id]:
                raise ValueError(f"late-tuple stream {spec.late_stream!r} is declared by the bolt too")
            if not seen or len(set(seen)) > 1:
                raise ValueError("a late-tuple stream carries the input tuples as they are: its inputs "
                                 "must all have the same fields")
            streams[id][spec.late_stream] = StreamDeclaration(seen[0], False)
        if spec.counted:
            need = int(WindowSpec.size(spec.length) + WindowSpec.size(spec.slide))
            limit = window_max(config)
            if need > limit:
                raise ValueError(f"a count window of {int(WindowSpec.size(spec.length))} sliding by "
                                 f"{int(WindowSpec.size(spec.slide))} holds up "
                                 f"to {need} tuples, more than {MAX_KEY} ({limit})")

    # -- running ----------------------------------------------------------------------------
    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.context = context
        self._time = context.clock.time  # processing time: the arrival time of a tuple
        self.manager = self._new_manager()
        self.max_tuples = window_max(conf)
        self.batch = False  # set by a batch run: all input first, then end_of_input
        self.late = self.bad = self.refused = 0
        self._sources: dict[tuple, Source] = {}
        self.window_collector = WindowCollector(collector)
        self.bolt.prepare(conf, context, self.window_collector)

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            self._run(self.manager.advance(self._time()))
            return
        coll, spec = self.collector, self.spec
        if len(self.manager) >= self.max_tuples and not self.batch:
            self.refused += 1
            coll.report_error(f"window full: {len(self.manager)} tuples held ({MAX_KEY}); "
                              f"tuple from {tup.source_component}/{tup.source_stream} failed")
            coll.fail(tup)
            return
        if spec.event_time:
            ts = tup.get(spec.timestamp_field)  # type: ignore[arg-type]  # set: event time
            if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not math.isfinite(ts):
                self.bad += 1
                coll.report_error(f"tuple from {tup.source_component}/{tup.source_stream} has timestamp "
                                  f"{ts!r:.40}, not a number of seconds: dropped")
                coll.ack(tup)
                return
            late, fired = self.manager.add(tup, ts, (tup.source.component, tup.source.stream),
                                           not self.batch or self.bolt.batch_watermark)
        else:
            late, fired = self.manager.add(tup, self._time())
        if late:
            self.late += 1
            if spec.late_stream is not None:
                coll.emit(list(tup.values), spec.late_stream, anchors=tup)
            coll.ack(tup)
        if fired:
            self._run(fired)

    def _new_manager(self) -> WindowManager:
        manager = WindowManager(self.spec)
        if self.spec.event_time:
            manager.expect([(c, s) for c, s in self.context.this_sources()
                            if not c.startswith("__") and not s.startswith("__")])
        return manager

    def _run(self, fired: list[Fired]) -> None:
        coll, wcoll = self.collector, self.window_collector
        for f in fired:
            tuples = [e.tup for e in f.entries]
            window = Window(tuples, [e.tup for e in f.new], [e.tup for e in f.expired], f.start, f.end)
            wcoll.window = tuples  # plain emits are anchored to the window, as in Storm
            try:
                self.bolt.execute(window)
            except Exception as exc:
                coll.report_error(exc)
                for t in tuples:
                    coll.fail(t)
            finally:
                wcoll.window = None
            for e in f.evicted:
                coll.ack(e.tup)

    def end_of_input(self) -> None:
        """A bounded input has ended (batch runs): fire every window left. In a batch run
        event time waits for the whole input, so no tuple is late and every window holds
        what a live run without late tuples would give it."""
        self._run(self.manager.flush())

    def cleanup(self) -> None:
        self.bolt.cleanup()

    # -- window contents as state -----------------------------------------------------------
    @staticmethod
    def _encode(tup: Tuple) -> list:
        s = tup.source
        return [s.component, s.task, s.stream, tup.values]

    def _decode(self, row: Any) -> Tuple:
        component, task, stream, values = row
        key = (component, task, stream)
        src = self._sources.get(key)
        if src is None:
            fields = self.context.component_output_fields(component, stream)
            src = self._sources[key] = Source(component, task, stream, fields)
        if not isinstance(values, list) or len(values) != len(src.fields):
            raise ValueError(f"window entry from {component}/{stream} does not match its fields")
        return Tuple(values, src)


class StatefulWindowedBoltRunner(Stateful, WindowedBoltRunner):
    """Also saves the window's contents in the bolt's state at every checkpoint."""

    bolt: StatefulWindowedBolt

    def init_state(self, state: Any) -> None:
        self.state = state
        self.manager = self._new_manager()
        snap = state.get(WINDOW_KEY)
        if snap is not None:
            self.manager.restore(snap, self._decode)
        self.bolt.init_state(state)

    def pre_prepare(self, txid: int) -> None:
        self.state.put(WINDOW_KEY, self.manager.snapshot(self._encode))
        self.bolt.pre_prepare(txid)

    def pre_commit(self, txid: int) -> None:
        self.bolt.pre_commit(txid)

    def pre_rollback(self) -> None:
        self.bolt.pre_rollback()
