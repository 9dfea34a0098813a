"""The worker's transfer thread: drains the transfer queue into per-peer buffers and sends.

It owns the client sockets (ZeroMQ sockets are single-threaded): refresh-connections
publishes a new routing table (task -> endpoint, endpoint -> connection) by replacing one
attribute, and hands connections it no longer needs to ``retire``; this thread closes them.
So a send never holds a lock that a refresh needs. A send never waits on a full peer
either: what a peer does not take now stays in that peer's buffer and is tried again on
the next turn, while other peers keep flowing. Messages for tasks without an endpoint,
or for an endpoint that was closed (its executors moved), are routed again on every turn
with the latest table. All of it is counted in payload bytes (``held_bytes``); over
``held_max_bytes`` the worker is overloaded and its spouts pause. Control frames
(backpressure status) go out first on each turn, on each peer's own control path.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from squall.clock import SYSTEM_CLOCK, Clock
from squall.messaging import Connection, TaskMessage
from squall.runtime.affinity import pin_thread
from squall.runtime.queues import BatchQueue

Endpoint = tuple[str, int]
Routing = tuple[Mapping[int, Endpoint], Mapping[Endpoint, Connection]]

# How long a turn waits for new batches; shorter while some peer has a backlog to retry.
IDLE_WAIT = 0.05
RETRY_WAIT = 0.005


class Transfer:
    def __init__(self, queue: BatchQueue, held_max_bytes: int, stopping: threading.Event,
                 log: Any, control: Callable[[float], list[tuple[int, Any]]], cpu: int | None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.queue = queue
        self.held_max_bytes = held_max_bytes
        self.routing: Routing = ({}, {})
        self._stopping = stopping
        self._log = log
        self._control = control
        self._cpu = cpu
        self._clock = clock  # control frames' resend and staleness decisions
        self._bufs: dict[Endpoint, list[TaskMessage]] = {}
        self._unrouted: list[TaskMessage] = []
        self._retired: list[Connection] = []
        self._retired_lock = threading.Lock()
        self.held_bytes = 0
        self.send_errors = 0
        self._thread: threading.Thread | None = None

    @property
    def over_bound(self) -> bool:
        return self.held_bytes > self.held_max_bytes

    def retire(self, conn: Connection) -> None:
        """Close ``conn`` from the transfer thread (or now, if it is not running)."""
        if self._thread is None or not self._thread.is_alive():
            conn.close()
            return
        with self._retired_lock:
            self._retired.append(conn)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="transfer", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        pin_thread(self._cpu)
        while True:
            items = self._next_items(self.routing[1])
            now = self._clock.monotonic()
            endpoints, conns = self.routing  # read after the wait: a refresh may have come
            self._close_retired()
            self._send_control(now, conns)
            if self._unrouted:
                items = self._unrouted + items
                self._unrouted = []
            self._route(items, endpoints, conns)
            for ep in list(self._bufs):
                self._flush(ep, conns.get(ep))
            self.held_bytes = (sum(len(p) for _, p in self._unrouted)
                               + sum(len(p) for buf in self._bufs.values() for _, p in buf))
            if self._stopping.is_set() and not items:
                if self._unrouted or self._bufs:
                    self._log.warning("undelivered batches at shutdown", held_bytes=self.held_bytes,
                                      peers=len(self._bufs))
                return

    def _next_items(self, conns: Mapping[Endpoint, Connection]) -> list[TaskMessage]:
        """New batches: wait for some while nothing is backed up; else wait (briefly)
        for a backed-up peer to take frames again, then take what has arrived."""
        if not self._bufs:
            return self.queue.wait(IDLE_WAIT)
        conn = conns.get(next(iter(self._bufs)))
        if conn is None or conn.wait_writable(RETRY_WAIT) is None:
            return self.queue.wait(RETRY_WAIT)
        return self.queue.get_all()

    def _route(self, items: list[TaskMessage], endpoints: Mapping[int, Endpoint],
               conns: Mapping[Endpoint, Connection]) -> None:
        bufs, unrouted = self._bufs, self._unrouted
        for item in items:
            ep = endpoints.get(item[0])
            if ep is None or ep not in conns:
                unrouted.append(item)
                continue
            buf = bufs.get(ep)
            if buf is None:
                bufs[ep] = [item]
            else:
                buf.append(item)

    def _flush(self, ep: Endpoint, conn: Connection | None) -> None:
        buf = self._bufs.pop(ep)
        if conn is None:  # the endpoint was closed: route these again with the new table
            self._unrouted.extend(buf)
            return
        try:
            left = conn.send(buf, 0.0)
        except Exception as exc:  # a failing peer must not stop the thread
            self.send_errors += 1
            self._log.warning("send failed", error=repr(exc), messages=len(buf))
            left = buf
        if left:
            self._bufs[ep] = left

    def _send_control(self, now: float, conns: Mapping[Endpoint, Connection]) -> None:
        for kind, body in self._control(now):
            for conn in conns.values():
                try:
                    conn.send_control(kind, body)
                except Exception as exc:  # noqa: BLE001 - status is sent again soon
                    self._log.debug("control frame not sent", error=repr(exc))

    def _close_retired(self) -> None:
        if not self._retired:
            return
        with self._retired_lock:
            retired, self._retired = self._retired, []
        for conn in retired:
            conn.close()
