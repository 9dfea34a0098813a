"""The ZooKeeper of ``squall dev-cluster``: started bounded and locked, watched and restarted.

Bounded: connections per client address, the size of one request (and so of one node),
and the requests queued in the server, so that no client can make it hold more than its
heap. Locked: once it serves, the nodes outside squall's root refuse writes from clients
without the daemons' credential (``ClusterState.lock_outside``), so a local user cannot fill
it. Its data (every topology's ZooKeeper password and CURVE key) is owner-only.

A ZooKeeper that dies is reported with the end of its log and restarted on the same port
and data, at most ``RestartBudget.max_restarts`` times in ``RestartBudget.window_secs``;
past that the dev cluster gives up and says so.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squall.cli.zookeeper_server import ZooKeeperError, ZooKeeperServer
from squall.daemons.state import MAX_NODE_BYTES, ClusterState, ClusterStateError

# Room for a dev cluster's daemons and workers (a dozen sessions or so, all from 127.0.0.1)
# and tools, and a bound on what one local client can open.
MAX_CLIENT_CONNECTIONS = 60
# squall's largest node plus its path and ACL: nothing squall sends is larger.
MAX_REQUEST_BYTES = MAX_NODE_BYTES + 16 * 1024
# Requests queued in the server: at most ~50 MB of them.
OUTSTANDING_LIMIT = 50
# ZooKeeper keeps its last 500 requests (zookeeper.commitLogCount, which it will not take
# below 500) with their data, refused ones included: 66 refused one-megabyte creates from a
# client without credentials exhausted a 256 MB heap. 500 of the largest requests and the
# queue take ~560 MB; the JVM grows its heap only as needed (~70 MB for a dev cluster).
HEAP_MB = 768
START_TIMEOUT_SECS = 60.0


@dataclass
class RestartBudget:
    """How often a dead process may be restarted: ``max_restarts`` within ``window_secs``."""

    max_restarts: int = 5
    window_secs: float = 600.0
    _times: deque[float] = field(default_factory=deque)

    def allow(self, now: float) -> bool:
        """Whether a restart now stays within the budget (and count it if so)."""
        while self._times and now - self._times[0] > self.window_secs:
            self._times.popleft()
        if len(self._times) >= self.max_restarts:
            return False
        self._times.append(now)
        return True


def locked_server(work_dir: Path) -> ZooKeeperServer:
    """The dev cluster's ZooKeeper (not started yet): bounded, data owner-only."""
    return ZooKeeperServer(work_dir=work_dir, max_client_cnxns=MAX_CLIENT_CONNECTIONS,
                           max_request_bytes=MAX_REQUEST_BYTES, outstanding_limit=OUTSTANDING_LIMIT,
                           heap_mb=HEAP_MB)


def lock(server: ZooKeeperServer, daemon_auth: Mapping[str, Any], root: str) -> list[str]:
    """Close the nodes outside ``root`` to clients without the daemons' credential; the
    paths changed. ZooKeeperError when ZooKeeper refuses or does not answer."""
    conf = {"zookeeper.servers": [server.host], "zookeeper.port": server.port, "zookeeper.root": root,
            **daemon_auth}
    try:
        with ClusterState(conf, warn_outside_open=False) as state:
            return state.lock_outside()
    except ClusterStateError as exc:
        raise ZooKeeperError(f"cannot lock ZooKeeper: {exc}") from None


class Keeper:
    """Restarts the dev cluster's ZooKeeper when it dies, within a ``RestartBudget``.

    ``check(now)`` is called from the thread that started the server (the JVM is tied to
    that thread's life); it returns a line to print, or None when all is well."""

    def __init__(self, server: ZooKeeperServer, budget: RestartBudget | None = None) -> None:
        self.server = server
        self.budget = budget or RestartBudget()
        self.restarts = 0
        self.given_up = False

    def check(self, now: float) -> str | None:
        if self.given_up or self.server.running:
            return None
        code = self.server.exit_code
        said = f"ZooKeeper (pid {self.server.pid}) exited with code {code} (log {self.server.log_path}): " \
               f"{self.server.log_tail(3)}"
        if not self.budget.allow(now):
            self.given_up = True
            return (f"{said}\nZooKeeper died {self.budget.max_restarts} times within "
                    f"{self.budget.window_secs:g}s: not restarting it again; the dev cluster stops")
        try:
            self.server.restart(timeout=START_TIMEOUT_SECS)
        except ZooKeeperError as exc:
            return f"{said}\nrestarting ZooKeeper failed: {exc}"
        self.restarts += 1
        return f"{said}\nZooKeeper restarted on {self.server.hosts} (pid {self.server.pid}, restart {self.restarts})"
