#!/usr/bin/env python3
"""Where a two-worker cluster run spends its CPU, thread by thread, and where each thread ran.

``python bench/thread_cpu.py [--acked] [--duration S] [--warmup S] [-c key=value ...]``
runs storm-perf's const -> id -> null in two workers (as ``bench/run.py
cluster-const-id-null(-acked)``: one supervisor, two slots) and prints, for each worker
process: the components it runs, and for each of its threads (named by ``py-spy dump``;
libzmq's own threads show as ``zmq-io`` / ``zmq-reaper``) the CPU it may run on, the CPUs it
was seen on (sampled every 20 ms), its CPU-seconds over the window and microseconds per
tuple. CPU per tuple hardly depends on the machine's load; tuples/s does. ``-c`` passes
topology settings on to ``squall submit`` (e.g. ``-c topology.max.spout.pending=4000`` to
ask whether the run is bound by its round trip or by a CPU).

Its tuples/s is not the bench's: it attaches py-spy to both workers before the window and
reads every thread's /proc stat every 20 ms during it, and that moves the rate (two settings
it ranked one way in 15 of 15 pairs, ``bench/run.py`` ranked the other way in 10 of 13:
bench/results/issue31-inflight.txt). Choose settings by ``bench/run.py`` or
``bench/compare_trees.py``; read this for where the CPU goes.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import envs  # noqa: E402
from cluster_bench import _executed, with_cluster  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int, tid: int) -> tuple[float, int, str]:
    """CPU seconds (user + system), last CPU and kernel name of one thread."""
    text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICKS, int(fields[36]), comm


def _sched(pid: int, tid: int) -> tuple[float, float]:
    """Seconds one thread has run and has waited, runnable, for a CPU (/proc schedstat)."""
    run, wait, _ = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
    return int(run) / 1e9, int(wait) / 1e9


def _allowed(pid: int, tid: int) -> str:
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return "?"


def _names(py_spy: Path, pid: int) -> dict[int, str]:
    """Thread id -> Python thread name, from py-spy (threads it does not list keep their comm)."""
    out = subprocess.run([str(py_spy), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
    names = {}
    for m in re.finditer(r'^Thread (0x[0-9A-Fa-f]+|\d+) \([^)]*\): "([^"]*)"', out.stdout, re.M):
        tid = m.group(1)
        names[int(tid, 16) if tid.startswith("0x") else int(tid)] = m.group(2)
    return names


def _threads(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def measure(acked: bool, duration: float, warmup: float, settings: list[str]) -> dict:
    file = "const_id_null_acked.py" if acked else "const_id_null.py"
    py_spy = envs.py_spy()

    def run(cluster, tmp: Path) -> dict:
        args = ["submit", str(HERE / "topologies" / file), "--name", "perf", "-c", "topology.workers=2"]
        for s in settings:
            args += ["-c", s]
        res = cluster.cli(*args)
        if res.returncode != 0:
            raise RuntimeError(res.stdout + res.stderr)
        cluster.wait_for(lambda: _executed(cluster, "perf", "null") > 0, 60, "first tuples")
        time.sleep(warmup)
        pids = list(cluster.worker_pids().values())
        names = {pid: _names(py_spy, pid) for pid in pids}
        tids = {pid: _threads(pid) for pid in pids}
        start = {(p, t): _stat(p, t)[0] for p in pids for t in tids[p]}
        sched0 = {(p, t): _sched(p, t) for p in pids for t in tids[p]}
        seen: dict[tuple[int, int], collections.Counter] = collections.defaultdict(collections.Counter)
        n0, t0 = _executed(cluster, "perf", "null"), time.monotonic()
        while time.monotonic() - t0 < duration:
            for p in pids:
                for t in tids[p]:
                    try:
                        seen[(p, t)][_stat(p, t)[1]] += 1
                    except OSError:
                        pass
            time.sleep(0.02)
        n1, t1 = _executed(cluster, "perf", "null"), time.monotonic()
        tuples = n1 - n0
        status = cluster.client.topology("perf")
        workers = []
        for p in pids:
            threads = []
            for t in tids[p]:
                try:
                    cpu, _, comm = _stat(p, t)
                    allowed = _allowed(p, t)
                    ran, waited = _sched(p, t)
                except OSError:
                    continue
                used = cpu - start[(p, t)]
                wall = t1 - t0
                # The rest of the window it slept: on a doorbell, a socket, or the GIL.
                run_share = (ran - sched0[(p, t)][0]) / wall
                wait_share = (waited - sched0[(p, t)][1]) / wall
                name = names[p].get(t) or {"ZMQbg/IO/0": "zmq-io", "ZMQbg/Reaper": "zmq-reaper"}.get(comm, comm)
                threads.append({"tid": t, "name": name, "allowed": allowed,
                                "ran_on": dict(sorted(seen[(p, t)].items())), "cpu_secs": round(used, 3),
                                "ran": round(run_share, 3), "runnable": round(wait_share, 3),
                                "us_per_tuple": round(1e6 * used / max(tuples, 1), 3)})
            workers.append({"pid": p, "threads": [th for th in threads if th["cpu_secs"] >= 0.05]})
        return {"tuples_per_sec": tuples / (t1 - t0), "tuples": tuples, "seconds": t1 - t0,
                "load": os.getloadavg(), "workers": workers, "placement": _placement(status),
                "cpu_us_per_tuple": per_cpu(workers)}

    return with_cluster(1, 2, run)


def per_cpu(workers: list[dict]) -> dict[int, float]:
    """Microseconds a tuple of each CPU's time: each thread's share split by where it was
    seen running. The busiest CPU's figure bounds the rate both runs can reach, so acked /
    unacked of that figure says what the rate's ratio would be with the load taken out."""
    out: collections.Counter = collections.Counter()
    for w in workers:
        for t in w["threads"]:
            seen = sum(t["ran_on"].values())  # > 0 whenever the loop below runs
            for cpu, n in t["ran_on"].items():
                out[int(cpu)] += t["us_per_tuple"] * n / seen
    return {cpu: round(us, 3) for cpu, us in sorted(out.items())}


