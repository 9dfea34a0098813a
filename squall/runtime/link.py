"""The seam between executors and their worker: everything an executor may ask of it.

An executor (squall.runtime.executor) and the thread that runs it see their worker only
through a :class:`WorkerLink`: the facts of the topology it needs to build its tasks'
contexts and routes, its receive queue, the clock, where to hand batches and errors, and
the worker's flags (topology active, backpressure). ``WorkerRuntime`` makes one link and
keeps its flags current; a test can make one over real queues and step executors by hand.

A plain class with slots and no properties, so that the hot path reads plain attributes
(and a compiled build of the runtime reads them directly).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from squall.clock import SYSTEM_CLOCK, Clock
from squall.context import TopologyContext, WorkerContext
from squall.metrics import MetricRegistry
from squall.runtime.load import TaskLoads
from squall.runtime.queues import BatchQueue
from squall.topology import Topology

Deliver = Callable[[int, list], None]
ErrorReport = Callable[[str, int, str], None]   # (component, task, text)
Drop = Callable[..., None]                       # DropCounter.add: (cause, n, executor, **detail)


class WorkerTopology:
    """What a worker's executors know of their topology: its system topology (with the
    acker and checkpoint edges), task maps, the worker's own tasks and its config, and the
    WorkerContext its tasks share (resources; their metric registries, for ``__system``)."""

    __slots__ = ("topology_id", "system", "task_to_component", "component_to_tasks", "acker_tasks",
                 "local_tasks", "port", "conf", "worker")

    def __init__(self, topology_id: str, system: Topology, task_to_component: Mapping[int, str],
                 component_to_tasks: Mapping[str, list[int]], local_tasks: frozenset[int], port: int,
                 conf: Mapping[str, Any], acker: str, worker: WorkerContext | None = None) -> None:
        self.topology_id = topology_id
        self.system = system
        self.task_to_component = task_to_component
        self.component_to_tasks = component_to_tasks
        self.acker_tasks: list[int] = list(component_to_tasks.get(acker, []))
        self.local_tasks = local_tasks
        self.port = port
        self.conf = conf
        self.worker = worker if worker is not None else WorkerContext(
            topology_id, conf, task_to_component, component_to_tasks, local_tasks, port)

    def context(self, task: int, conf: Mapping[str, Any], clock: Clock,
                metrics: MetricRegistry | None = None) -> TopologyContext:
        """The TopologyContext of one task (``conf``: its component's merged config;
        ``metrics``: the task's registry for ``register_metric``, which its stats read)."""
        if metrics is not None:
            self.worker.track_metrics(task, metrics)
        return TopologyContext(self.topology_id, self.system, self.task_to_component, self.component_to_tasks,
                               task, self.local_tasks, self.port, conf, clock, metrics, self.worker)


def _nothing_dies(component: str, executor: tuple[int, int], exc: BaseException) -> None:
    pass


class WorkerLink:
    """What an executor may ask of its worker.

    Read by executors: ``topology`` (WorkerTopology), ``clock``, ``active`` (is the
    topology active: spouts emit only then), ``bp_tasks`` (this worker's tasks under
    backpressure: a bolt relieves them as its queue drains), ``stopping``, ``cpu``.
    Called by executors: ``queue(task)``, ``neighbours(task)``, ``deliver(task, tuples)``, ``report_error(component,
    task, text)``, ``drop(cause, n, executor, error=...)``, ``overloaded()`` (should spouts
    hold their emits), ``relieve(task_ids, queue)``, ``executor_died(component, executor,
    exc)``, ``queued(task)`` (tuples queued ahead of a batch for ``task``: at its executor,
    or at the transfer thread; None: not known, and a spout's partial batch waits its
    flush interval). Written by the worker: ``active`` and ``bp_tasks``. ``loads``: the worker's
    view of task loads for load-aware shuffles (squall.runtime.load.TaskLoads), or None
    to shuffle evenly.
    """

    __slots__ = ("topology", "clock", "active", "bp_tasks", "stopping", "cpu", "queues", "deliver",
                 "report_error", "drop", "overloaded", "relieve", "executor_died", "loads", "queued")

    def __init__(self, topology: WorkerTopology, queues: Mapping[int, BatchQueue], deliver: Deliver,
                 report_error: ErrorReport, drop: Drop, overloaded: Callable[[], bool],
                 relieve: Callable[[list[int], BatchQueue], None], clock: Clock = SYSTEM_CLOCK,
                 stopping: threading.Event | None = None, cpu: int | None = None,
                 executor_died: Callable[[str, tuple[int, int], BaseException], None] = _nothing_dies,
                 loads: TaskLoads | None = None, queued: Callable[[int], int] | None = None) -> None:
        self.topology = topology
        self.clock = clock
        self.active = False
        self.bp_tasks: frozenset[int] = frozenset()
        self.stopping = stopping if stopping is not None else threading.Event()
        self.cpu = cpu
        self.queues = queues
        self.deliver = deliver
        self.report_error = report_error
        self.drop = drop
        self.overloaded = overloaded
        self.relieve = relieve
        self.executor_died = executor_died
        self.loads = loads
        self.queued = queued

    def queue(self, task: int) -> BatchQueue:
        """The receive queue of the executor that runs ``task``."""
        return self.queues[task]

    def neighbours(self, task: int) -> list[BatchQueue]:
        """The receive queues of the other executors on the thread that runs ``task``
        (the queues one thread serves share its doorbell)."""
        own = self.queues[task]
        bell = own.doorbell
        return list({id(q): q for q in self.queues.values() if q is not own and q.doorbell is bell}.values())
