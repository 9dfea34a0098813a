#!/usr/bin/env python3
"""Run bench scenarios from two versions of squall side by side, alternating.

``python bench/compare_trees.py --base REF [--rounds 3] [--duration 10] SCENARIO...``
exports git ``REF`` (a commit, a branch) into a temporary directory and runs each scenario
``--rounds`` times from that tree and from this working tree in turn (base, this, base,
this, ...), each run in a fresh process of this interpreter that imports squall from its
tree, so a neighbour's load falls on both alike. Prints one line per run with the load
average at its start, then per scenario the median of each side and the change, in
tuples per second and in tuples per CPU-second of the benchmark process, or of the worker
processes for a cluster scenario (which a busy machine disturbs less: it counts the work,
not the waiting for a core). Speed figures are
compared side by side in one run, never against numbers from another day (the machine is
shared).

``--cost`` measures the executors' hot path alone instead (``bench/step_cost.py``: CPU
nanoseconds per tuple, stepped in one thread), ``--codec`` the wire codec alone
(``bench/codec_cost.py``: encode and decode of tuple batches), ``--conversation`` a shell
bolt's round trip with a storm.py-style child (``bench/conversation_cost.py``); with ``--callgrind`` each
counts the instructions per tuple under valgrind, which the machine's load does not change
at all (the difference of two runs of different lengths, so start-up cancels out).
``git archive`` exports source only: ``--build`` compiles the base's own hot modules
(``setup.py build_ext --inplace`` in the export) so that a compiled tree is held against a
compiled base; without it the base runs as plain Python (compare with ``SQUALL_PURE=1``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# Runs SCRIPT with squall (and its daemons/, messaging/, conf/ packages, which the
# installed project maps under squall.*) imported from TREE, whatever tree the
# interpreter's environment has installed: python -c BOOTSTRAP TREE SCRIPT ARGS...
BOOTSTRAP = r"""
import runpy, sys
from importlib.machinery import PathFinder
from pathlib import Path
tree = Path(sys.argv[1])
roots = {"squall": tree / "squall", "squall.daemons": tree / "daemons",
         "squall.messaging": tree / "messaging", "squall.conf": tree / "conf"}
class TreeFinder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name in roots:
            return PathFinder.find_spec(name.rpartition(".")[2], [str(roots[name].parent)]) \
                if name == "squall" else _package(name, roots[name])
        parent = name.rpartition(".")[0]
        if parent in roots:
            return PathFinder.find_spec(name, [str(roots[parent])])
        return None
def _package(name, where):
    from importlib.util import spec_from_file_location
    return spec_from_file_location(name, where / "__init__.py", submodule_search_locations=[str(where)])
