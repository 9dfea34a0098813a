#!/usr/bin/env python3
"""A paced spout's turns against bursts, stepped on a clock that moves only while the
thread would sleep: ``python bench/pace_steps.py [--per-cycle N] [--tuples N] [--json]``.

Makes one worker's executors for ``bench/topologies/scheduled_load.py`` (spout -> id -> null,
acked; no threads, no sockets) and runs them as the worker's executor thread does: a turn
steps every executor; after a turn that asked for no wait, or whose doorbell was rung, the
next turn follows at once; otherwise the thread would sleep, and the clock moves by the
wait instead. Every clock (``time.monotonic``) is that clock, so the work of a turn costs
no time: bursts (``--per-cycle 0``: the spout emits as fast as acks allow) run turn after
turn, and a paced spout (``--per-cycle N``: offered N tuples per wait strategy time, 1 ms by
default) finds N tuples due each time its hold ends. The same work on every run: CPU per
tuple moves less with the machine's load than a wall-clock figure, and under
``valgrind --tool=callgrind`` (``--callgrind``: two runs of different lengths, so start-up
cancels out) the instruction count per tuple does not move with it at all.

The figure for issue 31: what a paced turn costs a tuple over a burst (turns, sleeps and
tuples per spout turn are printed alongside).
"""
from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class SteppedTime:
    """The only clock of the run: moves when the thread would sleep."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def monotonic(self) -> float:
        return self.now


CLOCK = SteppedTime()
STEP_SECS = 1e-5  # what an executor's step costs on this clock, so that complete latencies are not 0


def stepped_worker(name: str, settings: dict[str, Any]) -> tuple[Any, list[Any], Any]:
    """``scheduled_load``'s topology as one worker's executors, set up, to be stepped in this
    thread: (the worker runtime, its executors in run order, the spout's executor).
    ``settings`` adds to the topology's configuration (the plan's ``bench.load.*`` keys).
    Call it after swapping in the clock: squall's modules bind time.monotonic when they load."""
    sys.path[:0] = [str(HERE), str(HERE / "topologies")]
    import scheduled_load
    from squall import config as _config
    from squall.messaging.local import LocalContext
    from squall.model import executors as executors_of
    from squall.model import system_topology, task_ids
    from squall.runtime.spout_executor import SpoutExecutor
    from squall.runtime.worker_runtime import WorkerRuntime, tune_gc
    from step_cost import _executors

    random.seed(0)  # root and edge ids: the same work on every run
    conf = _config.build_config({**scheduled_load.CONFIG, "topology.name": name, "squall.log.level": "WARNING",
                                 "bench.load.output.file": "/dev/null", **settings},
                                {"squall.messaging.transport": "local"})
    topology = scheduled_load.topology()
    system = system_topology(topology, conf)
    rt = WorkerRuntime(name, topology, conf, sorted(executors_of(system, task_ids(system))), 1,
                       LocalContext(), host="local")
    rt.set_active(True)
    made = _executors(rt)
    for ex in made:
        ex.setup()
    tune_gc()
    return rt, made, next(e for e in made if isinstance(e, SpoutExecutor))


def measure(per_cycle: int, tuples: int, warmup: int = 5000) -> dict[str, Any]:
    # The clock first: squall's modules bind time.monotonic when they load (and the
    # --callgrind driver must keep the real one for its timeouts).
    time.monotonic = CLOCK.monotonic
    rt, made, spout_ex = stepped_worker("pace-steps", {"bench.load.fractions": "1", "bench.load.warmup.secs": 0,
                                                       "bench.load.duration.secs": 1e9})
    spout = next(iter(spout_ex.tasks.values())).emitter
    hold = spout_ex.idle_wait
    if per_cycle:
        spout.plan.due(CLOCK.now)  # starts the plan's first phase; then paced at per_cycle a hold
        spout.plan.phases[0].rate = per_cycle / hold
    null = next(e for e in made if e.component == "null")
    bell = rt.doorbells[0]
    phase = spout.plan.phases[0]
    counts = {"turns": 0, "sleeps": 0, "spout_turns": 0}

    def run(until: int) -> None:
        turns = sleeps = spout_turns = 0
        while null.executed < until:
            emitted = phase.emitted
            due = CLOCK.now + 3600.0
            for ex in made:
                w = CLOCK.now + ex.step(CLOCK.now)
                CLOCK.now += STEP_SECS
                if w < due:
                    due = w
            wait = due - CLOCK.now
            turns += 1
            spout_turns += phase.emitted > emitted
            if bell._rung or wait <= 0.0:
                bell.wait(0.0)  # forget rings: the next turn looks at every queue
            else:
                CLOCK.now += wait
                sleeps += 1
        counts.update(turns=turns, sleeps=sleeps, spout_turns=spout_turns)

    run(warmup)
    start, cpu = null.executed, time.process_time()
    run(start + tuples)
    cpu, done = time.process_time() - cpu, null.executed - start
    return {"per_cycle": per_cycle, "tuples": done, "cpu_ns_per_tuple": round(cpu * 1e9 / done, 1),
            "turns_per_1000": round(1000 * counts["turns"] / done, 2),
            "sleeps_per_1000": round(1000 * counts["sleeps"] / done, 2),
            "tuples_per_spout_turn": round(done / max(1, counts["spout_turns"]), 1)}


def instructions(per_cycle: int, tuples: int) -> float:
    """Instructions per tuple under callgrind: two runs, ``tuples`` apart."""
    def one(n: int) -> tuple[int, int]:
        proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                               __file__, "--per-cycle", str(per_cycle), "--tuples", str(n), "--json"],
                              capture_output=True, text=True, timeout=3600)
        match = re.search(r"Collected : (\d+)", proc.stderr)
        if proc.returncode or match is None:
            raise SystemExit(f"no instruction count from valgrind:\n{proc.stderr[-1000:]}")
        return int(match.group(1)), json.loads(proc.stdout.splitlines()[-1])["tuples"]
    (i1, t1), (i2, t2) = one(tuples // 4), one(tuples)
    return (i2 - i1) / (t2 - t1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-cycle", type=int, default=0, help="tuples due per hold; 0: bursts")
    parser.add_argument("--tuples", type=int, default=200_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--callgrind", action="store_true", help="instructions per tuple under valgrind")
    args = parser.parse_args()
    if args.callgrind:
        print(f"per cycle {args.per_cycle or 'bursts'}: {instructions(args.per_cycle, args.tuples):,.0f} "
              "instructions a tuple")
        return 0
    result = measure(args.per_cycle, args.tuples)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"per cycle {args.per_cycle or 'bursts'}: {result['cpu_ns_per_tuple']:,.0f} ns CPU a tuple, "
              f"{result['turns_per_1000']} turns and {result['sleeps_per_1000']} sleeps per 1000 tuples, "
              f"{result['tuples_per_spout_turn']} tuples a spout turn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
