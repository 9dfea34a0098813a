#!/usr/bin/env python3
"""Load simulator (issue 23): one process plays 1,000 supervisors and 4,000 workers
(100,000 executors) against a real ZooKeeper and a real nimbus.

    .venv/bin/python bench/scale_sim.py                       # the issue's load, about 6 minutes
    .venv/bin/python bench/scale_sim.py --supervisors 100 --topologies 10 --steady 30   # a quick look

What runs: a ZooKeeper server and a secured nimbus process (TLS, tokens, ZooKeeper ACLs) with
squall's defaults, except ``nimbus.supervisor.timeout.secs`` (``--supervisor-timeout``, 20 s,
to keep the run short). The simulated supervisors (``sim_supervisors.py``) register, watch
their own parts of the assignments, and post a report every
``supervisor.heartbeat.frequency.secs`` (5 s) with a beat and executor stats for every slot
their parts name. ``--topologies`` topologies of ``bench/topologies/wide.py`` (1,000
executors over 40 workers each) are submitted through the API.

First, in this process and without I/O, the scheduler alone: every topology's executors
placed from scratch on the supervisors' slots, as a nimbus does for a cluster starting
empty (``scheduler_from_scratch_cpu_secs``). Then, at steady state over ``--steady`` seconds
once every worker is placed: ZooKeeper write transactions per second (the server's own zxid, read with ``srvr``: every
committed write, session changes and failed writes included), nimbus's CPU (cores) and
memory, reports per second nimbus took, and the leader's round time (``/metrics``:
``squall_nimbus_round_seconds``). Then ``--deaths`` supervisors die at once (reports stop,
ZooKeeper connection cut; their sessions outlive ``nimbus.supervisor.timeout.secs``, so
nimbus notices from the reports alone): the seconds from each death to its executors being
reassigned (the dead supervisor's parts gone), against the goal of the timeout + 2 s.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sim_supervisors import Reporters, SimCluster  # noqa: E402
from squall.config import build_config  # noqa: E402
from squall.daemons.nimbus.access import ApiAccess  # noqa: E402
from squall.daemons.nimbus.code_store import build_bundle  # noqa: E402
from squall.daemons.nimbus.process import NimbusProcess  # noqa: E402
from squall.daemons.nimbus.scheduler import RoundSlots, compute_assignment  # noqa: E402
from squall.daemons.state import ClusterState  # noqa: E402
from squall.loader import load_topology  # noqa: E402
from squall.model import executors as executors_of  # noqa: E402
from squall.model import system_counts, task_ids  # noqa: E402
from squall.testing.zookeeper import ZooKeeperServer, daemon_auth_conf, ensure_zookeeper_installed  # noqa: E402

TOPOLOGY = HERE / "topologies" / "wide.py"
GOALS = {"zk_writes_per_sec": 100, "nimbus_cores": 1.0, "round_secs_max": 1.0, "round_cpu_secs_max": 1.0,
         "scheduler_from_scratch_cpu_secs": 1.0}


def zxid(zk: ZooKeeperServer) -> int:
    """The server's last committed transaction id (one per write, session changes included)."""
    match = re.search(r"Zxid: 0x([0-9a-f]+)", zk.four_letter("srvr"))
    assert match, "srvr gave no zxid"
    return int(match.group(1), 16) & 0xFFFFFFFF  # the counter; the high half is the epoch


def nimbus_metrics(nimbus: NimbusProcess) -> dict[str, float]:
    conn = nimbus.connection(timeout=60)
    try:
        conn.request("GET", "/metrics", headers=nimbus.auth_headers())
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            label = ",".join(f"{v}" for _, v in sorted(s.labels.items()))
            out[s.name + (f"{{{label}}}" if label else "")] = s.value
    return out


def progress(what: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {what} (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)


def wait(condition, timeout: float, what: str, every: float = 1.0) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)
    return time.monotonic() - start


