"""Metrics consumers (Storm's IMetricsConsumer): where the data points of every registered
metric of a topology go.

A consumer is registered in the topology's configuration, as in Storm::

    topology.metrics.consumer.register:
      - class: mypackage.consumers.StatsdConsumer
        parallelism.hint: 1
        argument: {"host": "127.0.0.1", "port": 8125}

Each entry runs as a bolt, ``__metrics<class>`` (``#2``, ``#3``... for the same class
registered again), with ``parallelism.hint`` tasks. The ``__system`` component of every
worker (squall.system_component) reads the worker's task metrics as their buckets end and
sends each task's data points to those bolts, which hand them to ``handle_data_points``.

The consumer's calls run on a thread of their own, fed through a queue of at most
``max.retain.metric.tuples`` entries (default 100): a consumer that is slow or stuck
loses the oldest data points (counted, reported), never the worker's tuples. A consumer
that raises is reported and keeps receiving; its ``cleanup`` gets CLEANUP_SECS.
"""

import importlib
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import structlog

from squall.components import Bolt
from squall.context import TopologyContext
from squall.metrics import CountMetric
from squall.tuple import Tuple

METRICS_COMPONENT_PREFIX = "__metrics"
CLEANUP_SECS = 5.0  # the longest a worker's shutdown waits for a consumer to flush and clean up
# Storm's own consumer, so a Storm topology's configuration runs as it is.
ALIASES = {"org.apache.storm.metric.LoggingMetricsConsumer": "squall.metrics_consumer.LoggingMetricsConsumer"}
_REPORT_AT = (1, 10, 100, 1000)  # the dropped counts at which a stuck consumer is reported again (then every 10000)


class TaskInfo(NamedTuple):
    """Where a batch of data points comes from (Storm's IMetricsConsumer.TaskInfo)."""

    src_worker_host: str | None
    src_worker_port: int | None
    src_component_id: str
    src_task_id: int
    timestamp: float             # when the buckets were read, seconds since the epoch
    update_interval_secs: float  # the metrics' time bucket


class DataPoint(NamedTuple):
    """One metric's value for one bucket: a number, ``{key: number}`` for a multi metric,
    or None (a gauge never set)."""

    name: str
    value: Any


class MetricsConsumer:
    """Storm's IMetricsConsumer. Instantiated with no arguments in every task of its bolt."""

    def prepare(self, conf: Mapping[str, Any], argument: Any, context: TopologyContext,
                error_reporter: Callable[[BaseException | str], None]) -> None:
        """``argument`` is the registration's ``argument``; ``error_reporter`` reports an
        error as the bolt's (log and ``squall errors``)."""

    def handle_data_points(self, task_info: TaskInfo, data_points: list[DataPoint]) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        """The worker is shutting down."""


class LoggingMetricsConsumer(MetricsConsumer):
    """Writes each data point to the worker log (Storm's LoggingMetricsConsumer)."""

    def prepare(self, conf, argument, context, error_reporter):
        self.log = structlog.get_logger("squall.metrics").bind(topology=context.topology_id)

    def handle_data_points(self, task_info, data_points):
        for point in data_points:
            self.log.info("metric", component=task_info.src_component_id, task=task_info.src_task_id,
                          host=task_info.src_worker_host, port=task_info.src_worker_port,
                          name=point.name, value=point.value, at=round(task_info.timestamp, 3))


class Registration(NamedTuple):
    """One checked entry of topology.metrics.consumer.register (squall.config checks them)."""

    component_id: str
    class_path: str
    parallelism: int
    argument: Any
    max_retain: int
    whitelist: tuple[str, ...]
    blacklist: tuple[str, ...]


def registrations(conf: Mapping[str, Any]) -> list[Registration]:
    """The consumers ``conf`` registers, with their bolts' component ids (Storm's naming)."""
    seen: dict[str, int] = {}
    out = []
    for entry in conf.get("topology.metrics.consumer.register") or []:
        path = str(entry["class"]).strip()
        seen[path] = seen.get(path, 0) + 1
        cid = METRICS_COMPONENT_PREFIX + path + (f"#{seen[path]}" if seen[path] > 1 else "")
        out.append(Registration(cid, path, int(entry.get("parallelism.hint", 1)), entry.get("argument"),
                                int(entry.get("max.retain.metric.tuples", 100)),
                                tuple(entry.get("whitelist", ())), tuple(entry.get("blacklist", ()))))
    return out


def consumer_class(path: str) -> type:
    """The class a registration names (``module.Class``, or Storm's class names in ALIASES);
    ValueError says why it cannot be used."""
    target = ALIASES.get(path, path)
    module, _, name = target.rpartition(".")
    if not module:
        raise ValueError(f"metrics consumer {path!r} is not a module.Class path")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"metrics consumer {path!r} cannot be imported: {exc}") from None
    if not isinstance(cls, type) or not callable(getattr(cls, "handle_data_points", None)):
        raise ValueError(f"metrics consumer {path!r} is not a class with handle_data_points")
    return cls


def _name_filter(reg: Registration) -> Callable[[str], bool] | None:
    if reg.whitelist:
        allow = [re.compile(p) for p in reg.whitelist]
        return lambda name: any(p.fullmatch(name) for p in allow)
    if reg.blacklist:
        deny = [re.compile(p) for p in reg.blacklist]
        return lambda name: not any(p.fullmatch(name) for p in deny)
    return None


