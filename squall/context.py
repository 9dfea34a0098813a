"""TopologyContext: what a task knows about itself and the topology around it; and
WorkerContext: what a worker's tasks and hooks share (Storm's WorkerTopologyContext)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from squall.clock import SYSTEM_CLOCK, Clock
from squall.errors import SquallError
from squall.metrics import IMetric, MetricRegistry
from squall.topology import Topology
from squall.tuple import Fields

MAX_RESOURCES = 10_000  # keys in one worker's resources


class ResourceError(SquallError, ValueError):
    """A resource set under a key that is not a string, or past MAX_RESOURCES keys."""


class Resources:
    """A worker's user resources: one dict its tasks and worker hooks share (Storm's
    ``WorkerUserContext.setResource`` / ``TopologyContext.getResource``). Safe from every
    executor thread; ``setdefault`` makes a value once however many tasks ask at once."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        with self._lock:
            self._check(key)
            self._values[key] = value

    def setdefault(self, key: str, make: Callable[[], Any]) -> Any:
        """The value under ``key``; if there is none, ``make()`` is called once (under the
        lock, so other tasks asking meanwhile wait for it) and its result kept."""
        if key in self._values:
            return self._values[key]
        with self._lock:
            if key not in self._values:
                self._check(key)
                self._values[key] = make()
            return self._values[key]

    def keys(self) -> list[str]:
        return sorted(self._values)

    def _check(self, key: Any) -> None:
        if not isinstance(key, str) or not key:
            raise ResourceError(f"a resource key must be a non-empty string, got {key!r}")
        if key not in self._values and len(self._values) >= MAX_RESOURCES:
            raise ResourceError(f"resource {key!r}: a worker holds at most {MAX_RESOURCES} resources")


class _TaskMaps:
    """What every context knows of the topology's tasks (Storm's GeneralTopologyContext)."""

    def __init__(self, task_to_component: Mapping[int, str], component_to_tasks: Mapping[str, list[int]],
                 worker_tasks: frozenset[int]) -> None:
        self._task_to_component = task_to_component
        self._component_to_tasks = component_to_tasks
        self._worker_tasks = worker_tasks

    def component_id(self, task_id: int) -> str:
        return self._task_to_component[task_id]

    def component_tasks(self, component: str) -> list[int]:
        return list(self._component_to_tasks.get(component, []))

    @property
    def task_to_component(self) -> dict[int, str]:
        return dict(self._task_to_component)

    @property
    def worker_tasks(self) -> list[int]:
        """The tasks of this worker (its ``__system`` task, -1, among them when it has one)."""
        return sorted(self._worker_tasks)


class WorkerContext(_TaskMaps):
    """One worker as its tasks and worker hooks see it (Storm's WorkerTopologyContext, with
    the ``setResource`` of its WorkerUserContext): the topology's ids and task maps, this
    worker's port, host and tasks, its configuration and its shared ``resources``.

    The runtime also keeps here the metric registry of each of the worker's tasks, which the
    ``__system`` component reads for the topology's metrics consumers."""

    def __init__(self, topology_id: str, conf: Mapping[str, Any], task_to_component: Mapping[int, str],
                 component_to_tasks: Mapping[str, list[int]], worker_tasks: frozenset[int],
                 port: int | None = None, host: str | None = None, keep_datapoints: bool = False) -> None:
        super().__init__(task_to_component, component_to_tasks, worker_tasks)
        self.topology_id = topology_id
        self.conf = conf
        self.worker_port = port
        self.worker_host = host
        self.started_at = time.time()
        self.resources = Resources()
        self._registries: dict[int, MetricRegistry] = {}
        self._keep_datapoints = keep_datapoints

    def get_resource(self, key: str, default: Any = None) -> Any:
        return self.resources.get(key, default)

    def set_resource(self, key: str, value: Any) -> None:
        self.resources.set(key, value)

    def track_metrics(self, task: int, registry: MetricRegistry) -> None:
        """Keep ``task``'s registry for the ``__system`` component (idempotent)."""
        if self._registries.get(task) is not registry:
            if self._keep_datapoints:
                registry.keep_datapoints()
            self._registries[task] = registry

    def task_metrics(self) -> dict[int, MetricRegistry]:
        """task -> its metric registry, for the tasks whose contexts were made so far."""
        return dict(self._registries)


