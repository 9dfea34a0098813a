"""Unmodified pystorm components in-process (local mode, no child process): pystorm's own
auto-anchor, auto-ack, need_task_ids, BatchingBolt ticks, ReliableSpout replays, and what
happens when user code raises."""
import pytest
import structlog

from squall import Bolt, LocalCluster, TopologyBuilder
from squall.multilang.pystorm_adapter import PystormBolt, PystormSpout
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt
from support.multilang.harness import METERED_WORDS, Names, error_text, metered_conf, metric_totals, run_until

M = "support.multilang.pystorm_components"
FAST = {"squall.log.level": "WARNING", "topology.message.timeout.secs": 5}


@pytest.fixture
def names(request):
    n = Names(request.node.name)
    yield n
    n.clear()


def test_bolt_auto_anchor_and_ack(names):
    words = [[f"word{i}"] for i in range(500)]
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout(names("s"), words, ["word"]))
    b.set_bolt("up", PystormBolt(f"{M}:Upper", {"default": ["upper", "n"]}), 2).shuffle("s")
    b.set_bolt("rec", RecordingBolt(names("rec"))).shuffle("up")
    with LocalCluster(FAST) as c:
        errors = run_until(c, b.build(), {}, lambda: len(Recorder.get(names("s.acked"))) == 500, "acks")
    assert errors == {}
    got = sorted(v for _, _, _, v in Recorder.get(names("rec")))
    assert got == sorted([w.upper(), len(w)] for [w] in words)
    assert sorted(Recorder.get(names("s.acked"))) == list(range(500))


def test_self_logger_writes_each_line_once_under_the_task_that_logged_it(names):
    words = [[f"w{i}"] for i in range(40)]
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout(names("s"), words, ["word"]))
    b.set_bolt("logs", PystormBolt(f"{M}:Logs", {"default": ["word", "task"]}), 2).shuffle("s")
    b.set_bolt("rec", RecordingBolt(names("rec"))).shuffle("logs")
    with structlog.testing.capture_logs() as logs, LocalCluster({**FAST, "squall.log.level": "INFO"}) as c:
        errors = run_until(c, b.build(), {}, lambda: len(Recorder.get(names("s.acked"))) == 40, "acks")
    assert errors == {}
    saw = [e for e in logs if e.get("event") == "pystorm log" and str(e.get("msg", "")).startswith("saw ")]
    assert sorted(e["msg"] for e in saw) == sorted(f"saw {w}" for [w] in words)  # once each, not once per instance
    handled = {word: task for *_, (word, task) in Recorder.get(names("rec"))}  # the task that logged it
    assert {e["msg"][4:]: e["task"] for e in saw} == handled


def test_streams_task_ids_and_named_fields(names):
    sentences = [["a b c"], ["dd ee"], ["f"]]
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout(names("s"), sentences, ["sentence"]))
    b.set_bolt("split", PystormBolt(f"{M}:Splitter", {"words": ["word"], "lengths": ["n"]})).shuffle("s")
    b.set_bolt("w", RecordingBolt(names("words"))).shuffle("split", stream="words")
    b.set_bolt("n", RecordingBolt(names("lengths"))).shuffle("split", stream="lengths")
    with LocalCluster(FAST) as c:
        errors = run_until(c, b.build(), {}, lambda: len(Recorder.get(names("s.acked"))) == 3, "acks")
    assert errors == {}
    assert sorted(v[0] for *_, v in Recorder.get(names("words"))) == ["a", "b", "c", "dd", "ee", "f"]
    assert sorted(v[0] for *_, v in Recorder.get(names("lengths"))) == [1, 2, 3]


class StopAfterOneReplay(FixedTupleSpout):
    """Replays a failed row once, then records it and gives up (so the run ends)."""

    def fail(self, msg_id):
        Recorder.add(self.name + ".failed", msg_id)
        if Recorder.get(self.name + ".failed").count(msg_id) < 2:
            self.todo.append(msg_id)


