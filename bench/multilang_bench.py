"""The multilang scenario: the same bolt work three ways, alternating in one run.

* multilang: a pystorm Bolt in a child process (Storm's JSON protocol over pipes);
* in-process: the same pystorm Bolt class in the worker (squall.multilang.pystorm_adapter);
* native: a squall Bolt doing the same work.

A spout of words feeds one bolt task, reliably (acking on, topology.max.spout.pending 2000)
or with acking off. Figures: tuples the bolt executed per second, and per CPU second (the
worker's CPU plus its children's), which a loaded machine disturbs less: a child process
gets a CPU share of its own, so under load wall-clock rates flatter multilang.

The split scenario (``split_storm_py_vs_pystorm``): sentences of 9 words split by a child
two ways over the same pipe, alternating: pystorm (its emits do not wait) and Storm's own
``storm.py`` (bench/topologies/storm_py, unmodified, Apache-2.0), whose every emit waits for
its task ids. Figure: words counted downstream per second, and the ratio storm.py / pystorm
(issue 31's goal: >= 0.8); CPU microseconds per word of the worker and of the child.

The floor scenario (``floor``): what storm.py's round trip per word costs on this machine
whatever the parent does. A bare parent (``bare_parent``: a plain loop in its own process that
answers every emit with a fixed task id, no JSON parsing, routing, acking or threads) runs the
same storm.py child, alternating with pystorm and storm.py in squall; each with words/s and
CPU per word of parent and child. bare / pystorm is the ratio storm.py can reach at most.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from squall import Bolt, Spout, TopologyBuilder

HERE = Path(__file__).resolve().parent
TOPOLOGIES = HERE / "topologies"
STORM_PY = ["python3", "storm_py/storm_split.py"]  # Storm's storm.py, run from TOPOLOGIES
PYSTORM = ["python3", "pystorm_split.py"]
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

    b = TopologyBuilder()
    b.set_spout("sentences", Sentences())
    b.set_bolt("split", ShellBolt({"pystorm": PYSTORM, "storm.py": STORM_PY}[kind], ["word"])).shuffle("sentences")
    b.set_bolt("count", Count()).fields("split", ["word"])
    return b.build()


def _per_word(result: dict[str, Any]) -> dict[str, Any]:
    """Words/s and CPU microseconds per word of the parent (squall's worker, all of it: spout,
    split, count and acker) and of the child, from one ``measure`` result."""
    rate = result["tuples_per_sec"]
    per = 1e6 / rate if rate else float("nan")
    return {"words_per_sec": round(rate), "parent_us": round(result.get("process_cpu", 0.0) * per, 1),
            "child_us": round(result.get("children_cpu", 0.0) * per, 1), "failed": result.get("failed", 0)}


def _alternate(runs: dict[str, Callable[[], dict[str, Any]]], rounds: int = 3) -> dict[str, list[dict[str, Any]]]:
    """Each run ``rounds`` times, alternating, so a noisy neighbour hits all alike. The children
    run without PYTHONUNBUFFERED, as under Storm's supervisor: with it, storm.py's print()
    writes each message in four pieces (its text, a newline, ``end``, a newline)."""
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in runs}
    unbuffered = os.environ.pop("PYTHONUNBUFFERED", None)
    try:
        for _ in range(rounds):
            for kind, run in runs.items():
                out[kind].append(run())
    finally:
        if unbuffered is not None:
            os.environ["PYTHONUNBUFFERED"] = unbuffered
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    return {kind: {f: round(_mean([r[f] for r in rs]), 1) for f in ("words_per_sec", "parent_us", "child_us")}
            for kind, rs in runs.items()}


def split_storm_py_vs_pystorm(measure: Callable[..., dict[str, Any]], duration: float, warmup: float,
                              conf: dict[str, Any]) -> dict[str, Any]:
    from squall.multilang.codedir import set_code_dir

    set_code_dir(TOPOLOGIES)
    runs = _alternate({kind: (lambda kind=kind: _per_word(measure(split_topology(kind), conf, "count",
                                                                   duration / 3, warmup)))
                       for kind in ("pystorm", "storm.py")})
    mean = _summary(runs)
    py, st = mean["pystorm"]["words_per_sec"], mean["storm.py"]["words_per_sec"]
    return {"tuples_per_sec": round(st), "pystorm_words_per_sec": round(py), "storm_py_words_per_sec": round(st),
            # None when pystorm counted nothing (its child never got going): no ratio to give
            "storm_style_over_pystorm": round(st / py, 2) if py else None,
            "cpu_us_per_word": {k: {"parent": v["parent_us"], "child": v["child_us"]} for k, v in mean.items()},
            "failed": {k: sum(r["failed"] for r in rs) for k, rs in runs.items()},
            "runs": {k: [r["words_per_sec"] for r in rs] for k, rs in runs.items()}, "summary": _line(mean, py)}


def _line(mean: dict[str, dict[str, float]], pystorm: float) -> str:
    """One line per kind: words/s, its ratio to pystorm, CPU microseconds per word."""
    return "; ".join(f"{k} {v['words_per_sec']:,.0f} words/s"
                     + (f" ({v['words_per_sec'] / pystorm:.2f} of pystorm)" if pystorm and k != "pystorm" else "")
                     + f", CPU/word parent {v['parent_us']:.1f} us child {v['child_us']:.1f} us"
                     for k, v in mean.items())


# -- the floor: a bare parent answering the same storm.py child ---------------------------------
IN_FLIGHT = 100  # sentences the bare parent keeps written ahead (ShellBolt's topology.shellbolt.max.pending)
SENTENCE_MSG = json.dumps({"id": "1", "comp": "sentences", "stream": "default", "task": 1,
                           "tuple": [SENTENCE]}).encode() + b"\nend\n"
ANSWER = b"[5]\nend\n"


def bare_parent(seconds: float, warmup: float) -> dict[str, Any]:
    """Run storm.py's split child from a bare loop: sentences written ahead, each emit answered
    at once with a fixed task id (found by a byte prefix, not parsed), blocking reads. Words/s
    and CPU microseconds per word of this process and of the child, after ``warmup``."""
    import psutil

    pid_dir = tempfile.mkdtemp(prefix="squall-bench-bare-")
    child = subprocess.Popen([sys.executable, *STORM_PY[1:]], cwd=TOPOLOGIES, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, bufsize=0)
    fd_in, fd_out = child.stdin.fileno(), child.stdout.fileno()  # type: ignore[union-attr]
    try:
        os.write(fd_in, json.dumps({"conf": {}, "context": {}, "pidDir": pid_dir}).encode() + b"\nend\n")
        os.write(fd_in, SENTENCE_MSG * IN_FLIGHT)
        words, buf, marks = 0, b"", None
        start = time.monotonic()
        measure_at, stop_at = start + warmup, start + warmup + seconds
        proc = psutil.Process(child.pid)
        while True:
            data = os.read(fd_out, 65536)
            if not data:
                raise RuntimeError("storm.py's child closed its stdout")
            *messages, buf = (buf + data).split(b"\nend\n")
            for msg in messages:
                if msg.startswith(b'{"command": "emit"'):
                    os.write(fd_in, ANSWER)
                    words += 1
                elif msg.startswith(b'{"command": "ack"'):
                    os.write(fd_in, SENTENCE_MSG)
            now = time.monotonic()
            if marks is None and now >= measure_at:
                t = proc.cpu_times()
                marks = (words, now, time.process_time(), t.user + t.system)
            elif marks is not None and now >= stop_at:
                t = proc.cpu_times()
                n = words - marks[0]
                return {"words_per_sec": round(n / (now - marks[1])),
                        "parent_us": round((time.process_time() - marks[2]) * 1e6 / n, 1),
                        "child_us": round((t.user + t.system - marks[3]) * 1e6 / n, 1), "failed": 0}
    finally:
        child.kill()
        child.wait()
        for name in os.listdir(pid_dir):
            os.unlink(os.path.join(pid_dir, name))
        os.rmdir(pid_dir)


def _bare_run(seconds: float, warmup: float) -> dict[str, Any]:
    """``bare_parent`` in a process of its own (so its CPU is its own), this file's main."""
    out = subprocess.run([sys.executable, __file__, "bare", str(seconds), str(warmup)], capture_output=True,
                         text=True, timeout=seconds + warmup + 60)
    if out.returncode != 0:
        raise RuntimeError(f"the bare parent failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


def floor(measure: Callable[..., dict[str, Any]], duration: float, warmup: float,
          conf: dict[str, Any]) -> dict[str, Any]:
    from squall.multilang.codedir import set_code_dir

    set_code_dir(TOPOLOGIES)
    runs = _alternate({
        "bare storm.py": lambda: _bare_run(duration / 3, warmup),
        "pystorm": lambda: _per_word(measure(split_topology("pystorm"), conf, "count", duration / 3, warmup)),
        "storm.py": lambda: _per_word(measure(split_topology("storm.py"), conf, "count", duration / 3, warmup))})
    mean = _summary(runs)
    py = mean["pystorm"]["words_per_sec"]

    def ratio(kind: str) -> float | None:
        return round(mean[kind]["words_per_sec"] / py, 2) if py else None

    return {"tuples_per_sec": mean["storm.py"]["words_per_sec"], "per_kind": mean,
            "bare_over_pystorm": ratio("bare storm.py"), "storm_py_over_pystorm": ratio("storm.py"),
            "runs": runs, "summary": _line(mean, py)}


if __name__ == "__main__" and sys.argv[1:2] == ["bare"]:
    print(json.dumps(bare_parent(float(sys.argv[2]), float(sys.argv[3]))))