def submit_all(nimbus: NimbusProcess, count: int, workers: int, work: Path) -> None:
    topology, conf, _ = load_topology(TOPOLOGY)
    client = nimbus.client(timeout=120)
    for i in range(count):
        name = f"wide{i:03d}"
        bundle = build_bundle(TOPOLOGY, topology, {**conf, "topology.workers": workers, "topology.name": name})
        client.submit(name, bundle)


def sample_rounds(nimbus: NimbusProcess, secs: float, out: list[tuple[float, float]], stop: threading.Event) -> None:
    """(squall_nimbus_round_seconds, squall_nimbus_round_cpu_seconds) each time a new round is counted."""
    last = None
    while not stop.wait(secs):
        try:
            m = nimbus_metrics(nimbus)
        except OSError:
            continue
        rounds = m.get("squall_nimbus_scheduling_rounds_total")
        if rounds != last and "squall_nimbus_round_seconds" in m:
            out.append((m["squall_nimbus_round_seconds"], m["squall_nimbus_round_cpu_seconds"]))
            last = rounds


def scheduler_from_scratch(args: argparse.Namespace) -> dict[str, Any]:
    """CPU seconds to place every topology's executors on empty slots, one topology after
    another with the slot use kept up to date (what a round does when all of them need it)."""
    topology, conf, _ = load_topology(TOPOLOGY)
    counts = {c: (p, p) for c, p in (("events", 20), ("work", 940))}
    system = system_counts(counts, {"topology.acker.executors": args.workers})
    wanted = sorted(executors_of(system, task_ids(system)))
    ports = {f"sim-{k:04d}": list(range(7000, 7000 + args.slots)) for k in range(args.supervisors)}
    started = time.process_time()
    slots = RoundSlots.of(ports, {})
    for i in range(args.topologies):
        new = compute_assignment(wanted, args.workers, {}, [], slots.ports, slots.used.by_others(f"t{i}"),
                                 live=slots.live)
        slots.used.update(f"t{i}", new)
    return {"scheduler_from_scratch_cpu_secs": time.process_time() - started,
            "scheduler_executors": len(wanted) * args.topologies}


def run(args: argparse.Namespace) -> dict[str, Any]:
    ensure_zookeeper_installed()
    result: dict[str, Any] = {"load_at_start": os.getloadavg(), "cpus": os.cpu_count(), "args": vars(args)}
    result.update(scheduler_from_scratch(args))
    auth = daemon_auth_conf()
    with tempfile.TemporaryDirectory(prefix="squall-scale-") as tmp, \
            ZooKeeperServer(heap_mb=1024, work_dir=Path(tmp) / "zk") as zk:
        conf = build_config({"zookeeper.servers": [zk.host], "zookeeper.port": zk.port, "zookeeper.root": "/scale",
                             "squall.log.level": "WARNING", **auth}, user_file=False)
        nimbus = NimbusProcess({**conf, "nimbus.supervisor.timeout.secs": args.supervisor_timeout,
                                "nimbus.code.max.upload.bytes": 50_000_000}, Path(tmp) / "nimbus")
        nimbus.start(leader=True, timeout=60)
        proc = psutil.Process(nimbus.pid)
        sims = SimCluster(conf, zk.host, zk.port, args.supervisors, args.slots, args.deaths,
                          victim_session_ms=int(args.supervisor_timeout * 3000))
        reporters = None
        try:
            progress(f"nimbus {nimbus.pid} up; registering {args.supervisors} supervisors")
            t0 = time.monotonic()
            sims.register()
            result["register_secs"] = time.monotonic() - t0
            progress("registered; submitting")
            access = ApiAccess.from_conf(nimbus.client_conf(nimbus.credentials.supervisor_token))
            reporters = Reporters(sims.sups, nimbus.address, access, args.interval).start()
            t0 = time.monotonic()
            submit_all(nimbus, args.topologies, args.workers, Path(tmp))
            result["submit_secs"] = time.monotonic() - t0
            progress("submitted")
            want = args.topologies * args.workers
            result["placed_secs"] = wait(lambda: sum(s.slots() for s in sims.sups) >= want, 600,
                                         f"{want} workers placed")
            progress("every worker placed")
            # Every worker reported at least once and nimbus's grace is over: steady state.
            time.sleep(max(args.interval * 2, float(conf["nimbus.task.timeout.secs"])))
            progress("measuring steady state")
            result.update(steady(zk, nimbus, proc, reporters, args))
            progress("killing supervisors")
            result.update(deaths(sims, conf, args))
            result["reports"] = dict(reporters.counts)
        finally:
            if reporters is not None:
                reporters.stop()
            sims.close()
            result["nimbus_exit"] = nimbus.stop()
    result["load_at_end"] = os.getloadavg()
    return result