class TopologyContext(_TaskMaps):
    def __init__(self, topology_id: str, topology: Topology, task_to_component: Mapping[int, str],
                 component_to_tasks: Mapping[str, list[int]], task_id: int,
                 worker_tasks: frozenset[int], worker_port: int | None = None,
                 conf: Mapping[str, Any] | None = None, clock: Clock = SYSTEM_CLOCK,
                 metrics: MetricRegistry | None = None, worker: WorkerContext | None = None) -> None:
        super().__init__(task_to_component, component_to_tasks, worker_tasks)
        self.topology_id = topology_id
        self._topology = topology
        self._task_id = task_id
        self.worker_port = worker_port
        self.conf = dict(conf or {})
        # The clock the task's time-based decisions read (windows, timeouts): the worker's
        # (squall.clock), which tests replace with a FakeClock.
        self.clock = clock
        # The runtime passes the task's registry, which its stats read; elsewhere (a
        # backfill, a test) a private one keeps register_metric working.
        self.metrics = metrics if metrics is not None else MetricRegistry()
        # The worker's shared resources; outside a worker (a backfill task, a test) the task's own.
        self.worker = worker
        self._resources = worker.resources if worker is not None else Resources()

    def register_metric(self, name: str, metric: IMetric, time_bucket_secs: float) -> IMetric:
        """Publish ``metric`` of this task under ``name`` (Storm's ``registerMetric``): read
        every ``time_bucket_secs``, shown in Prometheus and ``squall status`` and handed to
        the topology's metrics consumers. Returns it."""
        return self.metrics.register(name, metric, time_bucket_secs)

    def registered_metric(self, name: str) -> IMetric | None:
        """The metric registered under ``name`` (Storm's ``getRegisteredMetricByName``)."""
        return self.metrics.get(name)

    def get_resource(self, key: str, default: Any = None) -> Any:
        """A resource the worker's tasks share (Storm's ``getResource``): set by a worker
        hook's ``start`` or by any task of this worker."""
        return self._resources.get(key, default)

    def set_resource(self, key: str, value: Any) -> None:
        """Share ``value`` under ``key`` with every task of this worker."""
        self._resources.set(key, value)

    def setdefault_resource(self, key: str, make: Callable[[], Any]) -> Any:
        """The shared resource under ``key``, made with ``make()`` by the first task that
        asks (one connection pool per worker, whichever task prepares first)."""
        return self._resources.setdefault(key, make)

    @property
    def this_task_id(self) -> int:
        return self._task_id

    @property
    def this_component_id(self) -> str:
        return self._task_to_component[self._task_id]

    @property
    def this_task_index(self) -> int:
        """Position of this task among its component's tasks (0-based)."""
        return self._component_to_tasks[self.this_component_id].index(self._task_id)

    def component_output_fields(self, component: str, stream: str = "default") -> Fields:
        return self._topology.stream_fields(component, stream)

    def this_output_streams(self) -> list[str]:
        return list(self._topology.components[self.this_component_id].streams)

    def this_sources(self) -> dict[tuple[str, str], str]:
        """(component, stream) -> grouping kind of each input of this component."""
        spec = self._topology.components[self.this_component_id]
        return {(s.component, s.stream): s.grouping.kind for s in spec.inputs}

    def this_targets(self) -> dict[str, dict[str, str]]:
        """stream -> {subscribing component: grouping kind}."""
        me = self.this_component_id
        return {s: {c: gr.kind for c, gr in self._topology.subscribers(me, s)}
                for s in self._topology.components[me].streams}
