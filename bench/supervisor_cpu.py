"""The supervisor's own CPU while it looks after three workers (issue 31: a per-second burst of
it was a stall the workers' latency felt on two CPUs).

A real ZooKeeper, nimbus and one supervisor (``cluster_bench.with_cluster``); the scheduled
load topology in three workers at 1% of an unmeasured rate (it mostly idles); after a settling
pause the supervisor's user+system CPU over ``--duration`` seconds, as ms a second. Run it from
two trees alternating to compare them (the figure hardly depends on the machine's load).

    .venv/bin/python bench/supervisor_cpu.py [--duration 20]
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import psutil

from cluster_bench import with_cluster

HERE = Path(__file__).resolve().parent
WORKERS = 3


def supervisor_cpu(duration: float) -> float:
    """The supervisor's CPU in ms a second over ``duration`` seconds."""
    def run(cluster, tmp: Path) -> float:
        out = tmp / "load.json"
        res = cluster.cli("submit", str(HERE / "topologies" / "scheduled_load.py"), "--name", "idle",
                          "-c", f"topology.workers={WORKERS}", "-c", f"bench.load.output.file={out}",
                          "-c", "bench.load.fractions=0.01", "-c", "bench.load.warmup.secs=600",
                          "-c", "bench.load.duration.secs=600", "-c", "bench.load.drain.secs=1")
        if res.returncode != 0:
            raise RuntimeError(res.stdout + res.stderr)
        cluster.wait_for(lambda: len(cluster.worker_pids()) == WORKERS, 60, "three workers")
        time.sleep(5)
        sup = next(p for p in psutil.Process().children(recursive=True)
                   if "supervisor" in " ".join(p.cmdline()))
        before = sum(sup.cpu_times()[:2])
        time.sleep(duration)
        return 1000 * (sum(sup.cpu_times()[:2]) - before) / duration

    return with_cluster(1, WORKERS, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=20.0)
    args = parser.parse_args()
    ms = supervisor_cpu(args.duration)
    print(f"supervisor CPU {ms:.1f} ms a second with {WORKERS} workers over {args.duration:g} s "
          f"({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
