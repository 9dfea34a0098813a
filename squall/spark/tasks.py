"""What runs inside Spark's Python workers: spout inputs become tuples, bolts run tasks.

A record between components is ``(stream, source task, values, targets)``: one per emit,
with the target task ids its grouping chose when it was emitted. ``Fan`` turns a
component's records into ``(task, (component, stream, source task, values))`` pairs for
one downstream bolt; Spark partitions those by task, and ``bolt_partition`` runs one bolt
instance over one partition: ``prepare``, ``execute`` per tuple, (a simulated tick), then
``cleanup``, as a streaming executor would. Nothing here imports pyspark.
"""
from __future__ import annotations

import pickle
import traceback
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import structlog

from squall.context import TopologyContext
from squall.grouping import DIRECT
from squall.runtime.collectors import make_routes
from squall.spark import schema as _schema
from squall.spark.collector import BatchBoltCollector
from squall.spark.stateful import BatchTask
from squall.topology import Topology
from squall.tuple import SYSTEM_COMPONENT, TICK_STREAM, Fields, Source, Tuple

log = structlog.get_logger("squall.spark")

ERRORS_KEPT = 5
DRAIN_BATCH = 256
_BIG = 1 << 63
_TICK_FIELDS = Fields(["rate_secs"])


class BoltTaskError(RuntimeError):
    """A bolt task that could not run (its ``prepare`` raised); ends the Spark job."""


class WorkerPlan:
    """The part of a Plan that workers need, shipped once per run as a broadcast."""

    def __init__(self, topology_id: str, topology: Topology, system: Topology, conf: dict[str, Any],
                 task_to_component: dict[int, str], component_to_tasks: dict[str, list[int]],
                 keep: dict[str, frozenset[str]], ticks: dict[str, float],
                 blobs: dict[str, bytes], running: frozenset[str],
                 sink_fields: dict[str, dict[str, list[str]]]) -> None:
        self.topology_id = topology_id
        self.topology_bytes = topology.to_bytes()
        self.system_bytes = system.to_bytes()
        self.conf = conf
        self.task_to_component = task_to_component
        self.component_to_tasks = component_to_tasks
        self.keep = keep
        self.ticks = ticks
        self.blobs = blobs   # component -> pickled instance, where it differs from the spec's
        self.running = running
        self.sink_fields = sink_fields  # component -> sink stream -> its fields
        self._topology: Topology | None = None
        self._system: Topology | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_topology"] = state["_system"] = None
        return state

    @property
    def topology(self) -> Topology:
        if self._topology is None:
            self._topology = Topology.from_bytes(self.topology_bytes)
        return self._topology

    @property
    def system(self) -> Topology:
        if self._system is None:
            self._system = Topology.from_bytes(self.system_bytes)
        return self._system

    def component_conf(self, component: str) -> dict[str, Any]:
        return {**self.conf, **self.topology.components[component].config}

    def instantiate(self, component: str) -> Any:
        blob = self.blobs.get(component)
        return pickle.loads(blob) if blob is not None else self.topology.components[component].instantiate()

    def context(self, task: int, conf: Mapping[str, Any]) -> TopologyContext:
        every = frozenset(self.task_to_component)
        return TopologyContext(self.topology_id, self.system, self.task_to_component,
                               self.component_to_tasks, task, every, None, conf)

    def routes(self, component: str, task: int, context: TopologyContext) -> dict:
        topo, running = self.topology, self.running

        def subscribers(comp: str, stream: str) -> list:
            # Excluded bolts' groupings do not run (their code may not suit the input); a
            # direct emit to an excluded task stays legal, and Fan drops its record.
            return [(b, gr) for b, gr in topo.subscribers(comp, stream) if b in running or gr.kind == DIRECT]

        return make_routes(component, task, dict(topo.components[component].streams), subscribers,
                           self.component_to_tasks.__getitem__, frozenset(self.task_to_component), context)


_plans: dict[str, WorkerPlan] = {}


class PlanRef:
    """What task closures carry: the run's token and the broadcast holding its plan. The
    plan is unpickled once per worker process and run (Python workers are reused)."""

    def __init__(self, token: str, broadcast: Any) -> None:
        self.token, self.broadcast = token, broadcast

    def get(self) -> WorkerPlan:
        plan = _plans.get(self.token)
        if plan is None:
            value = self.broadcast.value
            plan = pickle.loads(value) if isinstance(value, bytes) else value
            if len(_plans) >= 8:
                _plans.clear()
            _plans[self.token] = plan
        return plan


