"""Complete latency under load, Storm-loadgen style, in local mode and on a real cluster.

``bench/topologies/scheduled_load.py`` (spout -> id -> null, acked) first runs as fast as
acks allow to measure the maximum rate, then offers 1%, 10%, 25%, 50% and 75% of it on a
schedule (issue 31); p50, p90, p99 and p999 per phase;
complete latency runs from each tuple's scheduled emit time to its ack at the spout, so a
backlog shows (see ``bench/topologies/loadgen.py``). The whole plan runs in one topology:
the driver submits it and waits for the results the spout writes. Each phase's p50 and p99 are
split into emit lag (scheduled to emitted) and flight (emitted to acked), and a probe
process (``wake_probe.py``) measures meanwhile how late a 1 ms sleep wakes on this
machine: the floor a crowded machine puts under the tail. Each phase also gives the spout
thread's CPU per tuple and its share of a CPU (``loadgen.thread_meter``): a phase acked below
its offer either cost more a tuple than the max phase or got less of a CPU.

- local-latency: local mode, one process.
- cluster-latency: a real ZooKeeper, nimbus and one supervisor; three worker processes.

At 1% of the maximum a phase sees few tuples (a 10 s window at 200/s holds 2,000: its p999
is the second-highest latency); give a longer ``--duration`` for a p999 to quote.
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from cluster_bench import with_cluster
from wake_probe import Probe

HERE = Path(__file__).resolve().parent
TOPOLOGY = HERE / "topologies" / "scheduled_load.py"
FRACTIONS = (0.01, 0.1, 0.25, 0.5, 0.75)
WORKERS = 3  # cluster-latency's worker processes
DRAIN = 10.0  # longest wait for the measured tuples after the last window


def _plan_conf(output: Path, duration: float, warmup: float) -> dict[str, Any]:
    return {"bench.load.output.file": str(output), "bench.load.fractions": ",".join(map(str, FRACTIONS)),
            "bench.load.warmup.secs": warmup, "bench.load.duration.secs": duration,
            "bench.load.drain.secs": DRAIN}


def _wait_result(path: Path, duration: float, warmup: float, slack: float) -> dict[str, Any]:
    """The spout's results; ``slack`` covers start-up (submit, workers)."""
    deadline = time.monotonic() + _plan_secs(duration, warmup) + DRAIN + slack
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the load plan wrote no results to {path} in time")
        time.sleep(0.2)
    result = json.loads(path.read_text())
    if "error" in result:
        raise RuntimeError(f"load plan failed: {result['error']}")
    return result


def _plan_secs(duration: float, warmup: float) -> float:
    return (len(FRACTIONS) + 1) * (warmup + duration)


def _measured(path: Path, duration: float, warmup: float, slack: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plan's results, and the wake probe's figures from the same time."""
    probe = Probe(_plan_secs(duration, warmup))
    try:
        result = _wait_result(path, duration, warmup, slack)
    except BaseException:
        probe.stop()
        raise
    return result, probe.result()


def _thread_text(phase: dict[str, Any]) -> str:
    """The spout thread's CPU per tuple and share of a CPU in a phase (loadgen.thread_meter):
    a phase acked below its offer either cost more a tuple or got less of a CPU."""
    if "thread_cpu_us_per_tuple" not in phase:
        return ""
    text = f" [thread {phase['thread_cpu_us_per_tuple']:.2f} us CPU a tuple, {phase['thread_cpu_share']:.0%} of a CPU"
    if "thread_runq_share" in phase:
        text += f", waited for one {phase['thread_runq_share']:.0%}"
    return text + "]"


def summary(result: dict[str, Any], machine: dict[str, Any]) -> dict[str, Any]:
    """run.py's shape: a one-line summary, the max rate as tuples_per_sec, the phases, and
    the wake probe's figures as ``machine``."""
    nan = float("nan")
    parts = [f"max {result['max_rate']:,.0f} tuples/s{_thread_text(result['phases'][0])}"]
    for p in result["phases"][1:]:
        text = f"{p['phase']} ({p['offered_per_sec']:,.0f}/s, acked {p['acked_per_sec']:,.0f}/s) " \
               f"p50 {p.get('p50_ms', nan):.2f} ms " \
               f"p99 {p.get('p99_ms', nan):.2f} ms p999 {p.get('p999_ms', nan):.2f} ms " \
               f"(p50 lag {p.get('lag_p50_ms', nan):.2f}, flight {p.get('flight_p50_ms', nan):.2f}; " \
               f"p99 lag {p.get('lag_p99_ms', nan):.2f}, flight {p.get('flight_p99_ms', nan):.2f})"
        if p["missing"] or p["failed"]:
            text += f" ({p['missing']} missing, {p['failed']} failed)"
        parts.append(text + _thread_text(p))
    if machine:
        parts.append(f"machine: a 1 ms sleep woke p99 {machine['oversleep_p99_ms']:.2f} ms late "
                     f"(max {machine['oversleep_max_ms']:.1f})")
    return {"tuples_per_sec": result["max_rate"], "summary": "; ".join(parts), **result, "machine": machine}


def local_latency(duration: float, warmup: float) -> dict[str, Any]:
    import scheduled_load
    from squall import LocalCluster
    from squall.logs import configure

    configure("console", "WARNING")
    with tempfile.TemporaryDirectory(prefix="squall-latency-") as tmp, LocalCluster() as cluster:
        out = Path(tmp) / "latency.json"
        cluster.submit("latency", {**scheduled_load.CONFIG, **_plan_conf(out, duration, warmup)},
                       scheduled_load.topology())
        result, machine = _measured(out, duration, warmup, slack=30)
        cluster.kill("latency")
    return summary(result, machine)


def cluster_latency(duration: float, warmup: float) -> dict[str, Any]:
    def run(cluster, tmp: Path) -> dict[str, Any]:
        out = tmp / "latency.json"
        overrides = [arg for k, v in _plan_conf(out, duration, warmup).items() for arg in ("-c", f"{k}={v}")]
        res = cluster.cli("submit", str(TOPOLOGY), "--name", "latency", "-c", f"topology.workers={WORKERS}", *overrides)
        if res.returncode != 0:
            raise RuntimeError(res.stdout + res.stderr)
        result, machine = _measured(out, duration, warmup, slack=90)
        result["workers"] = len(cluster.client.topology("latency")["workers"])
        return summary(result, machine)

    return with_cluster(1, WORKERS, run)


SCENARIOS = {
    "local-latency": ("complete latency p50/p99/p999 at 1/10/25/50/75% of the measured max rate, local mode",
                      local_latency),
    "cluster-latency": ("the same on a real cluster: 3 worker processes, real ZooKeeper", cluster_latency),
}
