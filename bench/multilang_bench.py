"""The multilang scenario: the same bolt work three ways, alternating in one run.

* multilang: a pystorm Bolt in a child process (Storm's JSON protocol over pipes);
* in-process: the same pystorm Bolt class in the worker (squall.multilang.pystorm_adapter);
* native: a squall Bolt doing the same work.

A spout of words feeds one bolt task, reliably (acking on, topology.max.spout.pending 2000)
or with acking off. Figures: tuples the bolt executed per second, and per CPU second (the
worker's CPU plus its children's), which a loaded machine disturbs less: a child process
gets a CPU share of its own, so under load wall-clock rates flatter multilang.

The split scenario (``split_storm_style_vs_pystorm``): sentences of 9 words split by a child
two ways over the same pipe, alternating: pystorm (its emits do not wait) and a Storm-style
adapter that waits for the task ids of every emit, as Storm's own ``storm.py`` does
(tests/support/multilang/storm_style.py). Figure: words counted downstream per second, and
the ratio storm-style / pystorm (issue 31's goal: >= 0.8).
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable

from squall import Bolt, Spout, TopologyBuilder

HERE = Path(__file__).resolve().parent
STORM_STYLE = HERE.parent / "tests" / "support" / "multilang" / "storm_style.py"
SENTENCE = "the quick brown fox jumps over the lazy dog"
WORDS = ["dog", "cat", "zebra", "elephant", "ant", "bee", "cow", "owl"]
ACKED = {"topology.acker.executors": 1, "topology.max.spout.pending": 2000}
UNACKED = {"topology.acker.executors": 0}


class Words(Spout):
    def open(self, conf, context, collector):
        self.collector, self.words, self.n = collector, itertools.cycle(WORDS), 0

    def next_tuple(self):
        self.n += 1
        self.collector.emit([next(self.words)], msg_id=self.n)

    def declare_output_fields(self, declarer):
        declarer.declare(["word"])


class NativeUpper(Bolt):
    def execute(self, tup):
        word = tup.values[0]
        self.collector.emit([word.upper(), len(word)], anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(["upper", "n"])


def topology(kind: str):
    from squall.multilang import ShellBolt
    from squall.multilang.pystorm_adapter import PystormBolt

    bolt = {"multilang": lambda: ShellBolt(["python3", "pystorm_upper.py"], ["upper", "n"]),
            "in-process": lambda: PystormBolt("pystorm_upper:Upper", {"default": ["upper", "n"]}),
            "native": NativeUpper}[kind]()
    b = TopologyBuilder()
    b.set_spout("words", Words())
    b.set_bolt("upper", bolt).shuffle("words")
    return b.build()


def multilang_vs_in_process(measure: Callable[..., dict[str, Any]], duration: float, warmup: float,
                            conf: dict[str, Any]) -> dict[str, Any]:
    from squall.multilang.codedir import set_code_dir

    set_code_dir(HERE / "topologies")  # the child runs pystorm_upper.py from here
    kinds = ("multilang", "in-process", "native")
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    per_cpu: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(3):
        for kind in kinds:  # alternated, so a noisy neighbour hits all three alike
            result = measure(topology(kind), conf, "upper", duration / 3, warmup)
            rates[kind].append(round(result["tuples_per_sec"]))
            per_cpu[kind].append(round(result["tuples_per_cpu_sec"]))
    mean = {k: sum(v) / len(v) for k, v in rates.items()}
    cpu = {k: sum(v) / len(v) for k, v in per_cpu.items()}
    return {"tuples_per_sec": mean["in-process"], "multilang_tuples_per_sec": round(mean["multilang"]),
            "in_process_tuples_per_sec": round(mean["in-process"]), "native_tuples_per_sec": round(mean["native"]),
            "in_process_over_multilang": round(mean["in-process"] / mean["multilang"], 1),
            "native_over_in_process": round(mean["native"] / mean["in-process"], 2),
            # CPU seconds of the worker and the children: what the machine pays per tuple,
            # whatever share of the CPUs a loaded machine gives each process
            "tuples_per_cpu_sec": {k: round(v) for k, v in cpu.items()},
            "in_process_over_multilang_per_cpu": round(cpu["in-process"] / cpu["multilang"], 1),
            "runs": rates, "runs_per_cpu_sec": per_cpu}


class Sentences(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        self.n += 1
        self.collector.emit([SENTENCE], msg_id=self.n)

    def declare_output_fields(self, declarer):
        declarer.declare(["sentence"])


class Count(Bolt):
    def prepare(self, conf, context, collector):
        self.collector, self.counts = collector, {}

    def execute(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


def split_topology(kind: str):
    from squall.multilang import ShellBolt

    command = {"pystorm": ["python3", "pystorm_split.py"], "storm-style": ["python3", str(STORM_STYLE)]}[kind]
    b = TopologyBuilder()
    b.set_spout("sentences", Sentences())
    b.set_bolt("split", ShellBolt(command, ["word"])).shuffle("sentences")
    b.set_bolt("count", Count()).fields("split", ["word"])
    return b.build()


def split_storm_style_vs_pystorm(measure: Callable[..., dict[str, Any]], duration: float, warmup: float,
                                 conf: dict[str, Any]) -> dict[str, Any]:
    from squall.multilang.codedir import set_code_dir

    set_code_dir(HERE / "topologies")
    kinds = ("pystorm", "storm-style")
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    failed: dict[str, int] = dict.fromkeys(kinds, 0)
    for _ in range(3):
        for kind in kinds:  # alternated, so a noisy neighbour hits both alike
            result = measure(split_topology(kind), conf, "count", duration / 3, warmup)
            rates[kind].append(round(result["tuples_per_sec"]))
            failed[kind] += result.get("failed", 0)
    mean = {k: sum(v) / len(v) for k, v in rates.items()}
    return {"tuples_per_sec": round(mean["storm-style"]), "pystorm_words_per_sec": round(mean["pystorm"]),
            "storm_style_words_per_sec": round(mean["storm-style"]),
            # None when pystorm counted nothing (its child never got going): no ratio to give
            "storm_style_over_pystorm": round(mean["storm-style"] / mean["pystorm"], 2) if mean["pystorm"] else None,
            "failed": failed, "runs": rates}
