#!/usr/bin/env python3
"""ZooKeeper write transactions per second of a real cluster, idle and running a 4-worker
word count, counted by the server itself (its zxid, read with ``srvr``).

    .venv/bin/python bench/zk_writes.py                     # this tree
    /path/to/other/.venv/bin/python bench/zk_writes.py      # another installed squall, e.g. main

The cluster is what ``squall dev-cluster`` runs: its own ZooKeeper, a nimbus and two
supervisors of two slots, secured, with squall's default periods (not the short test ones).
The script uses only what every squall version has (``ProcessCluster``), and the daemons run
with the interpreter that runs it, so the same file measures any installed version the same
way. Prints one JSON line with ``--json``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from squall.config import load_defaults
from squall.testing.cluster import FAST, ProcessCluster
from squall.testing.zookeeper import ZooKeeperServer, ensure_zookeeper_installed

WORDCOUNT = Path(__file__).resolve().parents[1] / "examples" / "wordcount.py"


def zxid(zk: ZooKeeperServer) -> int:
    match = re.search(r"Zxid: 0x([0-9a-f]+)", zk.four_letter("srvr"))
    assert match, "srvr gave no zxid"
    return int(match.group(1), 16) & 0xFFFFFFFF  # the counter; the high half is the epoch


def rate(zk: ZooKeeperServer, secs: float) -> float:
    z0, t0 = zxid(zk), time.monotonic()
    time.sleep(secs)
    return (zxid(zk) - z0) / (time.monotonic() - t0)


def run(idle: float, busy: float, settle: float) -> dict[str, Any]:
    ensure_zookeeper_installed()
    defaults = load_defaults()
    periods = {key: defaults[key] for key in FAST if key in defaults and key != "squall.log.format"}
    out: dict[str, Any] = {"python": sys.executable, "load_at_start": os.getloadavg(), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="squall-zkw-") as tmp, \
            ZooKeeperServer(work_dir=Path(tmp) / "zk") as zk:
        cluster = ProcessCluster(zk.port, "/squall", Path(tmp) / "cluster", supervisors=2, slots=2,
                                 conf={**periods, "squall.log.level": "WARNING"})
        with cluster:
            time.sleep(settle)
            out["idle_writes_per_sec"] = rate(zk, idle)
            res = cluster.cli("submit", str(WORDCOUNT), "--name", "wordcount", "-c", "topology.workers=4")
            if res.returncode != 0:
                raise SystemExit(res.stdout + res.stderr)
            cluster.wait_for(lambda: len(cluster.worker_pids()) == 4, 120, "four workers")
            time.sleep(settle)
            out["wordcount_writes_per_sec"] = rate(zk, busy)
            out["workers"] = len(cluster.worker_pids())
    out["load_at_end"] = os.getloadavg()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=30.0, help="seconds measured before the submit")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds measured with 4 workers running")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds waited before each measurement")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.idle, args.duration, args.settle)
    print(json.dumps(result) if args.json else "\n".join(f"{k:28} {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
