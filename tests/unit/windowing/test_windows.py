"""Windows against a reference computed in plain Python from the definitions (README,
"Windows"): time windows end at multiples of the slide and hold ``end - length <= ts <
end``; the watermark is the least over streams of the greatest timestamp minus the
lateness; a tuple older than the watermark is late; count windows take the last
``length`` tuples every ``slide`` (in timestamp order once the watermark passes them)."""
import math
import random
import time

import pytest

from squall import Count, Duration, LocalCluster, TopologyBuilder, TopologyError, WindowedBolt
from squall.clock import FakeClock
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt
from squall.testing.waiting import wait_for
from squall.windowing.manager import WindowManager
from squall.windowing.spec import WindowSpec

# -- the reference ------------------------------------------------------------------------

def reference(events, spec):
    """events: [(stream, ts, id)] in arrival order -> (windows, late ids); a window is
    (start, end, ids, new ids, expired ids)."""
    wm, max_ts, late, accepted = -math.inf, {}, [], []
    for seq, (stream, ts, ident) in enumerate(events):
        if spec.event_time and ts < wm:
            late.append(ident)
            continue
        accepted.append((ts, seq, ident))
        if spec.event_time:
            max_ts[stream] = max(max_ts.get(stream, -math.inf), ts)
            wm = max(wm, min(max_ts.values()) - spec.lateness)
        else:
            wm = ts  # processing time: the clock is the arrival time
    if spec.event_time:
        released = sorted(a for a in accepted if a[0] < wm)
    else:
        released = accepted
    windows = []
    if spec.counted:
        length, slide = spec.length.n, spec.slide.n
        for end in range(slide, len(released) + 1, slide):
            chunk = released[max(0, end - length):end]
            windows.append((end - len(chunk), end, [a[2] for a in chunk]))
    else:
        length, slide = spec.length.secs, spec.slide.secs
        if released:
            k = math.floor(min(a[0] for a in released) / slide) + 1
            while k * slide <= wm and (k - 1) * slide - length < max(a[0] for a in released):
                end = k * slide
                ids = [a[2] for a in released if end - length <= a[0] < end]
                if ids:
                    windows.append((end - length, end, ids))
                k += 1
    out, seen, prev = [], set(), []
    for start, end, ids in windows:
        out.append((start, end, ids, [i for i in ids if i not in seen], [i for i in prev if i not in ids]))
        seen.update(ids)
        prev = ids
    return out, late


def run_manager(events, spec, final_clock=None):
    m = WindowManager(spec)
    fired, late, acked = [], [], []
    for stream, ts, ident in events:
        is_late, fs = m.add(ident, ts, stream)
        if is_late:
            late.append(ident)
        fired += fs
    if final_clock is not None:
        fired += m.advance(final_clock)
    for f in fired:
        acked += [e.tup for e in f.evicted]
    windows = [(f.start, f.end, [e.tup for e in f.entries], [e.tup for e in f.new], [e.tup for e in f.expired])
               for f in fired]
    return windows, late, acked, m


def shuffled_events(rng, n, streams, jitter):
    """Timestamps mostly increasing, out of order by up to ``jitter``, on several streams."""
    out = []
    for i in range(n):
        ts = i // 2 + rng.randint(0, jitter)
        out.append((streams[i % len(streams)], ts, i))
    return out


SPECS = [
    ("time tumbling", dict(length=Duration(10), slide=Duration(10))),
    ("time sliding", dict(length=Duration(15), slide=Duration(5))),
    ("time sliding uneven", dict(length=Duration(7), slide=Duration(3))),
    ("count tumbling", dict(length=Count(10), slide=Count(10))),
    ("count sliding", dict(length=Count(12), slide=Count(4))),
]


@pytest.mark.parametrize("name,sizes", SPECS, ids=[s[0] for s in SPECS])
@pytest.mark.parametrize("lateness", [0, 4])
def test_event_time_windows_match_the_reference(name, sizes, lateness):
    for seed in range(5):
        rng = random.Random(seed)
        events = shuffled_events(rng, 300, ["a", "b"], jitter=8)
        spec = WindowSpec(timestamp_field="ts", lateness=lateness, **sizes)
        got, late, acked, m = run_manager(events, spec)
        want, want_late = reference(events, spec)
        assert got == want, (name, seed)
        assert late == want_late and (lateness == 0) <= bool(late)  # jitter beyond 0 makes late tuples
        # Acked exactly when in no later window: never twice, never while still needed.
        assert len(set(acked)) == len(acked)
        still = {e.tup for e in m.buf[m.head:]}
        assert not still & set(acked)
        shown = {i for w in got for i in w[2]}
        assert set(acked) <= shown


