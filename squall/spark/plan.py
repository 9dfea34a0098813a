"""What a batch run of a topology will do, decided and checked before Spark is touched.

A plan says which components run (all but the excluded ones, those that write live
output, and what hangs below them), in which order (topological), which spout streams the inputs feed, which streams
are written out (sinks), which bolts get a simulated tick, and which streams each
component must keep (those someone reads). Everything batch cannot do is refused here
with an error that names the component: a cycle, a spout without input, a bolt that
waits for tick tuples, a direct spout stream.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from squall.components import DEFAULT_STREAM
from squall.contrib.sources import BackfillError
from squall.model import ACKER, component_tasks, system_topology, task_ids
from squall.spark.stateful import batch_problem, system_components
from squall.topology import SPOUT, Topology

TICK_KEY = "topology.tick.tuple.freq.secs"


@dataclass
class Plan:
    topology: Topology
    conf: dict[str, Any]
    order: list[str]                          # components to run, upstream first
    inputs: dict[str, tuple[str, str]]        # input key -> (spout, stream)
    sinks: dict[str, tuple[str, str]]         # sink name -> (component, stream)
    keep: dict[str, frozenset[str]]           # component -> streams someone reads
    ticks: dict[str, float]                   # bolt -> tick period it is simulated with
    excluded: list[str] = field(default_factory=list)
    task_to_component: dict[int, str] = field(default_factory=dict)
    component_to_tasks: dict[str, list[int]] = field(default_factory=dict)
    live: list[str] = field(default_factory=list)  # left out by themselves: they write live output

    def component_conf(self, component: str) -> dict[str, Any]:
        """The conf a task of ``component`` sees, as a streaming executor builds it."""
        return {**self.conf, **self.topology.components[component].config}

    def upstream(self, component: str) -> list[str]:
        """Distinct running components ``component`` subscribes to, in order."""
        seen: list[str] = []
        for sub in self.topology.components[component].inputs:
            if sub.component in self.order and sub.component not in seen:
                seen.append(sub.component)
        return seen


def sink_name(component: str, stream: str) -> str:
    return component if stream == DEFAULT_STREAM else f"{component}:{stream}"


def parse_stream_ref(topology: Topology, ref: str, what: str) -> tuple[str, str | None]:
    """``COMPONENT`` or ``COMPONENT:STREAM`` -> (component, stream or None)."""
    if not isinstance(ref, str) or not ref:
        raise BackfillError(f"{what} {ref!r} is not a component id")
    if ref in topology.components:
        return ref, None
    comp, sep, stream = ref.rpartition(":")
    if sep and comp in topology.components and stream:
        return comp, stream
    raise BackfillError(f"{what} {ref!r} names no component of the topology "
                        f"(components: {sorted(topology.components)})")


def _resolve_stream(topology: Topology, comp: str, stream: str | None, what: str) -> str:
    streams = topology.components[comp].streams
    if stream is None:
        if DEFAULT_STREAM in streams:
            return DEFAULT_STREAM
        if len(streams) == 1:
            return next(iter(streams))
        if not streams:
            raise BackfillError(f"{what} {comp!r} declares no output streams")
        raise BackfillError(f"{what} {comp!r} declares several streams {sorted(streams)}; "
                            f"name one as {comp}:STREAM")
    if stream not in streams:
        raise BackfillError(f"{what} {comp}:{stream}: component {comp!r} declares no stream "
                            f"{stream!r} (it declares {sorted(streams)})")
    return stream


def _downstream_closure(topology: Topology, roots: Iterable[str]) -> set[str]:
    out = set(roots)
    changed = True
    while changed:
        changed = False
        for c in topology.components.values():
            if c.id not in out and any(s.component in out for s in c.inputs):
                out.add(c.id)
                changed = True
    return out


def _topological_order(topology: Topology, running: set[str]) -> list[str]:
    """Kahn's algorithm, ties broken by id so the order is stable; a cycle is an error."""
    deps = {c: {s.component for s in topology.components[c].inputs if s.component in running}
            for c in running}
    order: list[str] = []
    ready = sorted(c for c, d in deps.items() if not d)
    done: set[str] = set()
    while ready:
        c = ready.pop(0)
        order.append(c)
        done.add(c)
        for other in sorted(running - done):
            if other not in ready and deps[other] <= done:
                ready.append(other)
        ready.sort()
    if len(order) < len(running):
        raise BackfillError(f"the topology has a cycle ({_find_cycle(deps, running - done)}); "
                            "a batch run needs an acyclic topology")
    return order


def _find_cycle(deps: Mapping[str, set[str]], left: set[str]) -> str:
    # Every component left over lies on or below a cycle: walk upstream until one repeats.
    node = min(left)
    path: list[str] = []
    while node not in path:
        path.append(node)
        node = min(d for d in deps[node] if d in left)
    cycle = path[path.index(node):] + [node]
    return " -> ".join(reversed(cycle))


