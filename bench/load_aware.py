"""Load-aware shuffle with one slowed worker (issue 22): ``local-load-aware``.

``topologies/slowed_worker.py`` in local mode with two workers: a spout shuffles to a bolt
with one task per worker, and the task of one worker is slow. Evenly shuffled, that task
gets half the tuples; its queue fills, backpressure pauses the spout, and the whole
topology runs at twice the slow task's pace. Load-aware (the default), the spout's shuffle
sends the slow task a share in proportion to how idle its queue is, and the fast task takes
the rest. Runs both, alternating, three rounds each, and reports the bolt's rate and each
task's share.
"""
from __future__ import annotations

import time
from typing import Any

ROUNDS = 3


def _run(disabled: bool, duration: float, warmup: float) -> dict[str, Any]:
    import slowed_worker
    from squall import LocalCluster
    from squall.logs import configure

    configure("console", "WARNING")
    conf = {**slowed_worker.CONFIG, "topology.disable.loadaware.messaging": disabled}
    with LocalCluster() as cluster:
        cluster.submit("slowed", conf, slowed_worker.topology())

        def executed() -> dict[int, int]:
            return {s["executor"][0]: s["executed"] for s in cluster.stats("slowed") if s["component"] == "work"}

        time.sleep(warmup)
        before, started = executed(), time.monotonic()
        time.sleep(duration)
        after, elapsed = executed(), time.monotonic() - started
        cluster.kill("slowed")
    per_task = {t: after[t] - before.get(t, 0) for t in after}
    total = sum(per_task.values())
    return {"tuples_per_sec": total / elapsed,
            "shares": {str(t): round(n / total, 3) if total else 0.0 for t, n in sorted(per_task.items())}}


def load_aware(duration: float, warmup: float) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"even": [], "load-aware": []}
    for _ in range(ROUNDS):
        runs["even"].append(_run(True, duration, warmup))
        runs["load-aware"].append(_run(False, duration, warmup))
    rates = {k: sorted(r["tuples_per_sec"] for r in v) for k, v in runs.items()}
    median = {k: v[len(v) // 2] for k, v in rates.items()}
    parts = [f"{k} {median[k]:,.0f} tuples/s (rounds {', '.join(f'{r:,.0f}' for r in rates[k])}; "
             f"shares {runs[k][-1]['shares']})" for k in runs]
    return {"tuples_per_sec": median["load-aware"], "even_tuples_per_sec": median["even"],
            "speedup": round(median["load-aware"] / median["even"], 2) if median["even"] else None,
            "summary": "; ".join(parts), "runs": runs}


SCENARIOS = {
    "local-load-aware": ("a shuffle to a bolt with one task per worker, one worker's task slowed: "
                         "load-aware (the default) against even, alternating, three rounds each", load_aware),
}
