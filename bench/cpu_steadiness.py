#!/usr/bin/env python3
"""How steady this machine's CPU speed is: a fixed pure-Python workload timed on one CPU.

``python bench/cpu_steadiness.py [--cpu N] [--seconds S] [--windows W]`` pins itself to CPU
``N``, runs the same small loop again and again for ``S`` seconds, and prints its CPU time per
call (thread_time: waiting for the CPU is not counted) per window of ``S / W`` seconds: min,
p10, p50, p90, max. On a machine of its own the windows agree within a few percent; on a
virtual machine whose host runs other work the same loop can take 1.5x as long for seconds
at a time, with no steal time shown (bench/results/issue31-local75-host.txt), and every
figure measured meanwhile moves with it: a phase of the latency plan that draws a slow
stretch gets less done per CPU-second than the max phase it is a fraction of.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def _work() -> int:
    s = 0
    for i in range(200):
        s += i * 3 % 7
    return s


def windows(seconds: float, count: int) -> list[float]:
    """CPU microseconds per call of the fixed loop, one median per window."""
    per_window = seconds / count
    out: list[float] = []
    for _ in range(count):
        end = time.monotonic() + per_window
        calls: list[float] = []
        while time.monotonic() < end:
            c0 = time.thread_time()
            for _ in range(20):
                _work()
            calls.append((time.thread_time() - c0) * 1e6 / 20)
        out.append(statistics.median(calls))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", type=int, default=0, help="the CPU to pin to (default 0)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long (default 20)")
    parser.add_argument("--windows", type=int, default=20, help="windows to split it in (default 20)")
    args = parser.parse_args()
    if args.seconds <= 0 or args.windows < 1:
        parser.error("--seconds must be > 0 and --windows >= 1")
    os.sched_setaffinity(0, {args.cpu})
    meds = sorted(windows(args.seconds, args.windows))
    q = [meds[min(len(meds) - 1, int(len(meds) * f))] for f in (0.1, 0.5, 0.9)]
    load = os.getloadavg()[0]
    print(f"CPU {args.cpu}, {args.windows} windows of {args.seconds / args.windows:g} s, load {load:.2f}: "
          f"us a call min {meds[0]:.2f} p10 {q[0]:.2f} p50 {q[1]:.2f} p90 {q[2]:.2f} max {meds[-1]:.2f} "
          f"(max/min {meds[-1] / meds[0]:.2f})")


if __name__ == "__main__":
    main()
