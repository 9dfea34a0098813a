"""``StreamBuilder``: where a pipeline starts (``new_stream``) and what turns it into a
topology (``build``), which runs like any other: ``squall run``, ``squall submit``,
``squall spark-run``, ``LocalCluster.submit``."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

from squall.components import DEFAULT_STREAM, OutputFieldsDeclarer, Spout
from squall.streams import planner as pl
from squall.streams import steps as k
from squall.streams.bolts import StatefulStreamBolt, StatefulStreamWindowBolt, StreamBolt, StreamWindowBolt
from squall.streams.functions import Functions, check_function
from squall.streams.program import Program, ProgramInput, ProgramStep
from squall.streams.steps import PipelineError, Step
from squall.streams.stream import Stream
from squall.streams.windows import TIMESTAMP_FIELD
from squall.topology import BoltDeclarer, Topology, TopologyBuilder, TopologyError
from squall.tuple import Tuple

T = TypeVar("T")


class StreamBuilder:
    """Start streams from spouts, write the pipeline, then ``build()`` the topology."""

    def __init__(self) -> None:
        self._steps: list[Step] = []

    @overload
    def new_stream(self, spout: Spout, value: Callable[[Tuple], T], *, timestamp: str | Callable[[Tuple], float]
                   | None = None, parallelism: int = 1, name: str | None = None,
                   stream: str = DEFAULT_STREAM) -> Stream[T]: ...

    @overload
    def new_stream(self, spout: Spout, value: str | Sequence[str] | None = None, *,
                   timestamp: str | Callable[[Tuple], float] | None = None, parallelism: int = 1,
                   name: str | None = None, stream: str = DEFAULT_STREAM) -> Stream[Any]: ...

    def new_stream(self, spout: Spout, value: Any = None, *, timestamp: Any = None, parallelism: int = 1,
                   name: str | None = None, stream: str = DEFAULT_STREAM) -> Stream[Any]:
        """A stream of the tuples ``spout`` emits on ``stream``, as values: by default the
        tuple's one field (a tuple of its fields if it has several); ``value`` names a
        field, a list of fields, or is a function of the tuple. ``timestamp`` (a field of
        seconds, or a function of the tuple) gives the values event time, which they
        carry through the pipeline. The spout runs in ``parallelism`` tasks, and so do
        the steps after it until one changes that."""
        if not isinstance(spout, Spout):
            raise TypeError(f"new_stream takes a spout, got {type(spout).__name__}")
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
            raise ValueError(f"parallelism must be an integer >= 1, got {parallelism!r}")
        for what, rule in (("value", value), ("timestamp", timestamp)):
            ok = rule is None or isinstance(rule, str) or callable(rule) or (
                what == "value" and isinstance(rule, (list, tuple)) and all(isinstance(f, str) for f in rule))
            if not ok:
                raise TypeError(f"new_stream: {what} must be a field name{', a list of them' * (what == 'value')} "
                                f"or a function of the tuple, got {type(rule).__name__}")
        step = self._add(k.SOURCE, [], spout, pair=False, name=name, parallelism=parallelism,
                         timed=timestamp is not None, args={"value": value, "timestamp": timestamp, "stream": stream})
        return Stream(self, step)

    # -- for streams --------------------------------------------------------------------------
    def _add(self, kind: str, parents: list[Step], fn: Any, *, pair: bool = False, name: str | None = None,
             args: dict[str, Any] | None = None, parallelism: int | None = None, timed: bool | None = None) -> Step:
        if name is not None and (not isinstance(name, str) or not name):
            raise TypeError(f"a step's name must be a non-empty string, got {name!r}")
        if kind == k.WINDOW and parents[0].kind == k.SOURCE:
            # A window reads values with their timestamps in its own fields: give it a bolt's.
            parents = [self._add(k.MAP, parents, _values, pair=False, name="values")]
        step = Step(len(self._steps), kind, parents, fn, pair=pair, name=name, args=args,
                    parallelism=parallelism, timed=timed)
        self._steps.append(step)
        return step

    def _probe(self, kind: str) -> Step:
        """A step at the caller's line that is not added: for errors about a call."""
        return Step(-1, kind, [])

    # -- building -------------------------------------------------------------------------------
    def build(self) -> Topology:
        """The topology that runs the pipeline; raises TopologyError (a PipelineError
        naming the step and its line) for a pipeline that cannot run."""
        if not self._steps:
            raise PipelineError(None, "the pipeline is empty: start it with new_stream(spout)")
        for s in self._steps:
            if s.kind not in (k.SOURCE, k.SINK) and s.fn is not None:
                check_function(s, s.fn)
            if s.kind == k.SOURCE:
                for rule in (s.args["value"], s.args["timestamp"]):
                    if callable(rule):
                        check_function(s, rule)
        plan = pl.plan(self._steps)
        fields = {sp.step.id: _spout_fields(sp.step) for sp in plan.spouts}
        tb = TopologyBuilder()
        try:
            for sp in plan.spouts:
                tb.set_spout(sp.id, sp.step.fn, sp.step.parallelism)
            for b in plan.bolts:
                program = _program(b, fields)
                if b.window is not None:
                    cls = StatefulStreamWindowBolt if plan.checkpointed else StreamWindowBolt
                    bolt: Any = cls(program, b.window.spec(b.late_stream))
                else:
                    bolt = (StatefulStreamBolt if b.stateful else StreamBolt)(program)
                declarer = tb.set_bolt(b.id, bolt, b.parallelism)
                for inp in b.inputs:
                    _subscribe(declarer, inp)
            for sk in plan.sinks:
                _subscribe(tb.set_bolt(sk.id, sk.step.fn, sk.step.parallelism), sk.input)
            return tb.build()
        except PipelineError:
            raise
        except TopologyError as exc:
            raise TopologyError(f"the pipeline's topology: {exc}") from None


