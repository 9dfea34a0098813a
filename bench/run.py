#!/usr/bin/env python3
"""squall benchmarks: ``python bench/run.py SCENARIO [--duration S] [--json]``, ``--list``.

Each scenario runs, warms up, then measures throughput over ``--duration`` seconds from
the executors' own counters, and prints it with the machine's state (CPUs, load).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "topologies"))
sys.path.insert(0, str(HERE.parent / "examples"))

SCENARIOS: dict[str, tuple[str, Callable[[float, float], dict[str, Any]]]] = {}
MISSING: dict[str, str] = {}  # scenario -> the module it needs that this Python lacks


def scenario(name: str, doc: str):
    def register(fn):
        SCENARIOS[name] = (doc, fn)
        return fn
    return register


def _children_cpu() -> float:
    """CPU seconds used so far by this process's live children (multilang components)."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def _measure_local(topology, conf: dict, component: str, duration: float, warmup: float,
                   emitted: bool = False) -> dict[str, Any]:
    """Run in local mode; rate = tuples executed by ``component`` per second (``emitted``:
    tuples it emitted, on all its streams)."""
    from squall import LocalCluster
    from squall.logs import configure

    configure("console", "WARNING")
    with LocalCluster() as cluster:
        cluster.submit("bench", conf, topology)

        def executed() -> int:
            stats = [s for s in cluster.stats("bench") if s["component"] == component]
            if emitted:
                return sum(n for s in stats for n in s.get("emitted", {}).values())
            return sum(s["executed"] for s in stats)

        time.sleep(warmup)
        start_n, start_t, start_cpu = executed(), time.monotonic(), time.process_time()
        start_children = _children_cpu()
        time.sleep(duration)
        n, elapsed = executed() - start_n, time.monotonic() - start_t
        cpu = (time.process_time() - start_cpu) / elapsed
        children_cpu = (_children_cpu() - start_children) / elapsed
        stats = cluster.stats("bench")
        cluster.kill("bench")
    out: dict[str, Any] = {"tuples_per_sec": n / elapsed, "tuples": n, "seconds": elapsed,
                           "process_cpu": round(cpu, 3)}
    if children_cpu > 0:  # child processes the topology runs (multilang shell components)
        out["children_cpu"] = round(children_cpu, 3)
    out["tuples_per_cpu_sec"] = n / max(1e-9, (cpu + max(0.0, children_cpu)) * elapsed)
    lat = [s["complete_latency_ms"] for s in stats if "complete_latency_ms" in s]
    if lat:
        out["complete_latency_ms"] = {"p50": round(lat[0]["p50"], 2), "p99": round(lat[0]["p99"], 2)}
    failed = sum(s.get("failed", 0) for s in stats)
    if failed:
        out["failed"] = failed
    return out


@scenario("local-const-id-null", "storm-perf ConstSpoutIdBoltNullBolt, local mode, no acking")
def local_const_id_null(duration: float, warmup: float) -> dict[str, Any]:
    from perf_topologies import const_id_null

    return _measure_local(const_id_null(False), {"topology.acker.executors": 0}, "null", duration, warmup)


@scenario("local-const-id-null-acked",
          "the same with message ids and one acker (topology.max.spout.pending 1000)")
def local_const_id_null_acked(duration: float, warmup: float) -> dict[str, Any]:
    from perf_topologies import const_id_null

    conf = {"topology.acker.executors": 1, "topology.max.spout.pending": 1000}
    return _measure_local(const_id_null(True), conf, "null", duration, warmup)


@scenario("local-wordcount", "examples/wordcount.py (reliable spout, acking on), words counted per second")
def local_wordcount(duration: float, warmup: float) -> dict[str, Any]:
    import wordcount

    return _measure_local(wordcount.topology(1, 1), dict(wordcount.CONFIG), "count", duration, warmup)


@scenario("local-wordcount-unacked", "examples/wordcount.py with acking off")
def local_wordcount_unacked(duration: float, warmup: float) -> dict[str, Any]:
    import wordcount

    return _measure_local(wordcount.topology(1, 1), {"topology.acker.executors": 0}, "count", duration, warmup)


@scenario("local-wordcount-unacked-q4096",
          "the same with acking off and executor receive queues of 4,096 tuples (not 32,768): an unbounded "
          "spout then stops at a smaller standing queue (issue 31: is unacked slower than acked for its queue?)")
def local_wordcount_unacked_q4096(duration: float, warmup: float) -> dict[str, Any]:
    import wordcount

    conf = {"topology.acker.executors": 0, "topology.executor.receive.buffer.size": 4096}
    return _measure_local(wordcount.topology(1, 1), conf, "count", duration, warmup)


@scenario("local-stream-wordcount",
          "word count as a stream pipeline (squall.streams, all steps fused in one bolt), acked: (word, count) "
          "pairs emitted per second")
def local_stream_wordcount(duration: float, warmup: float) -> dict[str, Any]:
    import stream_wordcount

    return _measure_local(stream_wordcount.stream_topology(), dict(stream_wordcount.CONFIG),
                          "flat_map-map_to_pair-count", duration, warmup, emitted=True)