def test_explicit_fail_reaches_the_spout(names):
    rows = [["apple"], ["xray"], ["pear"]]
    b = TopologyBuilder()
    b.set_spout("s", StopAfterOneReplay(names("s"), rows, ["word"]))
    b.set_bolt("f", PystormBolt(f"{M}:Fails", {"default": ["word"]})).shuffle("s")
    b.set_bolt("rec", RecordingBolt(names("rec"))).shuffle("f")
    with LocalCluster(FAST) as c:
        run_until(c, b.build(), {}, lambda: len(Recorder.get(names("s.failed"))) == 2
                  and len(Recorder.get(names("s.acked"))) == 2, "fails and acks")
    assert sorted(Recorder.get(names("s.acked"))) == [0, 2]
    assert Recorder.get(names("s.failed")) == [1, 1]


def test_raising_component_is_reported_failed_and_replaced(names):
    rows = [["a"], ["b"], ["boom"], ["c"]]
    b = TopologyBuilder()
    b.set_spout("s", StopAfterOneReplay(names("s"), rows, ["word"]))
    b.set_bolt("r", PystormBolt(f"{M}:Raises", {"default": ["word", "seen"]})).shuffle("s")
    b.set_bolt("rec", RecordingBolt(names("rec"))).shuffle("r")
    with LocalCluster({**FAST, "topology.spout.batch.size": 1}) as c:
        errors = run_until(c, b.build(), {"topology.max.spout.pending": 1},
                           lambda: len(Recorder.get(names("s.failed"))) == 2
                           and len(Recorder.get(names("s.acked"))) == 3, "boom failed twice")
    text = "\n".join(e["error"] for e in errors["r"])
    assert "ValueError: boom!" in text
    seen = [v for *_, v in Recorder.get(names("rec"))]
    # a and b counted by the first instance; the replacement (after boom) starts again at 1
    assert seen[:2] == [["a", 1], ["b", 2]] and seen[2] == ["c", 1]


def test_batching_bolt_gets_ticks(names):
    rows = [[w] for w in ["ant", "apple", "bee", "bear", "bat", "cow"]]
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout(names("s"), rows, ["word"]))
    b.set_bolt("batch", PystormBolt(f"{M}:Batches", {"default": ["letter", "n"]},
                                    config={"topology.tick.tuple.freq.secs": 0.2})).shuffle("s")
    b.set_bolt("rec", RecordingBolt(names("rec"))).shuffle("batch")
    with LocalCluster(FAST) as c:
        run_until(c, b.build(), {}, lambda: len(Recorder.get(names("s.acked"))) == 6, "batches acked")
    totals = {}
    for *_, (letter, n) in Recorder.get(names("rec")):
        totals[letter] = totals.get(letter, 0) + n
    assert totals == {"a": 2, "b": 3, "c": 1}


class Sink(Bolt):
    def __init__(self, name):
        self.name = name

    def execute(self, tup):
        Recorder.add(self.name, tup.values[0])
        self.collector.ack(tup)


def test_reliable_spout_in_process(names):
    b = TopologyBuilder()
    b.set_spout("w", PystormSpout(f"{M}:FiniteWords", {"default": ["word"]}))
    b.set_bolt("sink", Sink(names("sink"))).shuffle("w")
    with LocalCluster(FAST) as c:
        run_until(c, b.build(), {"test.words": 120}, lambda: len(Recorder.get(names("sink"))) == 120, "words")
    words = Recorder.get(names("sink"))
    assert len(words) == 120 and set(words) == {"dog", "cat", "zebra", "elephant", "ant", "bee"}


def test_metrics_messages_update_registered_metrics_that_reach_consumers(names):
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout(names("s"), METERED_WORDS, ["word"]))
    b.set_bolt("m", PystormBolt(f"{M}:Metered", {"default": ["word"]})).shuffle("s")

    def counted():
        totals = metric_totals(Recorder.get(names("metrics")), "m")
        return {k: totals.get(k) for k in ("words", "letters")} == {"words": 30, "letters": 120}

    with LocalCluster(FAST) as c:
        errors = run_until(c, b.build(), metered_conf(names("metrics")), counted, "the metrics at the consumer")
    assert "metrics 'words': a count metric's params must be an integer, got 'one'" in error_text(errors, "m")
