"""The report a supervisor sends the leading nimbus every ``supervisor.heartbeat.frequency.secs``.

Storm 2's path (STORM-2693): workers leave their beat and executor stats on local disk
(``local_state``: ``heartbeat.json`` and ``stats.json``), their supervisor gathers them into
one report per interval and posts it over nimbus's authenticated API
(``POST /api/v1/supervisors/<id>/report``, role ``supervisor``). Nothing of it touches
ZooKeeper, so ZooKeeper's write rate does not grow with workers; the report is also the
supervisor's own heartbeat.

A report is JSON ``{"v": 1, "supervisor": id, "time": t, "workers": [WorkerBeat, ...],
"stats_left_out": n}``, each worker as ``WorkerBeat.to_dict`` with ``node`` the supervisor.
Both ends bound it: ``build_report`` keeps every beat (they keep executors alive) and adds
stats while they fit MAX_REPORT_BYTES; ``parse_report`` refuses anything larger, with more
workers or executors than the limits, or naming another node, with a ValueError that names
the problem. Executor stats stay opaque JSON: nimbus reads them only field by field where
they are shown (``nimbus.status``), so how deeply they nest costs nothing but their bytes, and
the report's own fields are checked one by one; their depth is not walked (a tenth of
nimbus's CPU at 1,000 reports per interval). Plain code: the reporter (supervisor) and the
beat table (nimbus) do the I/O.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from squall.daemons.state.records import (
    MAX_BEAT_EXECUTORS,
    WorkerBeat,
    as_dict,
    as_int,
    as_list,
    as_num,
    check_name,
    field_value,
)

REPORT_VERSION = 1
MAX_REPORT_BYTES = 4 << 20  # nimbus refuses a larger body (413) before reading it
MAX_REPORT_WORKERS = 1024  # workers one report may name (a supervisor has one per port)
MAX_REPORT_EXECUTORS = MAX_BEAT_EXECUTORS  # executors all beats of one report may name together


@dataclass
class SupervisorReport:
    """One supervisor's report: its workers' beats (``node`` is the supervisor) and how many
    workers' stats were left out to keep it within MAX_REPORT_BYTES."""

    supervisor_id: str
    time: float
    beats: list[WorkerBeat]
    stats_left_out: int = 0

    def to_json(self) -> bytes:
        return _dump({"v": REPORT_VERSION, "supervisor": self.supervisor_id, "time": self.time,
                      "workers": [b.to_dict() for b in self.beats], "stats_left_out": self.stats_left_out})


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def build_report(supervisor_id: str, now: float, beats: Iterable[WorkerBeat],
                 budget: int = MAX_REPORT_BYTES) -> SupervisorReport:
    """A report of ``beats`` within ``budget`` bytes: every beat stays, stats go in, smallest
    first, while the encoded report fits; the workers whose stats stayed out are counted
    (their executors still count as alive, their numbers wait for the next report)."""
    beats = sorted(beats, key=lambda b: (b.topology_id, b.port))
    bare = [WorkerBeat(b.topology_id, b.node, b.port, b.time, b.executors, b.uptime, {}) for b in beats]
    used = len(SupervisorReport(supervisor_id, now, bare, len(beats)).to_json())
    sizes = sorted((len(_dump(b.stats)) - 2, i) for i, b in enumerate(beats) if b.stats)
    kept = set()
    for size, i in sizes:
        if used + size > budget:
            break
        used += size
        kept.add(i)
    chosen = [beats[i] if i in kept else bare[i] for i in range(len(beats))]
    left_out = sum(1 for i, b in enumerate(beats) if b.stats and i not in kept)
    return SupervisorReport(supervisor_id, now, chosen, left_out)


def parse_report(data: bytes, supervisor_id: str) -> SupervisorReport:
    """Decode and check a report sent for ``supervisor_id``; ValueError naming the problem."""
    if len(data) > MAX_REPORT_BYTES:
        raise ValueError(f"report is {len(data)} bytes, above {MAX_REPORT_BYTES}")
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ValueError("report nested deeper than the interpreter allows") from None
    except ValueError as exc:
        raise ValueError(f"report is not JSON: {exc}") from None
    d = as_dict(obj, "report")
    if d.get("v") != REPORT_VERSION:
        raise ValueError(f"unsupported report version {d.get('v')!r} (expected {REPORT_VERSION})")
    sender = check_name(field_value(d, "supervisor"), "supervisor id")
    if sender != supervisor_id:
        raise ValueError(f"report of supervisor {sender!r} sent for {supervisor_id!r}")
    rows = as_list(field_value(d, "workers"), "workers")
    if len(rows) > MAX_REPORT_WORKERS:
        raise ValueError(f"report names {len(rows)} workers, more than {MAX_REPORT_WORKERS}")
    beats: list[WorkerBeat] = []
    seen: set[int] = set()
    executors = 0
    for row in rows:
        beat = WorkerBeat.from_dict(as_dict(row, "worker"))
        check_name(beat.topology_id, "topology id")
        if beat.node != supervisor_id:
            raise ValueError(f"worker on port {beat.port} names node {beat.node!r}, not {supervisor_id!r}")
        if not 1 <= beat.port <= 65535 or beat.port in seen:
            raise ValueError(f"worker port {beat.port} is out of range or named twice")
        seen.add(beat.port)
        executors += len(beat.executors)
        if executors > MAX_REPORT_EXECUTORS:
            raise ValueError(f"report names more than {MAX_REPORT_EXECUTORS} executors")
        beats.append(beat)
    left_out = as_int(d.get("stats_left_out", 0), "stats_left_out")
    return SupervisorReport(sender, as_num(field_value(d, "time"), "time"), beats, max(0, left_out))
