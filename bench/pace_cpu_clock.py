#!/usr/bin/env python3
"""The local latency plan on a clock made of the executor thread's own CPU time:
``python bench/pace_cpu_clock.py [--fractions 0.5,0.75] [--warmup 1] [--duration 3] [--sleep]``.

``bench/topologies/scheduled_load.py``'s plan (max, then fractions of it; spout -> id -> null,
acked) run by one worker's executors stepped in this thread as its executor thread steps
them, where time is this thread's CPU time plus the waits it asked for: a turn costs what it
costs, a wait costs exactly what was asked (no timer slack, no late wake-up, no neighbour
taking the CPU). So the maximum, the offered rates and every latency are what a thread with a
CPU of its own would see, on a crowded machine too (only its caches stay crowded): whether a
paced spout keeps up with a fraction of the burst maximum, and what its turns and holds add
to each tuple's latency, compared between two trees in one sitting when wall-clock latency
says nothing (``bench/run.py local-latency`` at load 10 on 2 CPUs: a 1 ms sleep woke p99
10-18 ms late). ``--sleep`` also sleeps each wait for real (caches go cold as they do),
still counting only the time asked for; ``PACE_CONF`` (JSON) adds topology settings (the
wait strategy's time, say); ``--spin-below MS`` spins through a wait shorter than
that instead of sleeping (the model of a wait strategy's spin level: the caches stay warm).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from pace_steps import stepped_worker  # noqa: E402

_thread_time, _real_sleep, _perf_counter = time.thread_time, time.sleep, time.perf_counter


class CpuClock:
    """This thread's CPU time plus the waits it skipped (or slept) on the way."""

    def __init__(self) -> None:
        self.waited = 1_000_000.0 - _thread_time()

    def monotonic(self) -> float:
        return _thread_time() + self.waited


CLOCK = CpuClock()


def measure(fractions: str, warmup: float, duration: float, sleep: bool, spin_below: float = 0.0) -> dict[str, Any]:
    time.monotonic = CLOCK.monotonic  # before squall loads: its modules bind time.monotonic then
    rt, made, spout_ex = stepped_worker("pace-cpu-clock", {
        "bench.load.fractions": fractions, "bench.load.warmup.secs": warmup, "bench.load.duration.secs": duration,
        "bench.load.drain.secs": 2 * duration, **json.loads(os.environ.get("PACE_CONF", "{}"))})
    spout = next(iter(spout_ex.tasks.values())).emitter
    plan, bell = spout.plan, rt.doorbells[0]
    sleeps = [0] * (len(plan.phases))
    turns = [0] * (len(plan.phases))
    cpu = [0.0] * (len(plan.phases))
    while not plan.finished(CLOCK.monotonic()):
        t0 = _thread_time()
        wait = 3600.0
        for ex in made:
            w = ex.step(CLOCK.monotonic())
            if w < wait:
                wait = w
        k = max(0, plan.index)
        turns[k] += 1
        cpu[k] += _thread_time() - t0
        if bell._rung or wait <= 0.0:
            bell.wait(0.0)  # forget rings: the next turn looks at every queue
        else:
            wait = min(wait, 0.1)
            sleeps[k] += 1
            if spin_below and wait < spin_below:
                # The time waited is left out of the clock: the spin's CPU is taken back off it.
                c0, end = _thread_time(), _perf_counter() + wait
                while _perf_counter() < end:
                    pass
                CLOCK.waited -= _thread_time() - c0
            elif sleep:
                _real_sleep(wait)
            CLOCK.waited += wait
    result = plan.result()
    for k, p in enumerate(result["phases"]):
        p["turns_per_1000"] = round(1000 * turns[k] / max(1, plan.phases[k].emitted), 2)
        p["sleeps_per_1000"] = round(1000 * sleeps[k] / max(1, plan.phases[k].emitted), 2)
        p["cpu_us_per_tuple"] = round(1e6 * cpu[k] / max(1, plan.phases[k].emitted), 3)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", default="0.01,0.1,0.25,0.5,0.75")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--sleep", action="store_true", help="sleep each wait for real too")
    parser.add_argument("--spin-below", type=float, default=0.0,
                        help="with --sleep: a wait shorter than this many ms spins instead (the model of a spin level)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.fractions, args.warmup, args.duration, args.sleep, args.spin_below / 1000)
    if args.json:
        print(json.dumps(result))
        return 0
    nan = float("nan")
    print(f"max {result['max_rate']:,.0f} tuples per CPU-second, "
          f"{result['phases'][0]['cpu_us_per_tuple']} us CPU a tuple")
    for p in result["phases"][1:]:
        print(f"{p['phase']:>4} ({p['offered_per_sec']:,.0f}/s): p50 {p.get('p50_ms', nan):.2f} ms "
              f"p99 {p.get('p99_ms', nan):.2f} ms (lag p50 {p.get('lag_p50_ms', nan):.2f} "
              f"p99 {p.get('lag_p99_ms', nan):.2f}; "
              f"flight p50 {p.get('flight_p50_ms', nan):.2f} p99 {p.get('flight_p99_ms', nan):.2f}); "
              f"{p['turns_per_1000']} turns, {p['sleeps_per_1000']} waits per 1000 tuples, "
              f"{p['cpu_us_per_tuple']} us CPU a tuple")
    return 0


if __name__ == "__main__":
    sys.exit(main())
