"""What one bolt of a pipeline runs: its steps as plain data (a ``Program``, pickled with
the bolt) and, in each task, the chain of Python calls they compile to.

A value goes through the fused steps as plain calls: ``map`` calls its function and hands
the result to the next step's ``push``; a step whose output another component reads
emits it on its own stream. Steps that hold values (aggregations, joins) keep them per
key; in a windowed bolt they emit when the window has been pushed through (``finish``),
else they emit their running result after every value. ``ctx`` is the bolt: its ``ts``
is the event time of the value being pushed (what emits carry), its ``state`` the
task's checkpointed state.
"""
from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from squall.errors import SquallError
from squall.streams import steps as k
from squall.streams.aggregators import Counting
from squall.streams.functions import Functions
from squall.streams.planner import PAIR, TUPLE, VALUE

_MISSING = object()
Push = Callable[[Any], None]


class ProgramStep:
    __slots__ = ("id", "kind", "where", "pair", "timed", "children", "stream", "args")

    def __init__(self, id: int, kind: str, where: str, pair: bool, timed: bool, children: list[int],
                 stream: str | None, args: dict[str, Any]) -> None:
        self.id, self.kind, self.where, self.pair, self.timed = id, kind, where, pair, timed
        self.children, self.stream, self.args = children, stream, args


class ProgramInput:
    """How one input stream's tuples become values: ``decode`` (TUPLE: a spout's, by the
    source's rules; VALUE; PAIR), the value and timestamp rules for spout tuples
    (``("field", index)``, ``("fields", indexes)`` or ``("fn", key of the function)``),
    and the (step, side) pairs the values go to."""

    __slots__ = ("decode", "timed", "value_rule", "ts_rule", "targets")

    def __init__(self, decode: str, timed: bool, value_rule: tuple, ts_rule: tuple | None,
                 targets: list[tuple[int, int]]) -> None:
        self.decode, self.timed, self.value_rule, self.ts_rule, self.targets = (
            decode, timed, value_rule, ts_rule, targets)


class Program:
    """A bolt's steps (upstream first), its inputs by stream id, its output streams with
    their fields, and the user's functions by step id."""

    def __init__(self, component: str, steps: list[ProgramStep], inputs: dict[str, ProgramInput],
                 outputs: dict[str, list[str]], fns: Functions, timed: bool) -> None:
        self.component, self.steps, self.inputs, self.outputs, self.fns = component, steps, inputs, outputs, fns
        self.timed = timed

    def step_for(self, exc: BaseException) -> str | None:
        """The step whose function raised ``exc`` (from its traceback), as ``kind at file:line``."""
        codes: dict[Any, ProgramStep] = {}
        for s in self.steps:
            fn = self.fns.fns.get(s.id)
            for f in (fn if isinstance(fn, list) else [fn]):
                for part in (f, getattr(f, "accumulate", None), getattr(type(f), "apply", None)):
                    code = getattr(part, "__code__", None)
                    if code is not None:
                        codes[code] = s
        found: ProgramStep | None = None
        for frame, _ in traceback.walk_tb(exc.__traceback__):
            found = codes.get(frame.f_code, found)
        return f"{found.kind} at {found.where}" if found is not None else None


class StepError(SquallError):
    """A user function of a step raised; the message names the step and its line."""


def freeze(key: Any) -> Any:
    """A key that came back from the wire as a list (a tuple key) made hashable again."""
    return tuple(freeze(x) for x in key) if type(key) is list else key


def compile_program(program: Program, ctx: Any, emit: Callable[..., Any],
                    windowed: bool) -> tuple[dict[str, Callable[[Any], None]], list[Callable[[], None]]]:
    """Per input stream, the call that takes one tuple; and the finishers (windowed bolts:
    what runs after a window was pushed through, upstream first)."""
    fns = program.fns
    by_id = {s.id: s for s in program.steps}
    push: dict[int, Any] = {}      # step id -> push (a join: (left push, right push))
    finishers: list[tuple[int, Callable[[], None]]] = []
    for s in reversed(program.steps):
        targets: list[Push] = [push[c] for c in s.children]
        if s.stream is not None:
            targets.append(_emitter(emit, s.stream, s.pair, s.timed, ctx))
        out = _fan_out(targets)
        branch_outs = None
        if s.kind == k.BRANCH:
            outs = {by_id[c].args["index"]: push[c] for c in s.children}
            branch_outs = [outs.get(i) for i in range(len(fns[s.id]))]
        made = _processor(s, fns.fns.get(s.id), out, ctx, windowed, branch_outs)
        if isinstance(made, _Holder):
            push[s.id] = made.push
            finishers.append((s.id, made.finish))
        else:
            push[s.id] = made
    finishers.sort(key=lambda f: f[0])
    entries = {stream: _entry(inp, push, ctx, fns) for stream, inp in program.inputs.items()}
    return entries, [f for _, f in finishers]