@scenario("local-stream-wordcount-by-hand",
          "the same word count by hand (a spout, split and running-count bolts), acked: (word, count) pairs "
          "emitted per second")
def local_stream_wordcount_by_hand(duration: float, warmup: float) -> dict[str, Any]:
    import stream_wordcount

    return _measure_local(stream_wordcount.hand_topology(), dict(stream_wordcount.CONFIG), "count",
                          duration, warmup, emitted=True)


@scenario("local-stateful-count",
          "keyed count with checkpointed state (embedded SQLite store, checkpoint every 1 s) against the "
          "same topology without state, alternating, three rounds each in one run")
def local_stateful_count(duration: float, warmup: float) -> dict[str, Any]:
    import tempfile

    from keyed_counts import topology

    # Acks wait for the commit that covers them: pending must cover a checkpoint interval
    # (and more) of tuples, or the interval caps throughput.
    conf = {"topology.acker.executors": 1, "topology.max.spout.pending": 1_000_000,
            "topology.state.checkpoint.interval.ms": 1000}
    with tempfile.TemporaryDirectory() as state_dir:
        stateful_conf = {**conf, "topology.state.provider": "embedded", "supervisor.state.dir": state_dir}
        runs = [("stateless", topology(False), conf), ("stateful", topology(True), stateful_conf)] * 3
        rates: dict[str, list[float]] = {"stateless": [], "stateful": []}
        for kind, topo, c in runs:  # alternated, so a noisy neighbour hits both alike
            rate = _measure_local(topo, c, "count", duration / 3, warmup)["tuples_per_sec"]
            rates[kind].append(round(rate))
    base, mine = sum(rates["stateless"]) / 3, sum(rates["stateful"]) / 3
    return {"tuples_per_sec": mine, "baseline_tuples_per_sec": base, "ratio": round(mine / base, 3),
            "runs": rates}


def _register_optional() -> None:
    """Scenarios that live in their own modules (cluster, ZeroMQ ceiling, Spark)."""
    try:
        import zmq_ceiling
    except ImportError as exc:  # listed all the same; running them says what is missing
        MISSING.update({"zmq-ceiling": exc.name or "zmq", "zmq-curve-cost": exc.name or "zmq"})

    @scenario("zmq-ceiling", "two plain processes passing msgpack tuple batches over ZeroMQ PUSH/PULL")
    def _zmq(duration: float, warmup: float) -> dict[str, Any]:
        return zmq_ceiling.run(duration)

    @scenario("zmq-curve-cost", "zmq-ceiling with CurveZMQ off and on, alternating, three rounds each")
    def _zmq_curve(duration: float, warmup: float) -> dict[str, Any]:
        runs: dict[str, list[float]] = {"off": [], "on": []}
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(3):
            for mode in ("off", "on"):
                result = zmq_ceiling.run(duration, curve=mode == "on")
                runs[mode].append(result["tuples_per_sec"])
                cpu[mode].append(result["cpu_ns_per_tuple"])
        from cluster_bench import curve_cost

        return {**curve_cost(runs), "cpu_ns_per_tuple": cpu}

    try:
        import multilang_bench
    except ImportError as exc:  # listed all the same; running them says what is missing
        MISSING.update({"multilang-pystorm": exc.name or "multilang_bench",
                        "multilang-pystorm-unacked": exc.name or "multilang_bench",
                        "multilang-split": exc.name or "multilang_bench",
                        "multilang-floor": exc.name or "multilang_bench"})

    @scenario("multilang-pystorm", "a pystorm bolt through multilang, the same bolt in-process, and a "
              "native squall bolt doing the same work, alternating, three rounds each (acking on)")
    def _multilang(duration: float, warmup: float) -> dict[str, Any]:
        return multilang_bench.multilang_vs_in_process(_measure_local, duration, warmup, multilang_bench.ACKED)

    @scenario("multilang-pystorm-unacked", "multilang-pystorm with acking off")
    def _multilang_unacked(duration: float, warmup: float) -> dict[str, Any]:
        return multilang_bench.multilang_vs_in_process(_measure_local, duration, warmup,
                                                       multilang_bench.UNACKED)

    @scenario("multilang-split", "sentences split by a child: Storm's storm.py, which waits for the task ids "
              "of every emit, against pystorm, alternating, three rounds (acked)")
    def _multilang_split(duration: float, warmup: float) -> dict[str, Any]:
        return multilang_bench.split_storm_py_vs_pystorm(_measure_local, duration, warmup, multilang_bench.ACKED)

    @scenario("multilang-floor", "multilang-split's storm.py child answered by a bare loop in its own process, "
              "beside pystorm and storm.py in squall: words/s and CPU per word of parent and child (acked)")
    def _multilang_floor(duration: float, warmup: float) -> dict[str, Any]:
        return multilang_bench.floor(_measure_local, duration, warmup, multilang_bench.ACKED)

    import kafka_pipeline  # standard library only at import; Kafka's modules when it runs

    @scenario("kafka-pipeline", "Kafka -> split -> count -> Kafka on one Tansu broker (bench/kafka_pipeline.py), "
              "input records per second; compare.py runs Bytewax's Kafka connector beside it")
    def _kafka_pipeline(duration: float, warmup: float) -> dict[str, Any]:
        return kafka_pipeline.scenario(duration, warmup)

    for module_name in ("cluster_bench", "latency", "api_bench", "load_aware", "http_bench"):
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # listed from its source; running them says what is missing
            for name, doc in _declared(HERE / f"{module_name}.py"):
                SCENARIOS[name] = (doc, _unavailable)
                MISSING[name] = exc.name or module_name
            continue
        for name, (doc, fn) in module.SCENARIOS.items():
            SCENARIOS[name] = (doc, fn)


