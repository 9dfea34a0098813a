"""From a pipeline's steps to spouts and bolts: plain code, no I/O.

The rules, in the order a step meets them:

- A source is a spout; the steps after it start a bolt, which reads the spout's tuples.
- A step that takes one value at a time runs in its parent's bolt (fused: no tuple, no
  queue between them).
- A keyed step (``*_by_key``, ``update_state_by_key``) needs each key's values in one
  task: it stays in its parent's bolt when that bolt runs in one task or its input is
  already partitioned by the same key, else it starts a bolt with a fields grouping on
  ``key``. An aggregation over the whole stream runs in one task (a global grouping).
- ``window`` starts a windowed bolt (one of squall.windowing's): the steps after it run
  per window, and the aggregations among them emit when their window closes. The window's
  input is partitioned as its first aggregation needs. When that aggregation's key is set
  after the window (``window(w).map_to_pair(f).count_by_key()`` in several tasks), the
  window moves down to it: the steps between run before the window, which for time
  windows changes nothing (a value's window follows from its timestamp) and is refused for
  count windows unless each of those steps gives one value per value.
- A join or co-group is a windowed bolt reading both streams' bolts by key.
- ``repartition`` starts a bolt of its own size; ``to(bolt)`` adds the user's bolt.
- ``update_state_by_key`` makes its bolt stateful (at most one state per bolt, never in
  a windowed bolt); ``state_query`` runs in that bolt, its values routed by key.
- A step whose output another component reads, or that ends the pipeline (other than
  ``for_each`` and ``print``), emits on a stream of its own, named after it; fields
  ``value`` or ``key, value``, plus ``ts`` where values carry event time. ``spark-run``
  writes the streams that end a pipeline.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from squall.grouping import FIELDS, GLOBAL, SHUFFLE
from squall.streams import steps as k
from squall.streams.steps import PipelineError, Step
from squall.streams.windows import Window

TUPLE, VALUE, PAIR = "tuple", "value", "pair"  # how an input's tuples become values


@dataclass
class Input:
    """One subscription of a bolt, and the steps its values go to (side 0, or 1 for the
    right stream of a join)."""

    component: str
    stream: str
    grouping: str
    field: str | None
    decode: str
    source: Step | None                 # for TUPLE: the source whose value and timestamp rules apply
    targets: list[tuple[Step, int]]


@dataclass
class BoltPlan:
    key: int                             # a number of its own until names are given
    parallelism: int
    steps: list[Step] = field(default_factory=list)
    inputs: list[Input] = field(default_factory=list)
    window: Window | None = None
    late_stream: str | None = None
    stateful: bool = False
    outputs: dict[int, str] = field(default_factory=dict)   # step id -> stream id
    id: str = ""


@dataclass
class SpoutPlan:
    step: Step
    id: str = ""


@dataclass
class SinkPlan:
    step: Step
    input: Input
    id: str = ""


@dataclass
class Plan:
    spouts: list[SpoutPlan]
    bolts: list[BoltPlan]
    sinks: list[SinkPlan]

    @property
    def checkpointed(self) -> bool:
        return any(b.stateful for b in self.bolts)


def copy_steps(steps: list[Step]) -> list[Step]:
    """A copy of the graph to plan (planning may move windows; the builder's stays as written)."""
    out: dict[int, Step] = {}
    for s in steps:
        c = Step.__new__(Step)
        for slot in Step.__slots__:
            setattr(c, slot, getattr(s, slot))
        c.parents = [out[p.id] for p in s.parents]
        c.children = []
        for p in c.parents:
            p.children.append(c)
        if "state" in c.args:
            c.args = {**c.args, "state": out[c.args["state"].id]}
        out[s.id] = c
    return list(out.values())


def first_need(marker: Step) -> str:
    """The grouping the bolt a window, repartition or late() starts needs, from the first
    aggregations after it: GLOBAL (one task), FIELDS (by key) or SHUFFLE."""
    found_global = keyed_ok = keyed_bad = False
    todo = [(c, marker.pair) for c in marker.children]
    while todo:
        s, key_intact = todo.pop()
        if s.kind in k.GLOBAL:
            found_global = True
        elif s.kind in k.KEYED or s.kind == k.UPDATE_STATE:
            keyed_ok |= key_intact
            keyed_bad |= not key_intact
        elif s.kind in k.PER_VALUE:
            todo.extend((c, key_intact and s.kind in k.KEEPS_KEY) for c in s.children)
    if found_global and marker.kind != k.REPARTITION:
        return GLOBAL
    if keyed_ok and not keyed_bad:
        return FIELDS
    return SHUFFLE


def nominal_parallelism(steps: list[Step]) -> dict[int, int]:
    """Tasks of what runs each step: a source's own, a repartition's, one for aggregations
    over the whole stream (and the windows before them), a join's left side's, a state
    query's state's, else its parent's."""
    par: dict[int, int] = {}
    for s in steps:
        if s.kind in (k.SOURCE, k.REPARTITION, k.SINK):
            par[s.id] = s.parallelism
        elif s.kind in k.GLOBAL:
            par[s.id] = 1
        elif s.kind in (k.WINDOW, k.LATE) and first_need(s) == GLOBAL:
            par[s.id] = 1
        elif s.kind == k.STATE_QUERY:
            par[s.id] = par[s.args["state"].id]
        else:
            par[s.id] = par[s.parents[0].id]
    return par


def check(steps: list[Step]) -> None:
    """What no placement can fix: windows where they are needed and match."""
    for s in steps:
        if s.kind in (k.JOIN, k.CO_GROUP):
            left, right = s.parents
            if left.kind != k.WINDOW or right.kind != k.WINDOW:
                raise PipelineError(s, "joins and co-groups work within windows (else they would keep every "
                                       "value forever): window both streams with the same window first, "
                                       "left.window(w).join(right.window(w))")
            if left.fn != right.fn:
                raise PipelineError(s, f"both streams need the same window: {left.fn.describe()} "
                                       f"({left.where}) and {right.fn.describe()} ({right.where})")
            for w in (left, right):
                if len(w.children) > 1:
                    raise PipelineError(w, "a window that feeds a join feeds only that join: "
                                           "call window() again for other steps")
        if s.kind == k.WINDOW and s.parents[0].kind == k.WINDOW:
            raise PipelineError(s, "two windows in a row: aggregate the first one's values before windowing again")
        if s.kind == k.STATE_QUERY and s.parents[0].pair:
            raise PipelineError(s, "state_query looks up plain values (the keys): map the pairs to keys first")


def defer_windows(steps: list[Step], par: dict[int, int]) -> None:
    """Move a window past the steps that set the key its aggregation needs (see the module)."""
    for w in [s for s in steps if s.kind == k.WINDOW]:
        if par[w.id] == 1 or len(w.children) != 1:
            continue
        path: list[Step] = []
        c = w.children[0]
        while c.kind in k.PER_VALUE and len(c.children) == 1:
            path.append(c)
            c = c.children[0]
        if c.kind not in k.KEYED or not path:
            continue
        if w.pair and all(p.kind in k.KEEPS_KEY for p in path):
            continue  # the key is there before the window
        window: Window = w.fn
        if window.counted and any(p.kind not in k.ONE_FOR_ONE for p in path):
            bad = next(p for p in path if p.kind not in k.ONE_FOR_ONE)
            raise PipelineError(c, f"needs its values partitioned by key, and the key is set after its count "
                                   f"window ({w.where}) by steps that change how many values there are "
                                   f"({bad.describe()}): key the values before the window, "
                                   "....key_by(f).window(w), or use a time window")
        parent, first, last = w.parents[0], path[0], path[-1]
        parent.children[parent.children.index(w)] = first
        first.parents = [parent]
        last.children = [w]
        w.parents, w.children, w.pair = [last], [c], last.pair
        c.parents = [w]


def topological(steps: list[Step]) -> list[Step]:
    """``steps`` parents first, otherwise in the order they were written (moving a window
    puts it after steps written later)."""
    done: set[int] = set()
    out: list[Step] = []
    waiting = list(steps)
    while waiting:
        rest = []
        for s in waiting:
            if all(p.id in done for p in s.parents) and ("state" not in s.args or s.args["state"].id in done):
                out.append(s)
                done.add(s.id)
            else:
                rest.append(s)
        waiting = rest
    return out


class _Planner:
    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.par = nominal_parallelism(steps)
        self.spouts: list[SpoutPlan] = []
        self.bolts: list[BoltPlan] = []
        self.sinks: list[SinkPlan] = []
        self.comp: dict[int, SpoutPlan | BoltPlan] = {}
        self.keyed_out: dict[int, bool] = {}       # step id -> its output is partitioned by its key
        self.marker_bolt: dict[int, BoltPlan] = {}  # window / repartition / late step -> its bolt
        self.marker_input: dict[int, Input] = {}    # ... and the input its values arrive on

    # -- helpers ------------------------------------------------------------------------------
    def new_bolt(self, parallelism: int) -> BoltPlan:
        b = BoltPlan(len(self.bolts), parallelism)
        self.bolts.append(b)
        return b

    def add(self, bolt: BoltPlan, s: Step, keyed_in: bool) -> None:
        bolt.steps.append(s)
        self.comp[s.id] = bolt
        keep = s.kind in k.KEEPS_KEY or s.kind == k.STATE_QUERY
        self.keyed_out[s.id] = bolt.parallelism == 1 or (keyed_in and keep)
        if s.kind == k.UPDATE_STATE:
            bolt.stateful = True

    def stream_of(self, producer: Step) -> tuple[str, str]:
        """(component key, stream) carrying ``producer``'s values to another component."""
        comp = self.comp[producer.id]
        if isinstance(comp, SpoutPlan):
            return f"spout:{id(comp)}", producer.args["stream"]
        stream = comp.outputs.get(producer.id)
        if stream is None:
            stream = comp.outputs[producer.id] = f"{_safe(producer.label)}-{producer.id}"
        return f"bolt:{comp.key}", stream

    def input_from(self, producer: Step, grouping: str, targets: list[tuple[Step, int]]) -> Input:
        comp, stream = self.stream_of(producer)
        if producer.kind == k.SOURCE:
            decode, source = TUPLE, producer
        else:
            decode, source = (PAIR if producer.pair else VALUE), None
        fld = ("key" if producer.pair else "value") if grouping == FIELDS else None
        return Input(comp, stream, grouping, fld, decode, source, targets)

    def producer(self, marker: Step) -> Step:
        if marker.kind == k.SOURCE:
            return marker
        p = marker.parents[0]
        while p.kind in (k.WINDOW, k.REPARTITION, k.LATE):
            if p.kind == k.LATE:
                raise PipelineError(marker, "the late values of a window cannot be windowed or repartitioned "
                                            "directly: add a step (map, filter, ...) after late() first")
            p = p.parents[0]
        return p

    # -- markers: the bolt a window, repartition or late() starts ---------------------------
    def bolt_of_marker(self, marker: Step) -> BoltPlan:
        bolt = self.marker_bolt.get(marker.id)
        if bolt is not None:
            return bolt
        need = first_need(marker) if marker.kind != k.SOURCE else SHUFFLE
        bolt = self.new_bolt(self.par[marker.id])
        grouping = need if bolt.parallelism > 1 else SHUFFLE
        if marker.kind == k.LATE:
            window = marker.parents[0]
            wbolt = self.bolt_of_marker(window)
            if wbolt.late_stream is None:
                wbolt.late_stream = f"late-{window.id}"
            src = self.producer(window)
            inp = Input(f"bolt:{wbolt.key}", wbolt.late_stream, grouping,
                        ("key" if marker.pair else "value") if grouping == FIELDS else None,
                        PAIR if marker.pair else VALUE, None, [])
            if src.kind == k.SOURCE:  # the window read the spout's tuples: its late ones are those
                inp.decode, inp.source = TUPLE, src
        else:
            if marker.kind == k.WINDOW:
                bolt.window = marker.fn
            inp = self.input_from(self.producer(marker), grouping, [])
        bolt.inputs.append(inp)
        self.marker_bolt[marker.id] = bolt
        self.marker_input[marker.id] = inp
        return bolt

    # -- the walk -----------------------------------------------------------------------------
    def run(self) -> Plan:
        for s in self.steps:
            if s.kind == k.SOURCE:
                sp = SpoutPlan(s)
                self.spouts.append(sp)
                self.comp[s.id] = sp
            elif s.kind in (k.WINDOW, k.REPARTITION, k.LATE):
                continue
            elif s.kind == k.SINK:
                producer = s.parents[0]
                self.sinks.append(SinkPlan(s, self.input_from(producer, SHUFFLE, [])))
            elif s.kind in (k.JOIN, k.CO_GROUP):
                self.place_join(s)
            else:
                self.place(s)
        for b in self.bolts:
            for s in b.steps:
                if not s.children and s.kind not in (k.FOR_EACH, k.BRANCH, k.BRANCH_OUT):
                    self.stream_of(s)  # a pipeline's last steps emit, as Storm's do: spark-run writes them
            if b.window is not None:
                for s in b.steps:
                    if s.kind == k.UPDATE_STATE:
                        raise PipelineError(s, "update_state_by_key runs outside windows")
        for s in self.steps:
            if s.kind == k.GROUP_BY_KEY:
                bolt = self.comp[s.id]
                if isinstance(bolt, BoltPlan) and bolt.window is None:
                    raise PipelineError(s, "group_by_key works within windows (else each key's list would grow "
                                           "forever): window the stream first, ....window(w).group_by_key()")
        return Plan(self.spouts, self.bolts, self.sinks)

    def place_join(self, s: Step) -> None:
        left, right = s.parents
        bolt = self.new_bolt(self.par[s.id])
        bolt.window = left.fn
        for side, w in enumerate((left, right)):
            producer = self.producer(w)
            bolt.inputs.append(self.input_from(producer, FIELDS if bolt.parallelism > 1 else SHUFFLE, [(s, side)]))
            self.marker_bolt[w.id] = bolt
        self.add(bolt, s, True)

    def place(self, s: Step) -> None:
        parent = s.parents[0]
        if parent.kind in (k.WINDOW, k.REPARTITION, k.LATE, k.SOURCE):
            # The steps right after a source share one bolt reading its tuples.
            return self.place_after_marker(s, parent)
        if s.kind == k.STATE_QUERY:
            state_step: Step = s.args["state"]
            bolt = self.comp[state_step.id]
            assert isinstance(bolt, BoltPlan)
            if self.comp.get(parent.id) is bolt:
                raise PipelineError(s, "queries the state of its own bolt: query the state from another stream")
            grouping = FIELDS if bolt.parallelism > 1 else SHUFFLE
            bolt.inputs.append(self.input_from(parent, grouping, [(s, 0)]))
            self.add(bolt, s, True)
            return
        pbolt = self.comp[parent.id]
        assert isinstance(pbolt, BoltPlan)
        keyed = self.keyed_out[parent.id]
        windowed = pbolt.window is not None
        if self.par[s.id] != pbolt.parallelism:
            if windowed and s.kind in k.HOLDS:
                raise PipelineError(s, "aggregates over the whole stream in one task, and the window before it "
                                       "runs in several: window in one task, ....repartition(1).window(w)")
            return self.start(s, parent, self.par[s.id])
        if s.kind in k.KEYED and not keyed:
            if windowed:
                raise PipelineError(s, "needs its values partitioned by key, but it would run with the window "
                                       "before it, whose values are partitioned otherwise: set the key before "
                                       "the window (....key_by(f).window(w)), or window these values again "
                                       "(....window(w2)) before this step")
            return self.start(s, parent, self.par[s.id])
        if s.kind == k.UPDATE_STATE and (windowed or pbolt.stateful or not keyed):
            return self.start(s, parent, self.par[s.id])
        self.add(pbolt, s, keyed)

    def place_after_marker(self, s: Step, marker: Step) -> None:
        bolt = self.bolt_of_marker(marker)
        keyed_in = bolt.parallelism == 1 or (self.marker_input[marker.id].grouping != SHUFFLE and marker.pair)
        fits = self.par[s.id] == bolt.parallelism and (s.kind not in k.KEYED or keyed_in)
        if s.kind == k.UPDATE_STATE:
            if marker.kind == k.WINDOW:
                raise PipelineError(s, "update_state_by_key runs outside windows: aggregate the window first")
            fits = fits and keyed_in and not bolt.stateful
        if not fits:
            if marker.kind == k.WINDOW:
                raise PipelineError(s, "needs its values partitioned by key, and its window comes before the "
                                       "key: key the values first, ....key_by(f).window(w)")
            if marker.kind == k.LATE:
                raise PipelineError(s, "cannot run where the late values arrive: add a step (map, filter, ...) "
                                       "after late() first")
            return self.start(s, self.producer(marker), self.par[s.id])
        self.marker_input[marker.id].targets.append((s, 0))
        self.add(bolt, s, keyed_in and marker.pair)

    def start(self, s: Step, producer: Step, par: int) -> None:
        """A new bolt whose first step is ``s``, reading ``producer``."""
        if s.kind in k.GLOBAL:
            grouping = GLOBAL
        elif (s.kind in k.KEYED or s.kind == k.UPDATE_STATE) and par > 1:
            if not producer.pair:
                raise PipelineError(s, "needs (key, value) pairs: key the values with key_by or map_to_pair first")
            grouping = FIELDS
        else:
            grouping = SHUFFLE
        bolt = self.new_bolt(par)
        bolt.inputs.append(self.input_from(producer, grouping, [(s, 0)]))
        self.add(bolt, s, grouping != SHUFFLE)


def plan(steps: list[Step]) -> Plan:
    """Spouts, bolts and sinks for ``steps`` (a copy is planned), named."""
    steps = copy_steps(steps)
    check(steps)
    par = nominal_parallelism(steps)
    defer_windows(steps, par)
    result = _Planner(topological(steps)).run()
    name(result)
    return result


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "step"


def name(p: Plan) -> None:
    """Readable component ids: a spout's name, a bolt's steps joined, a sink's name or class."""
    taken: set[str] = set()

    def unique(base: str) -> str:
        base = _safe(base)[:60]
        out, n = base, 2
        while out in taken:
            out, n = f"{base}-{n}", n + 1
        taken.add(out)
        return out

    for sp in p.spouts:
        sp.id = unique(sp.step.name or "spout")
    for b in p.bolts:
        labels = [s.label for s in b.steps if s.kind != k.BRANCH_OUT]
        if b.window is not None:
            labels.insert(0, "window")
        b.id = unique("-".join(labels) or "values")
    for sk in p.sinks:
        sk.id = unique(sk.step.name or type(sk.step.fn).__name__)
    ids = {f"spout:{id(sp)}": sp.id for sp in p.spouts}
    ids.update({f"bolt:{b.key}": b.id for b in p.bolts})
    for b in p.bolts:
        for inp in b.inputs:
            inp.component = ids[inp.component]
    for sk in p.sinks:
        sk.input.component = ids[sk.input.component]
