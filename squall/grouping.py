"""Stream groupings: the declaration (part of a topology) and the chooser (run time).

Fields grouping hashes with ``stable_hash`` (CRC-32 of the msgpack encoding of the key
values), so a key goes to the same task in every run, every process and on Spark. A key
may hold anything a tuple may (squall.values): what msgpack packs itself is packed as it
always was (a key keeps its task across versions), the rest as its extension type, a set's
elements in an order of their own bytes (the same in every process).
"""
from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from squall.registry import Registry
from squall.tuple import Fields
from squall.values import PLAIN, SET

SHUFFLE, FIELDS, ALL, GLOBAL, NONE, DIRECT, LOCAL_OR_SHUFFLE, PARTIAL_KEY, CUSTOM = (
    "shuffle", "fields", "all", "global", "none", "direct", "local_or_shuffle", "partial_key", "custom")


class CustomStreamGrouping:
    """Base for user groupings (Storm's CustomStreamGrouping)."""

    def prepare(self, context: Any, stream: str, target_tasks: list[int]) -> None:
        self.target_tasks = target_tasks

    def choose_tasks(self, task_id: int, values: list) -> Sequence[int]:
        raise NotImplementedError


class Grouping:
    """How a subscribed stream's tuples pick target tasks."""

    __slots__ = ("kind", "fields", "custom")

    def __init__(self, kind: str, fields: Sequence[str] | None = None,
                 custom: CustomStreamGrouping | None = None) -> None:
        self.kind = kind
        self.fields = tuple(fields) if fields is not None else None
        self.custom = custom

    def __getstate__(self) -> tuple[str, tuple[str, ...] | None, CustomStreamGrouping | None]:
        return (self.kind, self.fields, self.custom)

    def __setstate__(self, state: tuple[str, tuple[str, ...] | None, CustomStreamGrouping | None]) -> None:
        self.kind, self.fields, self.custom = state

    def __repr__(self) -> str:
        extra = f"{list(self.fields)}" if self.fields else ""
        return f"{self.kind}({extra})"


def _key_default(obj: Any) -> Any:
    """How a key value msgpack has no type for is packed for hashing."""
    if isinstance(obj, (set, frozenset)):  # iteration order differs between processes
        return msgpack.ExtType(SET, b"".join(sorted(_key_bytes(x) for x in obj)))
    return PLAIN.default(obj)


def _key_bytes(values: Any) -> bytes:
    return msgpack.packb(values, use_bin_type=True, default=_key_default)


def stable_hash(key: Sequence[Any]) -> int:
    """A process-independent hash of key values (Python's own hash of str is salted)."""
    return zlib.crc32(_key_bytes(list(key)))


def fields_task_index(key: Sequence[Any], n: int) -> int:
    """Index into the sorted target tasks for ``key``: the one rule fields grouping follows."""
    return stable_hash(key) % n


Chooser = Callable[[list], tuple[int, ...]]
_CACHE_LIMIT = 65536


@dataclass(frozen=True)
class Targets:
    """What a chooser is made for: the subscribing bolt's tasks (sorted), those in the
    emitter's worker, the emitting task, the stream's declared fields, the emitter's
    context, and the worker's task loads (squall.runtime.load.TaskLoads; None: none kept)."""

    tasks: list[int]
    local: frozenset[int] | set[int]
    source_task: int
    source_fields: Fields
    context: Any = None
    stream: str = "default"
    loads: Any = None


ChooserFactory = Callable[[Grouping, Targets], Chooser]