sys.meta_path.insert(0, TreeFinder)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def export(ref: str, into: Path) -> Path:
    """``ref``'s tree, as files (no worktree: nothing changes in the repository)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run(tree: Path, script: Path, args: list[str], timeout: float, wrap: list[str] | None = None) -> tuple[dict, str]:
    """(the script's last JSON line, its stderr)."""
    out = subprocess.run([*(wrap or []), sys.executable, "-c", BOOTSTRAP, str(tree), str(script), *args, "--json"],
                         capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONHASHSEED": "0"})
    if out.returncode != 0:
        raise SystemExit(f"{script.name} {' '.join(args)} from {tree} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def throughput(tree: Path, scenario: str, duration: float, warmup: float) -> tuple[float, float]:
    """bench/run.py of ``tree``: (tuples/s, tuples per CPU-second; records for kafka-pipeline)."""
    result, _ = run(tree, tree / "bench" / "run.py", [scenario, "--duration", str(duration), "--warmup", str(warmup)],
                    duration * 10 + warmup + 120)
    rate, cpu = result.get("tuples_per_sec", result.get("records_per_sec", 0.0)), result.get("process_cpu") or 0.0
    if isinstance(result.get("cpu_ns_per_tuple"), float):  # a cluster's: its worker processes' CPU, not the bench's
        return rate, 1e9 / result["cpu_ns_per_tuple"]
    return rate, rate / cpu if cpu else 0.0


def build(tree: Path) -> None:
    """Compile ``tree``'s hot modules as an install would (``pip wheel``: its own build
    requirements, isolated) and put the extension modules beside their sources."""
    with tempfile.TemporaryDirectory(prefix="squall-wheel-") as wheels:
        out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, str(tree)],
                             capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            raise SystemExit(f"building {tree} failed:\n{out.stderr[-2000:]}")
        sources = runpy.run_path(str(tree / "squall" / "compiled.py"))["MODULES"]
        with zipfile.ZipFile(next(Path(wheels).glob("*.whl"))) as wheel:
            for name in wheel.namelist():
                module = name.split(".")[0].replace("/", ".")
                if module in sources and not name.endswith(".py"):
                    (tree / sources[module]).with_name(Path(name).name).write_bytes(wheel.read(name))


def cost(tree: Path, scenario: str, turns: int, script: str = "step_cost.py") -> float:
    """CPU nanoseconds per tuple of ``script``: the executors stepped in one thread, or the codec."""
    result, _ = run(tree, HERE / script, [scenario, "--turns", str(turns)], 600)
    return float(result["cpu_ns_per_tuple"])


def instructions(tree: Path, scenario: str, turns: int, script: str = "step_cost.py") -> float:
    """Instructions per tuple under callgrind: two runs, ``turns`` apart."""
    def one(n: int) -> tuple[int, int]:
        result, err = run(tree, HERE / script, [scenario, "--turns", str(n)], 3600,
                          ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"])
        match = re.search(r"Collected : (\d+)", err)
        if match is None:
            raise SystemExit(f"no instruction count from valgrind:\n{err[-1000:]}")
        return int(match.group(1)), int(result["tuples"])
    (i1, t1), (i2, t2) = one(turns // 4), one(turns)
    return (i2 - i1) / (t2 - t1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="+")
    parser.add_argument("--base", required=True, help="git ref to compare this working tree with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--cost", action="store_true", help="CPU per tuple of the executors alone (step_cost.py)")
    parser.add_argument("--codec", action="store_true", help="CPU per tuple of the wire codec alone (codec_cost.py)")
    parser.add_argument("--conversation", action="store_true",
                        help="CPU per message of a shell bolt's round trip with its child alone (conversation_cost.py)")
    parser.add_argument("--callgrind", action="store_true",
                        help="with --cost, --codec or --conversation: instructions per tuple")
    parser.add_argument("--build", action="store_true", help="compile the base's hot modules first")
    parser.add_argument("--turns", type=int, default=None,
                        help="with --cost: executor turns per run "
                             "(2000; 400 under --callgrind, which runs ~50x slower)")
    args = parser.parse_args()
    if args.turns is None:
        args.turns = 400 if args.callgrind else 2000
    with tempfile.TemporaryDirectory(prefix="squall-base-") as tmp:
        sides = {"base": export(args.base, Path(tmp)), "this": REPO}
        if args.build:
            build(sides["base"])
        script = "codec_cost.py" if args.codec else "conversation_cost.py" if args.conversation else "step_cost.py"
        figures: dict[tuple[str, str, str], list[float]] = {}
        for scenario in args.scenarios:
            for r in range(args.rounds):
                for side, tree in sides.items():
                    load = os.getloadavg()[0]
                    if args.callgrind:
                        got = {"instructions/tuple": instructions(tree, scenario, args.turns, script)}
                    elif args.cost or args.codec or args.conversation:
                        got = {"CPU ns/tuple": cost(tree, scenario, args.turns, script)}
                    else:
                        rate, per_cpu = throughput(tree, scenario, args.duration, args.warmup)
                        got = {"tuples/s": rate, "tuples/CPU-s": per_cpu}
                    for what, value in got.items():
                        figures.setdefault((scenario, what, side), []).append(value)
                    shown = "  ".join(f"{v:12,.0f} {what}" for what, v in got.items())
                    print(f"{scenario:28} round {r + 1} {side:4} {shown}  (load {load:.2f})", flush=True)
        print()
        for scenario, what, side in figures:
            if side != "base":
                continue
            base = statistics.median(figures[scenario, what, "base"])
            this = statistics.median(figures[scenario, what, "this"])
            print(f"{scenario:28} {what:18} median base {base:12,.0f}  this {this:12,.0f}  "
                  f"change {this / base - 1:+.1%}" if base else f"{scenario}: no {what} figures")
    print(f"load average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
