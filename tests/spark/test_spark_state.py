"""Windowed and stateful bolts on Spark: event-time windows give the live windows, and
stateful bolts start empty or from a live topology's last committed checkpoint."""
from __future__ import annotations

import collections
import json
import os
import random
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from squall.loader import load_module  # noqa: E402
from squall.local import LocalCluster  # noqa: E402
from squall.spark import BackfillError, make_plan, run  # noqa: E402
from squall.testing.components import Recorder  # noqa: E402
from squall.testing.state import committed_component, wait_committed  # noqa: E402
from squall.testing.waiting import wait_for  # noqa: E402
from support.paths import SPARK_TOPOLOGIES

pytestmark = pytest.mark.spark

TOPOS = load_module(SPARK_TOPOLOGIES / "state_topologies.py")


@pytest.fixture(scope="module")
def spark():
    """The session's SparkSession if one runs (tests/test_spark.py makes one), else ours."""
    from pyspark.sql import SparkSession

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    existing = SparkSession.getActiveSession()
    session = existing or (SparkSession.builder.master("local[2]").appName("squall-state-tests")
                           .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                           .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    if existing is None:
        session.stop()


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows_in_time(n: int, seed: int) -> list[dict]:
    """Timestamps rising, out of order by less than the windows' lateness (3 s)."""
    rng = random.Random(seed)
    return [{"key": f"k{rng.randint(0, 4)}", "ts": i // 4 + rng.randint(0, 2), "v": rng.randint(1, 9)}
            for i in range(n)]


def test_event_time_windows_on_spark_give_the_live_windows(spark, tmp_path):
    rows = rows_in_time(400, seed=5)
    last = max(r["ts"] for r in rows)
    # Live, a closing row far in the future moves the watermark past the real windows.
    live_file = write_rows(tmp_path / "live.jsonl", rows + [{"key": "close", "ts": 10_000, "v": 0}])
    name = f"winspark-{time.monotonic_ns()}"
    with LocalCluster() as cluster:
        cluster.submit(name, {"rows.path": str(live_file), "topology.max.spout.pending": 1000,
                              "topology.message.timeout.secs": 60}, TOPOS.windowed(record=name))
        ends = set(range(5, last + 11, 5))
        wait_for(lambda: {v[3][0] for v in Recorder.get(name)} >= ends, 60, "the live windows")
    live = {tuple(v[3]) for v in Recorder.get(name) if v[3][1] != "close"}

    df = spark.read.json(str(write_rows(tmp_path / "batch.jsonl", rows)))
    result = run(TOPOS.windowed(), spark, {"rows": df}, sinks=["sums"])
    batch = {(r["end"], r["key"], r["total"]) for r in result["sums"].collect()}
    assert batch == live and len(live) > 100


def test_stateful_bolts_start_empty_or_from_a_live_snapshot(spark, tmp_path):
    first = [{"key": f"k{i % 6}", "ts": i, "v": 1} for i in range(300)]
    second = [{"key": f"k{i % 4}", "ts": i, "v": 1} for i in range(200)]
    store = {"topology.state.provider": "embedded", "supervisor.state.dir": str(tmp_path / "state")}
    name = f"snap-{time.monotonic_ns()}"
    with LocalCluster() as cluster:
        cluster.submit(name, {**store, "rows.path": str(write_rows(tmp_path / "first.jsonl", first)),
                              "topology.state.checkpoint.interval.ms": 200,
                              "topology.max.spout.pending": 1000}, TOPOS.counting())

        def all_counted(txid):
            return sum(sum(p.values()) for p in committed_component(store, name, "count", 2, txid)) == 300
        wait_committed(store, name, all_counted, 60, "the live counts committed")
    live = collections.Counter(r["key"] for r in first)
    more = collections.Counter(r["key"] for r in second)
    df = spark.read.json(str(write_rows(tmp_path / "second.jsonl", second)))

    def final_counts(conf):
        out = run(TOPOS.counting(), spark, {"rows": df}, sinks=["count"], conf=conf)["count"].collect()
        best = {}
        for r in out:
            best[r["key"]] = max(best.get(r["key"], 0), r["count"])
        return best

    assert final_counts({}) == dict(more)
    assert final_counts({**store, "topology.state.snapshot": name}) == {k: live[k] + more[k] for k in more}
    with pytest.raises(BackfillError, match="has no checkpoint"):
        make_plan(TOPOS.counting(), ["rows"], None, {**store, "topology.state.snapshot": "nope"})


def test_processing_time_windows_are_refused_in_batch():
    with pytest.raises(BackfillError, match="processing-time windows"):
        make_plan(TOPOS.windowed(processing_time=True), ["rows"])
