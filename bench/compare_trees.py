#!/usr/bin/env python3
"""Run bench scenarios from two versions of squall side by side, alternating.

``python bench/compare_trees.py --base REF [--rounds 3] [--duration 10] SCENARIO...``
exports git ``REF`` (a commit, a branch) into a temporary directory and runs each scenario
``--rounds`` times from that tree and from this working tree in turn (base, this, base,
this, ...), each run in a fresh process of this interpreter that imports squall from its
tree, so a neighbour's load falls on both alike. Prints one line per run with the load
average at its start, then per scenario the median of each side and the change, in
tuples per second and in tuples per CPU-second of the benchmark process (which a busy
machine disturbs less: it counts the work, not the waiting for a core). Speed figures are
compared side by side in one run, never against numbers from another day (the machine is
shared).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# Runs bench/run.py of TREE with squall (and its daemons/, messaging/, conf/ packages,
# which the installed project maps under squall.*) imported from TREE, whatever tree the
# interpreter's environment has installed.
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
sys.argv = [str(tree / "bench" / "run.py")] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def export(ref: str, into: Path) -> Path:
    """``ref``'s tree, as files (no worktree: nothing changes in the repository)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run(tree: Path, scenario: str, duration: float, warmup: float) -> dict:
    out = subprocess.run([sys.executable, "-c", BOOTSTRAP, str(tree), scenario, "--json",
                          "--duration", str(duration), "--warmup", str(warmup)],
                         capture_output=True, text=True, timeout=duration * 10 + warmup + 120)
    if out.returncode != 0:
        raise SystemExit(f"{scenario} from {tree} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="+")
    parser.add_argument("--base", required=True, help="git ref to compare this working tree with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="squall-base-") as tmp:
        sides = {"base": export(args.base, Path(tmp)), "this": REPO}
        rates: dict[tuple[str, str], list[float]] = {}
        per_cpu: dict[tuple[str, str], list[float]] = {}
        for scenario in args.scenarios:
            for r in range(args.rounds):
                for side, tree in sides.items():
                    load = os.getloadavg()[0]
                    result = run(tree, scenario, args.duration, args.warmup)
                    rate, cpu = result["tuples_per_sec"], result.get("process_cpu") or 0.0
                    rates.setdefault((scenario, side), []).append(rate)
                    per_cpu.setdefault((scenario, side), []).append(rate / cpu if cpu else 0.0)
                    print(f"{scenario:28} round {r + 1} {side:4} {rate:12,.0f} tuples/s "
                          f"{rate / cpu if cpu else 0:12,.0f} tuples/CPU-s  (load {load:.2f})", flush=True)
        print()
        for scenario in args.scenarios:
            for what, figures in (("tuples/s", rates), ("tuples/CPU-s", per_cpu)):
                base = statistics.median(figures[scenario, "base"])
                this = statistics.median(figures[scenario, "this"])
                print(f"{scenario:28} {what:13} median base {base:12,.0f}  this {this:12,.0f}  "
                      f"change {this / base - 1:+.1%}" if base else f"{scenario}: no {what} figures")
    print(f"load average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