def make_plan(topology: Topology, inputs: Iterable[str], sinks: Sequence[str] | None = None,
              conf: Mapping[str, Any] | None = None, ticks: bool = False,
              exclude: Iterable[str] = ()) -> Plan:
    """Check that ``topology`` can run in batch with these inputs and sinks, and plan it.

    ``sinks=None`` writes every stream of a running bolt that no running bolt reads.
    """
    if not isinstance(topology, Topology):
        raise BackfillError(f"run takes a built Topology, got {type(topology).__name__}")
    conf = dict(conf or {})
    comps = topology.components

    excluded_roots = []
    for ex in exclude:
        if ex not in comps:
            raise BackfillError(f"cannot exclude {ex!r}: no such component (components: {sorted(comps)})")
        excluded_roots.append(ex)
    # Components that write live output (Component.live_output) are left out by themselves:
    # a backfill must not write into the live topology's output.
    live = sorted(c.id for c in topology.bolts() if c.id not in excluded_roots and c.instantiate().live_output)
    excluded = _downstream_closure(topology, excluded_roots + live)
    running = set(comps) - excluded - system_components()

    input_map: dict[str, tuple[str, str]] = {}
    for key in inputs:
        comp, stream = parse_stream_ref(topology, key, "input")
        if comps[comp].kind != SPOUT:
            raise BackfillError(f"input {key!r}: {comp!r} is a bolt; inputs replace spouts")
        if comp in excluded:
            raise BackfillError(f"input {key!r}: spout {comp!r} is excluded")
        stream = _resolve_stream(topology, comp, stream, "spout")
        if (comp, stream) in input_map.values():
            raise BackfillError(f"two inputs for spout stream {comp}:{stream}")
        input_map[key] = (comp, stream)

    fed = {c for c, _ in input_map.values()}
    missing = sorted(c.id for c in topology.spouts() if c.id in running and c.id not in fed)
    if missing:
        raise BackfillError(
            f"spout{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} "
            f"{'have' if len(missing) > 1 else 'has'} no input: a batch run replaces every spout by a "
            f"bounded input (--input {missing[0]}=PATH, or inputs={{{missing[0]!r}: dataframe}}), "
            "or exclude it")

    order = _topological_order(topology, running)

    for spout, stream in input_map.values():
        subs = [b for b, _ in topology.subscribers(spout, stream) if b in running]
        if comps[spout].streams[stream].direct and subs:
            raise BackfillError(f"spout stream {spout}:{stream} is direct: in a batch run no spout "
                                "code runs to choose each tuple's task")

    problem = batch_problem(topology, running, conf)
    if problem:
        raise BackfillError(problem)

    tick_periods: dict[str, float] = {}
    needs_ticks = []
    for c in order:
        spec = comps[c]
        if spec.kind == SPOUT:
            continue
        freq = {**conf, **spec.config}.get(TICK_KEY)
        if freq:
            tick_periods[c] = float(freq)
            needs_ticks.append(f"{c!r} ({TICK_KEY}={freq})")
    if needs_ticks and not ticks:
        raise BackfillError(
            f"bolt{'s' if len(needs_ticks) > 1 else ''} {', '.join(needs_ticks)} "
            f"depend{'' if len(needs_ticks) > 1 else 's'} on tick tuples, and a batch run has no clock; "
            "pass --ticks (ticks=True) to send every task of such a bolt one tick tuple after its "
            "last input, or exclude the bolt")

    sink_map: dict[str, tuple[str, str]] = {}
    if sinks is None:
        for c in order:
            if comps[c].kind == SPOUT:
                continue
            for stream in comps[c].streams:
                if not any(b in running for b, _ in topology.subscribers(c, stream)):
                    sink_map[sink_name(c, stream)] = (c, stream)
    else:
        for ref in sinks:
            comp, stream = parse_stream_ref(topology, ref, "sink")
            if comp in live:
                raise BackfillError(f"sink {ref!r}: {comp!r} writes live output, and a batch run leaves it "
                                    "out; name the bolts whose streams you want written (--sink COMPONENT)")
            if comp in excluded:
                raise BackfillError(f"sink {ref!r}: component {comp!r} is excluded")
            stream = _resolve_stream(topology, comp, stream, "sink")
            sink_map[sink_name(comp, stream)] = (comp, stream)

    keep: dict[str, frozenset[str]] = {}
    for c in order:
        streams = {s for s in comps[c].streams
                   if any(b in running for b, _ in topology.subscribers(c, s))}
        streams |= {s for comp, s in sink_map.values() if comp == c}
        keep[c] = frozenset(streams)

    # Task ids exactly as a streaming run numbers them (the acker takes ids too).
    t2c = task_ids(system_topology(topology, conf))
    c2t = component_tasks(t2c)
    c2t.pop(ACKER, None)
    return Plan(topology, conf, order, input_map, sink_map, keep,
                tick_periods if ticks else {},
                sorted(excluded), t2c, c2t, live)