@dataclass(frozen=True)
class GroupingKind:
    """One grouping, as every reader of a topology knows it.

    ``chooser`` makes, per emitting task, the function from values to target task ids (the
    tuples it returns are shared: callers must not change them). ``fields``: declared with
    field names (``fields``, ``partial_key``). ``direct``: the emitter names the task
    (``emit_direct``), and the stream must be declared direct; no chooser is made.
    ``custom``: declared with a CustomStreamGrouping object. ``any_task``: any target task
    may take any tuple, so a backfill runs the bolt in its producer's Spark stage.
    ``thrift``: the field of Storm's Thrift ``Grouping`` union that names it in a
    streamparse topology (None: streamparse cannot declare it). Flux names it in capitals.
    """

    name: str
    chooser: ChooserFactory | None
    doc: str
    fields: bool = False
    direct: bool = False
    custom: bool = False
    any_task: bool = False
    thrift: str | None = None


# The groupings; a module that adds one registers it here and is named in ``providers``.
GROUPINGS: Registry[GroupingKind] = Registry("grouping", providers=())


def make_chooser(grouping: Grouping, source_fields: Fields, target_tasks: Sequence[int],
                 local_tasks: frozenset[int] | set[int], source_task: int,
                 context: Any = None, stream: str = "default", loads: Any = None) -> Chooser | None:
    """The function from values to target task ids; None for a direct grouping (chosen by the emitter).

    ``loads``: the worker's task loads (squall.runtime.load.TaskLoads) for load-aware
    shuffle and local-or-shuffle; without it they go round-robin, evenly.
    Returned sequences are shared and immutable (tuples): callers must not mutate them.
    """
    kind = GROUPINGS.find(grouping.kind)
    if kind is None:
        raise ValueError(f"unknown grouping {grouping.kind!r}")
    if kind.chooser is None:
        return None
    return kind.chooser(grouping, Targets(sorted(target_tasks), local_tasks, source_task, source_fields, context,
                                          stream, loads))


def is_direct(grouping: Grouping) -> bool:
    """Does the emitter name the task (a direct grouping)?"""
    return GROUPINGS.get(grouping.kind).direct


def field_indexes(grouping: Grouping, source_fields: Fields) -> list[int]:
    """Where the grouping's fields are in the stream's values."""
    if grouping.fields is None:
        raise ValueError(f"a {grouping.kind} grouping names no fields")
    return [source_fields.index(f) for f in grouping.fields]


def _all(grouping: Grouping, t: Targets) -> Chooser:
    return _constant(tuple(t.tasks))


def _global(grouping: Grouping, t: Targets) -> Chooser:
    return _constant((t.tasks[0],))


def _shuffle(grouping: Grouping, t: Targets) -> Chooser:
    if t.loads is not None and len(t.tasks) > 1:
        return _load_aware(t.loads.register([], t.tasks, t.source_task))
    return _round_robin(t.tasks, t.source_task)


def _local_or_shuffle(grouping: Grouping, t: Targets) -> Chooser:
    local = [task for task in t.tasks if task in t.local]
    if t.loads is not None and len(t.tasks) > 1:
        return _load_aware(t.loads.register(local, [task for task in t.tasks if task not in t.local], t.source_task))
    return _round_robin(local or t.tasks, t.source_task)


def _fields(grouping: Grouping, t: Targets) -> Chooser:
    return _fields_chooser(field_indexes(grouping, t.source_fields), t.tasks)


def _partial_key(grouping: Grouping, t: Targets) -> Chooser:
    return _partial_key_chooser(field_indexes(grouping, t.source_fields), t.tasks)


def _custom(grouping: Grouping, t: Targets) -> Chooser:
    custom = grouping.custom
    if custom is None:
        raise ValueError("a custom grouping has no CustomStreamGrouping")
    custom.prepare(t.context, t.stream, list(t.tasks))
    source_task = t.source_task
    return lambda values: tuple(custom.choose_tasks(source_task, values))


class _constant:
    """A chooser whose answer never varies; ``fixed`` lets the emitter skip the call."""

    __slots__ = ("fixed",)

    def __init__(self, targets: tuple[int, ...]) -> None:
        self.fixed = targets

    def __call__(self, values: list) -> tuple[int, ...]:
        return self.fixed


