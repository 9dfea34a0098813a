"""Window definitions for stream pipelines (Storm's ``TumblingWindows`` and
``SlidingWindows``): count or time, tumbling or sliding, processing or event time.

A window here only describes; it runs as one of squall's windowed bolts
(``squall.windowing``), whose ``WindowSpec`` it becomes when the pipeline is built.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from squall.windowing.spec import Count, Duration, Size, WindowSpec

TIMESTAMP_FIELD = "ts"  # the field every stream with event time carries its timestamps in


@dataclass(frozen=True)
class Window:
    """A window of a stream: ``length`` and ``slide`` are both ``Count(n)`` or both
    ``Duration(secs)``; with ``event_time`` the values' own timestamps (``new_stream(...,
    timestamp=...)``) decide which windows they fall in, and a value older than the
    watermark (the greatest timestamp seen less ``lag``) is late."""

    length: Size
    slide: Size
    event_time: bool = False
    lag: float = 0.0

    def __post_init__(self) -> None:
        # The same checks as squall's windowed bolts, made when the window is written.
        WindowSpec(self.length, self.slide, TIMESTAMP_FIELD if self.event_time else None, self.lag)
        if not isinstance(self.lag, (int, float)) or not math.isfinite(self.lag) or self.lag < 0:
            raise ValueError(f"lag must be a number of seconds >= 0, got {self.lag!r}")

    def with_event_time(self, lag: Duration | float = 0.0) -> Window:
        """The same window over event time, allowing values to arrive ``lag`` out of order."""
        return replace(self, event_time=True, lag=lag.secs if isinstance(lag, Duration) else float(lag))

    @property
    def counted(self) -> bool:
        return isinstance(self.length, Count)

    def spec(self, late_stream: str | None = None) -> WindowSpec:
        """The windowed bolt's spec; event time reads the ``ts`` field every stream carries."""
        return WindowSpec(self.length, self.slide, TIMESTAMP_FIELD if self.event_time else None,
                          self.lag, late_stream)

    def describe(self) -> str:
        kind = "tumbling" if self.length == self.slide else "sliding"
        size = _size(self.length) if self.length == self.slide else f"{_size(self.length)} every {_size(self.slide)}"
        time = f", event time, lag {self.lag:g}s" if self.event_time else ""
        return f"{kind} window of {size}{time}"


def _size(s: Size) -> str:
    return f"{s.n} values" if isinstance(s, Count) else f"{s.secs:g}s"


class TumblingWindows:
    """Windows one after another, each value in exactly one."""

    @staticmethod
    def of(length: Size) -> Window:
        return Window(length, length)


class SlidingWindows:
    """Windows of ``length`` starting every ``slide``: a value is in length/slide windows."""

    @staticmethod
    def of(length: Size, slide: Size) -> Window:
        return Window(length, slide)


__all__ = ["Count", "Duration", "SlidingWindows", "TumblingWindows", "Window"]