@pytest.mark.parametrize("name,sizes", SPECS, ids=[s[0] for s in SPECS])
def test_processing_time_windows_match_the_reference(name, sizes):
    rng = random.Random(7)
    t, events = 1000.0, []
    for i in range(200):
        t += rng.choice([0.0, 0.5, 1.0, 2.5])
        events.append(("a", t, i))
    spec = WindowSpec(**sizes)
    got, late, acked, _ = run_manager(events, spec, final_clock=t + 0.5)
    want, _ = reference(events + [("a", t + 0.5, "clock")], spec) if not spec.counted else reference(events, spec)
    want = [(s, e, [i for i in ids if i != "clock"], [i for i in new if i != "clock"], ex)
            for s, e, ids, new, ex in want]
    want = [w for w in want if w[2]]
    assert got == want and late == []


def test_flush_fires_what_is_left_and_snapshots_carry_on_exactly():
    spec = WindowSpec(Duration(10), Duration(5), timestamp_field="ts", lateness=2)
    events = shuffled_events(random.Random(3), 120, ["a"], jitter=4)
    whole, _, _, m = run_manager(events, spec)
    whole += [(f.start, f.end, [e.tup for e in f.entries], [e.tup for e in f.new], [e.tup for e in f.expired])
              for f in m.flush()]
    assert whole[-1][1] > max(ts for _, ts, _ in events)  # the last tuple's window fired

    first, _, _, m1 = run_manager(events[:60], spec)
    m2 = WindowManager(spec)
    m2.restore(m1.snapshot(lambda t: t), lambda t: t)
    rest = []
    for stream, ts, ident in events[60:]:
        rest += m2.add(ident, ts, stream)[1]
    rest += m2.flush()
    rest = [(f.start, f.end, [e.tup for e in f.entries], [e.tup for e in f.new], [e.tup for e in f.expired])
            for f in rest]
    assert first + rest == whole


def test_window_definitions_are_checked():
    for bad in (dict(length=Count(5), slide=Duration(1)), dict(length=Duration(5), slide=Duration(10)),
                dict(length=Count(3), slide=Count(1), lateness=1)):
        with pytest.raises(ValueError):
            WindowSpec(**bad)
    with pytest.raises(ValueError):
        Count(0)
    with pytest.raises(ValueError):
        Duration(float("nan"))


# -- through the runtime ------------------------------------------------------------------

class WindowLog(WindowedBolt):
    """Records each window and emits its size (anchored to the window)."""

    def __init__(self, name):
        self.name = name

    def execute(self, window):
        Recorder.add(self.name, (window.start, window.end, [t["id"] for t in window],
                                 [t["id"] for t in window.new], [t["id"] for t in window.expired]))
        self.collector.emit([window.end, len(window)])

    def declare_output_fields(self, d):
        d.declare(["end", "size"])


