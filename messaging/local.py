"""In-process transport: servers are queues with a delivery thread, clients find them by port.

One LocalContext is shared by every in-process worker of a LocalCluster (Storm passes a
shared context to its local workers the same way). Frames use the same codec as ZeroMQ, so
both paths reject the same bad input. A client whose server is not bound yet keeps its
frames and delivers them once the server appears: nothing is dropped.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from squall.messaging import codec
from squall.messaging.base import Connection, Context, RecvCallback, ServerConnection, TaskMessage, TransportCounters

log = structlog.get_logger("squall.messaging.local")
_STOP = object()


class LocalServer(ServerConnection):
    def __init__(self, ctx: "LocalContext", topology_id: str, port: int) -> None:
        self._ctx, self._topology_id, self._port = ctx, topology_id, port
        self._key = (topology_id, port)
        # Bounded like a ZeroMQ socket's high-water mark: a sender to a slow receiver waits.
        hwm = int(ctx.hwm)
        self._inbox: queue.Queue = queue.Queue(maxsize=hwm if hwm > 0 else 0)
        self._callback: RecvCallback | None = None
        self._control_cb = None
        self._ready = threading.Event()
        self.bad_frames = 0
        self.callback_errors = 0
        self._thread = threading.Thread(target=self._deliver, name=f"local-recv-{port}", daemon=True)
        self._thread.start()

    def register_recv(self, callback: RecvCallback) -> None:
        super().register_recv(callback)
        self._ctx._flush_pending(self)

    def put_frame(self, frame: bytes) -> None:
        self._inbox.put(frame)

    def _deliver(self) -> None:
        self._ready.wait()
        while True:
            frame = self._inbox.get()
            if frame is _STOP:
                return
            try:
                kind, body = codec.decode(frame)
            except codec.FrameError as exc:
                self.bad_frames += 1
                log.warning("bad frame dropped", port=self._port, error=str(exc))
                continue
            try:
                if kind == codec.KIND_TASKS:
                    self._callback(body)  # type: ignore[misc]
                elif self._control_cb is not None:
                    self._control_cb(kind, body)
            except Exception as exc:  # the receiver outlives a failing callback, as zmq's does
                self.callback_errors += 1
                log.error("receive callback raised", port=self._port, error=repr(exc))

    def close(self) -> None:
        self._ctx._unbind(self._topology_id, self._port, self)
        self._inbox.put(_STOP)
        self._ready.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)


class LocalClient(Connection):
    def __init__(self, ctx: "LocalContext", topology_id: str, host: str, port: int) -> None:
        self._ctx, self._key, self._port = ctx, (topology_id, port), port
        self._pending: list[bytes] = []
        self._lock = threading.Lock()
        self._peer_load: dict[int, float] = {}

    def _put(self, frame: bytes) -> None:
        with self._lock:
            server = self._ctx._servers.get(self._key)
            if server is None:
                self._pending.append(frame)
                return
            if self._pending:
                for old in self._pending:
                    server.put_frame(old)
                self._pending.clear()
            server.put_frame(frame)

    def flush_pending(self, server: LocalServer) -> None:
        with self._lock:
            for old in self._pending:
                server.put_frame(old)
            self._pending.clear()

    def send(self, messages: Iterable[TaskMessage]) -> None:
        batch = messages if isinstance(messages, list) else list(messages)
        if batch:
            self._put(codec.encode_tasks(batch))

    def send_raw(self, frame: bytes) -> None:
        """Send an already encoded (or deliberately malformed) frame; used by tests."""
        self._put(frame)

    def send_load_metrics(self, load: Mapping[int, float]) -> None:
        self._put(codec.encode_control(codec.KIND_LOAD, dict(load)))

    def send_control(self, kind: int, body: Any) -> None:
        self._put(codec.encode_control(kind, body))

    def register_recv(self, callback: RecvCallback) -> None:
        raise TypeError("a connected (client) connection only sends")

    @property
    def port(self) -> int:
        return self._port

    @property
    def pending(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        # Frames for a server that never appeared are lost here, as a closed socket's would be.
        with self._lock:
            if self._pending:
                log.warning("closing client with undelivered frames", port=self._port,
                            frames=len(self._pending))
            self._pending.clear()


class LocalContext(Context):
    """In-process Context; share one instance between the workers that must talk."""

    def __init__(self) -> None:
        self.hwm = 0
        self._servers: dict[tuple[str, int], LocalServer] = {}
        self._lock = threading.Lock()
        self._made: list[Connection] = []
        self.counters = TransportCounters()  # in-process links are not counted

    def prepare(self, conf: Mapping[str, Any]) -> None:
        self.hwm = int(conf.get("zmq.hwm", 0))

    def bind(self, topology_id: str, port: int) -> LocalServer:
        with self._lock:
            if (topology_id, port) in self._servers:
                raise OSError(f"port {port} is already bound for {topology_id}")
            server = LocalServer(self, topology_id, port)
            self._servers[(topology_id, port)] = server
            self._made.append(server)
        return server

    def _flush_pending(self, server: "LocalServer") -> None:
        """Frames sent before ``server`` existed go out once it delivers (its inbox is
        bounded, so this must wait until its thread is draining)."""
        with self._lock:
            clients = [c for c in self._made if isinstance(c, LocalClient) and c._key == server._key]
        for client in clients:
            client.flush_pending(server)

    def _unbind(self, topology_id: str, port: int, server: LocalServer) -> None:
        with self._lock:
            if self._servers.get((topology_id, port)) is server:
                del self._servers[(topology_id, port)]

    def connect(self, topology_id: str, host: str, port: int) -> LocalClient:
        client = LocalClient(self, topology_id, host, port)
        with self._lock:
            self._made.append(client)
        return client

    def term(self) -> None:
        with self._lock:
            made, self._made = self._made, []
        for conn in made:
            conn.close()
