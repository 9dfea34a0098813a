#!/usr/bin/env python3
"""squall side by side with Bytewax, a plain Python loop and the ZeroMQ ceiling.

    python bench/compare.py [--duration S] [--warmup S] [--rounds N] [--no-cluster]
                            [--no-latency] [--no-multilang] [--no-kafka] [--kafka-records N]
                            [--baseline FILE] [--json FILE|-]

Local rounds, alternating in each round: squall's word count acked and unacked, Bytewax's
running word count and a plain split-and-count loop over the same sentences, then
squall's const -> id -> null unacked and acked, then a Storm-style (storm.py) ShellBolt
against pystorm over the same pipe (bench/multilang_bench.py). Kafka rounds: Kafka -> split
-> count -> Kafka, squall against Bytewax's Kafka connector, on one Tansu broker whose input
topic this script fills once (bench/kafka_pipeline.py). Cluster rounds: const -> id -> null
unacked and acked in two worker processes (real ZooKeeper), and the ZeroMQ ceiling.
Then latency under load, local and cluster, once. Each figure runs in a fresh process
(squall's from bench/run.py in the repository's .venv, the peers in bench/peers/.venv,
set up when missing); every side counts what it processed. Prints every figure with the
load average before and after it, issue 22's ratios per round, the latency table, and issue
31's goal table, each row against its goal (``--baseline``, an earlier ``--json`` report,
gives the maximum-throughput rows their reference; a row whose figures are missing says so).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import envs
import kafka_pipeline
from compare_report import render

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    peer: str | None = None      # a script in bench/peers/, run in the bench environment
    scenario: str | None = None  # a bench/run.py scenario, run in squall's environment
    slack: float = 120.0         # seconds past warm-up and duration before the run is given up


LOCAL = [
    Figure("wordcount-acked", "squall word count, acked", "words/s", scenario="local-wordcount"),
    Figure("wordcount-unacked", "squall word count, unacked", "words/s", scenario="local-wordcount-unacked"),
    Figure("bytewax", "Bytewax 0.21.1 running word count", "words/s", peer="bytewax_wordcount.py"),
    Figure("plain-loop", "plain Python split-and-count loop", "words/s", peer="plain_loop.py"),
    Figure("const-id-null", "squall const -> id -> null, unacked", "tuples/s", scenario="local-const-id-null"),
    Figure("const-id-null-acked", "squall const -> id -> null, acked", "tuples/s",
           scenario="local-const-id-null-acked"),
]
CLUSTER = [
    Figure("cluster", "cluster const -> id -> null, unacked", "tuples/s", scenario="cluster-const-id-null",
           slack=240),
    Figure("cluster-acked", "cluster const -> id -> null, acked", "tuples/s",
           scenario="cluster-const-id-null-acked", slack=240),
    Figure("zmq-ceiling", "ZeroMQ ceiling (two plain processes)", "tuples/s", scenario="zmq-ceiling"),
]
MULTILANG = [
    Figure("multilang-split", "storm.py ShellBolt / pystorm (split)", "words/s", scenario="multilang-split",
           slack=240),
]
KAFKA = [
    Figure("kafka-pipeline", "squall Kafka -> split -> count -> Kafka", "records/s", scenario="kafka-pipeline",
           slack=300),
    Figure("bytewax-kafka", "Bytewax Kafka -> split -> count -> Kafka", "records/s", peer="bytewax_kafka.py",
           slack=300),
]
LATENCY = [
    Figure("latency-local", "latency under load, local", "tuples/s", scenario="local-latency", slack=300),
    Figure("latency-cluster", "latency under load, cluster", "tuples/s", scenario="cluster-latency", slack=400),
]

LATENCY_PHASES = 6  # the latency plan: max, then bench/latency.py's five loads (FRACTIONS)


class FigureError(RuntimeError):
    pass


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Runner:
    def __init__(self, args: argparse.Namespace, peers_python: Path, workdir: Path, say) -> None:
        self.args, self.peers_python, self.workdir, self.say = args, peers_python, workdir, say

    def command(self, fig: Figure, duration: float) -> list[str]:
        timing = ["--duration", str(duration), "--warmup", str(self.args.warmup)]
        if fig.peer:
            return [str(self.peers_python), str(HERE / "peers" / fig.peer), *timing]
        return [sys.executable, str(HERE / "run.py"), fig.scenario, "--json", *timing]

    def run(self, fig: Figure, round_no: int | None, duration: float) -> dict[str, Any]:
        before, started = load(), time.monotonic()
        entry: dict[str, Any] = {"figure": fig.key, "round": round_no, "load_before": before}
        try:
            entry["result"] = self._child(self.command(fig, duration),
                                          timeout=self._budget(fig, duration))
        except FigureError as exc:
            entry["error"] = str(exc)
        entry["load_after"], entry["wall_secs"] = load(), round(time.monotonic() - started, 1)
        self.say(_progress(fig, entry))
        return entry

    def _budget(self, fig: Figure, duration: float) -> float:
        phases = LATENCY_PHASES if fig in LATENCY else 2 if fig in MULTILANG else 1
        return phases * (duration + self.args.warmup) + fig.slack

    def _child(self, cmd: list[str], timeout: float) -> dict[str, Any]:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.workdir)
        except subprocess.TimeoutExpired:
            raise FigureError(f"no result within {timeout:.0f} s") from None
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            raise FigureError(f"exit {proc.returncode}: " + (lines[-1] if lines else "no output"))
        for line in reversed(proc.stdout.strip().splitlines()):  # the JSON result is the last line
            try:
                result = json.loads(line)
            except ValueError:
                continue
            if isinstance(result, dict):
                return result
        raise FigureError("printed no JSON result")


def rate(result: dict[str, Any]) -> float:
    for field in ("words_per_sec", "tuples_per_sec", "records_per_sec"):
        if field in result:
            return result[field]
    return 0.0


def _progress(fig: Figure, entry: dict[str, Any]) -> str:
    where = f"  {fig.label:40}"
    loads = f"load {entry['load_before'][0]:.2f} -> {entry['load_after'][0]:.2f}"
    if "error" in entry:
        return f"{where} FAILED ({entry['error']})  {loads}"
    result = entry["result"]
    if "summary" in result:
        return f"{where} {result['summary']}  {loads}"
    return f"{where} {rate(result):>12,.0f} {fig.unit}  {loads}"


def kafka_broker(args: argparse.Namespace, say, report: dict[str, Any]) -> Any:
    """The Kafka rounds' broker with the input topic filled, its address in the children's
    environment; None (the figures recorded as failed) when it cannot start."""
    say(f"kafka: starting a Tansu broker and writing {args.kafka_records:,} sentences ...")
    try:
        broker = kafka_pipeline.Broker(args.kafka_records)
    except Exception as exc:  # noqa: BLE001 - a missing extra or a broker that would not start
        why = f"no broker: {type(exc).__name__}: {exc}"[:300]
        say(f"  kafka rounds skipped ({why}; `scripts/quickstart.sh kafka` and the test extra give Tansu)")
        report["runs"] += [{"figure": fig.key, "round": r, "load_before": load(), "load_after": load(),
                            "error": why} for r in range(1, args.rounds + 1) for fig in KAFKA]
        return None
    os.environ[kafka_pipeline.ENV] = broker.spec
    return broker


def read_baseline(path: Path) -> dict[str, Any] | str:
    """An earlier report (compare.py --json), or why it cannot serve."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"cannot read {path}: {exc}"
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        return f"{path} is not a compare.py --json report"
    return data


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per figure (default 10)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of local and of cluster figures (default 3)")
    parser.add_argument("--no-cluster", action="store_true", help="skip the cluster rounds and cluster latency")
    parser.add_argument("--no-latency", action="store_true", help="skip latency under load")
    parser.add_argument("--no-multilang", action="store_true", help="skip the storm.py / pystorm figure")
    parser.add_argument("--no-kafka", action="store_true", help="skip the Kafka pipeline rounds")
    parser.add_argument("--kafka-records", type=int, default=200_000,
                        help="sentences in the Kafka pipeline's input topic (default 200000)")
    parser.add_argument("--baseline", metavar="FILE", help="an earlier --json report: the maximum-throughput "
                                                           "rows compare with its figures")
    parser.add_argument("--json", metavar="FILE", help="also write every result as JSON to FILE ('-': stdout, "
                                                       "and the text goes to stderr)")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.warmup < 0 or args.rounds < 1:
        parser.error("--duration must be > 0, --warmup >= 0 and --rounds >= 1")
    if args.kafka_records < 10_000:
        parser.error("--kafka-records must be at least 10000 (the first 5000 are warm-up)")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    out = sys.stderr if args.json == "-" else sys.stdout

    def say(line: str = "") -> None:
        print(line, file=out, flush=True)

    envs.use_repo_venv()
    envs.check_squall()
    peers = envs.peers_python(say)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"), "cpus": os.cpu_count(), "nproc": len(os.sched_getaffinity(0)),
        "python": sys.version.split()[0], "squall_python": sys.executable, "peers_python": str(peers),
        "duration": args.duration, "warmup": args.warmup, "rounds": args.rounds,
        "load_start": load(), "runs": []}
    say(f"squall vs Bytewax 0.21.1 and a plain loop: {args.rounds} rounds, {args.duration:g} s measured after "
        f"{args.warmup:g} s warm-up per figure")
    say(f"machine: {report['cpus']} CPUs (nproc {report['nproc']}), Python {report['python']}, "
        f"load average {' '.join(map(str, report['load_start']))}")
    say(f"squall runs in {sys.executable}; the peers in {peers}")
    if args.baseline:
        report["baseline"] = read_baseline(Path(args.baseline))
    with tempfile.TemporaryDirectory(prefix="squall-compare-") as tmp:
        runner = Runner(args, peers, Path(tmp), say)
        groups = [("local", LOCAL + ([] if args.no_multilang else MULTILANG))]
        groups += [] if args.no_kafka else [("kafka", KAFKA)]
        groups += [] if args.no_cluster else [("cluster", CLUSTER)]
        for name, figures in groups:
            broker = kafka_broker(args, say, report) if name == "kafka" else None
            if name == "kafka" and broker is None:
                continue
            try:
                for r in range(1, args.rounds + 1):
                    say(f"{name} round {r}/{args.rounds}")
                    report["runs"] += [runner.run(fig, r, args.duration) for fig in figures]
            finally:
                if broker is not None:
                    broker.close()
                    os.environ.pop(kafka_pipeline.ENV, None)
        if not args.no_latency:
            say("latency under load (once; each load level warms up, then is measured)")
            report["runs"] += [runner.run(fig, None, args.duration) for fig in LATENCY
                               if not (args.no_cluster and fig.key == "latency-cluster")]
    report["load_end"] = load()
    text, tables = render(report, [*LOCAL, *MULTILANG, *KAFKA, *CLUSTER, *LATENCY])
    say()
    say(text)
    report.pop("baseline", None)  # the file it came from is named instead
    report["baseline_file"] = args.baseline
    if args.json:
        report.update(tables)
        data = json.dumps(report, indent=1)
        if args.json == "-":
            print(data)
        else:
            Path(args.json).write_text(data + "\n")
            say(f"JSON copy: {args.json}")
    return 1 if any("error" in run for run in report["runs"]) else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except envs.SetupError as exc:
        print(f"compare: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("compare: interrupted", file=sys.stderr)
        sys.exit(130)
