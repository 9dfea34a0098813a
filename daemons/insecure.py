"""Loud warnings for a daemon started with a door left open (ZooKeeper auth, worker CURVE)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from squall.daemons.state.acls import PASSWORD_ENV, ZkAuth


def insecure_settings(conf: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """What is switched off in ``conf`` (and the environment), one sentence each (empty: nothing)."""
    env = os.environ if environ is None else environ
    out = []
    try:
        zk_auth = ZkAuth.from_conf(conf, env).enabled
    except ValueError:
        zk_auth = False
    if not zk_auth:
        unused = f"; ${PASSWORD_ENV} is set but counts only with zookeeper.auth.user" \
            if env.get(PASSWORD_ENV) else ""
        out.append("ZooKeeper authentication is OFF (zookeeper.auth.user/password unset" + unused + "): "
                   "every node is created open, and anyone reaching ZooKeeper can rewrite assignments")
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