def _values(value: Any) -> Any:
    return value


def _subscribe(declarer: BoltDeclarer, inp: pl.Input) -> None:
    fields = [inp.field or "key"] if inp.grouping == pl.FIELDS else None
    declarer.grouping(inp.component, inp.grouping, fields=fields, stream=inp.stream)


def _spout_fields(source: Step) -> list[str]:
    declarer = OutputFieldsDeclarer(source.label)
    source.fn.declare_output_fields(declarer)
    stream = source.args["stream"]
    decl = declarer.streams.get(stream)
    if decl is None:
        raise PipelineError(source, f"the spout declares no stream {stream!r} (it declares {sorted(declarer.streams)})")
    return list(decl.fields)


def _field(source: Step, fields: list[str], name: str, what: str) -> int:
    if name not in fields:
        raise PipelineError(source, f"{what} {name!r} is not a field of the spout's tuples (fields: {fields})")
    return fields.index(name)


def _program(b: pl.BoltPlan, spout_fields: dict[int, list[str]]) -> Program:
    """A bolt plan as the data its bolt carries."""
    in_bolt = {s.id for s in b.steps}
    fns: dict[Any, Any] = {}
    steps = []
    for s in b.steps:
        children = [c.id for c in s.children if c.id in in_bolt]
        args = {"how": s.args["how"]} if s.kind == k.JOIN else {}
        if s.kind == k.BRANCH_OUT:
            args = {"index": s.args["index"]}
        steps.append(ProgramStep(s.id, s.kind, s.where, s.pair, s.timed, children, b.outputs.get(s.id), args))
        if s.fn is not None:
            fns[s.id] = s.fn
    inputs: dict[str, ProgramInput] = {}
    for inp in b.inputs:
        value_rule: tuple = ("field", 0)
        ts_rule: tuple | None = None
        timed = False
        if inp.decode == pl.TUPLE:
            src = inp.source
            assert src is not None
            fields = spout_fields[src.id]
            rule, ts = src.args["value"], src.args["timestamp"]
            if rule is None:
                value_rule = ("field", 0) if len(fields) == 1 else ("fields", list(range(len(fields))))
            elif isinstance(rule, str):
                value_rule = ("field", _field(src, fields, rule, "value"))
            elif isinstance(rule, (list, tuple)):
                value_rule = ("fields", [_field(src, fields, f, "value field") for f in rule])
            else:
                value_rule = ("fn", ("value", src.id))
                fns[("value", src.id)] = rule
            if isinstance(ts, str):
                ts_rule = ("field", _field(src, fields, ts, "timestamp"))
            elif ts is not None:
                ts_rule = ("fn", ("ts", src.id))
                fns[("ts", src.id)] = ts
            timed = ts is not None
        else:
            timed = _timed(b, inp)
        if inp.stream in inputs:
            raise PipelineError(inp.targets[0][0], f"reads two streams named {inp.stream!r}; name the sources")
        inputs[inp.stream] = ProgramInput(inp.decode, timed, value_rule, ts_rule,
                                          [(s.id, side) for s, side in inp.targets])
    outputs = {}
    timed = any(s.timed for s in b.steps)
    for s in b.steps:
        stream = b.outputs.get(s.id)
        if stream is not None:
            names = ["key", "value"] if s.pair else ["value"]
            outputs[stream] = names + [TIMESTAMP_FIELD] if s.timed else names
    return Program(b.id, steps, inputs, outputs, Functions(fns), timed)


def _timed(b: pl.BoltPlan, inp: pl.Input) -> bool:
    return any(s.timed for s, _ in inp.targets)