def _placement(status: dict) -> dict:
    """port -> components, from nimbus's view of the topology (whatever shape it gives)."""
    out: dict[str, list[str]] = collections.defaultdict(list)
    for comp in status.get("components", []):
        for ex in comp.get("executors", []):
            where = ex.get("port") or ex.get("worker") or ex.get("host")
            out[str(where)].append(f"{comp['id']}{ex.get('executor', ex.get('tasks', ''))}")
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--acked", action="store_true")
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("-c", dest="settings", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = measure(args.acked, args.duration, args.warmup, args.settings)
    if args.json:
        print(json.dumps(res))
        return
    print(f"{res['tuples_per_sec']:,.0f} tuples/s over {res['seconds']:.1f} s, load {res['load'][0]:.2f}")
    print("placement:", res["placement"])
    print("per CPU:", ", ".join(f"CPU {c} {us:.2f} us/tuple" for c, us in res["cpu_us_per_tuple"].items()))
    for w in res["workers"]:
        total = sum(t["us_per_tuple"] for t in w["threads"])
        print(f"worker pid {w['pid']}: {total:.2f} us/tuple in all")
        for t in sorted(w["threads"], key=lambda t: -t["cpu_secs"]):
            print(f"  {t['name']:<22} allowed {t['allowed']:<5} ran on {t['ran_on']}  "
                  f"{t['cpu_secs']:6.2f} CPU-s  {t['us_per_tuple']:6.2f} us/tuple  ran {t['ran']:.0%} "
                  f"runnable {t['runnable']:.0%} slept {max(0.0, 1 - t['ran'] - t['runnable']):.0%}")


if __name__ == "__main__":
    main()
