"""The inside of one worker: it makes and wires its executors, queues and paths, starts and
stops them, keeps its backpressure state and reports its counters.

Local mode runs one or more of these in a process over the in-process transport; a worker
process runs exactly one over ZeroMQ and adds heartbeats and ZooKeeper timers around it
(squall.daemons.worker). The paths are modules of their own: the way out
(squall.runtime.delivery: a target task in this worker gets the batch straight on its
executor's queue; any other is serialized onto the worker transfer queue), the transfer
thread that drains that queue (squall.runtime.transfer), the way in
(squall.runtime.receiver), and the connections to the other workers (squall.runtime.peers).

Executors see the worker only through the WorkerLink it makes (squall.runtime.link); the
runtime runs ordinary spouts and bolts (features wrap components, squall.runtime.wrapping).
"""
from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from squall.clock import SYSTEM_CLOCK, Clock
from squall.context import WorkerContext
from squall.messaging import Connection, Context, codec
from squall.model import (
    ACKER,
    ACKER_STREAMS,
    component_tasks,
    executor_tasks,
    is_checkpointed,
    system_executors,
    system_topology,
    task_ids,
)
from squall.runtime import drops
from squall.runtime.acker_executor import AckerExecutor
from squall.runtime.admission import Admission
from squall.runtime.affinity import worker_cpu
from squall.runtime.bolt_executor import BoltExecutor
from squall.runtime.delivery import Delivery
from squall.runtime.drops import DropCounter
from squall.runtime.executor import Executor
from squall.runtime.executor_thread import ExecutorThread, component_order, thread_groups
from squall.runtime.flow import RESEND_SECS, RemoteBackpressure
from squall.runtime.hook_runner import WorkerHooks
from squall.runtime.link import WorkerLink, WorkerTopology
from squall.runtime.load import LOAD_SECS, TaskLoads
from squall.runtime.peers import Peers
from squall.runtime.queues import BatchQueue, Doorbell
from squall.runtime.receiver import Receiver
from squall.runtime.sampling import TupleSampler, set_sampling
from squall.runtime.serialization import TupleSerializer
from squall.runtime.spout_executor import SpoutExecutor
from squall.runtime.stats import ExecutorStats, TransportStats
from squall.runtime.transfer import Endpoint, Transfer
from squall.system_component import SYSTEM_TASK
from squall.topology import SPOUT, Topology
from squall.tuple import Fields

ErrorSink = Callable[[str, int, str], None]


def tune_gc() -> None:
    """Tuples are freed by reference counting and form no cycles, but every one of them
    counts toward the cyclic collector's young-generation threshold; at the default (700)
    the collector runs thousands of times a second over full queues. Raise the threshold
    and move start-up objects out of its way."""
    gc.freeze()
    if gc.get_threshold()[0] < 100_000:
        gc.set_threshold(100_000, 50, 100)


