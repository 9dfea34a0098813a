"""The tables of bench/compare.py: every figure per round, issue 22's ratios, latency, and
issue 31's goal table (each row's value against its goal; a row whose figures are missing
says so instead of failing).

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
THROUGHPUT_SLACK = 0.95  # issue 31: maximum throughput no more than 5% lower than the baseline's


def _rate(result: dict[str, Any]) -> float:
    for field in ("words_per_sec", "tuples_per_sec", "records_per_sec"):
        if field in result:
            return result[field]
    return math.nan


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
    results_by_round: list[dict[str, dict[str, Any]]] = [{} for _ in range(rounds)]
    cpu_by_round: list[Rates] = [{} for _ in range(rounds)]
    cells: dict[str, list[str]] = {}
    latency: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    labels = {f.key: (f.label, f.unit) for f in figures}
    for run in report["runs"]:  # a figure this list lacks (an older report) still gets a label
        labels.setdefault(run["figure"], (run["figure"], "/s"))
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
        results_by_round[run["round"] - 1][key] = result
        cpu_by_round[run["round"] - 1][key] = _per_cpu(result)
        cell = "failed" if math.isnan(value) else f"{value:,.0f}"
        row = cells.setdefault(key, [""] * rounds)
        row[run["round"] - 1] = f"{cell} ({run['load_before'][0]:.1f}>{run['load_after'][0]:.1f}{_cpu_cell(result)})"

    lines = ["figures, each round (load average before>after the run, CPUs the measured processes used)"]
    header = "".join(f"{'round ' + str(i + 1):>34}" for i in range(rounds))
    lines.append(f"  {'':56}{header}")
    for key, row in cells.items():
        label, unit = labels[key]
        lines.append(f"  {label + ' (' + unit + ')':56}" + "".join(f"{c:>34}" for c in row))

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
                  "(p50 and p99 split: lag = scheduled to emitted, flight = emitted to acked)",
                  f"  {'':10}{'phase':>6}{'offered/s':>12}{'acked/s':>12}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
                  f"{'p999 ms':>9}{'max ms':>9}{'lag p50':>9}{'flt p50':>9}{'lag p99':>9}{'flt p99':>9}"
                  f"{'missing':>9}"]
        for key, result in latency.items():
            where = key.split("-")[1]
            for p in result["phases"]:
                offered = "max" if p["offered_per_sec"] is None else f"{p['offered_per_sec']:,.0f}"
                lines.append(f"  {where:10}{p['phase']:>6}{offered:>12}{p['acked_per_sec']:>12,.0f}"
                             f"{_num(p.get('p50_ms', math.nan)):>9}{_num(p.get('p90_ms', math.nan)):>9}"
                             f"{_num(p.get('p99_ms', math.nan)):>9}{_num(p.get('p999_ms', math.nan)):>9}"
                             f"{_num(p.get('max_ms', math.nan)):>9}"
                             f"{_num(p.get('lag_p50_ms', math.nan)):>9}{_num(p.get('flight_p50_ms', math.nan)):>9}"
                             f"{_num(p.get('lag_p99_ms', math.nan)):>9}{_num(p.get('flight_p99_ms', math.nan)):>9}"
                             f"{p['missing'] + p['failed']:>9}")
            machine = result.get("machine") or {}
            if "oversleep_p99_ms" in machine:  # the wake probe's figures (a run's own "machine" has none)
                lines.append(f"  {where:10}  machine: a 1 ms sleep woke p99 {_num(machine['oversleep_p99_ms'])} ms "
                             f"late, max {_num(machine['oversleep_max_ms'])} ms (wake_probe.py, meanwhile)")
    goal_rows = goal_table(report, by_round, results_by_round, latency)
    lines += ["", "issue 31's goal table (ratios within a round: each round, the range; verdict on the median)",
              f"  {'':52}{'value':>24}{'goal':>9}  verdict"]
    for row in goal_rows:
        lines.append(f"  {row['name']:58}{row['shown']:>24}{row['goal']:>9}  {row['verdict']}")
    lines += ["", f"load average at start {' '.join(map(str, report['load_start']))}, "
                  f"at end {' '.join(map(str, report['load_end']))} ({report['nproc']} CPUs)"]
    if errors:
        lines += ["", "failed figures:"] + [f"  {e}" for e in errors]
    return "\n".join(lines), {"ratios": ratio_rows, "goals": goal_rows}


def _phase(result: dict[str, Any] | None, name: str) -> dict[str, Any]:
    for p in (result or {}).get("phases", []):
        if p["phase"] == name:
            return p
    return {}


# -- issue 31's goal table ------------------------------------------------------------------
def _result_field(key: str, field: str) -> Callable[[dict[str, dict[str, Any]]], float]:
    def value(results: dict[str, dict[str, Any]]) -> float:
        v = results.get(key, {}).get(field)
        return float(v) if isinstance(v, (int, float)) else math.nan
    return value


# (row, goal, value from one round's rates, or from its results when ``by_result``)
ROUND_GOALS: list[tuple[str, str, Callable[[Rates], float] | None, Callable[[dict], float] | None]] = [
    ("cluster acked / unacked", ">= 0.5", _ratio("cluster-acked", "cluster"), None),
    ("local acked / unacked (const -> id -> null)", ">= 0.7", _ratio("const-id-null-acked", "const-id-null"), None),
    ("storm.py ShellBolt / pystorm ShellBolt", ">= 0.8", None,
     _result_field("multilang-split", "storm_style_over_pystorm")),
    ("Kafka -> split -> count -> Kafka / Bytewax", ">= 1.3", _ratio("kafka-pipeline", "bytewax-kafka"), None),
]
LATENCY_GOALS = [("latency-local", "local", "75%", ("<= 2", "<= 10")),
                 ("latency-cluster", "3-worker cluster", "50%", ("<= 3", "<= 15"))]


def meets(value: float, goal: str) -> bool | None:
    """Whether ``value`` meets a goal written ">= x" or "<= x"; None when it cannot say."""
    if math.isnan(value) or not goal:
        return None
    op, _, bound = goal.partition(" ")
    try:
        limit = float(bound)
    except ValueError:
        return None
    return value >= limit if op == ">=" else value <= limit if op == "<=" else None


def _goal_row(name: str, goal: str, values: list[float], missing: str, digits: int = 2) -> dict[str, Any]:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return {"name": name, "goal": goal, "per_round": values, "shown": "-", "verdict": f"missing ({missing})"}
    median = sorted(vals)[len(vals) // 2] if len(vals) % 2 else sum(sorted(vals)[len(vals) // 2 - 1:][:2]) / 2
    ok = meets(median, goal)
    shown = _span(values, digits) if len(values) > 1 else _num(vals[0], digits)
    return {"name": name, "goal": goal, "per_round": values, "median": median, "shown": shown,
            "verdict": "-" if ok is None else "met" if ok else "NOT met"}


def _worst_latency(result: dict[str, Any] | None, q: str, top: str) -> float:
    phases = [p for p in (result or {}).get("phases", [])[1:]
              if str(p.get("phase", "")).endswith("%") and float(p["phase"][:-1]) <= float(top[:-1])]
    return max((p.get(f"{q}_ms", math.nan) for p in phases), default=math.nan)


def goal_table(report: dict[str, Any], by_round: list[Rates], results_by_round: list[dict[str, dict[str, Any]]],
               latency: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every row of issue 31's goal table, in its order; a row without figures says which."""
    rows = []
    for key, where, top, goals in LATENCY_GOALS:
        for q, goal in zip(("p50", "p99"), goals):
            rows.append(_goal_row(f"complete latency {q}, {where}, 1-{top} of max (ms)", goal,
                                  [_worst_latency(latency.get(key), q, top)], f"no {key} figure"))
    for name, goal, from_rates, from_results in ROUND_GOALS:
        if from_rates is not None:
            values = [from_rates(r) for r in by_round]
        else:
            values = [from_results(r) for r in results_by_round]  # type: ignore[misc]
        rows.append(_goal_row(name, goal, values, "its figures did not run or failed"))
    rows += throughput_rows(report, by_round, latency)
    return rows


