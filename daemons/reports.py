"""The report a supervisor sends the leading nimbus every ``supervisor.heartbeat.frequency.secs``.

Storm 2's path (STORM-2693): workers leave their beat and executor stats on local disk
(``local_state``: ``heartbeat.json`` and ``stats.json``), their supervisor gathers them into
one report per interval and posts it over nimbus's authenticated API
(``POST /api/v1/supervisors/<id>/report``, role ``supervisor``). Nothing of it touches
ZooKeeper, so ZooKeeper's write rate does not grow with workers; the report is also the
supervisor's own heartbeat.

A report is JSON ``{"v": 1, "supervisor": id, "time": t, "workers": [ReportedBeat, ...],
"stats_left_out": n, "epoch": e, "seq": s, "key": k}``: ``epoch`` is when this run of the
supervisor started (milliseconds, as its ZooKeeper node says), ``seq`` counts its reports,
and ``key`` is the secret whose sha256 its node holds (nimbus's checks:
``squall.daemons.nimbus.report_checks``); a supervisor of an earlier squall sends none of
the three. Each worker carries what nimbus reads from every report (its beat:
time and executors; and its executors' counters, for rates) as plain fields, and its full
executor stats as the JSON text the worker wrote: nimbus decodes that text only when a status
shows the topology, and keeps it as compact text meanwhile. At 1,000 reports per interval
that is the difference between nimbus decoding a few kilobytes of numbers per report and
building hundreds of dictionaries.

Both ends bound it: ``build_report`` keeps every beat (they keep executors alive) and adds
stats while they fit MAX_REPORT_BYTES; ``parse_report`` refuses anything larger, with more
workers or executors than the limits, or naming another node, with a ValueError that names
the problem. Plain code: the reporter (supervisor) and the beat table (nimbus) do the I/O.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from squall.daemons.fields import (
    MAX_BEAT_EXECUTORS,
    ExecutorId,
    as_dict,
    as_int,
    as_list,
    as_num,
    as_str,
    expand_runs,
    field_value,
)
from squall.daemons.state.records import Beat, WorkerBeat, check_name
from squall.runtime.stats import Counters, WorkerStats

REPORT_VERSION = 1
MAX_REPORT_BYTES = 4 << 20  # nimbus refuses a larger body (413) before reading it
MAX_REPORT_WORKERS = 1024  # workers one report may name (a supervisor has one per port)
MAX_REPORT_EXECUTORS = MAX_BEAT_EXECUTORS  # executors all beats of one report may name together
MAX_KEY_CHARS = 128  # the report key a supervisor sends (its sha256 is what its node holds)


# --- one worker in a report -------------------------------------------------------------------

@dataclass
class ReportedBeat(Beat):
    """One worker as its supervisor reports it: its beat (``time``: the worker's local
    heartbeat), its executors' counters read at ``counters_time`` (for rates), and its stats
    as the JSON text it wrote ("" when none), decoded only where shown."""

    counters_time: float | None = None
    counters: dict[ExecutorId, Counters] = field(default_factory=dict)
    stats: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**self.beat_dict(), "counters_time": self.counters_time,
                "counters": [[s, e, *c] for (s, e), c in sorted(self.counters.items())], "stats": self.stats}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], limit: int = MAX_BEAT_EXECUTORS) -> ReportedBeat:
        executors = expand_runs(as_list(field_value(d, "executor_runs"), "executor_runs"), limit)
        named = set(executors)
        counters: dict[ExecutorId, Counters] = {}
        for row in as_list(d.get("counters", []), "counters"):
            # `type(v) is int`, not isinstance: a bool is no counter (and this runs for every
            # executor of every report). Six: from a supervisor of an earlier squall (no latencies).
            if type(row) is not list or len(row) not in (6, 9) or not all(type(v) is int for v in row):
                raise ValueError(f"a counters row must be six or nine integers, got {row!r}")
            ex = (row[0], row[1])
            if ex not in named:
                raise ValueError(f"counters for executor {list(ex)} the worker does not run")
            counters[ex] = (row[2], row[3], row[4], row[5], *(row[6:] if len(row) == 9 else (0, 0, 0)))
        t = d.get("counters_time")
        return cls(**cls.checked_fields(d, executors),
                   counters_time=None if t is None else as_num(t, "counters_time"), counters=counters,
                   stats=as_str(d.get("stats", ""), "stats"))

    @classmethod
    def of(cls, beat: WorkerBeat) -> ReportedBeat:
        """A beat with its stats decoded (a legacy ZooKeeper beat, or one built from files)."""
        wire = beat.stats.to_dict()
        text = json.dumps(wire, separators=(",", ":")) if wire else ""
        return cls(**beat.beat_fields(), counters_time=beat.stats.time if beat.stats.time is not None else beat.time,
                   counters=beat.stats.counters(beat.executors), stats=text)

    def decoded(self) -> WorkerBeat:
        """As a WorkerBeat, its stats decoded; stats that are not a JSON object count as none
        (the report carried them opaque: they are checked here, where they are used)."""
        try:
            stats = json.loads(self.stats) if self.stats else {}
        except (ValueError, RecursionError):
            stats = {}
        return WorkerBeat(**self.beat_fields(), stats=WorkerStats.from_dict(stats))

    def samples(self) -> dict[ExecutorId, tuple[float, Counters]]:
        """(time, counters) per executor for the rate history."""
        t = self.time if self.counters_time is None else self.counters_time
        return {ex: (t, c) for ex, c in self.counters.items()}


# --- the report ---------------------------------------------------------------------------------

@dataclass
class SupervisorReport:
    """One supervisor's report: its workers (``node`` is the supervisor) and how many
    workers' stats were left out to keep it within MAX_REPORT_BYTES."""

    supervisor_id: str
    time: float
    beats: list[ReportedBeat]
    stats_left_out: int = 0
    epoch: int = 0  # this run of the supervisor (its start, ms); 0: not said (an earlier squall)
    seq: int = 0    # the report's number in this run
    key: str = ""   # this run's secret, whose sha256 its ZooKeeper node holds

    def to_json(self) -> bytes:
        out: dict[str, Any] = {"v": REPORT_VERSION, "supervisor": self.supervisor_id, "time": self.time,
                               "workers": [b.to_dict() for b in self.beats], "stats_left_out": self.stats_left_out}
        if self.epoch:
            out.update(epoch=self.epoch, seq=self.seq, key=self.key)
        return json.dumps(out, separators=(",", ":")).encode("utf-8")

    def __repr__(self) -> str:  # never print the key
        return (f"SupervisorReport(supervisor_id={self.supervisor_id!r}, epoch={self.epoch}, seq={self.seq}, "
                f"beats={len(self.beats)})")


