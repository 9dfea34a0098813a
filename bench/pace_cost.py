"""Executor-thread CPU per tuple of a paced spout against bursts, in local mode (issue 31).

Runs ``topologies/scheduled_load.py`` (spout -> id -> null, acked: first as fast as acks
allow, then at the given fractions of that rate) and sums ``time.thread_time()`` around
every executor step by phase of the load plan: CPU seconds per emitted tuple, and tuples
per spout turn that emitted. A paced spout that ran a whole loop turn for each tuple or
two that fell due paid far more CPU a tuple than in bursts and fell behind its schedule
(``squall.runtime.spout_pacing``). CPU seconds per tuple move less with the machine's load
than wall-clock latency, but a crowded machine still inflates them (cold caches after
every sleep): compare two trees in one sitting, and quote the load.

    .venv/bin/python bench/pace_cost.py [--fractions 0.5,0.75] [--warmup 3] [--duration 10]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "topologies")]

import scheduled_load  # noqa: E402
from squall import LocalCluster  # noqa: E402
from squall.logs import configure  # noqa: E402
from squall.runtime.acker_executor import AckerExecutor  # noqa: E402
from squall.runtime.bolt_executor import BoltExecutor  # noqa: E402
from squall.runtime.spout_executor import SpoutExecutor  # noqa: E402


class Meter:
    """CPU seconds of executor steps, and the spout's emitting turns, by load-plan phase."""

    def __init__(self) -> None:
        self.spouts: list[Any] = []
        self.cpu: dict[int, float] = {}
        self.turns: dict[int, int] = {}
        self.turn_tuples: dict[int, int] = {}

    def phase(self) -> int:
        return self.spouts[0].plan.index if self.spouts else -1

    def emitted(self, k: int) -> int:
        return self.spouts[0].plan.phases[k].emitted if self.spouts and k >= 0 else 0

    def install(self) -> None:
        meter, opened = self, scheduled_load.ScheduledSpout.open

        def open_(spout: Any, *args: Any) -> None:
            opened(spout, *args)
            meter.spouts.append(spout)

        scheduled_load.ScheduledSpout.open = open_  # type: ignore[method-assign]
        for cls in (SpoutExecutor, BoltExecutor, AckerExecutor):
            cls.step = self._timed(cls.step, cls is SpoutExecutor)  # type: ignore[method-assign]

    def _timed(self, step: Any, spout: bool) -> Any:
        meter, cpu = self, time.thread_time

        def timed(ex: Any, now: float) -> float:
            k = meter.phase()
            before = meter.emitted(k) if spout else 0
            t0 = cpu()
            wait = step(ex, now)
            meter.cpu[k] = meter.cpu.get(k, 0.0) + cpu() - t0
            n = meter.emitted(k) - before if spout else 0
            if n > 0:
                meter.turns[k] = meter.turns.get(k, 0) + 1
                meter.turn_tuples[k] = meter.turn_tuples.get(k, 0) + n
            return wait

        return timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fractions", default="0.5,0.75")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--duration", type=float, default=10.0)
    args = ap.parse_args()
    meter = Meter()
    meter.install()
    configure("console", "WARNING")
    phases = len(args.fractions.split(",")) + 1
    with tempfile.TemporaryDirectory(prefix="squall-pace-") as tmp, LocalCluster() as cluster:
        out = Path(tmp) / "result.json"
        conf = {**scheduled_load.CONFIG, "bench.load.output.file": str(out), "bench.load.fractions": args.fractions,
                "bench.load.warmup.secs": args.warmup, "bench.load.duration.secs": args.duration,
                "bench.load.drain.secs": 5}
        cluster.submit("pace-cost", conf, scheduled_load.topology())
        deadline = time.monotonic() + phases * (args.warmup + args.duration) + 60
        while not out.exists():
            if time.monotonic() > deadline:
                raise SystemExit("the load plan wrote no results in time")
            time.sleep(0.2)
        result = json.loads(out.read_text())
        plan = meter.spouts[0].plan
        cluster.kill("pace-cost")
    nan = float("nan")
    for k, p in enumerate(plan.phases):
        r = result["phases"][k]
        cpu = meter.cpu.get(k, 0.0)
        print(f"{p.name:>4}: offered {p.rate or 0:>9,.0f}/s, emitted {p.emitted:>9,}, executor CPU {cpu:6.2f} s = "
              f"{cpu / max(1, p.emitted) * 1e6:6.2f} us a tuple, "
              f"{meter.turn_tuples.get(k, 0) / max(1, meter.turns.get(k, 0)):6.1f} tuples a spout turn; "
              f"p50 {r.get('p50_ms', nan):.2f} ms p99 {r.get('p99_ms', nan):.2f} ms "
              f"lag p99 {r.get('lag_p99_ms', nan):.2f} ms")


if __name__ == "__main__":
    main()