def _fan_out(targets: list[Push]) -> Push | None:
    if not targets:
        return None
    if len(targets) == 1:
        return targets[0]

    def out(v: Any) -> None:
        for t in targets:
            t(v)
    return out


def _emitter(emit: Callable[..., Any], stream: str, pair: bool, timed: bool, ctx: Any) -> Push:
    if pair and timed:
        def send(v: Any) -> None:
            key, value = v
            emit([key, value, ctx.ts], stream)
    elif pair:
        def send(v: Any) -> None:
            key, value = v
            emit([key, value], stream)
    elif timed:
        def send(v: Any) -> None:
            emit([v, ctx.ts], stream)
    else:
        def send(v: Any) -> None:
            emit([v], stream)
    return send


def _ignore(v: Any) -> None:
    pass


class _Holder:
    """A step that holds values: ``push`` takes one, ``finish`` emits at a window's end."""

    __slots__ = ("push", "finish")

    def __init__(self, push: Any, finish: Callable[[], None]) -> None:
        self.push, self.finish = push, finish


def _processor(s: ProgramStep, fn: Any, out: Push | None, ctx: Any, windowed: bool,
               branch_outs: list[Push | None] | None) -> Any:
    kind = s.kind
    send = out or _ignore
    if kind == k.MAP:
        return lambda v: send(fn(v))
    if kind == k.FLAT_MAP or kind == k.FLAT_MAP_TO_PAIR:
        def flat(v: Any) -> None:
            for x in fn(v):
                send(x)
        return flat
    if kind == k.FILTER:
        def keep(v: Any) -> None:
            if fn(v):
                send(v)
        return keep
    if kind == k.PEEK:
        def peek(v: Any) -> None:
            fn(v)
            send(v)
        return peek
    if kind == k.FOR_EACH:
        return fn
    if kind == k.BRANCH:
        pairs = [(p, o or _ignore) for p, o in zip(fn, branch_outs or [])]

        def branch(v: Any) -> None:
            for pred, to in pairs:
                if pred(v):
                    to(v)
                    return
        return branch
    if kind == k.BRANCH_OUT:
        return send
    if kind == k.KEY_BY:
        return lambda v: send((fn(v), v))
    if kind == k.MAP_TO_PAIR:
        return lambda v: send(fn(v))
    if kind == k.MAP_VALUES:
        return lambda v: send((v[0], fn(v[1])))
    if kind == k.FLAT_MAP_VALUES:
        def flat_values(v: Any) -> None:
            key = v[0]
            for x in fn(v[1]):
                send((key, x))
        return flat_values
    if kind in (k.AGGREGATE_BY_KEY, k.GROUP_BY_KEY):
        return _by_key(fn, out, windowed)
    if kind == k.REDUCE_BY_KEY:
        return _reduce_by_key(fn, out, windowed)
    if kind == k.AGGREGATE:
        return _aggregate(fn, out, windowed)
    if kind == k.REDUCE:
        return _reduce(fn, out, windowed)
    if kind == k.JOIN:
        return _join(fn, s.args["how"], send)
    if kind == k.CO_GROUP:
        return _co_group(send)
    if kind == k.UPDATE_STATE:
        return _update_state(fn, send, ctx)
    if kind == k.STATE_QUERY:
        def query(key: Any) -> None:
            state = ctx.state
            if key in state:
                send((key, state.get(key)))
        return query
    raise ValueError(f"unknown step kind {kind!r}")


def _by_key(agg: Any, out: Push | None, windowed: bool) -> Any:
    accs: dict[Any, Any] = {}
    counting = isinstance(agg, Counting)
    init, apply, result = agg.init, agg.apply, agg.result

    if counting and not windowed:
        def count(v: Any) -> None:
            key = v[0]
            n = accs.get(key, 0) + 1
            accs[key] = n
            if out is not None:
                out((key, n))
        return count
    if counting:
        def count_window(v: Any) -> None:
            key = v[0]
            accs[key] = accs.get(key, 0) + 1
        push = count_window
    else:
        def add(v: Any) -> None:
            key = v[0]
            acc = accs.get(key, _MISSING)
            if acc is _MISSING:
                acc = init()
            acc = accs[key] = apply(acc, v[1])
            if not windowed and out is not None:
                out((key, result(acc)))
        push = add
    if not windowed:
        return push

    def finish() -> None:
        items = list(accs.items())
        accs.clear()
        if out is not None:
            for key, acc in items:
                out((key, result(acc)))
    return _Holder(push, finish)