def event_rows(n, jitter, seed):
    rng = random.Random(seed)
    return [[i, i // 3 + rng.randint(0, jitter)] for i in range(n)]


def test_event_time_sliding_windows_in_local_mode_with_a_late_stream():
    name = f"win-{time.monotonic_ns()}"
    rows = event_rows(240, jitter=6, seed=11)
    closing = [len(rows), 10_000]  # a far-future timestamp: moves the watermark past every window
    bolt = WindowLog(name).with_window(Duration(12), Duration(4)).with_timestamp_field("ts") \
        .with_lateness(Duration(2)).with_late_stream("late")
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout(name, rows + [closing], ["id", "ts"]))
    b.set_bolt("win", bolt).global_("rows")
    b.set_bolt("late", RecordingBolt(name + ".late")).shuffle("win", "late")
    b.set_bolt("sizes", RecordingBolt(name + ".sizes")).shuffle("win")
    conf = {"topology.max.spout.pending": 1000, "topology.message.timeout.secs": 60}
    want, want_late = reference([("rows", ts, i) for i, ts in rows + [closing]], bolt.window_spec())
    with LocalCluster() as cluster:
        cluster.submit(name, conf, b.build())
        wait_for(lambda: len(Recorder.get(name)) >= len(want), 30, "every window")
        wait_for(lambda: len(Recorder.get(name + ".acked")) >= len(rows), 30, "every tuple acked")
        assert Recorder.get(name) == want
        assert sorted(v[3][0] for v in Recorder.get(name + ".late")) == sorted(want_late) and want_late
        assert sorted(Recorder.get(name + ".acked")) == list(range(len(rows)))  # the closing tuple waits
        assert sorted(v[3] for v in Recorder.get(name + ".sizes")) == sorted([w[1], len(w[2])] for w in want)
        assert not Recorder.get(name + ".failed")


class ClockedRows(FixedTupleSpout):
    """Emits row ``i`` once its task's clock has passed ``start + ts`` (its second field)."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.clock, self.start = context.clock, context.clock.time()

    def next_tuple(self):
        if self.todo and self.clock.time() >= self.start + self.rows[self.todo[-1]][1]:
            super().next_tuple()


def test_processing_time_tumbling_windows_fire_on_their_own_and_ack_everything():
    name = f"ptw-{time.monotonic_ns()}"
    rows = [[i, (i // 20) * 0.125] for i in range(300)]  # 20 rows every 1/8 s of the clock (exact in binary)
    b = TopologyBuilder()
    b.set_spout("rows", ClockedRows(name, rows, ["id", "ts"]))
    b.set_bolt("win", WindowLog(name).with_tumbling_window(Duration(0.5))).global_("rows")
    clock = FakeClock(start=1000.0)
    arrived = []  # (stream, arrival time, id): the clock when each row reached the bolt
    with LocalCluster({"squall.log.level": "WARNING"}, clock=clock) as cluster:
        cluster.submit(name, {"topology.max.spout.pending": 1000, "topology.message.timeout.secs": 10}, b.build())

        def executed():  # rows, and one tick per move of the clock (the tick period is 0.05 s)
            return sum(s["executed"] for s in cluster.stats(name) if s["component"] == "win")
        for step in range(15):  # each row arrives before the clock moves on
            wait_for(lambda: executed() >= 20 * (step + 1) + step, 10, f"rows of step {step}")
            arrived += [("a", clock.time(), i) for i in range(20 * step, 20 * (step + 1))]
            clock.advance(0.125)
        # No input arrives after the last row: ticks fire the last window and ack its tuples.
        clock.advance(0.5)
        wait_for(lambda: len(Recorder.get(name + ".acked")) == len(rows), 20, "every tuple acked")
    windows = Recorder.get(name)
    ids = [i for w in windows for i in w[2]]
    assert sorted(ids) == list(range(300))  # tumbling: each tuple in exactly one window
    for start, end, tuples, new, _expired in windows:
        assert end - start == 0.5 and abs(end / 0.5 - round(end / 0.5)) < 1e-9 and new == tuples
    # The windows are exactly those of the rows' arrival times (the clock's, not the machine's).
    want, _ = reference(arrived + [("a", clock.time(), "clock")], WindowSpec(Duration(0.5), Duration(0.5)))
    want = [(s, e, [i for i in ids if i != "clock"], [i for i in new if i != "clock"], ex)
            for s, e, ids, new, ex in want]
    assert windows == [w for w in want if w[2]] and len(windows) == 4


def test_windows_are_checked_at_build_and_submit():
    spout = FixedTupleSpout("x", [[1, 2]], ["id", "ts"])

    def build(bolt):
        b = TopologyBuilder()
        b.set_spout("rows", spout)
        b.set_bolt("win", bolt).shuffle("rows")
        return b.build()

    with pytest.raises(TopologyError, match="timestamp field 'when'"):
        build(WindowLog("x").with_window(Duration(5)).with_timestamp_field("when"))
    with pytest.raises(TopologyError, match="no window set"):
        build(WindowLog("x"))
    with pytest.raises(TopologyError, match="topology.window.max.tuples"):
        build(WindowLog("x").with_window(Count(200_000)))
    topo = build(WindowLog("x").with_window(Duration(40), Duration(10)))
    with LocalCluster() as cluster:
        with pytest.raises(TopologyError, match=r"topology.message.timeout.secs \(30\) must exceed the 50 s"):
            cluster.submit("w1", {"topology.max.spout.pending": 10}, topo)
        with pytest.raises(TopologyError, match="max.spout.pending set"):
            cluster.submit("w2", {"topology.message.timeout.secs": 60}, topo)
        with pytest.raises(TopologyError, match="never fill"):
            cluster.submit("w3", {"topology.max.spout.pending": 5}, build(WindowLog("x").with_window(Count(10))))


def test_event_time_waits_for_every_input_stream_it_expects():
    """Two inputs (a join's two sides): one sending all its tuples first must not make the
    other's late; the watermark is the least over both, from the first tuple of each."""
    m = WindowManager(WindowSpec(Duration(10), Duration(10), "ts", 1.0))
    m.expect(["left", "right"])
    fired = []
    for ts in (1.0, 5.0, 12.0, 25.0, 40.0):
        late, f = m.add(("L", ts), ts, "left")
        assert not late and not f  # the right side has said nothing yet
    for ts in (2.0, 11.0, 30.0):
        late, f = m.add(("R", ts), ts, "right")
        assert not late
        fired += f
    assert [(w.end, sorted(e.tup for e in w.entries)) for w in fired] == [
        (10.0, [("L", 1.0), ("L", 5.0), ("R", 2.0)]), (20.0, [("L", 12.0), ("R", 11.0)])]
