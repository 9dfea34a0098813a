"""The inside of one worker: its executors, local delivery, transfer and receive paths.

Local mode runs one or more of these in a process over the in-process transport; a worker
process runs exactly one over ZeroMQ and adds heartbeats and ZooKeeper timers around it
(squall.daemons.worker). The transfer function follows seed 000's mk-transfer-fn: a
target task in this worker gets the batch straight on its executor's queue; any other is
serialized onto the worker transfer queue, which the transfer thread drains, grouping by
destination worker and sending one frame per destination per drain.
"""
from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from squall.messaging import Connection, Context
from squall.model import ACKER, ACKER_STREAMS, component_tasks, executor_tasks, system_topology, task_ids
from squall.runtime.affinity import choose_cpu, pin_thread
from squall.runtime.executor import AckerExecutor, BoltExecutor, Executor, SpoutExecutor
from squall.runtime.executor_thread import ExecutorThread, component_order, thread_groups
from squall.runtime.queues import BatchQueue, Doorbell
from squall.runtime.serialization import SerializationError, TupleSerializer
from squall.state.executors import executor_class as checkpointed_class
from squall.topology import SPOUT, Topology
from squall.tuple import Fields

Endpoint = tuple[str, int]  # (host, port)
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
                 on_fatal: Callable[[str], None] | None = None) -> None:
        self.topology_id = topology_id
        self.conf = dict(conf)
        self.system = system_topology(topology, conf)
        self.task_to_component = task_ids(self.system)
        self.component_to_tasks = component_tasks(self.task_to_component)
        self.acker_tasks = self.component_to_tasks.get(ACKER, [])
        self.executor_ids = sorted(executors)
        self.port, self.host, self.endpoint = port, host, (host, port)
        self.context = context
        self.local_tasks = frozenset(t for ex in self.executor_ids for t in executor_tasks(ex))
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
                                          self._stream_fields)
        self.active = False
        self.stopping = threading.Event()
        self.executors: list[Executor] = []
        self.threads: list[ExecutorThread] = []
        self.connections: dict[Endpoint, Connection] = {}
        self.task_endpoint: dict[int, Endpoint] = {}
        self._conn_lock = threading.Lock()
        self._server: Connection | None = None
        self._transfer_thread: threading.Thread | None = None
        self._unsent: list[tuple[int, bytes]] = []
        # Backpressure: our tasks whose queue is too full, and remote tasks that are.
        self.bp_tasks: set[int] = set()
        self.remote_bp: set[int] = set()
        self.on_backpressure: Callable[[set[int]], None] | None = None
        self._high = float(conf["worker.receive.high.watermark"])
        self._low = float(conf["worker.receive.low.watermark"])
        key = port + (os.getpid() if conf.get("squall.messaging.transport") == "local" else 0)
        self.cpu = choose_cpu(key) if conf.get("worker.pin.cpu") else None
        self._receiver_pinned = False
        self.dropped_unknown_task = 0
        self.dropped_bad_payload = 0
        self.dropped_unserializable = 0
        self.started_at = time.time()

    def _stream_fields(self, component: str, stream: str) -> Fields:
        sys_fields = ACKER_STREAMS.get(stream)
        if sys_fields is not None:
            return sys_fields
        return self.system.stream_fields(component, stream)

    # -- start-up -------------------------------------------------------------------------
    def bind(self) -> None:
        """Open the receive side first, so early senders queue rather than fail."""
        self._server = self.context.bind(self.topology_id, self.port)
        self._server.register_recv(self.receive)

    def start_executors(self, timeout: float = 60.0) -> None:
        """Create every executor, start the executor threads, and wait until each has
        prepared its executors."""
        tune_gc()
        for i, (group, bell) in enumerate(zip(self.thread_groups, self.doorbells)):
            made = []
            for ex in group:
                comp = self.task_to_component[ex[0]]
                spec = self.system.components[comp]
                cls = checkpointed_class(self.system, comp) or (
                    AckerExecutor if comp == ACKER else SpoutExecutor if spec.kind == SPOUT else BoltExecutor)
                made.append(cls(self, ex, comp))
            ackers = [e for e in made if isinstance(e, AckerExecutor)]
            if ackers and len(self.acker_tasks) == 1:
                # The topology's only acker shares this thread: emitters on it write its
                # ledger directly, with no ack messages (see Outbox.fuse).
                for e in made:
                    e.outbox.fuse(ackers[0].ledger)
            self.executors.extend(made)
            self.threads.append(ExecutorThread(self, made, bell, i))
        for t in self.threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.started.wait(max(0.0, deadline - time.monotonic()))

    def start_transfer(self) -> None:
        self._transfer_thread = threading.Thread(target=self._transfer_loop, name="transfer", daemon=True)
        self._transfer_thread.start()

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
        """Connect to workers newly needed, close those no longer needed (seed 000)."""
        needed = {task_endpoints[t] for t in self.outbound_tasks()
                  if t in task_endpoints and t not in self.local_tasks}
        needed.discard(self.endpoint)
        with self._conn_lock:
            for ep in needed - set(self.connections):
                self.connections[ep] = self.context.connect(self.topology_id, ep[0], ep[1])
            stale = set(self.connections) - needed
            for ep in stale:
                self.connections.pop(ep).close()
            self.task_endpoint = dict(task_endpoints)
        if stale or needed:
            self.log.debug("connections refreshed", connected=sorted(needed), closed=sorted(stale))

    # -- transfer path --------------------------------------------------------------------
    def deliver(self, task: int, tuples: list) -> None:
        """Hand a batch for ``task`` on: straight to a local queue, else to the transfer
        queue. Never waits: a full queue makes the spouts pause (``overloaded``)."""
        q = self.queues.get(task)
        if q is not None:
            q.put((task, tuples), len(tuples))
            return
        try:
            payload = self.serializer.dumps(tuples)
        except SerializationError as exc:
            # Reported against the emitting component; anchored tuples then time out and
            # their spouts replay them. Nothing crosses the wire half-encoded.
            self.dropped_unserializable += len(tuples)
            src = tuples[0].source
            self.log.error("tuples could not be serialized", component=src.component, task=src.task,
                           stream=src.stream, error=str(exc), tuples=len(tuples))
            self.report_error(src.component, src.task, f"SerializationError: {exc}")
            return
        self.transfer_queue.put((task, payload), len(tuples))

    def overloaded(self) -> bool:
        """Should spouts hold their emits? True while a queue of this worker is over its
        bound or a task elsewhere has raised backpressure (Storm 2's spout throttling)."""
        if self.remote_bp or self.transfer_queue.full:
            return True
        for q in self._queue_list:
            if q.full:
                return True
        return False

    def _transfer_loop(self) -> None:
        pin_thread(self.cpu)
        tq = self.transfer_queue
        while True:
            items = tq.wait(0.05)
            if self._unsent:
                items = self._unsent + items
                self._unsent = []
            if not items:
                if self.stopping.is_set():
                    return
                continue
            by_conn: dict[Connection, list] = {}
            with self._conn_lock:
                for item in items:
                    conn = self.connections.get(self.task_endpoint.get(item[0]))  # type: ignore[arg-type]
                    if conn is None:
                        self._unsent.append(item)
                    else:
                        by_conn.setdefault(conn, []).append(item)
                for conn, msgs in by_conn.items():
                    try:
                        conn.send(msgs)
                    except Exception as exc:  # a failing peer must not stop the thread
                        # (a send blocked at a dead peer gives up too: the lock must come free
                        # for refresh_connections to move its tasks to where they run now)
                        self.log.warning("send failed", error=str(exc) or repr(exc), messages=len(msgs))
                        self._unsent.extend(msgs)
            if self._unsent:
                # No connection yet for these tasks: keep them (nothing is dropped) and slow
                # down, so the bounded transfer queue pushes back on the emitters.
                if self.stopping.is_set():
                    self.log.warning("undeliverable batches at shutdown", batches=len(self._unsent))
                    return
                time.sleep(0.05)

    # -- receive path ---------------------------------------------------------------------
    def receive(self, messages: list[tuple[int, bytes]]) -> None:
        """Called by the receive thread with each decoded frame's task messages."""
        if not self._receiver_pinned:  # the transport's thread runs Python here: same CPU
            self._receiver_pinned = True
            pin_thread(self.cpu)
        queues = self.queues
        for task, payload in messages:
            q = queues.get(task)
            if q is None:
                self.dropped_unknown_task += 1
                self.log.warning("message for a task not in this worker dropped", task=task)
                continue
            try:
                tuples = self.serializer.loads(payload)
            except SerializationError as exc:
                self.dropped_bad_payload += 1
                self.log.warning("undecodable tuple batch dropped", task=task, error=str(exc))
                continue
            # Never block the receive thread (it serves every task); raise backpressure instead.
            q.put((task, tuples), len(tuples))
            if q.fill >= self._high and task not in self.bp_tasks:
                self._set_bp(self.bp_tasks | set(executor_tasks(self._executor_of(task))))

    def _executor_of(self, task: int) -> tuple[int, int]:
        for ex in self.executor_ids:
            if ex[0] <= task <= ex[1]:
                return ex
        raise KeyError(task)

    def check_relief(self, executor: Executor) -> None:
        if executor.task_ids[0] in self.bp_tasks and executor.queue.fill <= self._low:
            self._set_bp(self.bp_tasks - set(executor.task_ids))

    def _set_bp(self, tasks: set[int]) -> None:
        self.bp_tasks = tasks
        if self.on_backpressure is not None:
            self.on_backpressure(set(tasks))

    # -- status, errors, shutdown ---------------------------------------------------------
    def set_active(self, active: bool) -> None:
        self.active = active

    def report_error(self, component: str, task: int, text: str) -> None:
        if self._error_sink is not None:
            try:
                self._error_sink(component, task, text)
            except Exception as exc:
                self.log.warning("error report failed", error=repr(exc))

    def executor_died(self, executor: Executor, exc: BaseException) -> None:
        """An executor thread ended abnormally: the worker is no longer whole."""
        if self._on_fatal is not None and not self.stopping.is_set():
            self._on_fatal(f"executor {executor.component} {executor.executor_id} died: {exc!r}")

    def stats(self) -> list[dict[str, Any]]:
        return [e.stats() for e in self.executors]

    def transport_stats(self) -> dict[str, int]:
        """Receive-side counters: frames and messages dropped, handshakes refused (a peer
        without the topology's CURVE key), keys refused by the ZAP handler."""
        server = self._server
        return {"bad_frames": getattr(server, "bad_frames", 0),
                "refused_connections": getattr(server, "refused_connections", 0),
                "refused_keys": getattr(self.context, "refused_keys", 0),
                "dropped_unknown_task": self.dropped_unknown_task,
                "dropped_bad_payload": self.dropped_bad_payload}
    def metrics(self) -> dict[str, Any]:
        """Executors' metrics and this worker's transfer and drop counters (copies)."""
        counters = self.context.counters.as_dict()
        dropped = {"unknown_task": self.dropped_unknown_task, "bad_payload": self.dropped_bad_payload,
                   "unserializable": self.dropped_unserializable, "bad_frame": counters.pop("bad_frames"),
                   "receive_error": counters.pop("callback_errors")}
        refused = self.transport_stats()
        counters.update(refused_connections=refused["refused_connections"], refused_keys=refused["refused_keys"])
        return {"executors": [e.metrics() for e in self.executors], "transport": counters,
                "dropped": dropped, "transfer_queue": len(self.transfer_queue),
                "transfer_queue_capacity": self.transfer_queue.capacity}

    def shutdown(self, timeout: float = 10.0) -> None:
        """Seed 000's shutdown*: close sockets, stop executors, drain transfer, close."""
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
        if self._transfer_thread is not None:
            self._transfer_thread.join(max(0.0, deadline - time.monotonic()))
        with self._conn_lock:
            for conn in self.connections.values():
                conn.close()
            self.connections.clear()
