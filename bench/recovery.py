#!/usr/bin/env python3
"""Recovery times on a real cluster: ``python bench/recovery.py [--runs N] [--outage S] [--json]``.

Each run starts its own ZooKeeper, nimbus and two supervisors (three slots each) and the
chaos topology (``tests/support/chaos_topology/ids.py``: a durable spout -> relay -> store,
acked) over three workers, then measures one fault:

* ``worker-kill``: SIGKILL the worker running the most relay/store tasks; seconds until every
  one of those tasks has taken part in storing an id again (goal < 5 s).
* ``supervisor-kill``: SIGKILL the supervisor running the most workers, and its workers;
  seconds until every relay/store task they ran stores ids again from its new home
  (goal < 15 s, aim 8 s).
* ``zookeeper-outage``: stop ZooKeeper for ``--outage`` seconds (default 60) and start it on
  the same data; acked ids per second during the outage and in the 20 s after it, relative
  to the 20 s before, with the spout as fast as acks allow (``--outage-rate`` offers a fixed
  rate instead).

The cluster uses the test timeouts of ``squall.testing.cluster.FAST`` (printed with the
results): ZooKeeper session 4 s, nimbus task and supervisor timeouts 5 s, monitor 1 s,
supervisor monitor 0.5 s. Reported: the median over ``--runs`` runs, every run, and the
machine's state (CPUs, load average) before and after.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from squall.testing.cluster import FAST

# The chaos harness is a test driver (tests/support/chaos.py), not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.chaos import ChaosCluster, WorkerInfo, machine_state  # noqa: E402

RATE = 2000.0  # ids per second offered by the spout in the kill scenarios
UNTHROTTLED = 1e6  # the spout is then held by topology.max.spout.pending alone
IDS = 10**8  # never runs out during a run
WINDOW = 20.0  # seconds of throughput measured before and after an outage
WARMUP = 10.0  # seconds of flow before the first window


def relay_store_tasks(chaos: ChaosCluster, worker: WorkerInfo) -> set[int]:
    """The relay and store tasks a worker runs (task ids from its executors)."""
    wanted = chaos_tasks(chaos)
    return {t for s, e in worker.executors for t in range(s, e + 1) if t in wanted}


def chaos_tasks(chaos: ChaosCluster) -> set[int]:
    status = chaos.c.client.topology("chaos")
    return {t for comp in status["components"] if comp["id"] in ("relay", "store")
            for ex in comp["executors"] for t in range(ex["executor"][0], ex["executor"][1] + 1)}


def settled(chaos: ChaosCluster) -> None:
    chaos.submit(workers=3)
    chaos.wait_until(lambda: len(chaos.workers()) == 3, 90, "three workers")
    chaos.wait_progress(6000, 90, "the stream flowing")


def processing_again(chaos: ChaosCluster, tasks: set[int], killed: float, timeout: float) -> float:
    """Seconds from ``killed`` until every task in ``tasks`` stored an id again. Tuples the
    dead worker had in hand may still land just after the kill: count from +0.3 s."""
    chaos.wait_until(lambda: chaos.first_seen_after(tasks, killed + 0.3) is not None, timeout,
                     f"tasks {sorted(tasks)} to process again")
    back = chaos.first_seen_after(tasks, killed + 0.3)
    assert back is not None
    return round(back - killed, 2)


def worker_kill(base: Path) -> dict[str, Any]:
    with ChaosCluster(base, ids=IDS, rate=RATE) as chaos:
        settled(chaos)
        victim = max(chaos.workers(), key=lambda w: len(relay_store_tasks(chaos, w)))
        tasks = relay_store_tasks(chaos, victim)
        killed = time.time()
        chaos.kill_worker(victim)
        return {"seconds": processing_again(chaos, tasks, killed, 120), "tasks": sorted(tasks)}


def supervisor_kill(base: Path) -> dict[str, Any]:
    with ChaosCluster(base, ids=IDS, rate=RATE) as chaos:
        settled(chaos)
        workers = chaos.workers()
        node = max((0, 1), key=lambda i: sum(1 for w in workers if w.supervisor == i))
        tasks = set().union(*(relay_store_tasks(chaos, w) for w in workers if w.supervisor == node))
        killed = time.time()
        chaos.kill_supervisor(node)
        return {"seconds": processing_again(chaos, tasks, killed, 180), "tasks": sorted(tasks),
                "workers_killed": sum(1 for w in workers if w.supervisor == node)}


def zookeeper_outage(base: Path, outage: float, rate: float) -> dict[str, Any]:
    with ChaosCluster(base, ids=IDS, rate=rate) as chaos:
        settled(chaos)
        time.sleep(WARMUP)
        pids = {w.pid for w in chaos.workers()}
        before = chaos.sample_acked(WINDOW)
        during = chaos.stop_zookeeper(outage)
        after = chaos.sample_acked(WINDOW)
        per_sec = [_rate(s) for s in (before, during, after)]
        restarted = len(pids - {w.pid for w in chaos.workers()})
        kept = None
        if restarted:  # keep the logs: why did a worker end?
            kept = Path(tempfile.mkdtemp(prefix="squall-recovery-kept-"))
            shutil.copytree(chaos.c.base, kept / "cluster")
        return {"acked_per_sec": {"before": round(per_sec[0]), "during": round(per_sec[1]),
                                  "after": round(per_sec[2])},
                "during_vs_before": round(per_sec[1] / per_sec[0], 3),
                "after_vs_before": round(per_sec[2] / per_sec[0], 3),
                "workers_restarted": restarted, "outage_secs": outage, "offered_rate": rate,
                **({"logs_kept_in": str(kept)} if kept else {})}


def _rate(samples: list[tuple[float, int]]) -> float:
    (t0, n0), (t1, n1) = samples[0], samples[-1]
    return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--outage", type=float, default=60.0)
    parser.add_argument("--outage-rate", type=float, default=UNTHROTTLED,
                        help="ids/s the spout offers in the outage scenario (default: as fast as acks allow)")
    parser.add_argument("--only", choices=["worker-kill", "supervisor-kill", "zookeeper-outage"], action="append")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from squall.logs import configure

    configure("console", "WARNING")
    scenarios = {
        "worker-kill": worker_kill,
        "supervisor-kill": supervisor_kill,
        "zookeeper-outage": lambda base: zookeeper_outage(base, args.outage, args.outage_rate),
    }
    report: dict[str, Any] = {"machine_before": machine_state(), "rate": RATE,
                              "timeouts": {k: v for k, v in FAST.items() if "timeout" in k or "freq" in k}}
    for name, fn in scenarios.items():
        if args.only and name not in args.only:
            continue
        runs = []
        for i in range(args.runs):
            with tempfile.TemporaryDirectory(prefix=f"squall-recovery-{name}-") as tmp:
                runs.append(fn(Path(tmp)))
            if not args.json:
                print(f"{name} run {i + 1}: {json.dumps(runs[-1])}", flush=True)
        if name == "zookeeper-outage":
            summary = {key: statistics.median(r[key] for r in runs) for key in ("during_vs_before", "after_vs_before")}
        else:
            summary = {"median_seconds": statistics.median(r["seconds"] for r in runs)}
        report[name] = {**summary, "runs": runs}
        if not args.json:
            print(f"{name}: {json.dumps(summary)}", flush=True)
    report["machine_after"] = machine_state()
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
    else:
        print(f"machine: before {report['machine_before']}, after {report['machine_after']}")


if __name__ == "__main__":
    main()
