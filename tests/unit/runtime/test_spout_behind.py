"""A spout whose ``next_tuple`` emitted nothing but that says records are on their way
(``behind``: a Kafka client's fetch of a backlog not landed yet) is asked again at the next
turn, not held for the wait strategy's time; one that is not behind is held, and the
executor's ``waits`` counts the holds. A ``behind`` that raises counts as not behind."""
from squall import Spout, TopologyBuilder
from squall.testing.components import NullBolt, Recorder, unique_name
from support.stepping import SteppedWorker


class _Behind(Spout):
    """Emits nothing; counts its calls under ``<name>.calls``; behind while ``<name>.behind``
    holds True (last value), raising when it holds "raise"."""

    def __init__(self, name):
        self.name = name

    def next_tuple(self):
        Recorder.add(self.name + ".calls", 1)

    def behind(self):
        said = Recorder.get(self.name + ".behind")
        if said and said[-1] == "raise":
            raise RuntimeError("no watermark")
        return bool(said and said[-1])

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def test_a_spout_that_is_behind_is_not_held_and_one_that_is_not_waits():
    name = unique_name("behind")
    calls = lambda: len(Recorder.get(name + ".calls"))  # noqa: E731
    b = TopologyBuilder()
    b.set_spout("s", _Behind(name))
    b.set_bolt("null", NullBolt()).shuffle("s")
    # A hold real time does not end while the test runs; only the test's clock ends it.
    conf = {"topology.acker.executors": 0, "topology.sleep.spout.wait.strategy.time.ms": 30_000}
    with SteppedWorker(b.build(), conf) as w:
        spout = w.executor("s")
        Recorder.add(name + ".behind", True)
        for _ in range(3):
            w.step()
        assert calls() == 3 and spout.stats().waits == 0  # asked at every turn
        Recorder.add(name + ".behind", False)
        for _ in range(3):
            w.step()
        assert calls() == 4 and spout.stats().waits == 1  # held after its first dry call
        Recorder.add(name + ".behind", "raise")
        w.advance(30.0)  # the hold is over: asked once more
        w.step()
        assert calls() == 5 and spout.stats().waits == 2 and spout.errors == 1  # reported, and held
        assert spout.stats().to_dict()["waits"] == 2
