"""The bolts a pipeline runs in: ordinary squall bolts around a ``Program``.

- ``StreamBolt``: fused steps, value by value. A BasicBolt: every emit is anchored to the
  input being executed and the input is acked after it, or failed when a step raised, so
  a failed value replays from its spout.
- ``StreamWindowBolt``: a windowed bolt (squall.windowing): each window's values are
  pushed through its steps, then the holding steps emit; emits are anchored to the
  window's tuples, which are acked as they leave their last window.
- ``StatefulStreamBolt``: a BasicBolt with checkpointed state (squall.state), for
  ``update_state_by_key`` and the ``state_query`` steps that read it.
- ``StatefulStreamWindowBolt``: a windowed bolt in a checkpointed pipeline: its windows'
  contents are saved with every checkpoint, so they roll back with everything else.
"""
from __future__ import annotations

import math
from typing import Any

from squall.components import BasicBolt, OutputFieldsDeclarer
from squall.state.components import StatefulBolt
from squall.streams.program import Program, StepError, compile_program
from squall.windowing.bolt import StatefulWindowedBolt, WindowedBolt
from squall.windowing.spec import WindowSpec
from squall.windowing.window import Window


class _Runs:
    """What the stream bolts share: outputs, compiling the program, naming a failed step."""

    program: Program
    windowed = False

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for stream, fields in self.program.outputs.items():
            declarer.declare(fields, stream)

    def _start(self, collector: Any) -> None:
        self.ts: Any = None
        self.state: Any = getattr(self, "state", None)
        self._entries, self._finish = compile_program(self.program, self, collector.emit, self.windowed)
        self._only = next(iter(self._entries.values())) if len(self._entries) == 1 else None

    def _failed(self, exc: Exception) -> StepError:
        where = self.program.step_for(exc)
        what = f"{where} raised" if where else f"a step of {self.program.component} raised"
        return StepError(f"{what} {type(exc).__name__}: {exc}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.program.component})"


class StreamBolt(_Runs, BasicBolt):
    def __init__(self, program: Program) -> None:
        self.program = program

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self._start(collector)

    def execute(self, tuple: Any) -> None:
        entry = self._only or self._entries[tuple.source.stream]
        try:
            entry(tuple)
        except Exception as exc:
            raise self._failed(exc) from exc


class StatefulStreamBolt(_Runs, StatefulBolt):
    _auto_anchor = True  # a BasicBolt's acking, with state

    def __init__(self, program: Program) -> None:
        self.program = program

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self._start(collector)

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Any) -> None:
        entry = self._only or self._entries[tuple.source.stream]
        try:
            entry(tuple)
        except Exception as exc:
            raise self._failed(exc) from exc


class _Windowed(_Runs):
    windowed = True
    batch_watermark = True  # spark-run finds the same late values as a live run (squall.windowing.bolt)

    def _set_window(self, spec: WindowSpec) -> None:
        bolt: Any = self  # a WindowedBolt (the classes below)
        bolt.with_window(spec.length, spec.slide)
        if spec.timestamp_field is not None:
            bolt.with_timestamp_field(spec.timestamp_field).with_lateness(spec.lateness)
        if spec.late_stream is not None:
            bolt.with_late_stream(spec.late_stream)

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self._start(collector)

    def execute(self, window: Window) -> None:
        entries, only = self._entries, self._only
        timed = self.program.timed
        latest = -math.inf
        try:
            for t in window.tuples:
                (only or entries[t.source.stream])(t)
                if timed and self.ts is not None and self.ts > latest:
                    latest = self.ts
            if timed:
                # What a window gives carries the latest timestamp in it: a later window
                # downstream of the same length puts it in the same window.
                self.ts = latest if latest != -math.inf else window.end
            for finish in self._finish:
                finish()
        except Exception as exc:
            raise self._failed(exc) from exc


class StreamWindowBolt(_Windowed, WindowedBolt):
    def __init__(self, program: Program, spec: WindowSpec) -> None:
        self.program = program
        self._set_window(spec)


class StatefulStreamWindowBolt(_Windowed, StatefulWindowedBolt):
    def __init__(self, program: Program, spec: WindowSpec) -> None:
        self.program = program
        self._set_window(spec)

    def init_state(self, state: Any) -> None:
        self.state = state
