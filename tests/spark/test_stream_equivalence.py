"""One stream pipeline file, three ways to run it, one answer: local mode (two workers,
values serialized between them), a process cluster (nimbus, two supervisors, worker
processes) and ``spark-run`` give what plain Python makes of the same rows. The pipelines
(tests/support/spark_topologies/stream_pipelines.py) cover per-value steps, a branch,
keyed and global running aggregations, an event-time window with late values, a windowed
join, and, in a checkpointed topology whose worker is killed mid-run on the cluster,
``update_state_by_key`` and a window (exactly-once state; windows roll back with it).

One process cluster and the tier's one SparkSession serve the whole module.
"""
from __future__ import annotations

import collections
import json
import math
import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from click.testing import CliRunner  # noqa: E402

from squall.cli import main as squall_main  # noqa: E402
from squall.loader import load_module  # noqa: E402
from squall.local import LocalCluster  # noqa: E402
from squall.testing.components import recorded  # noqa: E402
from squall.testing.waiting import wait_for  # noqa: E402
from support.paths import SPARK_TOPOLOGIES

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

TOPOLOGY = SPARK_TOPOLOGIES / "stream_pipelines.py"
sp = load_module(TOPOLOGY)
SIZE = sp.SIZE


def window_of(ts: float) -> float:
    return (math.floor(ts / SIZE) + 1) * SIZE


# -- what plain Python says -------------------------------------------------------------------
def reference_plain() -> dict[str, object]:
    rows = [r for r in sp.EVENTS if r[0] != "end"]
    doubled = [[r[0].upper(), r[1] * 2] for r in rows]
    sums: collections.Counter = collections.Counter()
    for k, n, _ in sp.EVENTS:  # the far-future value too: nothing filters it here
        sums[k] += n
        sums[k[0]] += 1
    late, windows = sp.event_windows(sp.EVENTS)
    win = {(end, k): sum(r[1] for r in ws if r[0] == k) for end, ws in windows.items() for k in {r[0] for r in ws}}
    ordered = sp.event_windows(sorted(sp.EVENTS[:-1], key=lambda r: r[2]) + sp.EVENTS[-1:])[1]
    others = sp.event_windows(sp.OTHERS)[1]
    join = []
    for end, ls in ordered.items():
        rs = others.get(end, [])
        for k, n, _ in ls:
            found = [c * 100 for k2, c, _ in rs if k2 == k]
            join += [(end, k, (n, c)) for c in found] or [(end, k, (n, None))]
    return {
        "big": bag(r for r in doubled if r[1] > 10), "small": bag(r[1] for r in doubled if r[1] <= 10),
        "sums": dict(sums), "total": sum(r[1] for r in sp.EVENTS), "win": win,
        "late": bag(r for r in late if r[0] != "end"), "join": bag(join)}


def reference_state() -> dict[str, object]:
    totals: collections.Counter = collections.Counter()
    for k, n, _ in sp.STATE_ROWS:
        totals[k] += n
    _, windows = sp.event_windows(sp.STATE_ROWS)
    counts = {(end, k): sum(1 for r in ws if r[0] == k) for end, ws in windows.items() for k in {r[0] for r in ws}}
    return {"state": dict(totals), "statewin": counts}


def bag(items) -> collections.Counter:
    return collections.Counter(json.dumps(i) for i in items)


# -- what a run gave, as comparable results ------------------------------------------------------
def results(rows: dict[str, list[list]], which: str) -> dict[str, object]:
    """Per pipeline, results that do not depend on the order or duplicates that at-least-once
    delivery allows: all values (each once) where nothing replays, else per key the last."""
    def last(label: str) -> dict:
        out: dict = {}
        for k, v, *_ in rows.get(label, []):
            out[k] = max(out.get(k, v), v)  # running results only grow here
        return out

    def windowed(label: str) -> dict:
        # A live run never closes the window after the far-future value; a backfill does at
        # its end: compare the windows before it.
        out = {}
        for k, v, ts in rows.get(label, []):
            if k != "end":
                out[(window_of(ts), k)] = v
        return out

    if which == "state":
        return {"state": last("state"), "statewin": windowed("statewin")}
    return {
        "big": bag(r[0] for r in rows.get("big", [])), "small": bag(r[0] for r in rows.get("small", [])),
        "sums": last("sums"), "total": max((r[0] for r in rows.get("total", [])), default=None),
        "win": windowed("win"), "late": bag(r[0] for r in rows.get("late", [])),
        "join": bag((window_of(ts), k, [v[0], v[1]]) for k, v, ts in rows.get("join", []) if k != "end"),
    }


def labels(topology) -> dict[tuple[str, str], str]:
    """(component, stream) a recorder reads -> its pipeline's label."""
    out = {}
    for cid, spec in topology.components.items():
        if cid.startswith("rec-"):
            sub = spec.inputs[0]
            out[(sub.component, sub.stream)] = cid[4:]
    return out


def by_label(records, topology) -> dict[str, list[list]]:
    names = labels(topology)
    rows: dict[str, list[list]] = {}
    for _, component, stream, values in records:
        rows.setdefault(names[(component, stream)], []).append(values)
    return rows


def done(rows: dict[str, list[list]], which: str, expected: dict) -> bool:
    got = results(rows, which)
    return all(got[k] == expected[k] for k in expected)


