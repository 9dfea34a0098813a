#!/usr/bin/env python3
"""The executors' hot path alone: ``python bench/step_cost.py SCENARIO [--turns N] [--json]``.

Makes one worker's executors (no threads, no sockets), sets them up and steps them in run
order for ``--turns`` turns, as the worker's one executor thread does, and reports the
process CPU time per tuple executed by the last bolt. Nothing waits and nothing else runs,
so the figure moves much less with the machine's load than a throughput; under
``valgrind --tool=callgrind`` (see ``compare_trees.py --callgrind``) the instruction count
does not move with the load at all. A spout's turn is never cut short by the real-time
flush deadline, so every turn does the same work however slow the machine is.

``workers2-const-id-null(-acked)`` runs the cluster bench's layout instead: two workers'
executors (the scheduler's round-robin over two slots; one acker in each when acked),
stepped in one thread, every batch between them serialized and decoded as on the wire
(the sockets and their threads left out).

Works with squall from before the runtime seam too (it makes the executors as that
version's ``start_executors`` did), so that ``compare_trees.py`` can hold the two side by side.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "topologies"))
sys.path.insert(0, str(HERE.parent / "examples"))


def _scenario(name: str) -> tuple[Any, dict[str, Any], str]:
    """(topology, config, the component whose executed tuples are counted)."""
    if name in ("workers2-const-id-null", "workers2-const-id-null-acked"):
        from perf_topologies import const_id_null

        acked = name.endswith("acked")
        conf = {"topology.workers": 2, "topology.max.spout.pending": 1000} if acked else \
            {"topology.workers": 2, "topology.acker.executors": 0}
        return const_id_null(acked), conf, "null"
    if name in ("local-const-id-null", "local-const-id-null-acked"):
        from perf_topologies import const_id_null

        acked = name.endswith("acked")
        conf = {"topology.acker.executors": 1, "topology.max.spout.pending": 1000} if acked else \
            {"topology.acker.executors": 0}
        return const_id_null(acked), conf, "null"
    if name == "local-stateful-count":
        from keyed_counts import topology

        conf = {"topology.acker.executors": 1, "topology.max.spout.pending": 1_000_000,
                "topology.state.checkpoint.interval.ms": 1000, "topology.state.provider": "memory"}
        return topology(True), conf, "count"
    if name in ("local-wordcount", "local-wordcount-unacked"):
        import wordcount

        conf = {"topology.acker.executors": 0} if name.endswith("unacked") else dict(wordcount.CONFIG)
        return wordcount.topology(1, 1), conf, "count"
    if name in ("local-stream-wordcount", "local-stream-wordcount-by-hand"):
        # Counted: the (word, count) pairs the counting component emits, one per word.
        import stream_wordcount

        if name.endswith("by-hand"):
            return stream_wordcount.hand_topology(), dict(stream_wordcount.CONFIG), "count+emitted"
        return stream_wordcount.stream_topology(), dict(stream_wordcount.CONFIG), "flat_map-map_to_pair-count+emitted"
    raise SystemExit(f"unknown scenario {name!r}: local-const-id-null, local-const-id-null-acked, "
                     "local-wordcount, local-wordcount-unacked, local-stateful-count, local-stream-wordcount, "
                     "local-stream-wordcount-by-hand, "
                     "workers2-const-id-null, workers2-const-id-null-acked")


def _executors(rt: Any) -> list[Any]:
    """The worker's executors, not set up, in run order."""
    if hasattr(rt, "create_executors"):
        return [e for group in rt.create_executors() for e in group]
    # squall before the runtime seam: what its start_executors did, without the threads
    from squall.model import ACKER
    from squall.runtime.executor import AckerExecutor, BoltExecutor, SpoutExecutor
    from squall.state.executors import executor_class
    from squall.topology import SPOUT

    made = []
    for group in rt.thread_groups:
        execs = []
        for ex in group:
            comp = rt.task_to_component[ex[0]]
            cls = executor_class(rt.system, comp) or (
                AckerExecutor if comp == ACKER else SpoutExecutor if rt.system.components[comp].kind == SPOUT
                else BoltExecutor)
            execs.append(cls(rt, ex, comp))
        ackers = [e for e in execs if isinstance(e, AckerExecutor)]
        if ackers and len(rt.acker_tasks) == 1:
            for e in execs:
                e.outbox.fuse(ackers[0].ledger)
        made += execs
    return made


