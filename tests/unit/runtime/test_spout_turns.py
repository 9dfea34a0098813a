"""A spout capped by max pending keeps several batches in flight (turn_limit): its
allowance goes downstream in quarters, so the stage after it works on the first while the
spout emits the next, and acks of the first free room while the rest is on its way."""
from squall import Bolt, Spout, TopologyBuilder
from squall.runtime.spout_executor import IN_FLIGHT, turn_limit
from squall.testing.components import unique_name
from support.stepping import SteppedWorker

HELD: dict[str, list] = {}  # bolt name -> its input, not yet acked
BATCHES: dict[str, list[int]] = {}  # bolt name -> tuples it found at each step


def test_a_turn_is_the_spout_batch_size_or_a_fourth_of_max_pending():
    assert IN_FLIGHT == 4
    assert turn_limit(500, None) == 500          # no cap: the configured batch
    assert turn_limit(500, 1000) == 250          # Storm-perf's 1000 pending: four batches of 250
    assert turn_limit(500, 100_000) == 500       # a large allowance: the batch size still bounds a turn
    assert turn_limit(500, 1001) == 251          # rounded up: four turns cover the allowance
    assert turn_limit(500, 3) == 1 and turn_limit(500, 1) == 1 and turn_limit(500, 0) == 1


class Endless(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        self.collector.emit([self.n], msg_id=self.n)
        self.n += 1

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


class Holding(Bolt):
    """Keeps its input unacked (a round trip to another worker that has not come back)."""

    def __init__(self, name):
        self.name = name

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        HELD.setdefault(self.name, []).append(tup)


def test_a_capped_spout_sends_its_allowance_in_four_batches_and_refills_as_the_first_is_acked():
    name = unique_name("turns")
    b = TopologyBuilder()
    b.set_spout("src", Endless())
    b.set_bolt("sink", Holding(name)).shuffle("src")
    # Two ackers: acks travel as messages, as they do across workers (with the only acker
    # on its thread, a tree completes within the turn that emitted it and turns are not bounded).
    with SteppedWorker(b.build(), {"topology.acker.executors": 2, "topology.max.spout.pending": 1000,
                                   "topology.spout.batch.size": 500}) as w:
        sizes = []
        for _ in range(6):
            before = len(HELD.get(name, []))
            w.step()
            sizes.append(len(HELD.get(name, [])) - before)
        # Before, the allowance went as two batches of 500: the stage downstream had all
        # of it or none, and the spout waited for a whole batch's round trip.
        assert sizes == [250, 250, 250, 250, 0, 0]
        sink = w.executor("sink").tasks
        coll = next(iter(sink.values()))[1]
        for tup in HELD[name][:250]:  # the first batch's acks come back
            coll.ack(tup)
        w.step()
        w.step()
        # The spout emits again at once, with three batches still in flight.
        assert len(HELD[name]) == 1250
