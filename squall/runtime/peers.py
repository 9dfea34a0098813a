"""The worker's connections to the other workers of its topology (Storm's
mk-refresh-connections), and the loads those workers last reported for their tasks.

Every other worker of the topology gets a connection, not only those this worker sends
tuples to: backpressure status goes to all of them. A new routing table is published to the
transfer thread whole, and closed connections go to that thread to close, so a refresh never
waits on a send.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from squall.messaging import Connection, Context
from squall.runtime.transfer import Endpoint, Transfer


class Peers:
    """Connections by endpoint and endpoints by task, each replaced whole, never mutated."""

    def __init__(self, context: Context, topology_id: str, endpoint: Endpoint, transfer: Transfer, log: Any) -> None:
        self.context = context
        self.topology_id = topology_id
        self.endpoint = endpoint  # this worker's own: never connected to
        self.transfer = transfer
        self.log = log
        self.connections: dict[Endpoint, Connection] = {}   # replaced whole, never mutated
        self.task_endpoint: dict[int, Endpoint] = {}
        self._conn_lock = threading.Lock()  # serializes refreshes; sends never take it

    def refresh(self, task_endpoints: Mapping[int, Endpoint]) -> None:
        """Connect to workers newly assigned, close those no longer assigned."""
        needed = {ep for ep in task_endpoints.values() if ep != self.endpoint}
        with self._conn_lock:
            conns = dict(self.connections)
            for ep in needed - set(conns):
                conns[ep] = self.context.connect(self.topology_id, ep[0], ep[1])
            stale = set(conns) - needed
            retired = [conns.pop(ep) for ep in stale]
            self.connections, self.task_endpoint = conns, dict(task_endpoints)
            self.transfer.routing = (self.task_endpoint, conns)
        for conn in retired:
            self.transfer.retire(conn)
        if stale or needed:
            self.log.debug("connections refreshed", connected=sorted(needed), closed=sorted(stale))

    def record_loads(self, loads: Mapping[int, Any]) -> None:
        """A peer's report of its tasks' loads, kept on the connection to that peer (for
        ``Connection.get_load``)."""
        conns, endpoints = self.connections, self.task_endpoint
        for task, load in loads.items():
            conn = conns.get(endpoints.get(task))  # type: ignore[arg-type]
            if conn is not None:
                conn.record_load({task: float(load)})

    def loads(self, tasks: Sequence[int]) -> dict[int, float]:
        """The loads other workers last reported for ``tasks`` (0 for those not reported)."""
        conns, endpoints, out = self.connections, self.task_endpoint, {}
        for task in tasks:
            conn = conns.get(endpoints.get(task))  # type: ignore[arg-type]
            if conn is not None:
                out.update(conn.get_load((task,)))
        return out

    def close(self) -> None:
        """Close every connection (the transfer thread has stopped)."""
        with self._conn_lock:
            conns, self.connections = self.connections, {}
            self.transfer.routing = ({}, {})
        for conn in conns.values():
            conn.close()
