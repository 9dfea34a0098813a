"""Windowed bolts: what users subclass (Storm's BaseWindowedBolt, with Python names)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from squall.components import Component
from squall.state.components import Stateful
from squall.windowing.runner import StatefulWindowedBoltRunner, WindowedBoltRunner
from squall.windowing.spec import Count, Duration, Size, WindowSpec
from squall.windowing.window import Window

if TYPE_CHECKING:
    from squall.collector import OutputCollector
    from squall.context import TopologyContext


class WindowedBolt(Component):
    """A bolt that processes windows of tuples instead of single tuples.

    Set the window with ``with_window`` (or ``with_tumbling_window``), and for event time
    ``with_timestamp_field``, ``with_lateness`` and ``with_late_stream``. ``execute(window)``
    runs when a window fires; emits are anchored to the window's tuples unless you pass
    anchors (as in Storm), and each tuple is acked when it leaves its last window: do not
    ack or fail tuples yourself.
    """

    _window_length: Size | None = None
    _window_slide: Size | None = None
    _timestamp_field: str | None = None
    _lateness: float = 0.0
    _late_stream: str | None = None
    # In a batch run (spark-run) event time waits for the whole input, so nothing is late.
    # True: the watermark moves as tuples arrive, as in a live run, so that the same tuples
    # are late in both when they arrive in the same order (squall.streams' windows, whose
    # input comes from one upstream task in source order when late values matter).
    batch_watermark = False

    def with_window(self, length: Size, slide: Size | None = None) -> "WindowedBolt":
        """A sliding window (``slide`` < ``length``) or a tumbling one (``slide`` omitted)."""
        self._window_length, self._window_slide = length, slide or length
        return self

    def with_tumbling_window(self, length: Size) -> "WindowedBolt":
        return self.with_window(length, length)

    def with_timestamp_field(self, name: str) -> "WindowedBolt":
        """Event time: windows follow this field (seconds) of every input tuple."""
        self._timestamp_field = name
        return self

    def with_lateness(self, lateness: Duration | float) -> "WindowedBolt":
        """How far timestamps may be out of order: the watermark trails the greatest
        timestamp by this much. Older tuples are late."""
        self._lateness = lateness.secs if isinstance(lateness, Duration) else float(lateness)
        return self

    def with_late_stream(self, stream: str) -> "WindowedBolt":
        """Emit late tuples on this stream (declared for you, with the input's fields)
        instead of only counting them."""
        self._late_stream = stream
        return self

    def window_spec(self) -> WindowSpec:
        """The window as set; raises ValueError naming the problem."""
        if self._window_length is None or self._window_slide is None:
            raise ValueError("no window set: call with_window(length, slide) on the bolt")
        return WindowSpec(self._window_length, self._window_slide, self._timestamp_field,
                          self._lateness, self._late_stream)

    def runner(self) -> WindowedBoltRunner:
        """The bolt this one runs in (asked by ``TopologyBuilder.set_bolt``)."""
        return WindowedBoltRunner(self, self._checked_spec())

    def _checked_spec(self) -> WindowSpec:
        try:
            return self.window_spec()
        except ValueError as exc:
            raise ValueError(f"windowed bolt {type(self).__name__}: {exc}") from None

    def prepare(self, conf: dict[str, Any], context: "TopologyContext", collector: "OutputCollector") -> None:
        self.collector = collector

    def execute(self, window: Window) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        """The bolt is shutting down."""


class StatefulWindowedBolt(Stateful, WindowedBolt):
    """A windowed bolt with checkpointed state; the window's contents are checkpointed
    with it, so after a rollback windows fire exactly as if nothing had failed. The state
    key ``__window__`` is the window's own."""

    def runner(self) -> StatefulWindowedBoltRunner:
        return StatefulWindowedBoltRunner(self, self._checked_spec())


__all__ = ["Count", "Duration", "StatefulWindowedBolt", "Window", "WindowedBolt"]