def report_epoch(started_at: float) -> int:
    """A supervisor run's epoch: its start (its node's ``started_at``) in milliseconds."""
    return int(started_at * 1000)


def build_report(supervisor_id: str, now: float, beats: Iterable[ReportedBeat],
                 budget: int = MAX_REPORT_BYTES, epoch: int = 0, seq: int = 0, key: str = "") -> SupervisorReport:
    """A report of ``beats`` within ``budget`` bytes: every beat (with its counters) stays,
    stats texts go in, smallest first, while the report fits; the workers whose stats stayed
    out are counted (their numbers wait for the next report)."""
    beats = sorted(beats, key=lambda b: (b.topology_id, b.port))
    bare = [replace(b, stats="") for b in beats]
    used = len(SupervisorReport(supervisor_id, now, bare, len(beats), epoch, seq, key).to_json())
    kept = set()
    # Escaping in the report adds to each text; its encoded length is what counts.
    for size, i in sorted((len(json.dumps(b.stats)) - 2, i) for i, b in enumerate(beats) if b.stats):
        if used + size > budget:
            break
        used += size
        kept.add(i)
    chosen = [beats[i] if i in kept else bare[i] for i in range(len(beats))]
    left_out = sum(1 for i, b in enumerate(beats) if b.stats and i not in kept)
    return SupervisorReport(supervisor_id, now, chosen, left_out, epoch, seq, key)


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
    beats: list[ReportedBeat] = []
    seen: set[int] = set()
    left = MAX_REPORT_EXECUTORS
    for i, row in enumerate(rows):
        try:
            beat = ReportedBeat.from_dict(as_dict(row, "worker"), limit=left)
        except ValueError as exc:  # the limit is what the report's earlier workers left
            raise ValueError(f"worker {i} (of at most {MAX_REPORT_EXECUTORS} executors in all): {exc}") from None
        check_name(beat.topology_id, "topology id")
        if beat.node != supervisor_id:
            raise ValueError(f"worker on port {beat.port} names node {beat.node!r}, not {supervisor_id!r}")
        if not 1 <= beat.port <= 65535 or beat.port in seen:
            raise ValueError(f"worker port {beat.port} is out of range or named twice")
        seen.add(beat.port)
        left -= len(beat.executors)
        beats.append(beat)
    left_out = as_int(d.get("stats_left_out", 0), "stats_left_out")
    epoch, seq = as_int(d.get("epoch", 0), "epoch"), as_int(d.get("seq", 0), "seq")
    key = as_str(d.get("key", ""), "key")
    if epoch < 0 or seq < 0 or len(key) > MAX_KEY_CHARS:
        raise ValueError("a report's epoch and seq must be non-negative, its key at most "
                         f"{MAX_KEY_CHARS} characters")
    return SupervisorReport(sender, as_num(field_value(d, "time"), "time"), beats, max(0, left_out), epoch, seq, key)
