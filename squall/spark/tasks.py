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
from squall.runtime.collectors import make_routes
from squall.spark.collector import BatchBoltCollector
from squall.topology import Topology
from squall.tuple import SYSTEM_COMPONENT, TICK_STREAM, Fields, Source, Tuple

log = structlog.get_logger("squall.spark")

ERRORS_KEPT = 5
_TICK_FIELDS = Fields(["rate_secs"])


class BoltTaskError(RuntimeError):
    """A bolt task that could not run (its ``prepare`` raised); ends the Spark job."""


class WorkerPlan:
    """The part of a Plan that workers need, shipped once per run as a broadcast."""

    def __init__(self, topology_id: str, topology: Topology, system: Topology, conf: dict[str, Any],
                 task_to_component: dict[int, str], component_to_tasks: dict[str, list[int]],
                 keep: dict[str, frozenset[str]], ticks: dict[str, float],
                 blobs: dict[str, bytes]) -> None:
        self.topology_id = topology_id
        self.topology_bytes = topology.to_bytes()
        self.system_bytes = system.to_bytes()
        self.conf = conf
        self.task_to_component = task_to_component
        self.component_to_tasks = component_to_tasks
        self.keep = keep
        self.ticks = ticks
        self.blobs = blobs   # component -> pickled instance, where it differs from the spec's
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
        # Every subscriber counts, excluded ones too, so that emit returns what it would
        # in streaming; records for tasks that do not run are dropped by Fan.
        topo = self.topology
        tasks_of = self.component_to_tasks.__getitem__
        return make_routes(component, task, dict(topo.components[component].streams), topo.subscribers,
                           tasks_of, frozenset(self.task_to_component), context)


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


def spout_partition(broadcast: Any, spout: str, stream: str, stats: Any, plain: Any,
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
    n = 0
    for row in rows:
        values = plain(row) if plain is not None else list(row)
        n += 1
        if keep:
            yield (stream, task, values, fixed or choose(values))
    if stats is not None:
        stats.add(_stat(spout, emitted={stream: n}))


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


def bolt_partition(broadcast: Any, component: str, stats: Any, index: int,
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
    try:
        bolt.prepare(conf, context, coll)
    except Exception as exc:
        raise BoltTaskError(f"bolt {component!r} task {task}: prepare raised "
                            f"{type(exc).__name__}: {exc}") from exc
    if coll.out:
        yield from coll.take()
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
        if coll.out:
            yield from coll.take()
    period = plan.ticks.get(component)
    if period is not None:
        run_one(Tuple([period], Source(SYSTEM_COMPONENT, -1, TICK_STREAM, _TICK_FIELDS)))
        if coll.out:
            yield from coll.take()
    try:
        bolt.cleanup()
    except Exception as exc:
        report(exc, "cleanup")
    if coll.out:
        yield from coll.take()
    if stats is not None:
        emitted = {s: r.emitted for s, r in coll._routes.items()}
        stats.add(_stat(component, tasks=1, executed=counts["executed"], acked=coll.acked,
                        failed=coll.failed, errors=counts["errors"], emitted=emitted, error_texts=texts))
