"""Streams: what a pipeline is written with (Storm's ``Stream``, ``PairStream`` and
``StreamState``, with Python names). Each call adds a step to the builder's pipeline and
returns the stream of its output; nothing runs until the topology it builds does.

Types follow the values: ``Stream[T]`` carries values of type T, ``PairStream[K, V]``
carries (key, value) pairs and has the keyed steps, so a type checker sees what every
function is handed and what each step gives.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar, overload

from squall.components import Component
from squall.streams import steps as k
from squall.streams.aggregators import Aggregator, Collecting, Counting, Fold, is_aggregator
from squall.streams.steps import PipelineError, Step
from squall.streams.windows import Window

if TYPE_CHECKING:
    from squall.streams.builder import StreamBuilder

T = TypeVar("T")
R = TypeVar("R")
K = TypeVar("K")
V = TypeVar("V")
V1 = TypeVar("V1")
K2 = TypeVar("K2")
V2 = TypeVar("V2")

_NEEDS_PAIRS = {"aggregate_by_key", "reduce_by_key", "group_by_key", "count_by_key", "map_values",
                "flat_map_values", "join", "left_outer_join", "right_outer_join", "full_outer_join",
                "co_group_by_key", "update_state_by_key"}


def _callable(fn: Any, what: str) -> Any:
    if not callable(fn):
        raise TypeError(f"{what} takes a function, got {type(fn).__name__}")
    return fn


class Stream(Generic[T]):
    """A stream of values of type T."""

    def __init__(self, builder: StreamBuilder, step: Step) -> None:
        self._builder, self._step = builder, step

    def _add(self, kind: str, fn: Any = None, *, pair: bool = False, name: str | None = None,
             parents: list[Step] | None = None, **args: Any) -> Step:
        return self._builder._add(kind, parents or [self._step], fn, pair=pair, name=name, args=args)

    def _same(self, step: Step) -> Self:
        return type(self)(self._builder, step)

    # -- one value at a time ----------------------------------------------------------------
    def filter(self, predicate: Callable[[T], bool], *, name: str | None = None) -> Self:
        """The values for which ``predicate`` is true."""
        return self._same(self._add(k.FILTER, _callable(predicate, "filter"), pair=self._step.pair, name=name))

    def map(self, fn: Callable[[T], R], *, name: str | None = None) -> Stream[R]:
        """``fn(value)`` for every value."""
        return Stream(self._builder, self._add(k.MAP, _callable(fn, "map"), name=name))

    def flat_map(self, fn: Callable[[T], Iterable[R]], *, name: str | None = None) -> Stream[R]:
        """Every value of ``fn(value)``, for every value."""
        return Stream(self._builder, self._add(k.FLAT_MAP, _callable(fn, "flat_map"), name=name))

    def peek(self, fn: Callable[[T], object], *, name: str | None = None) -> Self:
        """The same values; ``fn`` sees each as it passes (for logging, say)."""
        return self._same(self._add(k.PEEK, _callable(fn, "peek"), pair=self._step.pair, name=name))

    def for_each(self, fn: Callable[[T], object], *, name: str | None = None) -> None:
        """Call ``fn`` on every value; the end of this branch of the pipeline."""
        self._add(k.FOR_EACH, _callable(fn, "for_each"), name=name)

    def print(self, *, name: str | None = None) -> None:
        """Print every value (to the worker's output, which its log keeps)."""
        self._add(k.FOR_EACH, print, name=name or "print")

    def branch(self, *predicates: Callable[[T], bool], name: str | None = None) -> list[Self]:
        """One stream per predicate: a value goes to the first whose predicate is true, and
        to none if none is."""
        if not predicates:
            raise TypeError("branch takes at least one predicate")
        for p in predicates:
            _callable(p, "branch")
        step = self._add(k.BRANCH, list(predicates), pair=self._step.pair, name=name)
        return [self._same(self._builder._add(k.BRANCH_OUT, [step], None, pair=self._step.pair,
                                              name=f"{step.label}{i}", args={"index": i}))
                for i in range(len(predicates))]

    def repartition(self, parallelism: int, *, name: str | None = None) -> Self:
        """The steps after this one run in ``parallelism`` tasks (values spread evenly)."""
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
            raise ValueError(f"repartition takes a number of tasks >= 1, got {parallelism!r}")
        step = self._builder._add(k.REPARTITION, [self._step], None, pair=self._step.pair, name=name,
                                  parallelism=parallelism)
        return self._same(step)

    # -- keys -------------------------------------------------------------------------------
    def key_by(self, fn: Callable[[T], K], *, name: str | None = None) -> PairStream[K, T]:
        """(``fn(value)``, value) pairs: the value keyed by ``fn``."""
        return PairStream(self._builder, self._add(k.KEY_BY, _callable(fn, "key_by"), pair=True, name=name))

    def map_to_pair(self, fn: Callable[[T], tuple[K, V]], *, name: str | None = None) -> PairStream[K, V]:
        """The (key, value) pair ``fn(value)`` for every value."""
        return PairStream(self._builder, self._add(k.MAP_TO_PAIR, _callable(fn, "map_to_pair"), pair=True,
                                                   name=name))

    def flat_map_to_pair(self, fn: Callable[[T], Iterable[tuple[K, V]]], *,
                         name: str | None = None) -> PairStream[K, V]:
        """Every (key, value) pair of ``fn(value)``, for every value."""
        return PairStream(self._builder, self._add(k.FLAT_MAP_TO_PAIR, _callable(fn, "flat_map_to_pair"),
                                                   pair=True, name=name))

    # -- aggregations over the whole stream -------------------------------------------------
    @overload
    def aggregate(self, initial: Aggregator[T, Any, R], /, *, name: str | None = None) -> Stream[R]: ...

    @overload
    def aggregate(self, initial: R, accumulate: Callable[[R, T], R], /, *, name: str | None = None) -> Stream[R]: ...

    def aggregate(self, initial: Any, accumulate: Any = None, /, *, name: str | None = None) -> Stream[Any]:
        """One result over all values (in one task): per window when the stream is
        windowed, else a running result after every value. Takes an ``Aggregator``, or a
        starting value and ``accumulate(acc, value) -> acc``."""
        return Stream(self._builder, self._add(k.AGGREGATE, _aggregator(initial, accumulate), name=name))

    def reduce(self, fn: Callable[[T, T], T], *, name: str | None = None) -> Stream[T]:
        """``fn`` folded over all values (in one task), per window or running."""
        return Stream(self._builder, self._add(k.REDUCE, _callable(fn, "reduce"), name=name))

    def count(self, *, name: str | None = None) -> Stream[int]:
        """How many values (in one task), per window or running."""
        return Stream(self._builder, self._add(k.AGGREGATE, Counting(), name=name or "count"))

    # -- windows ----------------------------------------------------------------------------
    def window(self, window: Window, *, name: str | None = None) -> Self:
        """The same values, in windows: the aggregations, joins and groupings after this
        step work per window and emit when it closes."""
        if not isinstance(window, Window):
            raise TypeError("window takes TumblingWindows.of(...) or SlidingWindows.of(...)")
        step = self._builder._add(k.WINDOW, [self._step], window, pair=self._step.pair, name=name)
        if window.event_time and not step.timed:
            raise PipelineError(step, "an event-time window needs timestamps, and this stream has none: give "
                                      "its source one, new_stream(spout, timestamp='FIELD') (or a function "
                                      "of the tuple), or drop with_event_time() for processing time")
        return self._same(step)

    def late(self, *, name: str | None = None) -> Self:
        """The values that came too late for this window (event time): older than its
        watermark when they arrived. Call it on the stream ``window`` returned."""
        w = self._step
        if w.kind != k.WINDOW:
            raise PipelineError(self._builder._probe(k.LATE), "late() applies to the stream window(...) "
                                "returned: call it right after window")
        if not w.fn.event_time:
            raise PipelineError(w, "only event-time windows have late values: use "
                                   "window(....with_event_time(lag))")
        step = self._builder._add(k.LATE, [w], None, pair=w.pair, name=name)
        return self._same(step)

    # -- state ------------------------------------------------------------------------------
    def state_query(self, state: StreamState[T, V], *, name: str | None = None) -> PairStream[T, V]:
        """(value, state) for every value that is a key of ``state`` with a state."""
        if not isinstance(state, StreamState):
            raise TypeError("state_query takes what update_state_by_key returned")
        parents = [self._step]
        if self._step.kind in (k.SOURCE, k.WINDOW, k.REPARTITION, k.LATE):  # routed by value: a bolt's field
            parents = [self._builder._add(k.MAP, parents, _identity, pair=self._step.pair, name="values")]
        return PairStream(self._builder, self._add(k.STATE_QUERY, None, pair=True, name=name, parents=parents,
                                                   state=state._step))

    # -- out --------------------------------------------------------------------------------
    def to(self, bolt: Component, parallelism: int = 1, *, name: str | None = None) -> None:
        """Send the values to a bolt of your own (``parallelism`` tasks): it gets tuples
        with the fields ``value`` (``key``, ``value`` for pairs), plus ``ts`` with event time."""
        if not isinstance(bolt, Component):
            raise TypeError(f"to() takes a bolt, got {type(bolt).__name__}")
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
            raise ValueError(f"to() takes a number of tasks >= 1, got {parallelism!r}")
        step = self._step
        if step.kind in (k.SOURCE, k.WINDOW, k.REPARTITION, k.LATE):
            step = self._builder._add(k.MAP, [step], _identity, pair=step.pair, name="values")
        self._builder._add(k.SINK, [step], bolt, pair=step.pair, name=name, parallelism=parallelism)

    if not TYPE_CHECKING:  # for type checkers the keyed steps exist on PairStream only
        def __getattr__(self, attr: str) -> Any:
            if attr in _NEEDS_PAIRS:
                raise PipelineError(self._builder._probe(attr),
                                    f"{attr} needs (key, value) pairs, and this stream has plain values: key it "
                                    "first with key_by(fn) or map_to_pair(fn)")
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")


class PairStream(Stream[tuple[K, V]], Generic[K, V]):
    """A stream of (key, value) pairs: the keyed steps, which see each key's values
    together (the pairs are partitioned by key when a step needs it)."""

    def map_values(self, fn: Callable[[V], R], *, name: str | None = None) -> PairStream[K, R]:
        """(key, ``fn(value)``) for every pair."""
        return PairStream(self._builder, self._add(k.MAP_VALUES, _callable(fn, "map_values"), pair=True, name=name))

    def flat_map_values(self, fn: Callable[[V], Iterable[R]], *, name: str | None = None) -> PairStream[K, R]:
        """(key, v) for every v of ``fn(value)``, for every pair."""
        return PairStream(self._builder, self._add(k.FLAT_MAP_VALUES, _callable(fn, "flat_map_values"),
                                                   pair=True, name=name))

    @overload
    def aggregate_by_key(self, initial: Aggregator[V, Any, R], /, *,
                         name: str | None = None) -> PairStream[K, R]: ...

    @overload
    def aggregate_by_key(self, initial: R, accumulate: Callable[[R, V], R], /, *,
                         name: str | None = None) -> PairStream[K, R]: ...

    def aggregate_by_key(self, initial: Any, accumulate: Any = None, /, *,
                         name: str | None = None) -> PairStream[K, Any]:
        """(key, result) per key: per window when the stream is windowed, else running."""
        return PairStream(self._builder, self._add(k.AGGREGATE_BY_KEY, _aggregator(initial, accumulate),
                                                   pair=True, name=name))

    def reduce_by_key(self, fn: Callable[[V, V], V], *, name: str | None = None) -> PairStream[K, V]:
        """(key, ``fn`` folded over its values) per key, per window or running."""
        return PairStream(self._builder, self._add(k.REDUCE_BY_KEY, _callable(fn, "reduce_by_key"), pair=True,
                                                   name=name))

    def count_by_key(self, *, name: str | None = None) -> PairStream[K, int]:
        """(key, how many values) per key, per window or running."""
        return PairStream(self._builder, self._add(k.AGGREGATE_BY_KEY, Counting(), pair=True,
                                                   name=name or "count_by_key"))

    def group_by_key(self, *, name: str | None = None) -> PairStream[K, list[V]]:
        """(key, its values in a list) per key and window."""
        step = self._add(k.GROUP_BY_KEY, Collecting(), pair=True, name=name)
        return PairStream(self._builder, step)

    # -- two streams, within windows ---------------------------------------------------------
    @overload
    def join(self, other: PairStream[K, V1], /, *, name: str | None = None) -> PairStream[K, tuple[V, V1]]: ...

    @overload
    def join(self, other: PairStream[K, V1], joiner: Callable[[V, V1], R], /, *,
             name: str | None = None) -> PairStream[K, R]: ...

    def join(self, other: PairStream[K, Any], joiner: Any = None, /, *, name: str | None = None) -> PairStream[K, Any]:
        """(key, (v, v1)) for every pair of values with the same key in the same window of
        both streams (``joiner(v, v1)`` instead of the tuple, if given)."""
        return self._join(other, joiner, "inner", name)

    @overload
    def left_outer_join(self, other: PairStream[K, V1], /, *,
                        name: str | None = None) -> PairStream[K, tuple[V, V1 | None]]: ...

    @overload
    def left_outer_join(self, other: PairStream[K, V1], joiner: Callable[[V, V1 | None], R], /, *,
                        name: str | None = None) -> PairStream[K, R]: ...

    def left_outer_join(self, other: PairStream[K, Any], joiner: Any = None, /, *,
                        name: str | None = None) -> PairStream[K, Any]:
        """A join that also gives (key, (v, None)) for a value of this stream with no match."""
        return self._join(other, joiner, "left", name)

    @overload
    def right_outer_join(self, other: PairStream[K, V1], /, *,
                         name: str | None = None) -> PairStream[K, tuple[V | None, V1]]: ...

    @overload
    def right_outer_join(self, other: PairStream[K, V1], joiner: Callable[[V | None, V1], R], /, *,
                         name: str | None = None) -> PairStream[K, R]: ...

    def right_outer_join(self, other: PairStream[K, Any], joiner: Any = None, /, *,
                         name: str | None = None) -> PairStream[K, Any]:
        """A join that also gives (key, (None, v1)) for a value of the other stream with no match."""
        return self._join(other, joiner, "right", name)

    @overload
    def full_outer_join(self, other: PairStream[K, V1], /, *,
                        name: str | None = None) -> PairStream[K, tuple[V | None, V1 | None]]: ...

    @overload
    def full_outer_join(self, other: PairStream[K, V1], joiner: Callable[[V | None, V1 | None], R], /, *,
                        name: str | None = None) -> PairStream[K, R]: ...

    def full_outer_join(self, other: PairStream[K, Any], joiner: Any = None, /, *,
                        name: str | None = None) -> PairStream[K, Any]:
        """Left and right outer join at once."""
        return self._join(other, joiner, "full", name)

    def co_group_by_key(self, other: PairStream[K, V1], *,
                        name: str | None = None) -> PairStream[K, tuple[list[V], list[V1]]]:
        """(key, (this stream's values, the other's)) per key in a window of both."""
        return PairStream(self._builder, self._two(k.CO_GROUP, other, None, name))

    def _join(self, other: PairStream[K, Any], joiner: Any, how: str, name: str | None) -> PairStream[K, Any]:
        if joiner is not None:
            _callable(joiner, "join")
        return PairStream(self._builder, self._two(k.JOIN, other, joiner, name, how=how))

    def _two(self, kind: str, other: Any, fn: Any, name: str | None, **args: Any) -> Step:
        if not isinstance(other, PairStream):
            raise TypeError(f"{kind} takes another PairStream (key it with key_by or map_to_pair)")
        if other._builder is not self._builder:
            raise PipelineError(self._builder._probe(kind), "the other stream belongs to another StreamBuilder")
        return self._add(kind, fn, pair=True, name=name, parents=[self._step, other._step], **args)

    # -- state ------------------------------------------------------------------------------
    def update_state_by_key(self, initial: R, update: Callable[[R, V], R], *,
                            name: str | None = None) -> StreamState[K, R]:
        """Per key, a state that ``update(state, value)`` replaces for every value (starting
        from ``initial``), kept in checkpointed state: updated exactly once, also when workers
        fail. Its stream gives (key, new state) after every update; ``state_query`` reads it."""
        _callable(update, "update_state_by_key")
        step = self._add(k.UPDATE_STATE, Fold(initial, update), pair=True, name=name)
        return StreamState(PairStream(self._builder, step))


class StreamState(Generic[K, V]):
    """The state ``update_state_by_key`` keeps: query it with ``Stream.state_query``."""

    def __init__(self, stream: PairStream[K, V]) -> None:
        self._stream = stream
        self._step = stream._step

    def to_pair_stream(self) -> PairStream[K, V]:
        """(key, new state) after every update."""
        return self._stream


def _identity(value: Any) -> Any:
    return value


def _aggregator(initial: Any, accumulate: Any) -> Any:
    if accumulate is None:
        if not is_aggregator(initial):
            raise TypeError("aggregate takes an Aggregator (init, apply, result) or a starting value "
                            "and a function accumulate(acc, value)")
        return initial
    return Fold(initial, _callable(accumulate, "aggregate"))


__all__ = ["PairStream", "Stream", "StreamState"]
