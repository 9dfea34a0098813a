"""What operators ask of a running topology's workers, on nimbus's side: log levels for a
while, sampling of emits, a profile of one worker, a restart of every worker
(``squall set-log-level``, ``debug``, ``profile``, ``kill-workers``). The leader checks every
input, writes the requests to ``/operations/<topology id>``
(:mod:`squall.daemons.state.operator_requests`), where the topology's workers read them through
a watch as they read its status, and says in its log who asked for what.

What workers produce comes back on the logs' path: nimbus asks the supervisors' logviewers for
a worker's ``events.log`` (samples) or ``profile-<id>.txt``, bounded in size and time.
"""
from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import structlog

from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.guard import ApiError
from squall.daemons.nimbus.leadership import Leadership
from squall.daemons.nimbus.placement import Placement
from squall.daemons.nimbus.queries import lookup
from squall.daemons.nimbus.worker_logs import worker_log
from squall.daemons.state import ClusterState, TopologyInfo
from squall.daemons.state.operator_requests import (
    ALL_COMPONENTS,
    DEFAULT_DURATION_SECS,
    DEFAULT_HEAP_SECS,
    MAX_DEBUG_COMPONENTS,
    MAX_LOGGERS,
    MAX_PROFILES,
    MAX_RECORD_SECS,
    PROFILE_KINDS,
    OperatorRequests,
    ProfileRequest,
    Timed,
    check_duration,
    check_logger,
    check_percent,
    normalize_level,
    valid_profile_id,
)
from squall.daemons.timers import Clock

log = structlog.get_logger("squall.nimbus")

MAX_SAMPLE_LINES = 1000  # samples one `debug show` asks each worker for
MAX_SAMPLE_WORKERS = 32  # workers one `debug show` asks (the topology's first, by slot)
SAMPLES_BUDGET_SECS = 15.0  # past this, the workers not yet asked are named, not asked