def _declared(path: Path) -> list[tuple[str, str]]:
    """(name, doc) of the ``SCENARIOS = {name: (doc, fn)}`` a module declares, read from its
    source: for listing a module this Python cannot import."""
    import ast

    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SCENARIOS" for t in node.targets) \
                and isinstance(node.value, ast.Dict):
            out = []
            for key, value in zip(node.value.keys, node.value.values):
                doc = value.elts[0] if isinstance(value, ast.Tuple) and value.elts else None
                if isinstance(key, ast.Constant) and isinstance(doc, ast.Constant):
                    out.append((str(key.value), str(doc.value)))
            return out
    return []


def _unavailable(duration: float, warmup: float) -> dict[str, Any]:
    raise RuntimeError("this scenario's module cannot be imported here")  # main() refuses first


_register_optional()


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {"cpus": os.cpu_count(), "load_avg_1m": round(load[0], 2), "python": sys.version.split()[0]}


def squall_missing() -> str | None:
    """Why this Python cannot run the scenarios (all need squall), or None."""
    if importlib.util.find_spec("squall") is not None:
        return None
    return (f"this Python ({sys.executable}) cannot import squall, which every scenario needs: run "
            f".venv/bin/python bench/run.py ... from the repository (scripts/quickstart.sh makes .venv)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds (default 10)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--list", action="store_true", help="list scenarios")
    args = parser.parse_args()
    missing = squall_missing()
    if args.list or not args.scenario:
        for name, (doc, _) in SCENARIOS.items():
            needs = f"[needs {MISSING[name]}] " if name in MISSING and not missing else ""
            print(f"{name:32} {needs}{doc}")
        if missing:
            print(f"\nnote: {missing}")
        return 0 if args.list else 2
    if args.scenario not in SCENARIOS:
        print(f"unknown scenario {args.scenario!r}; --list shows them", file=sys.stderr)
        return 2
    if missing or args.scenario in MISSING:
        print(missing or f"{args.scenario} needs the Python module {MISSING[args.scenario]!r}, which this "
              "Python lacks: use the project's .venv/bin/python", file=sys.stderr)
        return 2
    before = machine()
    result = SCENARIOS[args.scenario][1](args.duration, args.warmup)
    result = {"scenario": args.scenario, **result, "machine": before}
    if args.json:
        print(json.dumps(result))
    else:
        if "first_tuple_secs" in result:
            line = (f"{args.scenario}: first tuple {result['first_tuple_secs']:.2f} s after submit, "
                    f"every task {result['all_tasks_secs']:.2f} s ({result['workers']} workers)")
        elif "summary" in result:
            line = f"{args.scenario}: {result['summary']}"
        elif "curve_cost_pct" in result:
            off = ", ".join(f"{v:,.0f}" for v in result["curve_off_tuples_per_sec"])
            on = ", ".join(f"{v:,.0f}" for v in result["curve_on_tuples_per_sec"])
            line = (f"{args.scenario}: curve off {off} tuples/s; curve on {on} tuples/s; "
                    f"cost {result['curve_cost_pct']:.1f}%")
            if "cpu_ns_per_tuple" in result:
                cpu = {k: ", ".join(f"{v:.0f}" for v in vs) for k, vs in result["cpu_ns_per_tuple"].items()}
                line += f"; CPU ns/tuple (both processes) off {cpu['off']}, on {cpu['on']}"
        elif "records_per_sec" in result:
            line = (f"{args.scenario}: {result['records_per_sec']:,.0f} records/s "
                    f"({result['cpu_us_per_record']:.1f} us CPU/record)")
        else:
            line = f"{args.scenario}: {result['tuples_per_sec']:,.0f} tuples/s"
        if "baseline_tuples_per_sec" in result:
            line += (f" vs {result['baseline_tuples_per_sec']:,.0f} without state "
                     f"({result['ratio']:.0%} of stateless)")
        if "complete_latency_ms" in result:
            lat = result["complete_latency_ms"]
            line += f", complete latency p50 {lat['p50']:.1f} ms p99 {lat['p99']:.1f} ms"
        m = result["machine"]
        print(line + f"  [{m['cpus']} CPUs, load {m['load_avg_1m']}, Python {m['python']}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
