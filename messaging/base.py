"""The transport interface of Storm's IContext/IConnection (org.apache.storm.messaging), in Python."""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from squall.messaging import codec
from squall.messaging.codec import TaskMessage

log = structlog.get_logger("squall.messaging")
BAD_FRAME_LOG_SECS = 10.0


# Receive callback: called with a batch of task messages as it arrives.
RecvCallback = Callable[[list[TaskMessage]], None]
# Control callback: called with decoded control frames (load metrics, backpressure).
ControlCallback = Callable[[int, Any], None]


class TransportCounters:
    """What a context's connections have carried, for the worker's metrics. Each field has
    one writer thread (receive: ``*_in``, bad frames; transfer: ``*_out``, blocked sends,
    reconnects), so plain increments suffice."""

    __slots__ = ("frames_in", "bytes_in", "frames_out", "bytes_out", "bad_frames", "callback_errors",
                 "blocked_sends", "reconnects")
    frames_in: int
    bytes_in: int
    frames_out: int
    bytes_out: int
    bad_frames: int
    callback_errors: int
    blocked_sends: int
    reconnects: int

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class Connection(ABC):
    """One end of a link: a server (bound, receives) or a client (connected, sends)."""

    _control_cb: ControlCallback | None = None

    @abstractmethod
    def send(self, messages: Iterable[TaskMessage], timeout: float | None = None) -> list[TaskMessage]:
        """Send a batch of task messages (client side), as frames of at most the size
        limit. Waits up to ``timeout`` seconds (None: as long as it takes) for a peer that
        holds its high-water mark of frames; returns the messages it did not take."""

    @abstractmethod
    def register_recv(self, callback: RecvCallback) -> None:
        """Deliver every received batch to ``callback`` (server side)."""

    def register_control(self, callback: ControlCallback) -> None:
        """Deliver control frames (kind, body) to ``callback`` (server side)."""
        self._control_cb = callback

    @abstractmethod
    def send_load_metrics(self, load: Mapping[int, float]) -> None:
        """Tell the peer the load (0..1) of this worker's tasks."""

    @abstractmethod
    def send_control(self, kind: int, body: Any) -> bool:
        """Send a control frame (see codec.KIND_*) on a path data frames cannot hold up;
        never waits. False if the peer's control path is full (the frame is dropped)."""

    def wait_writable(self, timeout: float) -> bool | None:
        """Wait up to ``timeout`` seconds until a send would be taken (client side);
        None if this transport cannot tell (the caller then just waits)."""
        return None

    def get_load(self, task_ids: Iterable[int]) -> dict[int, float]:
        """Last load reported by the peer for each of ``task_ids`` that it reported."""
        loads = getattr(self, "_peer_load", {})
        return {t: loads[t] for t in task_ids if t in loads}

    def record_load(self, load: Mapping[int, float]) -> None:
        """Keep the load the peer reported (client side; its control frames arrive at
        our server, which hands them on)."""
        self._peer_load.update(load)  # type: ignore[attr-defined]

    @property
    @abstractmethod
    def port(self) -> int:
        """The port this connection is bound or connected to."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection; pending sends are flushed up to the linger time."""


class ServerConnection(Connection):
    """The bound side of a link: it only receives. Subclasses set ``_port``, ``_callback``,
    ``_ready`` (an Event their receive loop waits on before delivering) and ``_max_bytes``,
    and hand every frame to ``handle_frame``.

    ``on_bad_frame(error, frame_bytes)``, when set, is told of every frame refused (the
    worker counts them); otherwise they are logged here, at most one line per
    BAD_FRAME_LOG_SECS. ``bad_frames`` and ``callback_errors`` count them either way."""

    _port: int
    _callback: RecvCallback | None
    _ready: threading.Event
    _max_bytes: int
    counters: TransportCounters | None = None  # the context's, where it counts traffic
    on_bad_frame: Callable[[str, int], None] | None = None
    bad_frames = 0
    callback_errors = 0
    _last_bad_log = float("-inf")

    def handle_frame(self, frame: bytes) -> None:
        """Decode one frame and hand it on; never raises (the receive thread must live)."""
        counters = self.counters
        if counters is not None:
            counters.frames_in += 1
            counters.bytes_in += len(frame)
        try:
            kind, body = codec.decode(frame, self._max_bytes)
        except codec.FrameError as exc:
            self.bad_frames += 1
            if counters is not None:
                counters.bad_frames += 1
            if self.on_bad_frame is not None:
                self.on_bad_frame(str(exc), len(frame))
            elif time.monotonic() - self._last_bad_log >= BAD_FRAME_LOG_SECS:
                self._last_bad_log = time.monotonic()
                log.warning("bad frame dropped", port=self._port, error=str(exc),
                            frame_bytes=len(frame), bad_frames=self.bad_frames)
            return
        try:
            if kind == codec.KIND_TASKS:
                self._callback(body)  # type: ignore[misc]  # set before _ready, which delivery waits on
            elif self._control_cb is not None:
                self._control_cb(kind, body)
        except Exception:
            # The callback's failure is the caller's bug, but a dead receive thread would
            # leave the worker alive and deaf: log it, count it, keep receiving.
            self.callback_errors += 1
            if counters is not None:
                counters.callback_errors += 1
            log.exception("receive callback failed", port=self._port, kind=kind)

    def register_recv(self, callback: RecvCallback) -> None:
        self._callback = callback
        self._ready.set()

    def send(self, messages: Iterable[TaskMessage], timeout: float | None = None) -> list[TaskMessage]:
        raise TypeError("a bound (server) connection only receives")

    def send_load_metrics(self, load: Mapping[int, float]) -> None:
        raise TypeError("a bound (server) connection only receives")

    def send_control(self, kind: int, body: Any) -> bool:
        raise TypeError("a bound (server) connection only receives")

    @property
    def port(self) -> int:
        return self._port


class Context(ABC):
    """Creates connections for one process; one per worker. ``counters`` totals what its
    connections carried (transports that count fill it in)."""

    counters: TransportCounters

    @abstractmethod
    def prepare(self, conf: Mapping[str, Any]) -> None:
        """Read transport settings from the configuration."""

    @abstractmethod
    def bind(self, topology_id: str, port: int) -> Connection:
        """Open the receive side on ``port``."""

    @abstractmethod
    def connect(self, topology_id: str, host: str, port: int) -> Connection:
        """Open a send side to ``host:port``."""

    @abstractmethod
    def term(self) -> None:
        """Close every connection made by this context."""

    def ending(self) -> None:  # noqa: B027 - a hook: a transport with nothing to flush keeps it
        """The process is ending: connections closed from now on need not wait long to
        flush (a transport with nothing to flush ignores it)."""
