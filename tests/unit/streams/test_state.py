"""update_state_by_key and state_query in local mode: exactly-once state through failed
values (each failure rolls every task back to the last checkpoint and the spout replays
from its committed position), and queries answered from the state's own tasks."""
from __future__ import annotations

import collections
import random

from squall import LocalCluster, Spout
from squall.state.inspect import read_record
from squall.streams import StreamBuilder
from squall.testing.components import PositionedRowSpout, Recorder, RecordingBolt, unique_name
from squall.testing.state import committed_component
from squall.testing.waiting import wait_for

MEMORY = {"topology.state.provider": "memory"}
RNG = random.Random(7)
ROWS = [[RNG.choice("abcdefg"), RNG.randint(1, 20)] for _ in range(600)]


class GatedSpout(Spout):
    """Emits its rows once ``Recorder.get(gate)`` holds ``after`` items: queries that must
    come after the updates they read."""

    def __init__(self, gate: str, after: int, rows: list[list], fields: list[str]) -> None:
        self.gate, self.after, self.rows, self.fields = gate, after, rows, fields

    def open(self, conf, context, collector):
        self.collector, self.todo = collector, list(self.rows)

    def next_tuple(self):
        if self.todo and len(set(Recorder.get(self.gate))) >= self.after:
            row = self.todo.pop(0)
            self.collector.emit(row, msg_id=row[0])

    def declare_output_fields(self, declarer):
        declarer.declare(self.fields)


def fail_once(name: str, every: int):
    """A step that raises the first time it sees every ``every``-th amount's row."""
    def check(row):
        key = (row[0], row[1])
        if row[1] % every == 0 and key not in set(map(tuple, Recorder.get(name))):
            Recorder.add(name, list(key))
            raise RuntimeError(f"injected failure on {key}")
        return row
    return check


def test_state_is_updated_exactly_once_through_failures_and_queries_read_it():
    tag = unique_name("state")
    b = StreamBuilder()
    rows = b.new_stream(PositionedRowSpout(tag, ROWS, ["k", "n"]), value=["k", "n"], name="rows")
    totals = (rows.map(fail_once(f"{tag}.raised", 13)).map_to_pair(lambda r: (r[0], r[1]))
              .repartition(2).update_state_by_key(0, lambda acc, n: acc + n, name="totals"))
    totals.to_pair_stream().filter(lambda kv: kv[1] > 200).to(RecordingBolt(f"{tag}.big"))
    keys = sorted({r[0] for r in ROWS})
    queries = b.new_stream(GatedSpout(f"{tag}.acked", len(ROWS), [[k] for k in keys + ["nope"]], ["k"]),
                           name="queries")
    queries.state_query(totals).to(RecordingBolt(f"{tag}.answers"))
    topology = b.build()
    bolt = "totals-filter-state_query"  # the state's bolt: its filter and the query run in it
    tasks = topology.components[bolt].parallelism
    assert tasks == 2
    conf = {**MEMORY, "topology.state.checkpoint.interval.ms": 100, "topology.max.spout.pending": 200,
            "squall.log.level": "ERROR"}
    with LocalCluster() as cluster:
        cluster.submit(tag, conf, topology)
        wait_for(lambda: len(set(Recorder.get(f"{tag}.acked"))) == len(ROWS), 90, "every row acked (committed)")
        wait_for(lambda: len(Recorder.get(f"{tag}.answers")) == len(keys), 30, "an answer per known key")
        record = read_record(MEMORY, tag)
        state = committed_component(MEMORY, tag, bolt, tasks, record.restore_point())
        errors = cluster.errors(tag)
    expected: collections.Counter = collections.Counter()
    for k, n in ROWS:
        expected[k] += n
    merged = {k: v for task in state for k, v in task.items()}
    assert merged == dict(expected)
    assert all(not (set(a) & set(c)) for a in state for c in state if a is not c), "each key in one task"
    assert Recorder.get(f"{tag}.raised"), "failures were injected"
    assert "injected failure" in str(errors)
    assert sorted(tuple(v) for v in RecordingBolt.values(f"{tag}.answers")) == sorted(expected.items())
    # The stream of updates is at least once: every running total it gave is one the state passed
    # through, and the last one per key is the total.
    big = RecordingBolt.values(f"{tag}.big")
    assert {k: max(v for k2, v in big if k2 == k) for k, _ in big} == {k: v for k, v in expected.items() if v > 200}