def parse_datapoints(values: Sequence[Any]) -> tuple[TaskInfo, list[DataPoint]]:
    """A ``__metrics`` tuple's values as Storm's (TaskInfo, [DataPoint]); ValueError when
    they do not have the shape the ``__system`` component sends."""
    info, points = values
    if type(info) is not list or len(info) != 6 or type(points) is not list:
        raise ValueError(f"not [task_info, data_points]: {values!r:.120}")
    host, port, component, task, at, interval = info
    if not isinstance(component, str) or type(task) is not int or not isinstance(at, (int, float)) \
            or not isinstance(interval, (int, float)):
        raise ValueError(f"malformed task info {info!r:.120}")
    out = []
    for p in points:
        if type(p) is not list or len(p) != 2 or not isinstance(p[0], str):
            raise ValueError(f"malformed data point {p!r:.120}")
        out.append(DataPoint(p[0], p[1]))
    return TaskInfo(host, port, component, task, float(at), float(interval)), out


class _ConsumerThread(threading.Thread):
    """Runs one consumer: prepare, then handle_data_points per queued batch, then cleanup."""

    def __init__(self, make: Callable[[], MetricsConsumer], report: Callable[[BaseException | str], None],
                 handled: CountMetric, failures: CountMetric, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.make, self.report = make, report
        self.handled, self.failures = handled, failures
        self.items: deque[tuple[TaskInfo, list[DataPoint]]] = deque()
        self.cond = threading.Condition()
        self.stopping = False

    def put(self, item: tuple[TaskInfo, list[DataPoint]], bound: int) -> bool:
        """Queue ``item``; False when the oldest entry had to go to make room."""
        with self.cond:
            full = len(self.items) >= bound
            if full:
                self.items.popleft()
            self.items.append(item)
            self.cond.notify()
        return not full

    def run(self) -> None:
        try:
            consumer: MetricsConsumer | None = self.make()
        except Exception as exc:  # noqa: BLE001 - a consumer that cannot start must not end the worker
            self.report(exc)
            consumer = None
        while True:
            with self.cond:
                while not self.items and not self.stopping:
                    self.cond.wait()
                if not self.items:
                    break
                info, points = self.items.popleft()
            if consumer is None:
                self.failures.incr()
                continue
            try:
                consumer.handle_data_points(info, points)
                self.handled.incr()
            except Exception as exc:  # noqa: BLE001 - reported; the next batch goes on
                self.failures.incr()
                self.report(exc)
        if consumer is not None:
            try:
                consumer.cleanup()
            except Exception as exc:  # noqa: BLE001
                self.report(exc)

    def stop(self, timeout: float) -> bool:
        """Handle what is queued, clean up; False if that took longer than ``timeout``."""
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.join(timeout)
        return not self.is_alive()


class MetricsConsumerBolt(Bolt):
    """The bolt one registered consumer runs in (component ``__metrics<class>``)."""

    def __init__(self, registration: Registration) -> None:
        self.registration = registration

    def prepare(self, conf, context, collector):
        reg = self.registration
        self.collector = collector
        self.log = structlog.get_logger("squall.metrics").bind(
            topology=context.topology_id, component=context.this_component_id, task=context.this_task_id)
        self.allowed = _name_filter(reg)
        bucket = float(conf.get("topology.builtin.metrics.bucket.size.secs", 60))
        handled = context.register_metric("consumer_handled", CountMetric(), bucket)
        failures = context.register_metric("consumer_failures", CountMetric(), bucket)
        self.dropped = context.register_metric("consumer_dropped", CountMetric(), bucket)
        self.dropped_total = 0

        def make() -> MetricsConsumer:
            consumer = consumer_class(reg.class_path)()
            consumer.prepare(conf, reg.argument, context, collector.report_error)
            return consumer

        self.consumer_thread = _ConsumerThread(make, collector.report_error, handled, failures,
                                      f"metrics-consumer-{context.this_task_id}")
        self.consumer_thread.start()

    def execute(self, tup: Tuple) -> None:
        try:
            info, points = parse_datapoints(tup.values)
        except (ValueError, TypeError) as exc:
            self._drop(f"a malformed data point tuple from {tup.source.component}: {exc}")
            return
        if self.allowed is not None:
            points = [p for p in points if self.allowed(p.name)]
        if points and not self.consumer_thread.put((info, points), self.registration.max_retain):
            self._drop(f"its queue is full (max.retain.metric.tuples {self.registration.max_retain}): "
                       "the oldest data points were dropped; is handle_data_points slow or stuck?")

    def _drop(self, why: str) -> None:
        self.dropped.incr()
        self.dropped_total += 1
        n = self.dropped_total
        if n in _REPORT_AT or n % 10_000 == 0:
            self.collector.report_error(f"metrics consumer {self.registration.class_path}: {why} "
                                        f"(dropped so far: {n})")

    def cleanup(self) -> None:
        started = time.monotonic()
        if not self.consumer_thread.stop(CLEANUP_SECS):
            self.log.error("metrics consumer did not finish within its cleanup time; left behind",
                           consumer=self.registration.class_path, secs=round(time.monotonic() - started, 1))
