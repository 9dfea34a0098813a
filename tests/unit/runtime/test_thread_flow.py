"""Flow control within an executor thread (squall.runtime.thread_flow): an unacked spout
that outruns a bolt on its own thread skips turns instead of standing a deep queue in front
of it, and no consumer that fails to drain (not ready, fed by itself) holds it for good:
the last two deadlock under a hold that waits for the queue to fall below the mark."""
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from squall import Bolt, LocalCluster, TopologyBuilder
from squall.runtime.thread_flow import STEP_TUPLES, ThreadHold
from squall.testing.components import FixedTupleSpout, Recorder, unique_name
from squall.testing.waiting import wait_for
from support.stepping import SteppedWorker

WORDS = [f"w{i}" for i in range(20)]  # a sentence: 20 words, each word once
SENTENCES = 3000
BATCH = 500  # topology.spout.batch.size (its default): sentences a spout turn emits


class Split(Bolt):
    def execute(self, t):
        emit = self.collector.emit
        for word in t.values[0].split():
            emit([word])

    def declare_output_fields(self, d):
        d.declare(["word"])


class Count(Bolt):
    """Counts words into the Recorder-like Counter named by ``key``."""

    counts: dict[str, Counter] = {}

    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.counts = Count.counts.setdefault(self.key, Counter())

    def execute(self, t):
        self.counts[t.values[0]] += 1


def _wordcount(key):
    b = TopologyBuilder()
    b.set_spout("sentences", FixedTupleSpout(key, [[" ".join(WORDS)]] * SENTENCES, ["sentence"], reliable=False))
    b.set_bolt("split", Split()).shuffle("sentences")
    b.set_bolt("count", Count(key)).fields("split", ["word"])
    return b.build()


def test_an_unacked_word_count_keeps_the_count_queue_near_a_step_and_counts_every_word():
    """Its spout makes 10,000 words a turn against a count step of 2,000: the old runtime let
    the count's queue grow to its capacity (32,768); now a turn's words at most sit over a
    step's worth. Threads as a user runs it (LocalCluster, one executor thread)."""
    key = unique_name("wc-queue")
    conf = {"topology.acker.executors": 0, "topology.batch.flush.interval.millis": 0}  # whole spout turns
    with LocalCluster() as cluster:
        cluster.submit(key, conf, _wordcount(key))
        total = SENTENCES * len(WORDS)
        wait_for(lambda: sum(Count.counts.get(key, {}).values()) >= total, 60, what="every word counted",
                 detail=lambda: f"{sum(Count.counts.get(key, {}).values())} of {total}")
        stats = {s["component"]: s for s in cluster.stats(key)}
    assert Count.counts[key] == dict.fromkeys(WORDS, SENTENCES)  # exact: nothing lost, nothing twice
    assert stats["count"]["queue_peak"] <= STEP_TUPLES + BATCH * len(WORDS)


class Gate(Bolt):
    """Takes no input until the test opens it (``opened[key]``); records what it takes."""

    opened: dict[str, bool] = {}

    def __init__(self, key):
        self.key = key

    def ready(self):
        return Gate.opened.get(self.key, False)

    def execute(self, t):
        Recorder.add(self.key + ".seen", t.values[0])


def test_a_bolt_that_waits_for_the_spout_to_finish_does_not_hold_it():
    """The gate opens only once the spout has emitted everything: its queue stands over the
    mark and stops falling; the spout emits on (every other turn) and everything arrives."""
    key = unique_name("gate")
    rows = 3 * STEP_TUPLES
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout(key, [[i] for i in range(rows)], ["n"], reliable=False))
    b.set_bolt("gate", Gate(key)).shuffle("rows")
    worker = SteppedWorker(b.build(), {"topology.acker.executors": 0, "topology.spout.batch.size": 100})
    try:
        spout = worker.executor("rows")
        rows_spout = spout.tasks[spout.task_ids[0]].spout

        def done():
            if not rows_spout.todo:
                Gate.opened[key] = True
            return len(Recorder.get(key + ".seen")) == rows

        worker.run(done, turns=500)
        assert sorted(Recorder.get(key + ".seen")) == list(range(rows))
        assert spout.hold.holds > 0 and spout.hold.stalls > 0
    finally:
        worker.close()


