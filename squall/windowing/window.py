"""What a windowed bolt's ``execute`` gets: one window of tuples."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from squall.tuple import Tuple


class Window:
    """What ``execute`` gets: ``tuples`` in the window (in timestamp, else arrival, order),
    ``new`` (in no earlier window), ``expired`` (left since the previous window), and the
    window's ``start`` and ``end`` (seconds for time windows, ``end - length <= ts < end``;
    for count windows the positions of its first and one past its last tuple)."""

    __slots__ = ("tuples", "new", "expired", "start", "end")

    def __init__(self, tuples: list["Tuple"], new: list["Tuple"], expired: list["Tuple"],
                 start: float, end: float) -> None:
        self.tuples, self.new, self.expired, self.start, self.end = tuples, new, expired, start, end

    def __iter__(self) -> Iterator["Tuple"]:
        return iter(self.tuples)

    def __len__(self) -> int:
        return len(self.tuples)

    def __repr__(self) -> str:
        return f"Window([{self.start}, {self.end}), {len(self.tuples)} tuples, {len(self.new)} new)"