def topology_of(which: str):
    saved = os.environ.get("SQUALL_STREAMS_TOPOLOGY")
    os.environ["SQUALL_STREAMS_TOPOLOGY"] = which
    try:
        return sp.topology()
    finally:
        if saved is None:
            os.environ.pop("SQUALL_STREAMS_TOPOLOGY")
        else:
            os.environ["SQUALL_STREAMS_TOPOLOGY"] = saved


# -- the three runs ------------------------------------------------------------------------------
def run_local(which: str, out: Path, expected: dict) -> dict:
    topology = topology_of(which)
    conf = {**(sp.STATE_CONFIG if which == "state" else sp.CONFIG), "topology.workers": 2,
            "streams.out": str(out), "topology.state.provider": "memory"}
    with LocalCluster({"squall.log.level": "ERROR"}) as cluster:
        cluster.submit(f"streams-{which}", conf, topology)
        wait_for(lambda: done(by_label(recorded(out), topology), which, expected), 120,
                 f"the {which} pipelines' results", lambda: str(results(by_label(recorded(out), topology), which)))
        cluster.kill(f"streams-{which}")
    return results(by_label(recorded(out), topology), which)


def run_cluster(cluster, which: str, out: Path, expected: dict, kill_worker: bool) -> dict:
    name = f"streams-{which}-{time.time_ns() % 10 ** 6}"
    topology = topology_of(which)
    os.environ["SQUALL_STREAMS_TOPOLOGY"] = which  # read by topology() in the submitting process
    try:
        res = cluster.cli("submit", str(TOPOLOGY), "--name", name, "-c", "topology.workers=2",
                          "-c", f"streams.out={out}")
    finally:
        os.environ.pop("SQUALL_STREAMS_TOPOLOGY", None)
    assert res.returncode == 0, res.stdout + res.stderr
    if kill_worker:
        # Mid-run: some results are in, not all; then kill -9 one of its two workers.
        cluster.wait_for(lambda: len(recorded(out)) > 200, 120, "some results")
        pids = sorted(cluster.worker_pids().values())
        assert len(pids) == 2
        os.kill(pids[0], signal.SIGKILL)
        cluster.wait_for(lambda: pids[0] not in cluster.worker_pids().values() and len(cluster.worker_pids()) == 2,
                         120, "the killed worker replaced")
    cluster.wait_for(lambda: done(by_label(recorded(out), topology), which, expected), 180,
                     f"the {which} pipelines' results on the cluster")
    got = results(by_label(recorded(out), topology), which)
    assert cluster.cli("kill", name, "--wait", "0").returncode == 0
    cluster.wait_for(lambda: cluster.worker_pids() == {}, 60, "workers gone")
    return got


def run_spark(which: str, tmp: Path) -> dict:
    topology = topology_of(which)
    inputs = {"plain": {"events": sp.EVENTS, "others": sp.OTHERS,
                        "ordered": sorted(sp.EVENTS[:-1], key=lambda r: r[2]) + sp.EVENTS[-1:]},
              "state": {"rows": sp.STATE_ROWS}}[which]
    tmp.mkdir(parents=True, exist_ok=True)
    args = ["spark-run", str(TOPOLOGY), "--output", str(tmp / "out"), "--output-format", "jsonl",
            "--master", "local[2]", "--no-progress", "-c", "squall.log.level=WARNING"]
    for spout, rows in inputs.items():
        path = tmp / f"{spout}.jsonl"
        path.write_text("".join(json.dumps(dict(zip(sp.FIELDS, r))) + "\n" for r in rows), encoding="utf-8")
        args += ["--input", f"{spout}={path}"]
    names = labels(topology)
    for cid in topology.components:
        if cid.startswith("rec-"):
            args += ["--exclude", cid]
    for component, stream in names:
        args += ["--sink", f"{component}:{stream}"]
    res = CliRunner().invoke(squall_main, args, env={"SQUALL_STREAMS_TOPOLOGY": which})
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    assert res.exit_code == 0, res.output
    rows: dict[str, list[list]] = {}
    for (component, stream), label in names.items():
        fields = list(topology.stream_fields(component, stream))
        for f in sorted((tmp / "out" / f"{component}.{stream}").glob("part-*")):
            for line in f.read_text(encoding="utf-8").split("\n"):
                if line:
                    obj = json.loads(line)
                    rows.setdefault(label, []).append([obj[k] for k in fields])
    return results(rows, which)


@pytest.fixture(scope="module")
def process_cluster(zk_server, tmp_path_factory):
    from squall.testing.cluster import ProcessCluster

    cluster = ProcessCluster(zk_server.port, f"/streams-{time.time_ns()}", tmp_path_factory.mktemp("cluster"),
                             supervisors=2, slots=1)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_local_cluster_and_spark_give_what_plain_python_gives(spark, process_cluster, tmp_path):
    for which, reference, kill in (("plain", reference_plain(), False), ("state", reference_state(), True)):
        expected = reference
        assert run_spark(which, tmp_path / f"spark-{which}") == expected, which
        assert run_local(which, tmp_path / f"local-{which}", expected) == expected, which
        assert run_cluster(process_cluster, which, tmp_path / f"cluster-{which}", expected, kill) == expected, which
