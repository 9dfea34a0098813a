#!/usr/bin/env python3
"""squall's Kafka -> split -> count -> Kafka under two or more topology settings, side by side.

    .venv/bin/python bench/kafka_ab.py [--rounds 3] [--records 100000] \\
        --variant wait0 topology.sleep.spout.wait.strategy.time.ms=0 \\
        --variant wait1 topology.sleep.spout.wait.strategy.time.ms=1

One Tansu broker, its input topic filled once (bench/kafka_pipeline.py); then each round runs
every variant in turn (the order rotating each round, so a neighbour's load falls on all
alike), each in a fresh process reading the whole topic in a fresh consumer group. Per run:
input records per second, CPU microseconds per record of the measuring process, and the
spout's turns that ran dry (its ``next_tuple`` emitted nothing, so it was held for its wait
strategy's time) per thousand records; then each variant's median. Without ``--variant``:
the wait strategy at 0 and at 1 ms (Storm's default).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WAIT = "topology.sleep.spout.wait.strategy.time.ms"


def child(conf: dict[str, Any]) -> None:
    """One run, in this process: the figures as one JSON line."""
    sys.path[:0] = [str(HERE), str(HERE / "topologies")]
    import kafka_pipeline
    from squall.logs import configure
    from squall.runtime import spout_pacing

    configure("console", "WARNING")
    turns = {"dry": 0, "all": 0}
    ended = spout_pacing.SpoutPacing.turn_ended

    def counted(self, now: float, real: float, dry: bool) -> None:
        turns["all"] += 1
        turns["dry"] += dry
        ended(self, now, real, dry)

    spout_pacing.SpoutPacing.turn_ended = counted  # type: ignore[method-assign]
    given = kafka_pipeline.from_env()
    assert given is not None
    res = kafka_pipeline.run_squall(*given, conf=conf)
    res["dry_per_1000"] = round(turns["dry"] * 1000 / given[2], 2)
    res["turns_per_1000"] = round(turns["all"] * 1000 / given[2], 2)
    print(json.dumps(res), flush=True)


def value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000, help="sentences in the input topic")
    parser.add_argument("--variant", nargs="+", action="append", metavar=("NAME", "KEY=VALUE"),
                        help="a name and the topology settings it runs with (repeatable)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(json.loads(args.child))
        return 0
    variants = {v[0]: dict((kv.split("=", 1)[0], value(kv.split("=", 1)[1])) for kv in v[1:])
                for v in (args.variant or [["wait0", f"{WAIT}=0"], ["wait1", f"{WAIT}=1"]])}
    sys.path[:0] = [str(HERE), str(HERE / "topologies")]
    import kafka_pipeline

    print(f"kafka-ab: a Tansu broker, {args.records:,} sentences; variants {variants}", flush=True)
    broker = kafka_pipeline.Broker(args.records)
    env = {**os.environ, kafka_pipeline.ENV: broker.spec}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    names = list(variants)
    try:
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                load = os.getloadavg()[0]
                out = subprocess.run([sys.executable, __file__, "--child", json.dumps(variants[name])],
                                     env=env, capture_output=True, text=True, timeout=600)
                if out.returncode != 0:
                    raise SystemExit(f"{name}: {out.stderr.strip()[-800:]}")
                res = json.loads(out.stdout.strip().splitlines()[-1])
                results[name].append(res)
                print(f"r{r} {name:>10} {res['records_per_sec']:>9,.0f} records/s"
                      f"  {res['cpu_us_per_record']:6.1f} us CPU/record"
                      f"  dry turns {res['dry_per_1000']:6.2f}/1000 records (turns {res['turns_per_1000']:.1f})"
                      f"  failed {res['failed']}  load {load:.2f}", flush=True)
    finally:
        broker.close()
    for name, runs in results.items():
        print(f"median {name:>10} {statistics.median(r['records_per_sec'] for r in runs):>9,.0f} records/s  "
              f"{statistics.median(r['cpu_us_per_record'] for r in runs):6.1f} us CPU/record  "
              f"dry {statistics.median(r['dry_per_1000'] for r in runs):.2f}/1000")
    return 0


if __name__ == "__main__":
    sys.exit(main())
