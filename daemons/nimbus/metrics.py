"""Nimbus's series for ``/metrics``: leadership, topologies, supervisors and slots, and the
leader loop's counters. A plain function of what nimbus read; the route is mounted next to
the API in :mod:`squall.daemons.nimbus.daemon`."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from squall.daemons.metrics.families import Series

STATUSES = ("active", "inactive", "rebalancing", "killed")


REPORT_RESULTS = ("taken", "refused", "unsigned", "stats_dropped")


def nimbus_series(is_leader: bool, counts: Mapping[str, int], statuses: Iterable[str] | None,
                  supervisor_rows: list[dict[str, Any]] | None,
                  round_secs: tuple[float, float] | None = None) -> Series:
    """``statuses`` and ``supervisor_rows`` are None when ZooKeeper could not be read: the
    series that need it are then left out rather than reported as zero. ``counts`` holds the
    leader loop's counters and the reports' (``reports:<result>``); ``round_secs`` the last
    round's (seconds, CPU seconds of its thread: the difference is time spent waiting for a
    core or for the interpreter's lock)."""
    out = Series()
    out.add("squall_nimbus_leader", (), 1 if is_leader else 0)
    out.add("squall_nimbus_scheduling_rounds", (), counts.get("rounds", 0))
    out.add("squall_nimbus_assignments_written", (), counts.get("assignments", 0))
    out.add("squall_nimbus_executors_moved", (), counts.get("moved", 0))
    if round_secs is not None:
        out.add("squall_nimbus_round_seconds", (), round_secs[0])
        out.add("squall_nimbus_round_cpu_seconds", (), round_secs[1])
    for result in REPORT_RESULTS:
        out.add("squall_nimbus_supervisor_reports", (result,), counts.get(f"reports:{result}", 0))
    if statuses is not None:
        by_status = Counter(statuses)
        for status in sorted(set(STATUSES) | set(by_status)):
            out.add("squall_nimbus_topologies", (status,), by_status[status])
    if supervisor_rows is not None:
        out.add("squall_nimbus_supervisors", (), len(supervisor_rows))
        out.add("squall_nimbus_slots", ("used",), sum(r["used"] for r in supervisor_rows))
        out.add("squall_nimbus_slots", ("free",), sum(r["free"] for r in supervisor_rows))
    return out
