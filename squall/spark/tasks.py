"""What a run ships to Spark's Python workers (the plan), and what comes back (counts).

``WorkerPlan`` is broadcast once per run; ``PlanRef`` is what task closures carry, and
unpickles the plan once per Python worker process. ``StatsParam`` and ``TypesParam``
are the accumulators for per-component counts and sink column types. Nothing here
imports pyspark.
"""
from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

from squall.context import TopologyContext
from squall.contrib.columns import ColumnTypes
from squall.errors import SquallError
from squall.grouping import is_direct
from squall.runtime.collectors import make_routes
from squall.spark.collector import BoxRoute
from squall.spark.stages import LevelLayout, Stage
from squall.topology import Topology

ERRORS_KEPT = 5


class BoltTaskError(SquallError, RuntimeError):
    """A bolt task that could not run (its ``prepare`` raised); ends the Spark job."""


class WorkerPlan:
    """The part of a run that workers need."""

    def __init__(self, topology_id: str, topology: Topology, system: Topology, conf: dict[str, Any],
                 task_to_component: dict[int, str], component_to_tasks: dict[str, list[int]],
                 ticks: dict[str, float], blobs: dict[str, bytes], running: frozenset[str],
                 sinks: dict[str, tuple[str, str]], stages: list[Stage], layouts: list[LevelLayout],
                 inputs: dict[str, Any], progress: Any = None) -> None:
        self.topology_id = topology_id
        self.topology_bytes = topology.to_bytes()
        self.system_bytes = system.to_bytes()
        self.conf = conf
        self.task_to_component = task_to_component
        self.component_to_tasks = component_to_tasks
        self.ticks = ticks
        self.blobs = blobs   # component -> pickled instance, where it differs from the spec's
        self.running = running
        self.sinks = sinks   # sink name -> (component, stream)
        self.stages = stages
        self.layouts = layouts  # per level: how its stage partitions fill Spark partitions
        self.inputs = inputs  # input key -> what its stage reads (squall.spark.inputs)
        self.progress = progress  # where tasks send progress (squall.spark.progress), or None
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

    def routes(self, component: str, task: int, context: TopologyContext, stage: Stage,
               partition: int) -> dict[str, BoxRoute]:
        """The routes of one task running in ``partition`` of ``stage``: a subscriber in
        the same stage is offered only its tasks in this partition."""
        topo, running = self.topology, self.running
        fused = set(stage.bolts)
        local = frozenset(t for c in fused for t in stage.partition_tasks(self.component_to_tasks[c], partition))

        def subscribers(comp: str, stream: str) -> list:
            # Excluded bolts' groupings do not run (their code may not suit the input); a
            # direct emit to an excluded task stays legal, and its values are dropped.
            return [(b, gr) for b, gr in topo.subscribers(comp, stream) if b in running or is_direct(gr)]

        def tasks_of(bolt: str) -> list[int]:
            tasks = self.component_to_tasks[bolt]
            return stage.partition_tasks(tasks, partition) if bolt in fused else tasks

        streams = dict(topo.components[component].streams)
        routes = make_routes(component, task, streams, subscribers, tasks_of, local, context)
        return {s: BoxRoute.of(r, any(not is_direct(gr) for _, gr in subscribers(component, s)))
                for s, r in routes.items()}


_plans: dict[str, WorkerPlan] = {}


class PlanRef:
    """The run's token and the broadcast holding its plan. The plan is unpickled once per
    worker process and run (Python workers are reused)."""

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


class TypesParam:
    """Accumulator of sink name -> ColumnTypes."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:  # noqa: N802 (pyspark's name)
        for sink, types in b.items():
            have = a.get(sink)
            if have is None:
                a[sink] = ColumnTypes(types.fields).add(types)
            else:
                have.add(types)
        return a
