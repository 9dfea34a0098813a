"""Every stream operator in local mode against plain Python on generated input.

One topology holds one pipeline per operator, each from its own spout (so the suite pays
for one local cluster); each test checks its pipeline's output against what plain Python
makes of the same rows. Keyed steps run in two or three tasks, so values really are
partitioned by key; windows run on event time with values out of order, late values
included.
"""
from __future__ import annotations

import collections
import math
import random

import pytest

from squall import LocalCluster, Spout
from squall.streams import Count, Duration, Fold, SlidingWindows, StreamBuilder, TumblingWindows
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt, unique_name
from squall.testing.waiting import wait_for

RNG = random.Random(20240607)
WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu"]
SENTENCES = [[" ".join(RNG.choice(WORDS) for _ in range(RNG.randint(1, 6)))] for _ in range(300)]
NUMBERS = [[RNG.randint(-50, 50)] for _ in range(400)]
SIZE, LAG = 10.0, 4.0


def events(n: int, seed: int) -> list[list]:
    """(key, amount, ts): timestamps rising with jitter, some values arriving late, then a
    value far in the future that closes every window before it."""
    rng = random.Random(seed)
    rows, t = [], 0.0
    for _ in range(n):
        t += rng.random()
        jitter = rng.choice([0.0, 0.0, 0.0, -2.0, -6.0, -9.0])  # -6 and -9 are often late
        rows.append([rng.choice(WORDS[:4]), rng.randint(1, 9), round(max(0.0, t + jitter), 3)])
    rows.append(["end", 0, t + 1000.0])
    return rows


EVENTS = events(300, 1)
LEFT, RIGHT = events(120, 2), events(120, 3)
for rows_ in (LEFT, RIGHT):  # joins: in order, so nothing is late whatever interleaves
    rows_[:-1] = sorted(rows_[:-1], key=lambda r: r[2])


def ev_reference(rows: list[list], size: float, lag: float, slide: float | None = None):
    """What squall's event-time windows do with one input in this order: (late rows, the
    rows of every window that closed, by window end)."""
    slide = slide or size
    watermark, latest, late, kept = -math.inf, -math.inf, [], []
    for row in rows:
        ts = row[2]
        if ts < watermark:
            late.append(row)
            continue
        kept.append(row)
        latest = max(latest, ts)
        watermark = latest - lag
    windows = {}
    if kept:
        k = math.floor(min(r[2] for r in kept) / slide) + 1
        while k * slide <= watermark:
            end = k * slide
            inside = [r for r in kept if end - size <= r[2] < end]
            if inside:
                windows[end] = inside
            k += 1
    return late, windows


def _windowed(rows):
    out: dict = {}
    for k, n, t in rows[:-1]:
        out.setdefault(math.floor(t / SIZE), []).append((k, n))
    return out


def _joins():
    left, right = _windowed(LEFT), _windowed(RIGHT)
    join, left_join, co = [], [], []
    # The window of the far-future value never closes (nor does the last one before it, whose
    # end only the other stream's far-future value passes; both come): every other one does.
    for w in left.keys() | right.keys():
        ls, rs = left.get(w, []), right.get(w, [])
        join += [(k, (a, c * 10)) for k, a in ls for k2, c in rs if k == k2]
        rs2 = [(k, c) for k, c in rs if k != "ant"]
        for k, a in ls:
            matches = [c for k2, c in rs2 if k2 == k]
            left_join += [(k, [a, c]) for c in matches] or [(k, [a, None])]
        for k in {k for k, _ in ls} | {k for k, _ in rs}:
            co.append((k, ([a for k2, a in ls if k2 == k], [c for k2, c in rs if k2 == k])))
    return join, left_join, co


JOIN, LEFT_JOIN, CO_GROUP = _joins()