def _plan(ref: PlanRef) -> WorkerPlan:
    return ref.get()


def _stat(component: str, **counts: Any) -> dict[str, dict[str, Any]]:
    return {component: counts}


class StatsParam:
    """Accumulator of per-component counts: numbers add up, dicts merge, lists concatenate
    (error texts, kept to the first few)."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:  # noqa: N802 (pyspark's name)
        return merge_stats(a, b)


def merge_stats(a: dict, b: dict) -> dict:
    for key, value in b.items():
        if key not in a:
            a[key] = merge_stats({}, value) if isinstance(value, dict) else (
                list(value)[:ERRORS_KEPT] if isinstance(value, list) else value)
        elif isinstance(value, dict):
            merge_stats(a[key], value)
        elif isinstance(value, list):
            a[key] = (a[key] + value)[:ERRORS_KEPT]
        else:
            a[key] += value
    return a


def spout_partition(broadcast: Any, spout: str, stream: str, stats: Any, types: Any, plain: Any,
                    index: int, rows: Iterable[Any]) -> Iterator[tuple]:
    """Input rows -> the records the spout would emit: partition ``index`` plays spout task
    ``tasks[index % n]``, and each row is routed by that task's grouping choosers."""
    plan = _plan(broadcast)
    tasks = plan.component_to_tasks[spout]
    task = tasks[index % len(tasks)]
    conf = plan.component_conf(spout)
    route = plan.routes(spout, task, plan.context(task, conf))[stream]
    keep = stream in plan.keep.get(spout, ())
    choose, fixed = route.choose, route.fixed
    tracker = TypeTracker.for_component(plan, spout)
    see = tracker.see if tracker is not None else None
    n = 0
    for row in rows:
        values = plain(row) if plain is not None else list(row)
        n += 1
        if keep:
            if see is not None:
                see(stream, values)
            yield (stream, task, values, fixed or choose(values))
    if stats is not None:
        stats.add(_stat(spout, emitted={stream: n}))
    if tracker is not None and types is not None:
        types.add(tracker.result(spout))


class TypeTracker:
    """Column types of one task's values on its sink streams, found as they are emitted
    (so a sink needs no extra pass). A value with no column type marks the stream
    broken, with the reason, instead of ending the task."""

    def __init__(self, fields: Mapping[str, list[str]]) -> None:
        self.fields = fields
        self.types = {s: [_schema.NULL] * len(f) for s, f in fields.items()}
        self.broken: dict[str, str] = {}

    @classmethod
    def for_component(cls, plan: WorkerPlan, component: str) -> "TypeTracker | None":
        fields = plan.sink_fields.get(component)
        return cls(fields) if fields else None

    def see(self, stream: str, values: list) -> None:
        ts = self.types.get(stream)
        if ts is None:
            return
        i = 0
        scalars, describe, long = _schema.SCALARS, _schema.describe, _schema.LONG
        try:
            for i, v in enumerate(values):
                if v is not None:
                    t = scalars.get(type(v))
                    if t is None or t is long and not -_BIG <= v < _BIG:
                        t = describe(v)  # containers, subclasses; raises for a too-big int
                    if t is not ts[i] and t != ts[i]:
                        ts[i] = _schema.merge(ts[i], t)
        except _schema.SchemaError as exc:
            self.broken[stream] = f"field {self.fields[stream][i]!r}: {exc}"
            del self.types[stream]

    def result(self, component: str) -> dict:
        out: dict = {(component, s): ts for s, ts in self.types.items()}
        out.update({(component, s): why for s, why in self.broken.items()})
        return out


