#!/usr/bin/env python3
"""Word count as a stream pipeline, side by side with the same by hand and with Bytewax.

    python bench/streams_compare.py [--duration S] [--warmup S] [--rounds N] [--json FILE]

Each round runs, alternating, in fresh processes: ``bench/run.py local-stream-wordcount``
(squall.streams: sentences -> flat_map -> map_to_pair -> count_by_key, acked),
``local-stream-wordcount-by-hand`` (a spout, a split bolt and a running-count bolt,
acked) and Bytewax 0.21.1's running word count (``peers/bytewax_wordcount.py``, in the
bench-only environment). All three count the same thing: (word, running count) pairs
made, one per word of the same drawn sentences. Prints each figure with the load before and
after it, then per round the two ratios of issue 32 (stream / by hand, goal >= 1.0;
stream / Bytewax, goal >= 1.2) from the rates and from the rates per CPU-second (on a busy
machine read the second: a process that gets less CPU slows, its rate per CPU-second hardly
moves).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import envs
from compare import Figure, Runner, load, rate

FIGURES = [
    Figure("stream", "squall.streams word count, acked", "words/s", scenario="local-stream-wordcount"),
    Figure("by-hand", "the same by hand (spout and bolts), acked", "words/s",
           scenario="local-stream-wordcount-by-hand"),
    Figure("bytewax", "Bytewax 0.21.1 running word count", "words/s", peer="bytewax_wordcount.py"),
]
RATIOS = [("stream / by hand", "stream", "by-hand", 1.0), ("stream / Bytewax", "stream", "bytewax", 1.2)]


def per_cpu(result: dict[str, Any]) -> float | None:
    for key in ("tuples_per_cpu_sec", "words_per_cpu_sec"):
        if key in result:
            return float(result[key])
    cpu = result.get("process_cpu")
    return rate(result) / cpu if cpu else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    envs.use_repo_venv()
    envs.check_squall()
    peers = envs.peers_python(print)
    print(f"stream word count vs by hand vs Bytewax: {args.rounds} rounds, {args.duration:g} s after "
          f"{args.warmup:g} s warm-up; {os.cpu_count()} CPUs, load {' '.join(map(str, load()))}", flush=True)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="squall-streams-") as tmp:
        runner = Runner(args, peers, Path(tmp), lambda line: print(line, flush=True))
        for r in range(1, args.rounds + 1):
            print(f"round {r}/{args.rounds}", flush=True)
            runs += [runner.run(fig, r, args.duration) for fig in FIGURES]
    print()
    print(f"{'round':>5}  {'ratio':18} {'rates':>7} {'per CPU-s':>10}  goal")
    failed = False
    for r in range(1, args.rounds + 1):
        got = {e["figure"]: e.get("result") for e in runs if e["round"] == r}
        for label, a, b, goal in RATIOS:
            if not got.get(a) or not got.get(b):
                failed = True
                print(f"{r:>5}  {label:18} {'n/a':>7}")
                continue
            by_rate = rate(got[a]) / max(1e-9, rate(got[b]))
            ca, cb = per_cpu(got[a]), per_cpu(got[b])
            by_cpu = f"{ca / cb:10.2f}" if ca and cb else f"{'n/a':>10}"
            print(f"{r:>5}  {label:18} {by_rate:7.2f} {by_cpu}  >= {goal}")
    if args.json:
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M %Z"), "runs": runs}, indent=1))
    return 1 if failed or any("error" in e for e in runs) else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except envs.SetupError as exc:
        print(f"streams_compare: {exc}", file=sys.stderr)
        sys.exit(2)