class GatedSpout(Spout):
    """Emits its rows once ``Recorder.get(gate)`` holds ``after`` items (a query that must
    come after the updates it reads)."""

    def __init__(self, gate: str, after: int, rows: list[list], fields: list[str]) -> None:
        self.gate, self.after, self.rows, self.fields = gate, after, rows, fields

    def open(self, conf, context, collector):
        self.collector, self.todo = collector, list(self.rows)

    def next_tuple(self):
        if self.todo and len(Recorder.get(self.gate)) >= self.after:
            self.collector.emit(self.todo.pop(0), msg_id=len(self.todo))

    def declare_output_fields(self, declarer):
        declarer.declare(self.fields)


def _record(name: str):
    return lambda v: Recorder.add(name, v)


@pytest.fixture(scope="module")
def run():
    tag = unique_name("ops")
    b = StreamBuilder()
    names = {}

    def out(label: str) -> RecordingBolt:
        names[label] = f"{tag}.{label}"
        return RecordingBolt(names[label])

    def src(label: str, rows, fields, **kw):
        return b.new_stream(FixedTupleSpout(f"{tag}.{label}.src", rows, fields), name=f"{label}-src", **kw)

    nums = src("nums", NUMBERS, ["n"], parallelism=2)
    nums.map(lambda x: x * 3 + 1).to(out("map"))
    nums.filter(lambda x: x % 2 == 0).to(out("filter"))
    nums.peek(_record(f"{tag}.peeked")).map(abs).to(out("peek"))
    nums.for_each(_record(f"{tag}.for_each"))
    b0, b1 = nums.branch(lambda x: x % 3 == 0, lambda x: x % 3 == 1)
    b0.to(out("branch0"))
    b1.map(lambda x: -x).to(out("branch1"))
    nums.repartition(3).map(lambda x: x + 1000).to(out("repartition"), parallelism=2)
    nums.aggregate(0, lambda acc, x: acc + x).to(out("aggregate"))
    nums.reduce(max).to(out("reduce"))
    nums.count().to(out("count"))

    words = src("words", SENTENCES, ["sentence"], parallelism=2).flat_map(str.split)
    words.to(out("flat_map"))
    words.key_by(len).count_by_key().to(out("key_by_count"))
    words.map_to_pair(lambda w: (w, 1)).reduce_by_key(lambda a, c: a + c).to(out("reduce_by_key"))
    (src("pairs", SENTENCES, ["sentence"], parallelism=2)
        .flat_map_to_pair(lambda s: [(w[0], w) for w in s.split()])
        .map_values(len)
        .aggregate_by_key(Fold(0, lambda acc, n: acc + n))
        .to(out("aggregate_by_key")))
    (src("fmv", SENTENCES, ["sentence"]).map_to_pair(lambda s: (len(s), s))
        .flat_map_values(str.split).to(out("flat_map_values")))

    grouped = (src("groups", NUMBERS, ["n"]).key_by(lambda x: x % 4)
               .window(TumblingWindows.of(Count(40))).group_by_key())
    grouped.to(out("group_by_key"))
    (src("sliding", NUMBERS, ["n"]).window(SlidingWindows.of(Count(30), Count(10)))
        .aggregate(0, lambda acc, x: acc + x).to(out("sliding_sum")))

    ev = b.new_stream(FixedTupleSpout(f"{tag}.ev.src", EVENTS, ["k", "n", "t"]), name="ev-src",
                      value=["k", "n", "t"], timestamp="t")
    windowed = ev.key_by(lambda r: r[0]).window(TumblingWindows.of(Duration(SIZE)).with_event_time(LAG))
    windowed.count_by_key().to(out("ev_counts"))
    windowed.late().map(lambda kv: kv[1]).to(out("ev_late"))
    (ev.window(SlidingWindows.of(Duration(SIZE), Duration(SIZE / 2)).with_event_time(LAG))
        .map(lambda r: r[1]).reduce(lambda a, c: a + c).to(out("ev_sliding")))
    window = TumblingWindows.of(Duration(SIZE)).with_event_time(0)
    left = (b.new_stream(FixedTupleSpout(f"{tag}.l.src", LEFT, ["k", "n", "t"]), name="left-src",
                         value=["k", "n", "t"], timestamp="t")
            .map_to_pair(lambda r: (r[0], r[1])).window(window))
    right = (b.new_stream(FixedTupleSpout(f"{tag}.r.src", RIGHT, ["k", "n", "t"]), name="right-src",
                          value=["k", "n", "t"], timestamp="t")
             .map_to_pair(lambda r: (r[0], r[1] * 10)).window(window))
    left.join(right).to(out("join"))
    left2 = (b.new_stream(FixedTupleSpout(f"{tag}.l2.src", LEFT, ["k", "n", "t"]), name="left2-src",
                          value=["k", "n", "t"], timestamp="t")
             .map_to_pair(lambda r: (r[0], r[1])).window(window))
    right2 = (b.new_stream(FixedTupleSpout(f"{tag}.r2.src", RIGHT, ["k", "n", "t"]), name="right2-src",
                           value=["k", "n", "t"], timestamp="t")
              .filter(lambda r: r[0] != "ant").map_to_pair(lambda r: (r[0], r[1])).window(window))
    left2.left_outer_join(right2, lambda a, c: [a, c]).to(out("left_join"))
    left3 = (b.new_stream(FixedTupleSpout(f"{tag}.l3.src", LEFT, ["k", "n", "t"]), name="left3-src",
                          value=["k", "n", "t"], timestamp="t")
             .map_to_pair(lambda r: (r[0], r[1])).window(window))
    right3 = (b.new_stream(FixedTupleSpout(f"{tag}.r3.src", RIGHT, ["k", "n", "t"]), name="right3-src",
                           value=["k", "n", "t"], timestamp="t")
              .map_to_pair(lambda r: (r[0], r[1])).window(window))
    left3.co_group_by_key(right3).to(out("co_group"))

    topology = b.build()
    conf = {"topology.max.spout.pending": 2000, "squall.log.level": "WARNING", "topology.workers": 2,
            "topology.message.timeout.secs": 300}
    spouts = [s for s in topology.components.values() if s.kind == "spout"]
    # An event-time window's last window never closes in a live run (no later value comes),
    # so its values stay pending: wait for what those pipelines give instead of their acks.
    late, windows = ev_reference(EVENTS, SIZE, LAG)
    outputs = {"ev_counts": sum(len({r[0] for r in rows}) for rows in windows.values()), "ev_late": len(late),
               "ev_sliding": len(ev_reference(EVENTS, SIZE, LAG, SIZE / 2)[1]),
               "join": len(JOIN), "left_join": len(LEFT_JOIN), "co_group": len(CO_GROUP),
               "sliding_sum": len(NUMBERS) // 10,
               "group_by_key": sum(len({x % 4 for x in flat(NUMBERS[i:i + 40])}) for i in range(0, len(NUMBERS), 40))}
    # Windows hold their last values (no later window fires): those rows stay pending.
    windowed = {"ev", "ev2", "l", "r", "l2", "r2", "l3", "r3", "sliding", "groups"}
    with LocalCluster() as cluster:
        cluster.submit(tag, conf, topology)
        for s in spouts:
            spout = s.instantiate()
            if spout.name.split(".")[-2] not in windowed:
                wait_for(lambda: len(set(Recorder.get(spout.name + ".acked"))) == len(spout.rows), 60,
                         f"every row of {s.id} acked")
        for label, n in outputs.items():
            wait_for(lambda: len(Recorder.get(names[label])) >= n, 60, f"{n} results of {label}",
                     lambda: str(len(Recorder.get(names[label]))))
        errors = cluster.errors(tag)
    assert not errors, errors
    return {label: RecordingBolt.values(name) for label, name in names.items()} | {
        "peeked": Recorder.get(f"{tag}.peeked"), "for_each": Recorder.get(f"{tag}.for_each"),
        "topology": topology}


