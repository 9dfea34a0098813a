#!/usr/bin/env python3
"""The wire codec alone: ``python bench/codec_cost.py SCENARIO [--turns N] [--json]``.

Encodes and decodes tuple batches as a worker's way out and way in do
(``TupleSerializer.dumps``, then ``loads`` for the target task), ``--turns`` times over the
same batches, and reports the process CPU time per tuple. Under ``valgrind
--tool=callgrind`` (``compare_trees.py --codec --callgrind``) the instruction count does
not move with the machine's load. Scenarios, each a batch of 500 tuples (a producer's
batch, ``topology.producer.batch.size``) from one task:

- ``const``: storm-perf's ``["some data"]``, unanchored (const -> id -> null);
- ``const-acked``: the same, each in one tuple tree (message ids on the wire);
- ``wordcount``: ``[word, count]`` pairs, anchored, as a word count's count bolt emits;
- ``mixed``: values beyond msgpack's own types (big integers, tuples, decimals, times, ids),
  a figure of its own with no base to compare with.

Works with squall from before issue 34 too, so that ``compare_trees.py`` can hold the two
side by side on the scenarios both can encode.
"""
from __future__ import annotations

import argparse
import datetime
import decimal
import json
import random
import sys
import time
import uuid
from typing import Any

BATCH = 500
WORDS = ("the", "cow", "jumped", "over", "moon", "an", "apple", "a", "day", "keeps", "doctor", "away",
         "four", "score", "and", "seven", "years", "ago", "snow", "white", "dwarfs", "i", "am", "at", "two")


def _values(scenario: str, i: int) -> list:
    if scenario in ("const", "const-acked"):
        return ["some data"]
    if scenario == "wordcount":
        return [WORDS[i % len(WORDS)], i % 977]
    if scenario == "mixed":
        return [2 ** 70 + i, (i, "x"), decimal.Decimal(i) / 7,
                datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=i),
                uuid.UUID(int=i)]
    raise SystemExit(f"unknown scenario {scenario!r}: const, const-acked, wordcount, mixed")


def measure(scenario: str, turns: int, warmup: int = 20) -> dict[str, Any]:
    from squall.runtime.serialization import TupleSerializer
    from squall.tuple import Fields, Source, TreeTuple, Tuple

    rng = random.Random(0)
    fields = Fields(["a", "b", "c", "d", "e"][:len(_values(scenario, 0))])
    ser = TupleSerializer({}, {1: "src", 2: "dst"}, lambda component, stream: fields)
    src = Source("src", 1, "default", fields)
    batch = []
    for i in range(BATCH):
        if scenario in ("const-acked", "wordcount"):
            t = TreeTuple(_values(scenario, i), src)
            t.root, t.edge, t.ack_val = rng.getrandbits(64), rng.getrandbits(64), 0
        else:
            t = Tuple(_values(scenario, i), src)
        batch.append(t)
    dumps, loads = ser.dumps, ser.loads

    def run(n: int) -> None:
        for _ in range(n):
            loads(dumps(batch), 2)

    run(warmup)
    cpu = time.process_time()
    run(turns)
    cpu = time.process_time() - cpu
    tuples = turns * BATCH
    return {"scenario": scenario, "turns": turns, "tuples": tuples, "cpu_secs": round(cpu, 4),
            "cpu_ns_per_tuple": round(cpu * 1e9 / tuples, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.scenario, args.turns)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.scenario}: {result['tuples']:,} tuples encoded and decoded, "
              f"{result['cpu_ns_per_tuple']:,.0f} ns CPU per tuple")
    return 0


if __name__ == "__main__":
    sys.exit(main())