def measure(scenario: str, turns: int, warmup: int = 50) -> dict[str, Any]:
    from squall import config as _config
    from squall.messaging.local import LocalContext
    from squall.model import executors as executors_of
    from squall.model import system_topology, task_ids
    from squall.runtime.collectors import Outbox
    from squall.runtime.worker_runtime import WorkerRuntime, tune_gc

    random.seed(0)  # root and edge ids: the same work on every run
    topology, conf, sink = _scenario(scenario)
    # A spout's turn never cut short by the real-time flush deadline, and what it emitted sent
    # at the end of its turn: 0 since spouts hold partial batches (Outbox.flush_due), a
    # deadline never reached before.
    settled = 0 if hasattr(Outbox, "flush_due") else 60_000
    conf = _config.build_config({**conf, "topology.name": "step-cost", "squall.log.level": "WARNING",
                                 "topology.batch.flush.interval.millis": settled},
                                {"squall.messaging.transport": "local"})
    system = system_topology(topology, conf)
    execs = sorted(executors_of(system, task_ids(system)))
    workers = int(conf.get("topology.workers", 1)) if scenario.startswith("workers") else 1
    # The scheduler's round-robin of the sorted executors over the workers' slots.
    rts = [WorkerRuntime("step-cost", topology, conf, execs[i::workers], 1 + i, LocalContext(), host="local")
           for i in range(workers)]
    made = []
    for rt in rts:
        rt.set_active(True)
        made += _executors(rt)
    for ex in made:
        ex.setup()
    tune_gc()
    # Batches for the other worker's tasks wait in the sender's transfer queue, encoded;
    # after each turn they are decoded into the receiving worker (its receive thread's work).
    owner = {t: rt for rt in rts for t in rt.local_tasks}
    sink, _, what = sink.partition("+")
    counted = [e for e in made if e.component == sink]
    mono = time.monotonic

    def done() -> int:
        if what == "emitted":
            return sum(n for e in counted for n in e.stats().emitted.values())
        return sum(e.executed for e in counted)

    def run(n: int) -> None:
        for _ in range(n):
            for ex in made:
                ex.step(mono())
            if workers > 1:
                for rt in rts:
                    for task, payload in rt.transfer_queue.get_all():
                        owner[task].receiver.receive([(task, payload)])

    run(warmup)
    before, cpu = done(), time.process_time()
    run(turns)
    cpu, tuples = time.process_time() - cpu, done() - before
    return {"scenario": scenario, "turns": turns, "tuples": tuples, "cpu_secs": round(cpu, 4),
            "cpu_ns_per_tuple": round(cpu * 1e9 / tuples, 1) if tuples else None,
            "queue_peaks": {e.component: e.queue.peak for e in made},
            # turns a spout skipped for a queue of its thread (squall.runtime.thread_flow), where it has one
            "spout_holds": {e.component: e.hold.holds for e in made if getattr(e, "hold", None) is not None}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-thread-hold", action="store_true",
                        help="spouts never skip a turn for a queue of their thread (squall.runtime.thread_flow): "
                             "the queues stand as before it, in the same tree")
    args = parser.parse_args()
    if args.no_thread_hold:
        from squall.runtime import thread_flow

        thread_flow.ThreadHold.held = lambda self: False
    result = measure(args.scenario, args.turns)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.scenario}: {result['tuples']:,} tuples in {args.turns} turns, "
              f"{result['cpu_ns_per_tuple']:,.0f} ns CPU per tuple")
    return 0


if __name__ == "__main__":
    sys.exit(main())