class Ring(Bolt):
    """Records each row it takes; the first row also starts ``tokens`` tuples round the
    bolt itself (stream "lap"), forever: its queue never falls below them."""

    def __init__(self, key, tokens):
        self.key, self.tokens = key, tokens

    def execute(self, t):
        if t.source_stream == "lap":
            self.collector.emit(t.values, "lap")
            return
        Recorder.add(self.key, t.values[0])
        if t.values[0] == 0:
            for i in range(self.tokens):
                self.collector.emit([i], "lap")

    def declare_output_fields(self, d):
        d.declare_stream("lap", ["token"])


def test_a_bolt_that_feeds_itself_forever_does_not_starve_the_spout():
    key = unique_name("ring")
    rows = 6 * BATCH
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout(key, [[i] for i in range(rows)], ["n"], reliable=False))
    b.set_bolt("ring", Ring(key + ".rows", 3 * STEP_TUPLES // 2)).shuffle("rows").shuffle("ring", "lap")
    worker = SteppedWorker(b.build(), {"topology.acker.executors": 0})
    try:
        worker.run(lambda: len(Recorder.get(key + ".rows")) == rows, turns=500)
        assert sorted(Recorder.get(key + ".rows")) == list(range(rows))
        hold = worker.executor("rows").hold
        assert hold.holds > 0 and hold.stalls > 0
    finally:
        worker.close()


def test_the_hold_lasts_while_a_queue_over_the_mark_falls():
    a, b = [0] * 100, [0] * 10
    hold = ThreadHold([a, b], mark=50)
    assert hold.held()          # a is over the mark
    del a[:30]
    assert hold.held()          # and fell (70)
    assert not hold.held()      # did not fall: the spout emits this turn
    assert hold.held()          # over the mark again after a turn that emitted
    del a[:30]
    assert not hold.held()      # under the mark (40)
    b.extend([0] * 100)
    assert hold.held()          # any queue of the thread
    assert (hold.holds, hold.stalls) == (4, 1)
    assert not ThreadHold([], mark=0).held()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 200), min_size=1, max_size=60), st.integers(0, 100))
def test_a_hold_never_outlasts_a_queue_that_stopped_falling(depths, mark):
    """Whatever the depths seen, a held turn follows a held turn only if the queue fell, so
    the spout is held at most (depth at the first held turn - mark) turns in a row."""
    q: list = []
    hold = ThreadHold([q], mark)
    run, first, prev = 0, 0, None
    for depth in depths:
        q[:] = [0] * depth
        if hold.held():
            assert depth > mark
            if run:
                assert depth < prev
            else:
                first = depth
            run += 1
            assert run <= first - mark
        else:
            run = 0
        prev = depth
    assert hold.holds + hold.stalls <= len(depths)


def test_only_queues_of_the_spouts_own_thread_hold_it():
    """A thread per executor (Storm's model): the spout shares its thread with no queue and
    only the full mark holds it. Two threads: only the queues of its own thread count."""
    key = unique_name("threads")
    alone = SteppedWorker(_wordcount(key), {"topology.acker.executors": 0, "topology.worker.executor.threads": 0})
    try:
        assert alone.executor("sentences").hold is None
    finally:
        alone.close()
    two = SteppedWorker(_wordcount(key), {"topology.acker.executors": 0, "topology.worker.executor.threads": 2})
    try:
        rt = two.runtime
        group = next(g for g in rt.thread_groups if rt.task_to_component[g[0][0]] == "sentences")
        mates = {rt.task_to_component[ex[0]] for ex in group} - {"sentences"}
        held_by = {e.component for e in two.executors if e.queue in two.executor("sentences").hold.queues}
        assert held_by == mates and "split" not in held_by  # split runs on the other thread
    finally:
        two.close()
