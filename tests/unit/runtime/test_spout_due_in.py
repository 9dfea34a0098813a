"""A spout that ran dry is asked again when its ``due_in`` says its next tuple falls due,
not after the wait strategy's fixed time: at once when it says 0 (records on their way: a
Kafka client's fetch of a backlog not landed yet), at its due time when it says when, after
the wait strategy's time when it does not know (None) or answers nonsense (reported)."""
import math
import time

from squall import LocalCluster, Spout, TopologyBuilder
from squall.runtime.spout_pacing import MAX_DUE_WAIT, MIN_DUE_WAIT, SpoutPacing
from squall.testing.components import NullBolt, Recorder, unique_name
from squall.testing.waiting import wait_for
from support.stepping import SteppedWorker


class _Says(Spout):
    """Emits nothing; counts its calls under ``<name>.calls``; ``due_in`` answers the last
    value under ``<name>.due_in`` (None when there is none), raising when it is "raise"."""

    def __init__(self, name):
        self.name = name

    def next_tuple(self):
        Recorder.add(self.name + ".calls", 1)

    def due_in(self):
        said = Recorder.get(self.name + ".due_in")
        if said and said[-1] == "raise":
            raise RuntimeError("no watermark")
        return said[-1] if said else None

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def _held_for(w, calls, hold, dry_at):
    """Moves the test's clock to just before ``hold`` after a dry turn (begun at real time
    ``dry_at``), then to it: the spout is asked only then. The real clock also ends a hold
    (a worker whose clock stands still is not held for ever), so a machine that stalled this
    test for ``hold`` seconds may see the call sooner: that is the hold working, not a failure."""
    before = calls()
    w.advance(hold - 0.1)
    assert calls() == before or time.monotonic() - dry_at >= hold
    w.advance(0.1)
    assert calls() >= before + 1


def test_a_spout_is_asked_again_when_its_due_in_says():
    name = unique_name("due")
    calls = lambda: len(Recorder.get(name + ".calls"))  # noqa: E731
    say = lambda value: Recorder.add(name + ".due_in", value)  # noqa: E731
    b = TopologyBuilder()
    b.set_spout("s", _Says(name))
    b.set_bolt("null", NullBolt()).shuffle("s")
    # The wait strategy's time (30 s) does not end while the test runs: only the test's clock ends it.
    conf = {"topology.acker.executors": 0, "topology.sleep.spout.wait.strategy.time.ms": 30_000}
    with SteppedWorker(b.build(), conf) as w:
        spout = w.executor("s")
        say(0)  # due now: asked at every turn, not held
        for _ in range(3):
            w.step()
        assert calls() == 3 and spout.stats().waits == 0
        say(0.5)  # held until then, not for the wait strategy's 30 s
        dry_at = time.monotonic()
        w.step()
        assert calls() == 4 and spout.stats().waits == 1
        _held_for(w, calls, 0.5, dry_at)
        say(3600.0)  # a spout that says an hour is asked again within MAX_DUE_WAIT
        dry_at = time.monotonic()
        w.advance(30.0)  # ends any hold; the call says an hour
        _held_for(w, calls, MAX_DUE_WAIT, dry_at)
        say(None)  # does not know: the wait strategy's time
        w.advance(30.0)
        asked = calls()
        w.advance(29.0)
        assert calls() == asked
        w.advance(1.0)
        assert calls() == asked + 1 and spout.errors == 0
        for bad in ("raise", math.nan, "soon"):  # reported, and the wait strategy's time
            say(bad)
            w.advance(30.0)  # the call that is answered with it
            asked = calls()
            w.advance(29.0)
            assert calls() == asked
            w.advance(1.0)
            assert calls() == asked + 1
        assert spout.errors == 6  # each bad answer, twice


def test_hold_after_a_dry_turn_is_the_spouts_time_within_bounds():
    pace = SpoutPacing(0.001)
    assert pace.hold_after_dry(None) == 0.001
    assert pace.hold_after_dry(0.0) is None and pace.hold_after_dry(-2.0) is None  # due now: not held
    assert pace.hold_after_dry(0.0002) == 0.0002  # sooner than the strategy: not held past it
    assert pace.hold_after_dry(MIN_DUE_WAIT / 10) == MIN_DUE_WAIT  # not a turn for every tuple
    assert SpoutPacing(0.0).hold_after_dry(MIN_DUE_WAIT / 10) == 0.0  # nor longer than the strategy
    assert pace.hold_after_dry(0.25) == 0.25  # later: not asked in between
    assert pace.hold_after_dry(math.inf) == MAX_DUE_WAIT


class _Ticker(Spout):
    """Emits a tuple every ``period`` seconds on the real clock and says when the next is
    due; records each emit's lateness under ``<name>.late`` and counts its calls."""

    def __init__(self, name, period, ticks):
        self.name, self.period, self.ticks = name, period, ticks

    def open(self, conf, context, collector):
        self.collector = collector
        self.due, self.sent = time.monotonic() + self.period, 0

    def next_tuple(self):
        Recorder.add(self.name + ".calls", 1)
        now = time.monotonic()
        if self.sent < self.ticks and now >= self.due:
            Recorder.add(self.name + ".late", now - self.due)
            self.collector.emit([self.sent])
            self.sent += 1
            self.due += self.period

    def due_in(self):
        return self.due - time.monotonic() if self.sent < self.ticks else None

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def test_a_timed_spout_is_called_at_its_due_times_without_spinning():
    """In a running worker (real threads, real clock): a spout with a tuple due every 40 ms
    and a wait strategy of 30 s is called when each tuple falls due, not 30 s later (the
    stepped test above says how exactly), and is asked a few times a tuple, not in a loop."""
    name = unique_name("ticker")
    b = TopologyBuilder()
    b.set_spout("s", _Ticker(name, 0.04, 10))
    b.set_bolt("null", NullBolt()).shuffle("s")
    with LocalCluster() as cluster:
        cluster.submit(name, {"topology.acker.executors": 0,
                              "topology.sleep.spout.wait.strategy.time.ms": 30_000}, b.build())
        wait_for(lambda: len(Recorder.get(name + ".late")) == 10, 20, "ten ticks emitted, none held 30 s")
    # Late by a wake-up's delay; on a crowded machine a thread may get no CPU for a second
    # (another process at real-time priority), never for the 30 s a fixed hold takes.
    assert max(Recorder.get(name + ".late")) < 5.0, Recorder.get(name + ".late")
    # Asked about once when a tuple falls due and twice more (dry) after it, and once more
    # when a wake comes early; a spout that spun would be asked thousands of times.
    assert len(Recorder.get(name + ".calls")) <= 10 * 6, len(Recorder.get(name + ".calls"))
