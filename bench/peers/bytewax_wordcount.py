"""Bytewax's running word count over the word-count example's sentences, in one worker.

    python bench/peers/bytewax_wordcount.py [--duration S] [--warmup S] [--batch N]

input (batches of drawn sentences) -> flat_map split -> key_on word -> stateful_map
running count -> a sink that counts the (word, count) pairs it receives: one per word
processed. ``run_main`` runs the dataflow on this thread, one worker, as squall's local
mode runs a topology on one executor thread.
"""
from __future__ import annotations

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, StatelessSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import run_main

from workload import Window, drawn, parse_args


class _Sentences(StatelessSourcePartition):
    def __init__(self, batch: int, window: Window) -> None:
        self.lines, self.batch, self.window, self.at = drawn(), batch, window, 0

    def next_batch(self) -> list[str]:
        if self.window.stop is not None:
            raise StopIteration
        at, n, lines = self.at, self.batch, self.lines
        out = lines[at:at + n]
        while len(out) < n:  # wrap around the drawn block
            out += lines[:n - len(out)]
        self.at = (at + n) % len(lines)
        return out


class Sentences(DynamicSource):
    def __init__(self, batch: int, window: Window) -> None:
        self.batch, self.window = batch, window

    def build(self, step_id, worker_index, worker_count):
        return _Sentences(self.batch, self.window)


class _Counted(StatelessSinkPartition):
    def __init__(self, window: Window) -> None:
        self.window = window

    def write_batch(self, items: list) -> None:
        self.window.add(len(items))


class Counted(DynamicSink):
    def __init__(self, window: Window) -> None:
        self.window = window

    def build(self, step_id, worker_index, worker_count):
        return _Counted(self.window)


def running_count(count: int | None, _word: str) -> tuple[int, int]:
    count = (count or 0) + 1
    return count, count


def flow(batch: int, window: Window) -> Dataflow:
    df = Dataflow("wordcount")
    lines = op.input("sentences", df, Sentences(batch, window))
    words = op.flat_map("split", lines, str.split)
    keyed = op.key_on("word", words, lambda word: word)
    counts = op.stateful_map("count", keyed, running_count)
    op.output("counted", counts, Counted(window))
    return df


def main() -> None:
    parser = parse_args(__doc__)
    parser.add_argument("--batch", type=int, default=1000, help="sentences per input batch (default 1000)")
    args = parser.parse_args()
    window = Window(args.warmup, args.duration)
    run_main(flow(args.batch, window))
    window.report("bytewax", batch=args.batch)


if __name__ == "__main__":
    main()