def steady(zk: ZooKeeperServer, nimbus: NimbusProcess, proc: psutil.Process, reporters: Reporters,
           args: argparse.Namespace) -> dict[str, Any]:
    rounds: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_rounds, args=(nimbus, 5.0, rounds, stop), daemon=True)
    m0 = nimbus_metrics(nimbus)
    z0, c0, t0, r0 = zxid(zk), sum(proc.cpu_times()[:2]), time.monotonic(), reporters.counts["sent"]
    sampler.start()
    time.sleep(args.steady)
    z1, c1, t1, r1 = zxid(zk), sum(proc.cpu_times()[:2]), time.monotonic(), reporters.counts["sent"]
    stop.set()
    sampler.join(5)
    m1 = nimbus_metrics(nimbus)
    secs = t1 - t0
    taken = m1["squall_nimbus_supervisor_reports_total{taken}"] - m0["squall_nimbus_supervisor_reports_total{taken}"]
    return {"steady_secs": secs, "zk_writes_per_sec": (z1 - z0) / secs, "nimbus_cores": (c1 - c0) / secs,
            "nimbus_rss_mb": proc.memory_info().rss / 2**20, "reports_sent_per_sec": (r1 - r0) / secs,
            "reports_taken_per_sec": taken / secs, "rounds": len(rounds),
            "round_secs_median": statistics.median(r[0] for r in rounds) if rounds else None,
            "round_secs_max": max(r[0] for r in rounds) if rounds else None,
            "round_cpu_secs_median": statistics.median(r[1] for r in rounds) if rounds else None,
            "round_cpu_secs_max": max(r[1] for r in rounds) if rounds else None,
            "report_bytes_mean": reporters.bytes / max(1, sum(reporters.counts.values())),
            "assignments_written_in_window": m1["squall_nimbus_assignments_written_total"]
            - m0["squall_nimbus_assignments_written_total"]}


def deaths(sims: SimCluster, conf: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    if not args.deaths:
        return {}
    emptied: dict[str, float] = {}
    observer = ClusterState(conf).start()
    try:
        victims = [v for v in sims.victims if v.slots()]
        for v in victims:
            def seen(parts, sid=v.sid):
                if not parts and sid not in emptied:
                    emptied[sid] = time.monotonic()
            observer.watch_node_assignments(v.sid, seen)
        for v in victims:
            sims.kill(v)
        wait(lambda: len(emptied) == len(victims), args.supervisor_timeout * 4, "the dead supervisors' executors moved",
             every=0.2)
        took = sorted(emptied[v.sid] - v.died_at for v in victims)  # type: ignore[operator]
        return {"deaths": len(victims), "death_to_reassigned_secs": took,
                "death_goal_secs": args.supervisor_timeout + 2}
    finally:
        observer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--supervisors", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=5, help="ports per supervisor (spare slots take the dead's work)")
    parser.add_argument("--topologies", type=int, default=100)
    parser.add_argument("--workers", type=int, default=40, help="workers per topology (1,000 executors each)")
    parser.add_argument("--interval", type=float, default=5.0, help="supervisor.heartbeat.frequency.secs")
    parser.add_argument("--supervisor-timeout", type=float, default=20.0)
    parser.add_argument("--steady", type=float, default=60.0)
    parser.add_argument("--deaths", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = parser.parse_args()
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return 0
    for key, value in result.items():
        goal = GOALS.get(key)
        mark = "" if goal is None or not isinstance(value, (int, float)) else \
            f"   (goal < {goal}: {'met' if value < goal else 'MISSED'})"
        print(f"{key:32} {value}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
