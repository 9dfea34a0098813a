"""The pipeline as data: one ``Step`` per operator call, linked to its parents, with the
line of the user's code that made it (so build errors can name it).

Streams (squall.streams.stream) add steps; the planner (squall.streams.planner) cuts
them into spouts and bolts; the bolts (squall.streams.bolts) run them.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from squall.topology import TopologyError

# Kinds of steps.
SOURCE = "source"
MAP, FLAT_MAP, FILTER, PEEK, FOR_EACH = "map", "flat_map", "filter", "peek", "for_each"
BRANCH, BRANCH_OUT = "branch", "branch_out"
KEY_BY, MAP_TO_PAIR, FLAT_MAP_TO_PAIR = "key_by", "map_to_pair", "flat_map_to_pair"
MAP_VALUES, FLAT_MAP_VALUES = "map_values", "flat_map_values"
AGGREGATE, REDUCE = "aggregate", "reduce"
AGGREGATE_BY_KEY, REDUCE_BY_KEY, GROUP_BY_KEY = "aggregate_by_key", "reduce_by_key", "group_by_key"
WINDOW, LATE, REPARTITION = "window", "late", "repartition"
JOIN, CO_GROUP = "join", "co_group_by_key"
UPDATE_STATE, STATE_QUERY = "update_state_by_key", "state_query"
SINK = "to"

# Steps that take one value at a time and keep nothing between values.
PER_VALUE = frozenset({MAP, FLAT_MAP, FILTER, PEEK, FOR_EACH, BRANCH, BRANCH_OUT, KEY_BY, MAP_TO_PAIR,
                       FLAT_MAP_TO_PAIR, MAP_VALUES, FLAT_MAP_VALUES})
# Per-value steps that give exactly one value for each value (a count window may move past them).
ONE_FOR_ONE = frozenset({MAP, PEEK, KEY_BY, MAP_TO_PAIR, MAP_VALUES})
KEYED = frozenset({AGGREGATE_BY_KEY, REDUCE_BY_KEY, GROUP_BY_KEY})
GLOBAL = frozenset({AGGREGATE, REDUCE})
# Steps after which values carry the same key as before (a key partition still holds).
KEEPS_KEY = frozenset({FILTER, PEEK, FOR_EACH, BRANCH, BRANCH_OUT, MAP_VALUES, FLAT_MAP_VALUES,
                       AGGREGATE_BY_KEY, REDUCE_BY_KEY, GROUP_BY_KEY, JOIN, CO_GROUP, UPDATE_STATE})
# Steps that hold values until their window ends (or, without a window, keep a running result).
HOLDS = KEYED | GLOBAL | {JOIN, CO_GROUP}

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


class PipelineError(TopologyError):
    """A pipeline that cannot be built; the message names the step and its line."""

    def __init__(self, step: Step | None, problem: str) -> None:
        super().__init__(f"{step.describe()}: {problem}" if step is not None else problem)
        self.step = step


def call_site() -> str:
    """``file:line`` of the nearest caller outside squall.streams: the user's line."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_HERE):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


class Step:
    """One operator of a pipeline. ``fn`` is the user's function (or aggregator, or spout,
    or bolt); ``args`` what else the kind needs; ``pair``: its values are (key, value)
    pairs; ``timed``: they carry event timestamps; ``parallelism``: tasks of what runs it."""

    __slots__ = ("id", "kind", "fn", "args", "parents", "children", "parallelism", "where", "name",
                 "pair", "timed")
    parallelism: int
    timed: bool

    def __init__(self, id: int, kind: str, parents: list[Step], fn: Any = None, *, pair: bool = False,
                 timed: bool | None = None, parallelism: int | None = None, name: str | None = None,
                 args: dict[str, Any] | None = None, where: str | None = None) -> None:
        self.id, self.kind, self.fn = id, kind, fn
        self.args = args or {}
        self.parents = parents
        self.children: list[Step] = []
        for p in parents:
            p.children.append(self)
        self.parallelism = parallelism if parallelism is not None else (parents[0].parallelism if parents else 1)
        self.where = where or call_site()
        self.name = name
        self.pair = pair
        self.timed = timed if timed is not None else all(p.timed for p in parents) and bool(parents)

    @property
    def label(self) -> str:
        """How component names and messages call it: the user's name, else its kind."""
        return self.name or self.kind

    def describe(self) -> str:
        named = f" {self.name!r}" if self.name else ""
        return f"{self.kind}{named} at {self.where}"

    def __repr__(self) -> str:
        return f"Step({self.id}, {self.describe()})"
