"""A worker runtime on a real ZeroMQ socket in this process, and raw sockets to poke it with:
for tests of what a worker does with the frames that reach it."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import zmq

from squall.messaging.curve import CurveKeys, apply_curve
from squall.messaging.zmq import ZmqContext
from squall.runtime.transfer import Endpoint
from squall.runtime.worker_runtime import WorkerRuntime
from squall.testing.zookeeper import free_port
from squall.topology import Topology


@contextmanager
def runtime_over_zmq(topology_id: str, topology: Topology, conf: Mapping[str, Any],
                     executors: Sequence[tuple[int, int]], port: int | None = None,
                     endpoints: Mapping[int, Endpoint] | None = None, **kwargs: Any) -> Iterator[WorkerRuntime]:
    """A started WorkerRuntime bound on ``port`` (a free one by default) of 127.0.0.1,
    connected to ``endpoints``; shut down with its context afterwards."""
    ctx = ZmqContext()
    ctx.prepare(conf)
    rt = WorkerRuntime(topology_id, topology, conf, executors, port or free_port(), ctx, **kwargs)
    try:
        rt.start(dict(endpoints or {}))
        yield rt
    finally:
        rt.shutdown()
        ctx.term()


@contextmanager
def raw_sender(port: int, linger_ms: int = 1000, curve: CurveKeys | None = None) -> Iterator[zmq.Socket]:
    """A PUSH socket to 127.0.0.1:``port`` that sends whatever bytes it is given (with
    ``curve``, as a peer holding the topology's keys: an insider); on exit it still
    delivers what it holds for up to ``linger_ms``."""
    zctx = zmq.Context()
    push = zctx.socket(zmq.PUSH)
    if curve is not None:
        apply_curve(push, curve, server=False)
    push.setsockopt(zmq.LINGER, linger_ms)
    push.connect(f"tcp://127.0.0.1:{port}")
    try:
        yield push
    finally:
        push.close()
        zctx.term()
