"""Stream pipelines that run live (local mode, a process cluster) and as a backfill
(``spark-run``) with the same results: tests/spark/test_stream_equivalence.py.

``plain`` (SQUALL_STREAMS_TOPOLOGY unset or "plain"): per-value steps, a branch, keyed and
global running aggregations, an event-time window with late values, and a windowed join;
the input is rows (key, amount, ts) from one spout task in a fixed order, so the same
values are late everywhere. ``state`` ("state"): ``update_state_by_key`` and a window in a
checkpointed topology whose spout keeps its position in its state, so that a worker killed
mid-run changes nothing: the state is updated exactly once and windows roll back too.

Every pipeline ends in a FileRecordingBolt named ``rec-LABEL`` (config key
``streams.out``); a backfill excludes them and writes the streams they read.
"""
from __future__ import annotations

import math
import os
import random

from squall.streams import Duration, StreamBuilder, TumblingWindows
from squall.testing.components import FileRecordingBolt, FixedTupleSpout, PositionedRowSpout

FIELDS = ["k", "n", "t"]
KEYS = ["ant", "bee", "cat", "dog"]
SIZE, LAG = 10.0, 4.0
PLAIN_CONFIG = {"topology.max.spout.pending": 5000, "topology.message.timeout.secs": 300}
# The state pipelines checkpoint every 200 ms with at most 100 rows uncommitted, so a run
# lasts some seconds and a worker killed after the first results is killed mid-run. A
# checkpoint barrier that was inside the killed worker (or whose acker entry was) is lost:
# only its timeout fails it and starts the recovery, and that timeout would be the message
# timeout (300 s) unless set.
STATE_CONFIG = {**PLAIN_CONFIG, "topology.state.checkpoint.interval.ms": 200, "topology.max.spout.pending": 100,
                "topology.state.checkpoint.timeout.secs": 5}
# What `squall submit` and `spark-run` read: the config of the pipelines this file builds.
CONFIG = STATE_CONFIG if os.environ.get("SQUALL_STREAMS_TOPOLOGY") == "state" else PLAIN_CONFIG


def rows(n: int, seed: int, ordered: bool = False) -> list[list]:
    """(key, amount, ts): rising timestamps with jitter (some values late), then a value
    far in the future that closes every window before it."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for _ in range(n):
        t += rng.random()
        jitter = 0.0 if ordered else rng.choice([0.0, 0.0, 0.0, -2.0, -6.0, -9.0])
        out.append([rng.choice(KEYS), rng.randint(1, 9), round(max(0.0, t + jitter), 3)])
    if ordered:
        out.sort(key=lambda r: r[2])
    out.append(["end", 0, round(t + 1000.0, 3)])
    return out


EVENTS, OTHERS, STATE_ROWS = rows(400, 11), rows(150, 12, ordered=True), rows(1500, 13)


def window():
    return TumblingWindows.of(Duration(SIZE)).with_event_time(LAG)


def plain():
    b = StreamBuilder()
    out = "streams.out"
    events = b.new_stream(FixedTupleSpout("events", EVENTS, FIELDS), FIELDS, timestamp="t", name="events")
    big, small = events.filter(lambda r: r[0] != "end").map(lambda r: [r[0].upper(), r[1] * 2]).branch(
        lambda r: r[1] > 10, lambda r: True)
    big.to(FileRecordingBolt(out), name="rec-big")
    small.map(lambda r: r[1]).to(FileRecordingBolt(out), name="rec-small")
    pairs = events.flat_map_to_pair(lambda r: [(r[0], r[1]), (r[0][0], 1)])
    pairs.repartition(2).reduce_by_key(lambda a, c: a + c).to(FileRecordingBolt(out), name="rec-sums")
    events.map(lambda r: r[1]).aggregate(0, lambda acc, n: acc + n).to(FileRecordingBolt(out), name="rec-total")
    windowed = events.key_by(lambda r: r[0]).window(window())
    windowed.map_values(lambda r: r[1]).reduce_by_key(lambda a, c: a + c).to(FileRecordingBolt(out), name="rec-win")
    windowed.late().map(lambda kv: kv[1]).to(FileRecordingBolt(out), name="rec-late")
    others = b.new_stream(FixedTupleSpout("others", OTHERS, FIELDS), FIELDS, timestamp="t", name="others")
    ordered = b.new_stream(FixedTupleSpout("ordered", sorted(EVENTS[:-1], key=lambda r: r[2]) + EVENTS[-1:], FIELDS),
                           FIELDS, timestamp="t", name="ordered")
    (ordered.map_to_pair(lambda r: (r[0], r[1])).window(window())
        .left_outer_join(others.map_to_pair(lambda r: (r[0], r[1] * 100)).window(window()))
        .to(FileRecordingBolt(out), name="rec-join"))
    return b.build()


def state():
    b = StreamBuilder()
    out = "streams.out"
    src = b.new_stream(PositionedRowSpout("state-rows", STATE_ROWS, FIELDS), FIELDS, timestamp="t", name="rows")
    totals = src.map_to_pair(lambda r: (r[0], r[1])).repartition(2).update_state_by_key(0, lambda acc, n: acc + n)
    totals.to_pair_stream().to(FileRecordingBolt(out), name="rec-state")
    (src.key_by(lambda r: r[0]).window(window()).count_by_key()
        .to(FileRecordingBolt(out), name="rec-statewin"))
    return b.build()


def topology():
    return state() if os.environ.get("SQUALL_STREAMS_TOPOLOGY") == "state" else plain()


# -- what plain Python makes of the same rows -------------------------------------------------
def event_windows(rows_: list[list]) -> tuple[list[list], dict[float, list[list]]]:
    """(late rows, rows of every window that closed by its end), as squall's event-time
    windows do with one input in this order."""
    watermark, latest, late, kept = -math.inf, -math.inf, [], []
    for row in rows_:
        if row[2] < watermark:
            late.append(row)
            continue
        kept.append(row)
        latest = max(latest, row[2])
        watermark = latest - LAG
    windows: dict[float, list[list]] = {}
    for row in kept:
        end = (math.floor(row[2] / SIZE) + 1) * SIZE
        if end <= watermark:
            windows.setdefault(end, []).append(row)
    return late, windows