def flat(rows):
    return [r[0] for r in rows]


def bag(values):
    return collections.Counter(repr(v) for v in values)


def last_per_key(pairs):
    out = {}
    for k, v, *_ in pairs:
        out[k] = v
    return out


def test_map_filter_peek_for_each(run):
    ns = flat(NUMBERS)
    assert bag(v[0] for v in run["map"]) == bag(x * 3 + 1 for x in ns)
    assert bag(v[0] for v in run["filter"]) == bag(x for x in ns if x % 2 == 0)
    assert bag(v[0] for v in run["peek"]) == bag(abs(x) for x in ns)
    assert bag(run["peeked"]) == bag(ns)
    assert bag(run["for_each"]) == bag(ns)


def test_branch_sends_each_value_to_the_first_match_only(run):
    ns = flat(NUMBERS)
    assert bag(v[0] for v in run["branch0"]) == bag(x for x in ns if x % 3 == 0)
    assert bag(v[0] for v in run["branch1"]) == bag(-x for x in ns if x % 3 == 1)


def test_repartition_runs_the_next_steps_in_as_many_tasks(run):
    assert bag(v[0] for v in run["repartition"]) == bag(x + 1000 for x in flat(NUMBERS))
    assert sorted(s.parallelism for s in run["topology"].components.values()).count(3) == 1


