"""Window definitions: lengths and sliding intervals in tuples (``Count``) or seconds
(``Duration``), and the checks a window definition must pass on its own."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Count:
    """A number of tuples."""

    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise ValueError(f"Count must be an integer >= 1, got {self.n!r}")


@dataclass(frozen=True)
class Duration:
    """A span of time in seconds (event timestamps are in seconds too)."""

    secs: float

    def __post_init__(self) -> None:
        ok = isinstance(self.secs, (int, float)) and not isinstance(self.secs, bool)
        if not ok or not math.isfinite(self.secs) or self.secs <= 0:
            raise ValueError(f"Duration must be a positive number of seconds, got {self.secs!r}")

    @classmethod
    def seconds(cls, n: float) -> "Duration":
        return cls(n)

    @classmethod
    def minutes(cls, n: float) -> "Duration":
        return cls(n * 60)

    @classmethod
    def millis(cls, n: float) -> "Duration":
        return cls(n / 1000)


Size = Count | Duration


@dataclass(frozen=True)
class WindowSpec:
    """A window: its length, how far it slides (equal to the length: tumbling), and for
    event time the timestamp field, the allowed lateness and the late-tuple stream.

    Time windows end at multiples of the sliding interval and hold the tuples with
    ``end - length <= ts < end``. In event time ``ts`` is the tuple's timestamp field and
    the watermark is the least, over input streams, of the greatest timestamp seen minus
    the lateness; a window fires once the watermark reaches its end, and a tuple older
    than the watermark is late. In processing time ``ts`` is the arrival time. Count
    windows fire every ``slide`` tuples with the last ``length`` ones (in event time, in
    timestamp order as the watermark passes them).
    """

    length: Size
    slide: Size
    timestamp_field: str | None = None
    lateness: float = 0.0
    late_stream: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.length, (Count, Duration)) or not isinstance(self.slide, (Count, Duration)):
            raise ValueError("window length and sliding interval must be Count(n) or Duration(secs)")
        if type(self.length) is not type(self.slide):
            raise ValueError(f"window length {self.length} and sliding interval {self.slide} must both "
                             "be counts or both be durations")
        if self.size(self.length) < self.size(self.slide):
            raise ValueError(f"window length {self.length} is shorter than its sliding interval "
                             f"{self.slide}: tuples between windows would belong to none")
        if self.timestamp_field is None and (self.lateness or self.late_stream):
            raise ValueError("lateness and a late-tuple stream need event time (a timestamp field)")
        if self.timestamp_field is not None and (not isinstance(self.timestamp_field, str)
                                                 or not self.timestamp_field):
            raise ValueError(f"timestamp field must be a field name, got {self.timestamp_field!r}")
        if not isinstance(self.lateness, (int, float)) or not math.isfinite(self.lateness) or self.lateness < 0:
            raise ValueError(f"lateness must be a number of seconds >= 0, got {self.lateness!r}")
        if self.late_stream is not None and (not isinstance(self.late_stream, str) or not self.late_stream
                                             or self.late_stream.startswith("__")):
            raise ValueError(f"bad late-tuple stream id {self.late_stream!r}")

    @staticmethod
    def size(s: Size) -> float:
        return s.n if isinstance(s, Count) else s.secs

    @property
    def counted(self) -> bool:
        return isinstance(self.length, Count)

    @property
    def event_time(self) -> bool:
        return self.timestamp_field is not None

    @property
    def tumbling(self) -> bool:
        return self.length == self.slide

    def span(self) -> float:
        """Seconds a tuple may wait in a time window before it is acked: length + slide +
        lateness (0 for count windows)."""
        if self.counted:
            return 0.0
        return self.size(self.length) + self.size(self.slide) + self.lateness

    def tick_period(self) -> float | None:
        """Tick period a processing-time time window needs to fire without new input."""
        if self.counted or self.event_time:
            return None
        return max(0.01, min(1.0, self.size(self.slide) / 10))