def _reduce_by_key(fn: Any, out: Push | None, windowed: bool) -> Any:
    accs: dict[Any, Any] = {}

    def add(v: Any) -> None:
        key, value = v
        acc = accs.get(key, _MISSING)
        acc = accs[key] = value if acc is _MISSING else fn(acc, value)
        if not windowed and out is not None:
            out((key, acc))
    if not windowed:
        return add

    def finish() -> None:
        items = list(accs.items())
        accs.clear()
        if out is not None:
            for item in items:
                out(item)
    return _Holder(add, finish)


def _aggregate(agg: Any, out: Push | None, windowed: bool) -> Any:
    box = [_MISSING]

    def add(v: Any) -> None:
        acc = box[0]
        if acc is _MISSING:
            acc = agg.init()
        acc = box[0] = agg.apply(acc, v)
        if not windowed and out is not None:
            out(agg.result(acc))
    if not windowed:
        return add

    def finish() -> None:
        acc, box[0] = box[0], _MISSING
        if acc is not _MISSING and out is not None:
            out(agg.result(acc))
    return _Holder(add, finish)


def _reduce(fn: Any, out: Push | None, windowed: bool) -> Any:
    box = [_MISSING]

    def add(v: Any) -> None:
        acc = box[0]
        acc = box[0] = v if acc is _MISSING else fn(acc, v)
        if not windowed and out is not None:
            out(acc)
    if not windowed:
        return add

    def finish() -> None:
        acc, box[0] = box[0], _MISSING
        if acc is not _MISSING and out is not None:
            out(acc)
    return _Holder(add, finish)


def _join(joiner: Any, how: str, send: Push) -> _Holder:
    left: list[tuple[Any, Any]] = []
    right: list[tuple[Any, Any]] = []
    make = joiner if joiner is not None else (lambda a, b: (a, b))

    def finish() -> None:
        rows, others = list(left), list(right)
        left.clear()
        right.clear()
        by_key: dict[Any, list[Any]] = {}
        for key, value in others:
            by_key.setdefault(key, []).append(value)
        matched: set[Any] = set()
        for key, value in rows:
            found = by_key.get(key)
            if found:
                matched.add(key)
                for other in found:
                    send((key, make(value, other)))
            elif how in ("left", "full"):
                send((key, make(value, None)))
        if how in ("right", "full"):
            for key, value in others:
                if key not in matched:
                    send((key, make(None, value)))
    return _Holder((left.append, right.append), finish)


def _co_group(send: Push) -> _Holder:
    groups: dict[Any, tuple[list[Any], list[Any]]] = {}

    def side(i: int) -> Push:
        def add(v: Any) -> None:
            key, value = v
            g = groups.get(key)
            if g is None:
                g = groups[key] = ([], [])
            g[i].append(value)
        return add

    def finish() -> None:
        items = list(groups.items())
        groups.clear()
        for key, g in items:
            send((key, g))
    return _Holder((side(0), side(1)), finish)


def _update_state(fold: Any, send: Push, ctx: Any) -> Push:
    init, apply = fold.init, fold.apply

    def update(v: Any) -> None:
        key, value = v
        state = ctx.state
        acc = state.get(key, _MISSING)
        if acc is _MISSING:
            acc = init()
        acc = apply(acc, value)
        state.put(key, acc)
        send((key, acc))
    return update


def _entry(inp: ProgramInput, push: dict[int, Any], ctx: Any, fns: Functions) -> Callable[[Any], None]:
    """The call that takes one input tuple: its value (and timestamp) to the steps it feeds."""
    targets = []
    for step_id, side in inp.targets:
        p = push[step_id]
        targets.append(p[side] if isinstance(p, tuple) else p)
    to = _fan_out(targets) or _ignore
    timed = inp.timed
    if inp.decode == VALUE:
        if timed:
            def value_ts(t: Any) -> None:
                values = t.values
                ctx.ts = values[1]
                to(values[0])
            return value_ts
        return lambda t: to(t.values[0])
    if inp.decode == PAIR:
        def pair(t: Any) -> None:
            values = t.values
            key = values[0]
            if type(key) is list:
                key = freeze(key)
            if timed:
                ctx.ts = values[2]
            to((key, values[1]))
        return pair
    assert inp.decode == TUPLE
    how, arg = inp.value_rule
    value_of: Callable[[Any], Any]
    if how == "field":
        value_of = lambda t: t.values[arg]  # noqa: E731
    elif how == "fields":
        value_of = lambda t: tuple([t.values[i] for i in arg])  # noqa: E731
    else:
        value_of = fns[arg]
    if inp.ts_rule is None:
        if how == "field":
            return lambda t: to(t.values[arg])
        return lambda t: to(value_of(t))
    ts_how, ts_arg = inp.ts_rule
    if ts_how == "field":
        def stamped(t: Any) -> None:
            ctx.ts = t.values[ts_arg]
            to(value_of(t))
        return stamped
    ts_fn = fns[ts_arg]

    def stamped_by(t: Any) -> None:
        ctx.ts = ts_fn(t)
        to(value_of(t))
    return stamped_by