def test_global_aggregate_reduce_and_count_are_running_results_in_one_task(run):
    ns = flat(NUMBERS)
    # A running result after every value: one task sees them all, the last is the total.
    assert sorted(v[0] for v in run["count"]) == list(range(1, len(ns) + 1))
    assert run["aggregate"][-1][0] == sum(ns) and len(run["aggregate"]) == len(ns)
    assert run["reduce"][-1][0] == max(ns)


def test_flat_map_and_keyed_running_aggregations(run):
    words = [w for s in flat(SENTENCES) for w in s.split()]
    assert bag(v[0] for v in run["flat_map"]) == bag(words)
    assert last_per_key(run["key_by_count"]) == dict(collections.Counter(len(w) for w in words))
    assert last_per_key(run["reduce_by_key"]) == dict(collections.Counter(words))
    by_letter = collections.Counter()
    for w in words:
        by_letter[w[0]] += len(w)
    assert last_per_key(run["aggregate_by_key"]) == dict(by_letter)


def test_flat_map_values_keeps_the_key(run):
    expected = [(len(s), w) for s in flat(SENTENCES) for w in s.split()]
    assert bag(tuple(v) for v in run["flat_map_values"]) == bag(expected)


def test_group_by_key_in_count_windows(run):
    ns = flat(NUMBERS)
    expected = []
    for i in range(0, len(ns) - len(ns) % 40, 40):
        groups: dict = {}
        for x in ns[i:i + 40]:
            groups.setdefault(x % 4, []).append(x)
        expected.extend(groups.items())
    assert bag((k, v) for k, v in run["group_by_key"]) == bag(expected)


def test_sliding_count_window_sums(run):
    ns = flat(NUMBERS)
    expected = [sum(ns[max(0, i - 30):i]) for i in range(10, len(ns) + 1, 10)]
    assert [v[0] for v in run["sliding_sum"]] == expected


def test_event_time_windows_count_per_key_and_send_late_values_apart(run):
    late, windows = ev_reference(EVENTS, SIZE, LAG)
    assert late, "the input has late values"
    expected = [(k, n, end) for end, rows in windows.items()
                for k, n in collections.Counter(r[0] for r in rows).items()]
    got = [(k, n, math.floor(ts / SIZE + 1) * SIZE) for k, n, ts in run["ev_counts"]]
    assert bag(got) == bag(expected)
    # a stream's value of several fields is a tuple, and stays one between workers (issue 34)
    assert [v[0] for v in run["ev_late"]] == [tuple(r) for r in late]


def test_event_time_sliding_windows(run):
    _, windows = ev_reference(EVENTS, SIZE, LAG, SIZE / 2)
    assert sorted(v[0] for v in run["ev_sliding"]) == sorted(sum(r[1] for r in rows) for rows in windows.values())


def test_joins_and_co_groups_within_windows(run):
    join, left_join, co = JOIN, LEFT_JOIN, CO_GROUP
    assert bag((k, tuple(v)) for k, v, _ in run["join"]) == bag(join)
    assert bag((k, list(v)) for k, v, _ in run["left_join"]) == bag(left_join)
    assert bag((k, tuple(v)) for k, v, _ in run["co_group"]) == bag(co)
