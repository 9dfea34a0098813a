"""``squall status`` for people: the topology as a table, totals beside rates per second.

Plain functions of the status JSON nimbus returns (see ``daemons/nimbus/status.py``);
``squall status --watch`` redraws this text.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from squall.logs import last_line

COLUMNS = ("COMPONENT", "EXECUTOR", "HOST:PORT", "UPTIME", "EMITTED", "EMIT/S", "EXECUTED", "EXEC/S",
           "ACKED", "ACK/S", "FAILED", "FAIL/S", "DROPPED")
COUNTERS = ("emitted", "executed", "acked", "failed")


def plural(n: int, word: str) -> str:
    """``1 worker``, ``2 workers``, ``0 workers``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def duration(secs: float | None) -> str:
    if secs is None:
        return "-"
    secs = int(secs)
    days, rest = divmod(secs, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h{minutes}m"
    if hours:
        return f"{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{minutes}m{seconds}s"
    return f"{seconds}s"


def table(rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def count(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else "-"


def rate(r: Any) -> str:
    """A per-second rate: one decimal below 10, whole numbers above; "-" when unknown."""
    if not isinstance(r, (int, float)):
        return "-"
    if r == 0:
        return "0"
    return f"{r:.1f}" if abs(r) < 10 else f"{round(r):,}"


def _numbers(row: Mapping[str, Any]) -> list[str]:
    rates = row.get("rates") or {}
    out = []
    for key in COUNTERS:
        out += [count(row.get(key)), rate(rates.get(key))]
    return [*out, count(row.get("dropped", 0))]


def _causes(by_cause: Mapping[str, int]) -> str:
    return ", ".join(f"{cause} {n}" for cause, n in sorted(by_cause.items()))


def render(st: Mapping[str, Any]) -> str:
    """The whole status screen of one topology."""
    window = st.get("rate_window_secs")
    lines = [f"topology {st['name']} ({st['id']}): {st['status']}, {plural(len(st['workers']), 'worker')} "
             f"(requested {st['requested_workers']}), {plural(st['executors'], 'executor')}, "
             f"uptime {duration(st['uptime'])}"]
    rows: list[Sequence[Any]] = [COLUMNS]
    errors, drops, metrics = [], [], []
    for comp in st["components"]:
        rows.append([f"{comp['id']} ({comp.get('kind') or '?'})", plural(len(comp['executors']), 'executor'),
                     "", "", *_numbers(comp)])
        for ex in comp["executors"]:
            where = f"{ex['host']}:{ex['port']}" if ex["port"] is not None else "unassigned"
            rows.append(["", f"[{ex['executor'][0]}-{ex['executor'][1]}]", where, duration(ex["uptime"]),
                         *_numbers(ex)])
            for m in ex.get("metrics") or []:
                key = f"{{{m['key']}}}" if m.get("key") is not None else ""
                value = count(m["value"]) if isinstance(m["value"], int) else m["value"]
                metrics.append(f"  {comp['id']} task {m['task']}: {m['name']}{key} = {value}")
            if ex.get("dropped_by_cause"):
                drops.append(f"  {comp['id']} [{ex['executor'][0]}-{ex['executor'][1]}] on {where}: "
                             + _causes(ex["dropped_by_cause"]))
        err = comp.get("last_error")
        if err:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(err["time"]))
            first = last_line(err["error"])
            errors.append(f"  {comp['id']}: {when} task {err['task']} on {err['host']}:{err['port']}: {first}")
    worker_error = st.get("worker_error")
    if worker_error:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(worker_error["time"]))
        errors.append(f"  worker {worker_error['host']}:{worker_error['port']}: {when}: "
                      f"{last_line(worker_error['error'])}")
    for w in st["workers"]:
        if w.get("dropped_by_cause"):
            drops.append(f"  worker {w['host']}:{w['port']}: " + _causes(w["dropped_by_cause"]))
    lines.append(table(rows))
    if window:
        # '-' only where an executor has no two beats yet (a new worker, or one that stopped beating)
        unknown = any(not ex.get("rates") for c in st["components"] for ex in c["executors"])
        lines.append(f"rates: per second over the last {duration(window)}"
                     + (" ('-': not enough beats yet)" if unknown else ""))
    if st.get("state_namespace") and any(c["id"] == "__checkpoint" for c in st["components"]):
        lines.append(f"checkpointed state: {st['state_namespace']}")
    if drops:
        lines.append("input dropped (counted by cause; anchored tuples are replayed):")
        lines.extend(drops)
    if metrics:
        lines.append("metrics (registered by components):")
        lines.extend(metrics)
    if errors:
        lines.append(f"last errors (with tracebacks: squall errors {st['name']}):")
        lines.extend(errors)
    unusable = st.get("unusable_slots") or []
    if unusable:
        lines.append("unusable slots (nimbus assigns nothing there until the port is free):")
        lines.extend(f"  {u['host']}:{u['port']} ({u['node']}): {u['reason']}" for u in unusable)
    return "\n".join(lines)
