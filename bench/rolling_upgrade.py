#!/usr/bin/env python3
"""A rolling upgrade on a real cluster: daemons of an earlier squall restarted one at a time
onto this tree while the chaos topology (a durable spout, a relay, a store) carries ids.

    .venv/bin/python bench/rolling_upgrade.py --old /path/to/old/.venv/bin/python [--json]

``--old`` is the interpreter of an environment where the earlier squall is installed (e.g.
``git archive main | tar -x -C /tmp/old && (cd /tmp/old && scripts/test.sh unit -q)`` makes
``/tmp/old/.venv``). The cluster (its own ZooKeeper, a nimbus, two supervisors of three slots,
the short test periods of ``squall.testing.cluster.FAST``) starts on the old version with three
workers; then, in the order docs/operations/upgrades.md gives, nimbus, then supervisor 0, then
supervisor 1 are stopped (SIGTERM) and started on this tree, each followed by more than a
task and a supervisor timeout of running. It reports, after each step, whether the
assignment and the workers were left as they were, and at the end whether every id was
acked and stored. A topology's workers keep the old version (they are adopted, not
relaunched) and their beats reach nimbus through ZooKeeper as before.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from squall.testing.cluster import FAST

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.chaos import ChaosCluster, machine_state  # noqa: E402

IDS, RATE = 40_000, 300
SETTLE = FAST["nimbus.task.timeout.secs"] + FAST["nimbus.supervisor.timeout.secs"] + 5


def snapshot(chaos: ChaosCluster) -> tuple[dict[Any, Any], dict[str, int]]:
    return dict(chaos.assignment().executors), {w.worker_id: w.pid for w in chaos.workers()}


def step(chaos: ChaosCluster, name: str, before: tuple[dict[Any, Any], dict[str, int]]) -> dict[str, Any]:
    acked = chaos.acked()
    time.sleep(SETTLE)
    executors, workers = snapshot(chaos)
    return {"step": name, "assignment_kept": executors == before[0], "workers_kept": workers == before[1],
            "acked_meanwhile": chaos.acked() - acked}


def run(old_python: str, keep: Path | None) -> dict[str, Any]:
    report: dict[str, Any] = {"machine_before": machine_state(), "old": old_python, "new": sys.executable}
    steps = []
    with tempfile.TemporaryDirectory(prefix="squall-upgrade-") as tmp, \
            ChaosCluster(keep or Path(tmp), ids=IDS, rate=RATE, python=old_python) as chaos:
        chaos.submit(workers=3)
        chaos.wait_until(lambda: len(chaos.workers()) == 3, 90, "three workers")
        chaos.wait_progress(1000, 90, "ids flowing on the old version")
        before = snapshot(chaos)
        launches = chaos.launches()
        cluster = chaos.c
        cluster.python = sys.executable
        cluster.nimbus.terminate()
        cluster.nimbus.wait(30)
        cluster.start_nimbus()
        steps.append(step(chaos, "nimbus on the new version", before))
        for i in range(chaos.n_supervisors):
            proc = cluster.supervisors[i]
            proc.terminate()
            proc.wait(30)
            cluster.start_supervisor(i)
            steps.append(step(chaos, f"supervisor {i} on the new version", before))
        chaos.wait_until(lambda: chaos.acked() >= IDS, 300, "every id acked")
        chaos.wait_until(lambda: chaos.tally().missing == 0, 60, "every id stored")
        tally = chaos.tally()
        report.update(steps=steps, ids=IDS, lost=tally.missing, duplicates=tally.duplicates,
                      worker_launches_during_upgrade=chaos.launches() - launches)
    report["machine_after"] = machine_state()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the python of an environment with the earlier squall")
    parser.add_argument("--keep", type=Path, help="run (and leave the logs) in this directory")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from squall.logs import configure

    configure("console", "WARNING")
    result = run(args.old, args.keep)
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    ok = result["lost"] == 0 and all(s["assignment_kept"] and s["workers_kept"] for s in result["steps"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