def _round_robin(pool: list[int], seed: int) -> Chooser:
    # Storm 2's shuffle: round-robin over a shuffled list gives an even spread at a
    # fraction of the cost of a random draw per tuple.
    order = [(t,) for t in pool]
    random.Random(seed).shuffle(order)
    n = len(order)
    if n == 1:
        return _constant(order[0])
    state = [0]

    def choose(values: list) -> tuple[int]:
        i = state[0] + 1
        if i == n:
            i = 0
        state[0] = i
        return order[i]

    return choose


def _load_aware(choices: Any) -> Chooser:
    # Storm 2's load-aware shuffle: round-robin over a list in which each task appears in
    # proportion to how idle it is; the worker replaces the list as loads change.
    state = [0]

    def choose(values: list) -> tuple[int]:
        order = choices.order
        i = state[0] + 1
        if i >= len(order):
            i = 0
        state[0] = i
        return order[i]

    return choose


def _fields_chooser(indexes: list[int], tasks: list[int]) -> Chooser:
    if len(tasks) == 1:
        return _constant((tasks[0],))
    singles = [(t,) for t in tasks]
    n = len(tasks)
    cache: dict[Any, tuple[int]] = {}
    if len(indexes) == 1:
        idx = indexes[0]

        def choose(values: list) -> tuple[int]:
            v = values[idx]
            try:
                return cache[v]
            except KeyError:
                pass
            except TypeError:  # unhashable key value: no caching
                return singles[stable_hash((v,)) % n]
            hit = singles[stable_hash((v,)) % n]
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[v] = hit
            return hit

        return choose

    def choose_many(values: list) -> tuple[int]:
        key = [values[i] for i in indexes]
        try:
            k = tuple(key)
            return cache[k]
        except KeyError:
            hit = singles[stable_hash(key) % n]
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[k] = hit
            return hit
        except TypeError:
            return singles[stable_hash(key) % n]

    return choose_many


def _partial_key_chooser(indexes: list[int], tasks: list[int]) -> Chooser:
    # Storm's PartialKeyGrouping: two candidate tasks per key, send to the less loaded one
    # (load as counted by this sender), which splits hot keys over two tasks.
    singles = [(t,) for t in tasks]
    n = len(tasks)
    sent = [0] * n

    def choose(values: list) -> tuple[int]:
        raw = _key_bytes([values[i] for i in indexes])
        a = zlib.crc32(raw) % n
        b = zlib.crc32(raw, 0x9E3779B9) % n
        pick = a if sent[a] <= sent[b] else b
        sent[pick] += 1
        return singles[pick]

    return choose


for _kind in (
        GroupingKind(SHUFFLE, _shuffle, "each tuple to one task, spread evenly (by load where loads are kept)",
                     any_task=True, thrift="shuffle"),
        GroupingKind(FIELDS, _fields, "tuples with equal values of the fields to the same task", fields=True,
                     thrift="fields"),
        GroupingKind(ALL, _all, "every tuple to every task", thrift="all"),
        GroupingKind(GLOBAL, _global, "every tuple to the task with the lowest id"),
        GroupingKind(NONE, _shuffle, "no preference: as shuffle", any_task=True, thrift="none"),
        GroupingKind(DIRECT, None, "the emitter names the task (emit_direct on a direct stream)", direct=True,
                     thrift="direct"),
        GroupingKind(LOCAL_OR_SHUFFLE, _local_or_shuffle,
                     "a task in the emitter's worker if the bolt has one there, else as shuffle", any_task=True,
                     thrift="local_or_shuffle"),
        GroupingKind(PARTIAL_KEY, _partial_key,
                     "the less loaded of two tasks chosen by the fields' values (hot keys split over two)",
                     fields=True),
        GroupingKind(CUSTOM, _custom, "a CustomStreamGrouping chooses", custom=True)):
    GROUPINGS.register(_kind.name, _kind, __name__)
