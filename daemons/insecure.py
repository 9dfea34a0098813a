"""Loud warnings for a daemon started with a door left open (ZooKeeper auth, worker CURVE)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def insecure_settings(conf: Mapping[str, Any]) -> list[str]:
    """What is switched off in ``conf``, one sentence each (empty: nothing)."""
    out = []
    if not conf.get("zookeeper.auth.user") or not conf.get("zookeeper.auth.password"):
        out.append("ZooKeeper authentication is OFF (zookeeper.auth.user/password unset): every node "
                   "is created open, and anyone reaching ZooKeeper can rewrite assignments")
    if not conf.get("zmq.curve", True):
        out.append("CurveZMQ is OFF (zmq.curve: false): worker traffic is plain TCP and any peer "
                   "that reaches a worker port can inject tuples")
    host = conf.get("zmq.bind.host")
    if host in ("0.0.0.0", "::", "*"):
        out.append(f"workers bind every interface (zmq.bind.host: {host})")
    return out


def warn_insecure(conf: Mapping[str, Any], logger: Any) -> None:
    """One WARNING line per open door, at start."""
    for sentence in insecure_settings(conf):
        logger.warning("SECURITY OFF: " + sentence)
