"""The tables of bench/compare.py: every figure per round, issue 22's ratios, latency.

A ratio is computed within a round (its two figures ran minutes apart, on the same
machine state), then shown per round and as the range over the rounds: once from the
rates (the issue's definition) and once from the rates per CPU-second that the measured
processes used, which a busy shared machine disturbs far less than it disturbs rates.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

Rates = dict[str, float]  # figure key -> words/s or tuples/s, one round


def _ratio(num: str, den: str) -> Callable[[Rates], float]:
    return lambda r: r[num] / r[den] if r.get(num) and r.get(den) else math.nan


# (row, goal of issue 22, value from one round's rates)
RATIOS: list[tuple[str, str, Callable[[Rates], float]]] = [
    ("local word count, acked / Bytewax", ">= 1.2", _ratio("wordcount-acked", "bytewax")),
    ("local word count, unacked / Bytewax", ">= 1.5", _ratio("wordcount-unacked", "bytewax")),
    ("plain Python loop / Bytewax", "", _ratio("plain-loop", "bytewax")),
    ("local const -> id -> null, M tuples/s", ">= 2",
     lambda r: r["const-id-null"] / 1e6 if r.get("const-id-null") else math.nan),
    ("acked / unacked, local const -> id -> null", ">= 0.7", _ratio("const-id-null-acked", "const-id-null")),
    ("acked / unacked, local word count", "", _ratio("wordcount-acked", "wordcount-unacked")),
    ("cluster const -> id -> null / zmq ceiling", ">= 0.6", _ratio("cluster", "zmq-ceiling")),
    ("cluster acked / unacked", ">= 0.6", _ratio("cluster-acked", "cluster")),
]
LATENCY_GOAL = "<= 10"


def _rate(result: dict[str, Any]) -> float:
    return result.get("words_per_sec", result.get("tuples_per_sec", math.nan))


def _per_cpu(result: dict[str, Any]) -> float:
    """Items per CPU-second of the measured processes (NaN when the run did not say)."""
    if result.get("cpu_ns_per_tuple"):
        return 1e9 / result["cpu_ns_per_tuple"]
    if result.get("process_cpu"):
        return _rate(result) / result["process_cpu"]
    return math.nan


def _cpu_cell(result: dict[str, Any]) -> str:
    per = _per_cpu(result)
    return "" if math.isnan(per) else f" cpu {_rate(result) / per:.2f}"


def _num(v: float, digits: int = 2) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _span(values: list[float], digits: int = 2) -> str:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return "-"
    lo, hi = min(vals), max(vals)
    return _num(lo, digits) if _num(lo, digits) == _num(hi, digits) else f"{_num(lo, digits)}-{_num(hi, digits)}"


def render(report: dict[str, Any], figures: list) -> tuple[str, dict[str, Any]]:
    """The text of the summary and its tables as data (ratios and latency) for the JSON copy."""
    rounds = report["rounds"]
    by_round: list[Rates] = [{} for _ in range(rounds)]
    cpu_by_round: list[Rates] = [{} for _ in range(rounds)]
    cells: dict[str, list[str]] = {}
    latency: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    labels = {f.key: (f.label, f.unit) for f in figures}
    for run in report["runs"]:
        key = run["figure"]
        if "error" in run:
            errors.append(f"{labels[key][0]}{'' if run['round'] is None else ' round %d' % run['round']}: "
                          f"{run['error']}")
        if run["round"] is None:
            if "result" in run:
                latency[key] = run["result"]
            continue
        result = run.get("result", {})
        value = _rate(result)
        by_round[run["round"] - 1][key] = value
        cpu_by_round[run["round"] - 1][key] = _per_cpu(result)
        cell = "failed" if math.isnan(value) else f"{value:,.0f}"
        row = cells.setdefault(key, [""] * rounds)
        row[run["round"] - 1] = f"{cell} ({run['load_before'][0]:.1f}>{run['load_after'][0]:.1f}{_cpu_cell(result)})"

    lines = ["figures, each round (load average before>after the run, CPUs the measured processes used)"]
    header = "".join(f"{'round ' + str(i + 1):>34}" for i in range(rounds))
    lines.append(f"  {'':48}{header}")
    for key, row in cells.items():
        label, unit = labels[key]
        lines.append(f"  {label + ' (' + unit + ')':48}" + "".join(f"{c:>34}" for c in row))

    ratio_rows = []
    for title, rates, kind in (("ratios (issue 22's goal table), each round and the range", by_round, "rate"),
                               ("the same per CPU-second of the measured processes", cpu_by_round, "per_cpu")):
        lines += ["", title]
        lines.append(f"  {'':48}" + "".join(f"{'r' + str(i + 1):>8}" for i in range(rounds))
                     + f"{'range':>14}{'goal':>9}")
        for name, goal, fn in RATIOS:
            vals = [fn(r) for r in rates]
            if all(math.isnan(v) for v in vals):
                continue
            ratio_rows.append({"name": name, "of": kind, "goal": goal, "per_round": vals})
            lines.append(f"  {name:48}" + "".join(f"{_num(v):>8}" for v in vals) + f"{_span(vals):>14}{goal:>9}")
    if latency:
        lines += ["", "latency (once)"]
    for key, where in (("latency-local", "local"), ("latency-cluster", "cluster")):
        p99 = _phase(latency.get(key), "50%").get("p99_ms", math.nan)
        if key in latency:
            name = f"p99 complete latency at 50% of max, {where} (ms)"
            ratio_rows.append({"name": name, "goal": LATENCY_GOAL, "value": p99})
            lines.append(f"  {name:48}{_num(p99):>8}{'':14}{LATENCY_GOAL:>9}")
    for key, where, top, goals in (("latency-local", "local", "75%", ("<= 2", "<= 10")),
                                   ("latency-cluster", "cluster", "50%", ("<= 3", "<= 15"))):
        if key not in latency:
            continue
        loads = [p for p in latency[key]["phases"][1:]
                 if p["phase"].endswith("%") and float(p["phase"][:-1]) <= float(top[:-1])]
        for q, goal in zip(("p50", "p99"), goals):  # issue 31: the worst over every load up to ``top``
            worst = max((p.get(f"{q}_ms", math.nan) for p in loads), default=math.nan)
            name = f"worst {q} at 1-{top} of max, {where} (ms)"
            ratio_rows.append({"name": name, "goal": goal, "value": worst})
            lines.append(f"  {name:48}{_num(worst):>8}{'':14}{goal:>9}")

    if latency:
        lines += ["", "latency under load: complete latency from each tuple's scheduled emit time to its ack",
                  "(p99 split: lag = scheduled to emitted, flight = emitted to acked)",
                  f"  {'':10}{'phase':>6}{'offered/s':>12}{'acked/s':>12}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
                  f"{'p999 ms':>9}{'max ms':>9}{'lag p99':>9}{'flt p99':>9}{'missing':>9}"]
        for key, result in latency.items():
            where = key.split("-")[1]
            for p in result["phases"]:
                offered = "max" if p["offered_per_sec"] is None else f"{p['offered_per_sec']:,.0f}"
                lines.append(f"  {where:10}{p['phase']:>6}{offered:>12}{p['acked_per_sec']:>12,.0f}"
                             f"{_num(p.get('p50_ms', math.nan)):>9}{_num(p.get('p90_ms', math.nan)):>9}"
                             f"{_num(p.get('p99_ms', math.nan)):>9}{_num(p.get('p999_ms', math.nan)):>9}"
                             f"{_num(p.get('max_ms', math.nan)):>9}"
                             f"{_num(p.get('lag_p99_ms', math.nan)):>9}{_num(p.get('flight_p99_ms', math.nan)):>9}"
                             f"{p['missing'] + p['failed']:>9}")
            machine = result.get("machine") or {}
            if "oversleep_p99_ms" in machine:  # the wake probe's figures (a run's own "machine" has none)
                lines.append(f"  {where:10}  machine: a 1 ms sleep woke p99 {_num(machine['oversleep_p99_ms'])} ms "
                             f"late, max {_num(machine['oversleep_max_ms'])} ms (wake_probe.py, meanwhile)")
    lines += ["", f"load average at start {' '.join(map(str, report['load_start']))}, "
                  f"at end {' '.join(map(str, report['load_end']))} ({report['nproc']} CPUs)"]
    if errors:
        lines += ["", "failed figures:"] + [f"  {e}" for e in errors]
    return "\n".join(lines), {"ratios": ratio_rows}


def _phase(result: dict[str, Any] | None, name: str) -> dict[str, Any]:
    for p in (result or {}).get("phases", []):
        if p["phase"] == name:
            return p
    return {}
