"""Transport between workers: a Context makes Connections that carry batches of task messages.

Two implementations share one interface and one frame codec: ``local`` (in-process queues)
and ``zmq`` (ZeroMQ PUSH/PULL). The choice comes from ``squall.messaging.transport``.
Nothing here knows about daemons, ZooKeeper or topologies beyond their ids.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from squall.messaging.base import Connection, Context, TaskMessage
from squall.messaging.codec import FrameError
from squall.messaging.curve import CurveKeys
from squall.messaging.local import LocalContext
from squall.messaging.zmq import ZmqContext


def make_context(conf: Mapping[str, Any], curve: CurveKeys | None = None,
                 io_cpus: Collection[int] = ()) -> Context:
    """Build and prepare the transport named by ``squall.messaging.transport``; ``curve``
    (zmq only) encrypts every connection and accepts only peers with the same keys;
    ``io_cpus`` (zmq only): the CPUs the transport's own threads may run on (empty: any)."""
    kind = conf.get("squall.messaging.transport", "zmq")
    if kind == "local":
        ctx: Context = LocalContext()
    elif kind == "zmq":
        ctx = ZmqContext(curve, io_cpus)
    else:
        raise ValueError(f"unknown transport {kind!r} in squall.messaging.transport")
    ctx.prepare(conf)
    return ctx


__all__ = ["Connection", "Context", "CurveKeys", "FrameError", "TaskMessage", "make_context"]