def throughput_rows(report: dict[str, Any], by_round: list[Rates],
                    latency: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Maximum throughput of every squall scenario against the baseline report's (a
    ``compare.py --json`` file given with ``--baseline``): goal at least 0.95 of it."""
    base = report.get("baseline")
    goal = f">= {THROUGHPUT_SLACK}"
    name = "maximum throughput / baseline's"
    if not isinstance(base, dict):
        why = base if isinstance(base, str) else "no --baseline report given"
        return [_goal_row(name + ", every scenario", goal, [math.nan], why)]
    now, before = _medians(by_round, latency), _medians(*_rates_of(base))
    rows = []
    for key in sorted(set(now) | set(before)):
        if key in PEER_FIGURES:
            continue
        value = now[key] / before[key] if now.get(key) and before.get(key) else math.nan
        rows.append(_goal_row(f"{name}, {key}", goal, [value], "not in both reports"))
    return rows or [_goal_row(name + ", every scenario", goal, [math.nan], "no figures in common")]


PEER_FIGURES = {"bytewax", "plain-loop", "zmq-ceiling", "bytewax-kafka"}  # not squall's throughput


def _medians(by_round: list[Rates], latency: dict[str, dict[str, Any]]) -> dict[str, float]:
    out = {}
    for key in {k for r in by_round for k in r}:
        vals = sorted(v for r in by_round if not math.isnan(v := r.get(key, math.nan)))
        if vals:
            out[key] = vals[len(vals) // 2]
    for key, result in latency.items():  # the latency bench's measured maximum
        top = result.get("max_rate")
        if isinstance(top, (int, float)) and top > 0:
            out[key + " (max)"] = float(top)
    return out


def _rates_of(report: dict[str, Any]) -> tuple[list[Rates], dict[str, dict[str, Any]]]:
    """A saved report's rates per round and latency results (what render reads)."""
    rounds = int(report.get("rounds") or 1)
    by_round: list[Rates] = [{} for _ in range(rounds)]
    latency: dict[str, dict[str, Any]] = {}
    for run in report.get("runs", []):
        if not isinstance(run, dict) or "result" not in run:
            continue
        if run.get("round") is None:
            latency[run["figure"]] = run["result"]
        elif 1 <= run["round"] <= rounds:
            by_round[run["round"] - 1][run["figure"]] = _rate(run["result"])
    return by_round, latency
