"""The transport interface of Storm's IContext/IConnection (seed 002), in Python."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# A task message: (target task id, payload bytes). The payload is opaque to messaging.
TaskMessage = tuple[int, bytes]

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

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class Connection(ABC):
    """One end of a link: a server (bound, receives) or a client (connected, sends)."""

    @abstractmethod
    def send(self, messages: Iterable[TaskMessage]) -> None:
        """Send a batch of task messages as one frame (client side)."""

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
    def send_control(self, kind: int, body: Any) -> None:
        """Send a control frame (see codec.KIND_*)."""

    def get_load(self, task_ids: Iterable[int]) -> dict[int, float]:
        """Last load reported by the peer for each of ``task_ids`` that it reported."""
        loads = getattr(self, "_peer_load", {})
        return {t: loads[t] for t in task_ids if t in loads}

    @property
    @abstractmethod
    def port(self) -> int:
        """The port this connection is bound or connected to."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection; pending sends are flushed up to the linger time."""


class ServerConnection(Connection):
    """The bound side of a link: it only receives. Subclasses set ``_port``, ``_callback``
    and ``_ready`` (an Event their receive loop waits on before delivering)."""

    def register_recv(self, callback: RecvCallback) -> None:
        self._callback = callback
        self._ready.set()

    def send(self, messages: Iterable[TaskMessage]) -> None:
        raise TypeError("a bound (server) connection only receives")

    def send_load_metrics(self, load: Mapping[int, float]) -> None:
        raise TypeError("a bound (server) connection only receives")

    def send_control(self, kind: int, body: Any) -> None:
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
