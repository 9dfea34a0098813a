"""TopologyContext: what a task knows about itself and the topology around it."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.clock import SYSTEM_CLOCK, Clock
from squall.metrics import IMetric, MetricRegistry
from squall.topology import Topology
from squall.tuple import Fields


class TopologyContext:
    def __init__(self, topology_id: str, topology: Topology, task_to_component: Mapping[int, str],
                 component_to_tasks: Mapping[str, list[int]], task_id: int,
                 worker_tasks: frozenset[int], worker_port: int | None = None,
                 conf: Mapping[str, Any] | None = None, clock: Clock = SYSTEM_CLOCK,
                 metrics: MetricRegistry | None = None) -> None:
        self.topology_id = topology_id
        self._topology = topology
        self._task_to_component = task_to_component
        self._component_to_tasks = component_to_tasks
        self._task_id = task_id
        self._worker_tasks = worker_tasks
        self.worker_port = worker_port
        self.conf = dict(conf or {})
        # The clock the task's time-based decisions read (windows, timeouts): the worker's
        # (squall.clock), which tests replace with a FakeClock.
        self.clock = clock
        # The runtime passes the task's registry, which its stats read; elsewhere (a
        # backfill, a test) a private one keeps register_metric working.
        self.metrics = metrics if metrics is not None else MetricRegistry()

    def register_metric(self, name: str, metric: IMetric, time_bucket_secs: float) -> IMetric:
        """Publish ``metric`` of this task under ``name`` (Storm's ``registerMetric``): read
        every ``time_bucket_secs``, shown in Prometheus and ``squall status``. Returns it."""
        return self.metrics.register(name, metric, time_bucket_secs)

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

    def component_id(self, task_id: int) -> str:
        return self._task_to_component[task_id]

    def component_tasks(self, component: str) -> list[int]:
        return list(self._component_to_tasks.get(component, []))

    @property
    def task_to_component(self) -> dict[int, str]:
        return dict(self._task_to_component)

    @property
    def worker_tasks(self) -> list[int]:
        return sorted(self._worker_tasks)

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
