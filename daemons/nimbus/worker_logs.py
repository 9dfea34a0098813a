"""Worker logs through nimbus: find the supervisor that runs a topology's worker on a slot
and ask its logviewer (``squall.daemons.supervisor.logviewer``) for the log.

This is how ``squall logs`` and the web UI read logs from any machine that reaches nimbus:
nimbus authorizes its caller, then asks the supervisor with its own token (``squall.token``,
role ``supervisor``), over TLS when ``nimbus.tls.ca.file`` is set.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.guard import ApiError
from squall.daemons.state import Assignment, SupervisorInfo, TopologyInfo
from squall.daemons.supervisor.logviewer import LogViewerError, fetch_log

FETCH_TIMEOUT_SECS = 10.0


def worker_log(access: ApiAccess, info: TopologyInfo, assignment: Assignment | None,
               supervisors: Mapping[str, SupervisorInfo], node: str, port: int, *,
               lines: int | None = None, offset: int | None = None,
               inode: int | None = None, file: str | None = None) -> dict[str, Any]:
    """The log of ``info``'s worker on (node, port), as its supervisor's logviewer gives it,
    with the slot's node, host and port; ApiError naming what is missing."""
    if assignment is None or (node, port) not in assignment.slots():
        raise ApiError(404, f"topology {info.name!r} has no worker on {node}:{port}")
    sup = supervisors.get(node)
    if sup is None:
        raise ApiError(503, f"supervisor {node} is not registered; its logs cannot be read")
    if sup.logviewer_port is None:
        raise ApiError(503, f"supervisor {node} ({sup.host}) does not serve worker logs "
                            "(supervisor.logviewer.port is null in its config)")
    try:
        body = fetch_log(sup.host, sup.logviewer_port, access, info.id, port, lines=lines,
                         offset=offset, inode=inode, timeout=FETCH_TIMEOUT_SECS, file=file)
    except LogViewerError as exc:
        raise ApiError(404 if exc.status == 404 else 502, str(exc)) from None
    return {"topology_id": info.id, "node": node, "host": sup.host, "port": port,
            "worker_id": body.get("worker_id"), "text": body["text"],
            "next_offset": body.get("next_offset"), "inode": body.get("inode"),
            "truncated": bool(body.get("truncated"))}