class TypesParam:
    """Accumulator of (component, stream) -> column types, or the reason there are none."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:  # noqa: N802 (pyspark's name)
        for key, types in b.items():
            have = a.get(key)
            if have is None or isinstance(have, str):
                a[key] = have if isinstance(have, str) else types
            elif isinstance(types, str):
                a[key] = types
            else:
                merged = []
                for i, (x, y) in enumerate(zip(have, types)):
                    try:
                        merged.append(_schema.merge(x, y))
                    except _schema.SchemaError as exc:
                        a[key] = f"field #{i + 1}: {exc}"
                        break
                else:
                    a[key] = merged
        return a


class Fan:
    """Records of ``component`` -> (task, input) pairs for the tasks in [lo, hi]."""

    def __init__(self, component: str, lo: int, hi: int) -> None:
        self.component, self.lo, self.hi = component, lo, hi

    def __call__(self, record: tuple) -> list:
        stream, src_task, values, targets = record
        lo, hi = self.lo, self.hi
        return [(t, (self.component, stream, src_task, values)) for t in targets if lo <= t <= hi]


class TaskIndex:
    """Partitioner: task id -> its index among its component's (contiguous) tasks."""

    def __init__(self, first: int) -> None:
        self.first = first

    def __call__(self, task: int) -> int:
        return task - self.first


def bolt_partition(broadcast: Any, component: str, stats: Any, types: Any, index: int,
                   pairs: Iterable[tuple]) -> Iterator[tuple]:
    """Run task ``index`` of ``component`` over its input; yields its records."""
    plan = _plan(broadcast)
    task = plan.component_to_tasks[component][index]
    conf = plan.component_conf(component)
    topology = plan.topology
    counts = {"executed": 0, "errors": 0}
    texts: list[str] = []

    def report(error: BaseException | str, where: str = "report_error") -> None:
        counts["errors"] += 1
        if isinstance(error, BaseException):
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        else:
            text = str(error)
        if len(texts) < ERRORS_KEPT:
            texts.append(f"task {task} {where}: {text.strip()}")
        log.error("user code raised", component=component, task=task, where=where,
                  error=text.strip().splitlines()[-1] if text.strip() else "")

    bolt = plan.instantiate(component)
    context = plan.context(task, conf)
    coll = BatchBoltCollector(component, task, plan.routes(component, task, context), report,
                              plan.keep.get(component, frozenset()))
    tracker = TypeTracker.for_component(plan, component)

    def drain() -> list:
        records = coll.take()
        if tracker is not None:
            for r in records:
                tracker.see(r[0], r[2])
        return records

    try:
        bolt.prepare(conf, context, coll)
        batch = BatchTask(bolt, conf, component, index)  # state and windows (squall.spark.stateful)
    except Exception as exc:
        raise BoltTaskError(f"bolt {component!r} task {task}: prepare raised "
                            f"{type(exc).__name__}: {exc}") from exc
    if coll.out:
        yield from drain()
    execute = bolt.execute
    basic = bool(getattr(bolt, "_auto_anchor", False))
    sources: dict[tuple, Source] = {}

    def run_one(tup: Tuple) -> None:
        # The streaming executor's rules: BasicBolt acks after execute unless it failed;
        # an exception is reported and fails the tuple; the task goes on.
        if basic:
            coll._auto, coll._failed = tup, False
            try:
                execute(tup)
            except Exception as exc:
                report(exc, "execute")
                coll.fail(tup)
            else:
                if not coll._failed:
                    coll.ack(tup)
            coll._auto = None
        else:
            try:
                execute(tup)
            except Exception as exc:
                report(exc, "execute")
                coll.fail(tup)
        counts["executed"] += 1

    for _, (src_comp, stream, src_task, values) in pairs:
        key = (src_comp, src_task, stream)
        src = sources.get(key)
        if src is None:
            src = sources[key] = Source(src_comp, src_task, stream, topology.stream_fields(src_comp, stream))
        run_one(Tuple(values, src))
        if len(coll.out) >= DRAIN_BATCH:  # hand records on in batches: cheaper than one by one
            yield from drain()
    if coll.out:
        yield from drain()
    batch.finish()
    if coll.out:
        yield from drain()
    batch.close()
    period = plan.ticks.get(component)
    if period is not None:
        run_one(Tuple([period], Source(SYSTEM_COMPONENT, -1, TICK_STREAM, _TICK_FIELDS)))
        if coll.out:
            yield from drain()
    try:
        bolt.cleanup()
    except Exception as exc:
        report(exc, "cleanup")
    if coll.out:
        yield from drain()
    if stats is not None:
        emitted = {s: r.emitted for s, r in coll._routes.items()}
        stats.add(_stat(component, tasks=1, executed=counts["executed"], acked=coll.acked,
                        failed=coll.failed, errors=counts["errors"], emitted=emitted, error_texts=texts))
    if tracker is not None and types is not None:
        types.add(tracker.result(component))