class WorkerRuntime:
    def __init__(self, topology_id: str, topology: Topology, conf: Mapping[str, Any],
                 executors: Sequence[tuple[int, int]], port: int, context: Context,
                 host: str = "127.0.0.1", error_sink: ErrorSink | None = None,
                 on_fatal: Callable[[str], None] | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.topology_id = topology_id
        self.clock = clock
        self.conf = dict(conf)
        self.system = system_topology(topology, conf)
        self.task_to_component = task_ids(self.system)
        self.component_to_tasks = component_tasks(self.task_to_component)
        self.acker_tasks = self.component_to_tasks.get(ACKER, [])
        # Those assigned, and __system's when the topology has metrics consumers.
        self.executor_ids = sorted({*executors, *system_executors(self.system)})
        self.port, self.host, self.endpoint = port, host, (host, port)
        self.context = context
        self.local_tasks = frozenset(t for ex in self.executor_ids for t in executor_tasks(ex))
        self._reported_tasks = self.local_tasks - {SYSTEM_TASK}  # every worker has -1: peers never hear of it
        self.log = structlog.get_logger("squall.worker").bind(topology=topology_id, port=port)
        self._error_sink = error_sink
        self._on_fatal = on_fatal
        cap = int(conf["topology.executor.receive.buffer.size"])
        rank = component_order(self.system)
        ordered = sorted(self.executor_ids, key=lambda ex: (rank[self.task_to_component[ex[0]]], ex))
        # Executors sharing a thread share its doorbell; each has its own queue.
        self.thread_groups = thread_groups(ordered, int(conf["topology.worker.executor.threads"]))
        self.doorbells = [Doorbell() for _ in self.thread_groups]
        self.queues: dict[int, BatchQueue] = {}
        for group, bell in zip(self.thread_groups, self.doorbells):
            for ex in group:
                q = BatchQueue(cap, bell)
                for t in executor_tasks(ex):
                    self.queues[t] = q
        self._queue_list = list({id(q): q for q in self.queues.values()}.values())
        self.transfer_queue = BatchQueue(int(conf["topology.transfer.buffer.size"]))
        self.serializer = TupleSerializer(conf.get("topology.serializers") or {}, self.task_to_component,
                                          self._stream_fields, Admission(self.system, self.task_to_component))
        self.stopping = threading.Event()
        self.executors: list[Executor] = []
        self.threads: list[ExecutorThread] = []
        self.sampler = TupleSampler()  # emits sampled by `squall debug`
        self._server: Connection | None = None
        # Backpressure: remote tasks under it (ours are the link's bp_tasks).
        self.remote_bp: set[int] = set()
        self._remote = RemoteBackpressure(self.local_tasks, self.task_to_component)
        self._bp_changed = True
        self._bp_sent_at = float("-inf")
        self._load_sent_at = float("-inf")
        self._low = float(conf["worker.receive.low.watermark"])
        self.cpu = worker_cpu(conf, port)
        self.drops = DropCounter(self.log.warning)
        max_payload = int(conf.get("zmq.max.message.bytes", codec.DEFAULT_MAX_BYTES)) \
            - codec.HEADER_BYTES - codec.ENTRY_OVERHEAD
        self.delivery = Delivery(self.queues, self.transfer_queue, self.serializer, max_payload, self.log,
                                 self.report_error, tuple(self.acker_tasks),
                                 bool(conf.get("topology.testing.always.try.serialize")), clock,
                                 is_checkpointed(self.system))
        self.transfer = Transfer(self.transfer_queue, int(conf["worker.transfer.held.max.bytes"]),
                                 self.stopping, self.log, self._control_frames, self.cpu, clock)
        self.peers = Peers(context, topology_id, self.endpoint, self.transfer, self.log)
        self.started_at = time.time()
        # What the worker's tasks and hooks share: resources, and the tasks' metrics for __system.
        keep_datapoints = bool(system_executors(self.system))
        self.worker_context = WorkerContext(topology_id, self.conf, self.task_to_component, self.component_to_tasks,
                                            self.local_tasks, port, host, keep_datapoints=keep_datapoints)
        self.hooks = WorkerHooks(topology.worker_hooks, self.worker_context, self.conf, self.log, self.report_error)
        topology_facts = WorkerTopology(topology_id, self.system, self.task_to_component, self.component_to_tasks,
                                        self.local_tasks, port, self.conf, ACKER, self.worker_context)
        # All the executors see of this worker (squall.runtime.link).
        # Load-aware shuffles (Storm's topology.disable.loadaware.messaging turns them off).
        self.loads = None if conf.get("topology.disable.loadaware.messaging") else \
            TaskLoads(lambda task: min(1.0, self.queues[task].fill), self.peers.loads)
        self.link = WorkerLink(topology_facts, self.queues, self.delivery.deliver, self.report_error, self.drops.add,
                               self.overloaded, self.relieve, clock, self.stopping, self.cpu, self.executor_died,
                               self.loads, self.delivery.queued)
        self.receiver = Receiver(self.queues, self.executor_ids, self.serializer, self.drops, self.link,
                                 float(conf["worker.receive.high.watermark"]), self._set_bp, self.stopping,
                                 self.cpu, self.log)

    @property
    def active(self) -> bool:
        """Is the topology active (spouts emit only then)."""
        return self.link.active

    @active.setter
    def active(self, active: bool) -> None:
        self.link.active = active

    @property
    def bp_tasks(self) -> frozenset[int]:
        """This worker's tasks under backpressure (their queue is over the high mark)."""
        return self.link.bp_tasks

    def _stream_fields(self, component: str, stream: str) -> Fields:
        sys_fields = ACKER_STREAMS.get(stream)
        if sys_fields is not None:
            return sys_fields
        return self.system.stream_fields(component, stream)

    # -- start-up -------------------------------------------------------------------------
    def bind(self) -> None:
        """Open the receive side first, so early senders queue rather than fail."""
        self._server = self.context.bind(self.topology_id, self.port)
        self._server.on_bad_frame = self.receiver.bad_frame  # type: ignore[attr-defined]
        self._server.register_control(self.receive_control)
        self._server.register_recv(self.receiver.receive)

    def create_executors(self) -> list[list[Executor]]:
        """Make every executor (not set up yet), grouped by the thread that runs them."""
        groups = []
        for group in self.thread_groups:
            made: list[Executor] = []
            for ex in group:
                comp = self.task_to_component[ex[0]]
                cls = AckerExecutor if comp == ACKER else (
                    SpoutExecutor if self.system.components[comp].kind == SPOUT else BoltExecutor)
                made.append(cls(self.link, ex, comp))
            ackers = [e for e in made if isinstance(e, AckerExecutor)]
            if ackers and len(self.acker_tasks) == 1:
                # The topology's only acker shares this thread: emitters on it write its
                # ledger directly, with no ack messages (see Outbox.fuse).
                for e in made:
                    e.outbox.fuse(ackers[0].ledger)
            else:
                # Ackers on this thread get their share of its emitters' acker traffic by a
                # call, not a message (Outbox.attach); spouts here pick them for their trees.
                for e in made:
                    for a in ackers:
                        e.outbox.attach(a.task_ids[0], a.ledger)
            groups.append(made)
        return groups

    def start_executors(self, timeout: float = 60.0) -> None:
        """Create every executor, start the executor threads, and wait until each has
        prepared its executors. The worker hooks' start runs first (Storm's order), so
        tasks find the resources they set."""
        self.hooks.start()
        tune_gc()
        for i, (made, bell) in enumerate(zip(self.create_executors(), self.doorbells)):
            self.executors.extend(made)
            self.threads.append(ExecutorThread(self.link, made, bell, i, self.transfer_queue))
        for t in self.threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.started.wait(max(0.0, deadline - time.monotonic()))

    def start_transfer(self) -> None:
        self.transfer.start()

    def start(self, task_endpoints: Mapping[int, Endpoint], active: bool = True) -> None:
        """Local-mode start: bind, connect, executors, transfer thread."""
        self.bind()
        self.refresh_connections(task_endpoints)
        self.active = active
        self.start_executors()
        self.start_transfer()

    # -- connections ----------------------------------------------------------------------
    def outbound_tasks(self) -> set[int]:
        """Every task this worker's executors may send to."""
        out: set[int] = set(self.acker_tasks)
        comps = {self.task_to_component[ex[0]] for ex in self.executor_ids}
        for comp in comps:
            if comp == ACKER:
                for spec in self.system.spouts():
                    out.update(self.component_to_tasks[spec.id])
                continue
            for stream in self.system.components[comp].streams:
                for bolt, _ in self.system.subscribers(comp, stream):
                    out.update(self.component_to_tasks[bolt])
        return out

    def refresh_connections(self, task_endpoints: Mapping[int, Endpoint]) -> None:
        """Connect to workers newly assigned, close those no longer assigned (squall.runtime.peers)."""
        self.peers.refresh(task_endpoints)
        self._bp_changed = True  # tell new peers our status now

    # -- backpressure and load, between workers -----------------------------------------
    def overloaded(self) -> bool:
        """Should spouts hold their emits? True while a queue of this worker is over its
        bound or a task elsewhere has raised backpressure (Storm 2's spout throttling)."""
        if self.remote_bp or self.transfer_queue.full or self.transfer.over_bound:
            return True
        for q in self._queue_list:
            if q.full:
                return True
        return False

    def receive_control(self, kind: int, body: Any) -> None:
        """A control frame from a peer: the backpressure state of its tasks, or their load
        (kept on the connection to that peer, for ``Connection.get_load``)."""
        if not self._remote.foreign(body):
            self.drops.add(drops.BAD_CONTROL, error="control frame names tasks of this worker "
                           "or tasks not in the topology")
            return
        if kind == codec.KIND_BACKPRESSURE:
            held = self.remote_bp
            self.remote_bp = self._remote.report(body, self.clock.monotonic())
            if held and not self.remote_bp:
                self._wake_executors()
        elif kind == codec.KIND_LOAD:
            self.peers.record_loads(body)

    def _control_frames(self, now: float) -> list[tuple[int, Any]]:
        """Called by the transfer thread each turn: the status to send to every peer, at
        once when it changed and every RESEND_SECS; the load of every task every
        LOAD_SECS, when this worker's load-aware choosers are refreshed too; stale peer
        reports expire here too."""
        frames: list[tuple[int, Any]] = []
        if now - self._load_sent_at >= LOAD_SECS:
            self._load_sent_at = now
            if self.loads is not None:
                self.loads.refresh()
            queues = self.queues
            frames.append((codec.KIND_LOAD, {t: min(1.0, queues[t].fill) for t in self._reported_tasks}))
        if not self._bp_changed and now - self._bp_sent_at < RESEND_SECS:
            return frames
        self._bp_changed = False
        self._bp_sent_at = now
        if self.remote_bp:
            self.remote_bp = self._remote.expire(now)
            if not self.remote_bp:
                self._wake_executors()
        bp = self.link.bp_tasks
        frames.append((codec.KIND_BACKPRESSURE, {t: t in bp for t in self._reported_tasks}))
        return frames

    def _wake_executors(self) -> None:
        """Backpressure from elsewhere ended: spouts held by it emit now, not at their next
        wait-strategy poll."""
        for bell in self.doorbells:
            bell.ring()

    def relieve(self, task_ids: list[int], queue: BatchQueue) -> None:
        """An executor of ``task_ids`` drained ``queue``: below the low mark, its tasks
        leave backpressure."""
        bp = self.link.bp_tasks
        if task_ids[0] in bp and queue.fill <= self._low:
            self._set_bp(bp - set(task_ids))

    def _set_bp(self, tasks: frozenset[int]) -> None:
        self.link.bp_tasks = tasks
        self._bp_changed = True
        self.transfer_queue._doorbell.ring()  # the transfer thread sends the news now

    # -- status, errors, shutdown ---------------------------------------------------------
    def set_active(self, active: bool) -> None:
        self.link.active = active

    def set_sampling(self, percents: Callable[[str], float]) -> None:
        """Sample each component's emits at ``percents(component)`` percent into ``sampler``."""
        set_sampling(self.executors, percents, self.sampler)

    def report_error(self, component: str, task: int, text: str) -> None:
        if self._error_sink is not None:
            try:
                self._error_sink(component, task, text)
            except Exception as exc:
                self.log.warning("error report failed", error=repr(exc))

    def executor_died(self, component: str, executor: tuple[int, int], exc: BaseException) -> None:
        """An executor could not start: the worker is no longer whole."""
        if self._on_fatal is not None and not self.stopping.is_set():
            self._on_fatal(f"executor {component} {executor} died: {exc!r}")

    def stats(self) -> list[ExecutorStats]:
        """Per executor: its counters, and what was dropped on its way in, by cause."""
        out = []
        for e in self.executors:
            st = e.stats()
            st.dropped = self.drops.by_cause(e.executor_id)
            out.append(st)
        return out

    def transport_stats(self) -> TransportStats:
        """What belongs to no executor: frames refused (and by cause in ``dropped``),
        handshakes refused (a peer without the topology's CURVE key), keys refused by the
        ZAP handler, payload bytes held for slow or unreachable peers."""
        server, worker_drops = self._server, self.drops.by_cause(None)
        every = self.drops.by_cause(every=True)
        return TransportStats(bad_frames=getattr(server, "bad_frames", 0),
                              refused_connections=getattr(server, "refused_connections", 0),
                              refused_keys=getattr(self.context, "refused_keys", 0),
                              dropped_unknown_task=every.get(drops.UNKNOWN_TASK, 0),
                              dropped_bad_payload=every.get(drops.BAD_PAYLOAD, 0),
                              dropped=worker_drops, held_bytes=self.transfer.held_bytes,
                              unserializable=self.delivery.dropped_unserializable)

    def metrics(self) -> dict[str, Any]:
        """Executors' metrics and this worker's transfer and drop counters (copies)."""
        counters = self.context.counters.as_dict()
        counters.pop("bad_frames")  # counted among the drops, by cause
        dropped = {**self.drops.by_cause(every=True), "unserializable": self.delivery.dropped_unserializable,
                   "receive_error": counters.pop("callback_errors")}
        refused = self.transport_stats()
        counters.update(refused_connections=refused.refused_connections, refused_keys=refused.refused_keys)
        return {"executors": [e.metrics() for e in self.executors], "transport": counters,
                "dropped": dropped, "transfer_queue": len(self.transfer_queue),
                "transfer_queue_capacity": self.transfer_queue.capacity}

    def shutdown(self, timeout: float = 10.0) -> None:
        """Storm's worker shutdown*: close sockets, stop executors, drain transfer, close;
        then the worker hooks' shutdown."""
        self.log.info("shutting down worker runtime")
        if self._server is not None:
            self._server.close()
        self.stopping.set()
        for q in self.queues.values():
            q.close()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.transfer_queue.close()
        self.transfer.join(max(0.0, deadline - time.monotonic()))
        self.peers.close()
        self.hooks.shutdown()
