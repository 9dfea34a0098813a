"""The machine's own latency: how late a process that sleeps 1 ms wakes up.

A paced spout does the same (it sleeps until its next tuples are due), so on a crowded
machine the oversleep this measures is a floor under any complete latency: a tuple due
while its spout's thread waits for a CPU goes out that much later. ``bench/latency.py``
runs it beside the load plan; standalone: ``python bench/wake_probe.py SECONDS``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

SLEEP = 0.001


def probe(seconds: float) -> dict[str, Any]:
    """Sleep 1 ms at a time for ``seconds``; quantiles of the oversleep, in ms."""
    over: list[float] = []
    mono = time.monotonic
    end = mono() + seconds
    while (t := mono()) < end:
        time.sleep(SLEEP)
        over.append(mono() - t - SLEEP)
    over.sort()
    n = len(over)

    def q(x: float) -> float:
        return 1000 * over[min(n - 1, int(x * n))] if n else float("nan")

    return {"sleeps": n, "oversleep_p50_ms": q(0.5), "oversleep_p99_ms": q(0.99),
            "oversleep_max_ms": 1000 * over[-1] if n else float("nan"),
            "late_secs": sum(over)}


class Probe:
    """``probe`` in a child process while the caller runs something else."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.proc = subprocess.Popen([sys.executable, __file__, str(seconds)],
                                     stdout=subprocess.PIPE, text=True)

    def result(self) -> dict[str, Any]:
        """Its figures (waits for it at most a few seconds past its time; {} if it failed)."""
        try:
            out, _ = self.proc.communicate(timeout=self.seconds + 30)
            return json.loads(out)
        except (subprocess.TimeoutExpired, ValueError):
            self.stop()
            return {}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


if __name__ == "__main__":
    print(json.dumps(probe(float(sys.argv[1]))))
