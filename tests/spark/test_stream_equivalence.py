"""One stream pipeline file, three ways to run it, one answer: local mode (two workers,
values serialized between them), a process cluster (nimbus, two supervisors, worker
processes) and ``spark-run`` give what plain Python makes of the same rows. The pipelines
(tests/support/spark_topologies/stream_pipelines.py) cover per-value steps, a branch,
keyed and global running aggregations, an event-time window with late values, a windowed
join, and, in a checkpointed topology whose worker is killed mid-run on the cluster,
``update_state_by_key`` and a window (exactly-once state; windows roll back with it).
The worker killed is the one without the checkpoint spout, with the checkpoint barrier in
flight inside it: the recovery must start from the barrier's timeout.

One process cluster and the tier's one SparkSession serve the whole module. A timeout
says what differs from plain Python's results and, for the state run, where checkpoints
stood (the record in the store, recoveries and failures the workers logged).
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
from squall.state.inspect import read_record  # noqa: E402
from squall.testing.components import recorded  # noqa: E402
from squall.testing.waiting import wait_for  # noqa: E402
from support.daemon_logs import log_events
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


def differences(got: dict, expected: dict, most: int = 8) -> str:
    """What differs, per pipeline: keys missing, wrong (got, want) and extra, a few of each."""
    lines = []
    for label, want in expected.items():
        have = got.get(label)
        if have == want:
            continue
        if not (isinstance(want, dict) and isinstance(have, dict)):
            lines.append(f"  {label}: got {have!r:.200} want {want!r:.200}")
            continue
        missing = [k for k in want if k not in have]
        wrong = {k: (have[k], want[k]) for k in want if k in have and have[k] != want[k]}
        extra = [k for k in have if k not in want]
        lines.append(f"  {label}: {len(missing)} of {len(want)} missing {missing[:most]}, {len(wrong)} wrong "
                     f"(got, want) {dict(list(wrong.items())[:most])}, {len(extra)} extra {extra[:most]}")
    return "\n".join(lines) or "  nothing differs"


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
    conf = {**(sp.STATE_CONFIG if which == "state" else sp.PLAIN_CONFIG), "topology.workers": 2,
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
        # Mid-run (some results in, not all), kill -9 the worker without the checkpoint spout,
        # stopped for a moment first: what was sent to it by then dies with it, the
        # checkpoint barrier in flight included (as when its host dies). The checkpoint spout
        # in the other worker hears nothing of that barrier: its timeout starts the recovery.
        ns = cluster.state_namespace(name)
        cluster.wait_for(lambda: len(recorded(out)) > 200 and coordinator_worker(cluster, ns), 120, "some results")
        keeper, pids = coordinator_worker(cluster, ns), cluster.worker_pids()
        assert len(pids) == 2 and keeper in pids, (pids, keeper)
        victim = next(pid for worker, pid in pids.items() if worker != keeper)
        os.kill(victim, signal.SIGSTOP)
        time.sleep(1)
        # No checkpoint commits while it is stopped, so the spout, at max pending, waits.
        assert not done(by_label(recorded(out), topology), which, expected), "the run ended before the kill"
        os.kill(victim, signal.SIGKILL)
        cluster.wait_for(lambda: victim not in cluster.worker_pids().values() and len(cluster.worker_pids()) == 2,
                         120, "the killed worker replaced")

    def why() -> str:
        got = results(by_label(recorded(out), topology), which)
        return (f"what differs from plain Python's:\n{differences(got, expected)}\n"
                f"{checkpoint_story(cluster, name) if which == 'state' else ''}\nlogs in {cluster.base}")
    wait_for(lambda: done(by_label(recorded(out), topology), which, expected), 180,
             f"the {which} pipelines' results on the cluster", why, interval=0.1)
    got = results(by_label(recorded(out), topology), which)
    assert cluster.cli("kill", name, "--wait", "0").returncode == 0
    cluster.wait_for(lambda: cluster.worker_pids() == {}, 60, "workers gone")
    return got


def worker_logs(cluster, ns: str) -> list[Path]:
    """The logs of topology ``ns``'s workers: under workers/<id>/worker.log while a worker
    runs, filed by its supervisor under logs/workers/ once it is gone."""
    return [*cluster.base.glob("supervisor-*/workers/*/worker.log"),
            *cluster.base.glob(f"supervisor-*/logs/workers/{ns}-*.log")]


def coordinator_worker(cluster, ns: str) -> str | None:
    """The id of the running worker of topology ``ns`` that runs its checkpoint spout."""
    for path in cluster.base.glob("supervisor-*/workers/*/worker.log"):
        if any(e.get("topology") == ns for e in log_events(path, "checkpoint spout starting")):
            return path.parent.name
    return None


CHECKPOINT_EVENTS = ("checkpoint spout starting", "restoring state", "checkpoint failed; rolling back",
                     "state restored with a gap")


def checkpoint_story(cluster, name: str) -> str:
    """For a timeout: the checkpoint record in the host's store, and the last
    assignments nimbus wrote and checkpoint events (starts, recoveries, failures) workers
    logged for topology ``name``."""
    lines = []
    try:
        ns = cluster.state_namespace(name)
    except Exception as exc:  # a diagnostic must not hide the failure it explains
        return f"checkpoint state unknown: {exc!r}"
    conf = {"topology.state.provider": "embedded", "supervisor.state.dir": cluster.common["supervisor.state.dir"]}
    try:
        lines.append(f"checkpoint record: {read_record(conf, ns)}")
    except Exception as exc:
        lines.append(f"checkpoint record unreadable: {exc!r}")
    events = [e for e in log_events(cluster.base / "nimbus.log", "assignment written") if e.get("topology_id") == ns]
    for path in worker_logs(cluster, ns):
        for event in CHECKPOINT_EVENTS:
            events += [e for e in log_events(path, event) if e.get("topology") == ns]
    events.sort(key=lambda e: str(e.get("timestamp", "")))
    keep = ("timestamp", "event", "port", "component", "task", "txid", "action", "epoch", "phase", "failures",
            "retry_in", "problem", "version", "moved", "dead")
    lines += [f"  {' '.join(f'{k}={e[k]}' for k in keep if k in e)}" for e in events[-15:]]
    return "\n".join(lines)


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

    base = tmp_path_factory.mktemp("cluster")
    # Both supervisors run on this one host: they share its state directory, as supervisors
    # of one host do, so that an executor nimbus moves to the other one finds its state.
    cluster = ProcessCluster(zk_server.port, f"/streams-{time.time_ns()}", base, supervisors=2, slots=1,
                             conf={"supervisor.state.dir": str(base / "host-state")})
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


# One test per pipeline file, each within the suite's time limit per test (one did both:
# on a loaded machine they did not fit in it together).
@pytest.mark.parametrize("which", ["plain", "state"])
def test_local_cluster_and_spark_give_what_plain_python_gives(spark, process_cluster, tmp_path, which):
    expected = reference_state() if which == "state" else reference_plain()
    assert run_spark(which, tmp_path / "spark") == expected
    assert run_local(which, tmp_path / "local", expected) == expected
    assert run_cluster(process_cluster, which, tmp_path / "cluster", expected, kill_worker=which == "state") == expected