def _checked(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; its ValueError becomes a 400 that says what is wrong."""
    try:
        return fn(*args)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None


class OperatorActions:
    """The leader's side of operator requests (on the HTTP server's threads)."""

    def __init__(self, state: ClusterState, clock: Clock, lock: threading.RLock, leadership: Leadership,
                 placement: Placement) -> None:
        self.state = state
        self.clock = clock
        self._lock = lock
        self.leadership = leadership
        self.placement = placement

    def _update(self, info: TopologyInfo, change: Callable[[OperatorRequests], OperatorRequests]) -> OperatorRequests:
        now = self.clock.time()
        return self.state.update_operator_requests(info.id, lambda current: change(current.pruned(now)))

    def _topology(self, name: str) -> TopologyInfo:
        self.leadership.require()
        info = lookup(self.state, name)
        if info.status == "killed":
            raise ApiError(409, f"topology {info.name!r} is killed")
        return info

    def set_log_levels(self, name: str, levels: Any, timeout: Any, user: str) -> dict[str, Any]:
        """Set ``levels`` ({logger: level}; level "RESET" puts the logger back) for ``timeout``
        seconds (default ten minutes) on every worker of the topology."""
        if not isinstance(levels, dict) or not levels:
            raise ApiError(400, "levels must be a non-empty object of logger -> level")
        if len(levels) > MAX_LOGGERS:
            raise ApiError(400, f"at most {MAX_LOGGERS} loggers at once, got {len(levels)}")
        secs = DEFAULT_DURATION_SECS if timeout is None else _checked(check_duration, timeout, "timeout")
        wanted: dict[str, str | None] = {}
        for logger, level in levels.items():
            reset = isinstance(level, str) and level.upper() == "RESET"
            wanted[_checked(check_logger, logger)] = None if reset else _checked(normalize_level, level)
        with self._lock:
            info = self._topology(name)
            until = self.clock.time() + secs

            def change(current: OperatorRequests) -> OperatorRequests:
                new = dict(current.log_levels)
                for logger, level in wanted.items():
                    if level is None:
                        new.pop(logger, None)
                    else:
                        new[logger] = Timed(level, until)
                if len(new) > MAX_LOGGERS:
                    raise ApiError(409, f"topology {info.name!r} would have more than {MAX_LOGGERS} loggers set; "
                                        "reset some first")
                return replace(current, log_levels=new)

            done = self._update(info, change)
        log.info("operator request: log levels", topology_id=info.id, user=user, levels=wanted, timeout_secs=secs)
        return {"id": info.id, "name": info.name, "timeout_secs": secs,
                "log_levels": {k: {"level": t.value, "until": t.until} for k, t in done.log_levels.items()}}

    def debug(self, name: str, component: Any, percent: Any, timeout: Any, user: str) -> dict[str, Any]:
        """Sample ``percent`` of ``component``'s emits (None: every component) for ``timeout``
        seconds; ``percent`` 0 (or None) stops sampling it."""
        off = percent is None or (not isinstance(percent, bool) and percent == 0)
        value = 0.0 if off else _checked(check_percent, percent)
        secs = DEFAULT_DURATION_SECS if timeout is None else _checked(check_duration, timeout, "timeout")
        with self._lock:
            info = self._topology(name)
            key = ALL_COMPONENTS
            if component is not None:
                counts = self.placement.component_counts(info.id)
                if not isinstance(component, str) or counts is None or component not in counts:
                    known = ", ".join(sorted(counts or ())) or "none known to this nimbus"
                    raise ApiError(400, f"topology {info.name!r} has no component {str(component)[:80]!r} "
                                        f"(its components: {known})")
                key = component
            until = self.clock.time() + secs

            def change(current: OperatorRequests) -> OperatorRequests:
                new = dict(current.debug)
                if off:
                    if key == ALL_COMPONENTS:
                        new.clear()
                    else:
                        new.pop(key, None)
                else:
                    new[key] = Timed(value, until)
                if len(new) > MAX_DEBUG_COMPONENTS:
                    raise ApiError(409, f"at most {MAX_DEBUG_COMPONENTS} components sampled at once")
                return replace(current, debug=new)

            done = self._update(info, change)
        log.info("operator request: debug", topology_id=info.id, user=user,
                 component=None if key == ALL_COMPONENTS else key, percent=value, timeout_secs=secs)
        return {"id": info.id, "name": info.name, "debug": _debug_rows(done)}

    def profile(self, name: str, worker: Any, kind: Any, secs: Any, user: str) -> dict[str, Any]:
        """Ask the worker at ``worker`` ("host:port", or "node:port") for a profile."""
        if kind not in PROFILE_KINDS:
            raise ApiError(400, f"kind must be one of {', '.join(PROFILE_KINDS)}, got {str(kind)[:40]!r}")
        if kind == "stack":
            length = 0.0
        elif secs is None and kind == "heap":
            length = DEFAULT_HEAP_SECS
        else:
            length = _checked(check_duration, secs, "secs", MAX_RECORD_SECS)
        if not isinstance(worker, str) or worker.count(":") < 1:
            raise ApiError(400, f"worker must be HOST:PORT, got {str(worker)[:80]!r}")
        host, _, raw_port = worker.rpartition(":")
        if not raw_port.isdigit() or not 1 <= int(raw_port) <= 65535:
            raise ApiError(400, f"worker must be HOST:PORT with a port from 1 to 65535, got {worker[:80]!r}")
        with self._lock:
            info = self._topology(name)
            assignment = self.state.assignment(info.id)
            slots = sorted(assignment.slots()) if assignment else []
            node_host = assignment.node_host if assignment else {}
            found = [(n, p) for n, p in slots if p == int(raw_port) and host in (n, node_host.get(n))]
            if not found:
                where = ", ".join(f"{node_host.get(n, n)}:{p}" for n, p in slots) if assignment else "none"
                raise ApiError(404, f"topology {info.name!r} has no worker on {worker[:80]} (its workers: {where})")
            node, port = found[0]
            request = ProfileRequest(f"{kind}-{secrets.token_hex(4)}", node, port, str(kind), length,
                                     self.clock.time())
            self._update(info, lambda current: replace(current,
                                                       profiles=(*current.profiles, request)[-MAX_PROFILES:]))
        log.info("operator request: profile", topology_id=info.id, user=user, profile=request.id, node=node,
                 port=port, kind=kind, secs=length)
        return {"id": info.id, "name": info.name, "profile": _profile_row(request, node_host)}

    def kill_workers(self, name: str, user: str) -> dict[str, Any]:
        """Every worker of the topology ends and its supervisor starts it again."""
        with self._lock:
            info = self._topology(name)
            now = self.clock.time()
            done = self._update(info, lambda current: replace(current, restarts=current.restarts + 1,
                                                              restart_at=now))
            assignment = self.state.assignment(info.id)
        workers = len(assignment.slots()) if assignment else 0
        log.info("operator request: kill workers", topology_id=info.id, user=user, workers=workers,
                 restarts=done.restarts)
        return {"id": info.id, "name": info.name, "workers": workers, "restarts": done.restarts}

    # -- reads ----------------------------------------------------------------------------
    def requests(self, name: str) -> dict[str, Any]:
        """What is asked of the topology's workers now (log levels, sampling, profiles)."""
        info = lookup(self.state, name)
        current = (self.state.operator_requests(info.id) or OperatorRequests()).pruned(self.clock.time())
        assignment = self.state.assignment(info.id)
        hosts = assignment.node_host if assignment else {}
        return {"id": info.id, "name": info.name, "debug": _debug_rows(current),
                "log_levels": {k: {"level": t.value, "until": t.until} for k, t in current.log_levels.items()},
                "profiles": [_profile_row(p, hosts) for p in reversed(current.profiles)],
                "restarts": current.restarts, "restart_at": current.restart_at or None}

    def samples(self, access: ApiAccess, name: str, component: str | None, limit: int) -> dict[str, Any]:
        """The newest ``limit`` samples of the topology's workers (of ``component``), newest
        last, read from their events logs; workers that could not be read are named."""
        info = lookup(self.state, name)
        assignment = self.state.assignment(info.id)
        slots = sorted(assignment.slots()) if assignment else []
        supervisors = self.state.supervisors()
        rows: list[dict[str, Any]] = []
        unread: list[dict[str, Any]] = []
        deadline = self.clock.monotonic() + SAMPLES_BUDGET_SECS
        for node, port in slots[:MAX_SAMPLE_WORKERS]:
            if self.clock.monotonic() > deadline:
                unread.append({"node": node, "port": port, "error": "not asked: the time for one read ran out"})
                continue
            try:
                got = worker_log(access, info, assignment, supervisors, node, port,
                                 lines=min(MAX_SAMPLE_LINES, max(limit, 1) * 4), file="events")
            except ApiError as exc:
                unread.append({"node": node, "port": port, "error": str(exc)})
                continue
            for line in got["text"].splitlines():
                sample = _sample(line)
                if sample is not None and (component is None or sample["component"] == component):
                    rows.append({**sample, "host": got["host"], "port": port})
        rows.sort(key=lambda r: r["time"])
        return {"id": info.id, "name": info.name, "samples": rows[-limit:], "unread": unread,
                "workers_left_out": max(0, len(slots) - MAX_SAMPLE_WORKERS)}

    def profile_result(self, access: ApiAccess, name: str, profile_id: str) -> dict[str, Any]:
        """A profile's text; 404 while the worker has not written it (or when it is gone)."""
        if not valid_profile_id(profile_id):
            raise ApiError(400, f"{profile_id[:80]!r} is not a profile id")
        info = lookup(self.state, name)
        current = self.state.operator_requests(info.id) or OperatorRequests()
        request = next((p for p in current.profiles if p.id == profile_id), None)
        if request is None:
            raise ApiError(404, f"topology {info.name!r} has no profile {profile_id!r}")
        assignment = self.state.assignment(info.id)
        got = worker_log(access, info, assignment, self.state.supervisors(), request.node, request.port,
                         file=f"profile-{profile_id}")
        if not got["inode"]:
            raise ApiError(404, f"profile {profile_id!r} is not ready yet (asked for {request.secs:g}s of "
                                f"{request.kind}); try again in a moment")
        return {"id": info.id, "name": info.name, "profile": _profile_row(request, assignment.node_host
                                                                          if assignment else {}),
                "text": got["text"], "truncated": got["truncated"]}


def _debug_rows(requests: OperatorRequests) -> dict[str, Any]:
    return {("*" if k == ALL_COMPONENTS else k): {"percent": t.value, "until": t.until}
            for k, t in requests.debug.items()}


def _profile_row(p: ProfileRequest, hosts: Mapping[str, str]) -> dict[str, Any]:
    return {"profile_id": p.id, "node": p.node, "host": hosts.get(p.node, p.node), "port": p.port, "kind": p.kind,
            "secs": p.secs, "at": p.at}


_SAMPLE_KEYS: dict[str, type | tuple[type, ...]] = {
    "time": (int, float), "component": str, "task": int, "stream": str, "target": int, "anchors": dict, "values": list}


def _sample(line: str) -> dict[str, Any] | None:
    """One sample line of a worker's events log, checked; None when it is not one."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or any(not isinstance(obj.get(k), t) for k, t in _SAMPLE_KEYS.items()):
        return None
    return {k: obj[k] for k in (*_SAMPLE_KEYS, "values_left_out") if k in obj}
