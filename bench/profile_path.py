#!/usr/bin/env python3
"""Profile squall's per-tuple path with py-spy: ``python bench/profile_path.py [TARGET ...]``.

TARGET is a local bench/run.py scenario (``local-wordcount``, ``local-const-id-null-acked``,
..., ``kafka-pipeline``: give it a filled topic in SQUALL_BENCH_KAFKA, bench/kafka_pipeline.py,
and a --warmup past its first records) or ``example-wordcount`` (examples/wordcount.py as it
ships: two split and two count tasks, so fields grouping hashes), profiled in a child process after a warm-up, or
``cluster-const-id-null-acked`` /
``cluster-const-id-null``: the topology in two worker processes on a real cluster, each
worker profiled. py-spy (from bench/peers/.venv, set up when missing) samples every
thread, idle ones too (``--idle --threads``), without ``--native``: C work (str.split,
msgpack, getrandbits) is counted at the Python line that calls it, which is what the
stage split needs. Prints, per process, each thread's busy and idle share, busy samples by
path stage (bench/profile_stages.py) and the top functions by self time.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import envs
from profile_stages import parse, render, source_line, summarize

HERE = Path(__file__).resolve().parent
DEFAULT_TARGETS = ["local-wordcount", "example-wordcount", "local-const-id-null-acked",
                   "cluster-const-id-null-acked"]
CLUSTER_FILES = {"cluster-const-id-null-acked": "const_id_null_acked.py", "cluster-const-id-null": "const_id_null.py"}
ROOTS = [envs.ROOT, HERE, HERE / "topologies", envs.ROOT / "examples", Path(sysconfig.get_paths()["stdlib"]),
         Path(sysconfig.get_paths()["purelib"])]
USER_FILES = {p.name for d in (HERE / "topologies", envs.ROOT / "examples") for p in d.glob("*.py")}


def record(py_spy: Path, pid: int, seconds: float, rate: int, out: Path) -> subprocess.Popen:
    return subprocess.Popen([str(py_spy), "record", "--pid", str(pid), "--duration", str(int(seconds)),
                             "--rate", str(rate), "--format", "raw", "--idle", "--threads", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, out: Path, seconds: float) -> Path:
    try:
        _, err = proc.communicate(timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise RuntimeError("py-spy did not finish in time") from None
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"py-spy failed: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}")
    return out


def profile_local(scenario: str, args, py_spy: Path, tmp: Path) -> list[tuple[str, Path]]:
    runs_for = str(args.seconds + args.warmup + 30)
    if scenario == "example-wordcount":
        cmd = [sys.executable, str(envs.ROOT / "examples" / "wordcount.py"), "--duration", runs_for]
    else:
        cmd = [sys.executable, str(HERE / "run.py"), scenario, "--duration", runs_for, "--warmup", "1"]
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp)
    try:
        time.sleep(args.warmup)
        if child.poll() is not None:
            raise RuntimeError(f"{scenario} ended early: {child.stderr.read().decode().strip()[-300:]}")
        out = tmp / f"{scenario}.txt"
        return [(scenario, finish(record(py_spy, child.pid, args.seconds, args.rate, out), out, args.seconds))]
    finally:
        child.kill()  # our child, by PID: its measurement is of no use here
        child.wait(10)


def profile_cluster(target: str, args, py_spy: Path, tmp: Path) -> list[tuple[str, Path]]:
    from cluster_bench import with_cluster  # imports squall: only once main() runs in its environment

    def run(cluster, _tmp: Path) -> list[tuple[str, Path]]:
        res = cluster.cli("submit", str(HERE / "topologies" / CLUSTER_FILES[target]), "--name", "perf",
                          "-c", "topology.workers=2")
        if res.returncode != 0:
            raise RuntimeError(res.stdout + res.stderr)
        cluster.wait_for(lambda: len(cluster.worker_pids()) == 2, 60, "two workers")
        time.sleep(args.warmup)
        procs = []
        for pid, role in _worker_roles(cluster, "perf").items():
            out = tmp / f"{target}-{pid}.txt"
            procs.append((f"{target} {role}", out, record(py_spy, pid, args.seconds, args.rate, out)))
        return [(name, finish(proc, out, args.seconds)) for name, out, proc in procs]

    return with_cluster(1, 2, run)


def _worker_roles(cluster, name: str) -> dict[int, str]:
    """pid -> "worker-<components it runs>" of the topology's workers (the port is the third
    argument of ``worker start``)."""
    by_port: dict[int, list[str]] = {}
    for comp in cluster.client.topology(name)["components"]:
        for ex in comp["executors"]:
            by_port.setdefault(ex["port"], []).append(comp["id"])
    import psutil  # squall's environment, which main() runs in by then (not the caller's Python)

    roles = {}
    for pid in sorted(cluster.worker_pids().values()):
        args = psutil.Process(pid).cmdline()
        port = int(args[args.index("start") + 3])
        roles[pid] = "worker-" + "+".join(sorted(set(by_port.get(port, ["?"]))))
    return roles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", default=DEFAULT_TARGETS, help=f"default: {' '.join(DEFAULT_TARGETS)}")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds sampled (default 10)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before sampling (default 5)")
    parser.add_argument("--rate", type=int, default=200, help="samples per second per thread (default 200)")
    parser.add_argument("--top", type=int, default=20, help="functions listed (default 20)")
    parser.add_argument("--save", metavar="DIR", help="also write each summary to DIR/<target>.txt")
    args = parser.parse_args()
    envs.use_repo_venv()
    envs.check_squall()
    py_spy = envs.py_spy()
    line_of = lambda frame: source_line(frame, ROOTS)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="squall-profile-") as tmp:
        for target in args.targets:
            before = os.getloadavg()[0]
            if target in CLUSTER_FILES:
                recorded = profile_cluster(target, args, py_spy, Path(tmp))
            elif target.startswith("local-") or target in ("example-wordcount", "kafka-pipeline"):
                recorded = profile_local(target, args, py_spy, Path(tmp))
            else:
                parser.error(f"unknown target {target!r}: a local-* scenario of bench/run.py, kafka-pipeline or one of "
                             f"{', '.join(CLUSTER_FILES)}")
            after = os.getloadavg()[0]
            for name, path in recorded:
                with open(path) as fh:
                    # A local scenario's main thread is the bench driver, asleep: not squall's time.
                    prof = summarize(parse(fh), USER_FILES, line_of,
                                     skip_threads=[] if target in CLUSTER_FILES else ["MainThread"])
                text = (f"profile of {name}: py-spy {args.rate} Hz for {args.seconds:g} s after {args.warmup:g} s, "
                        f"--idle --threads, no --native; load {before:.2f} -> {after:.2f} on {os.cpu_count()} CPUs, "
                        f"{time.strftime('%Y-%m-%d')}\n\n" + render(prof, args.top, line_of))
                print(text + "\n", flush=True)
                if args.save:
                    Path(args.save).mkdir(parents=True, exist_ok=True)
                    (Path(args.save) / f"{name.replace(' ', '-')}.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except envs.SetupError as exc:
        print(f"profile: {exc}", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as exc:
        print(f"profile: {exc}", file=sys.stderr)
        sys.exit(1)
