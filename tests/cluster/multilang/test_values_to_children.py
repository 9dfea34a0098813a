"""Every value a tuple may hold crosses to a multilang child and back (issue 34): values
hypothesis generates go to a pystorm bolt in a child process that emits what it read,
over Storm's JSON protocol and over pystorm's msgpack, and come back as the same values,
types and all."""
import pytest

from squall import LocalCluster, TopologyBuilder
from squall.multilang import ShellBolt
from squall.testing.components import FixedTupleSpout, RecordingBolt
from support.multilang.harness import run_until
from support.values import canon, sample, values

FAST = {"squall.log.level": "WARNING", "topology.message.timeout.secs": 20,
        "topology.subprocess.timeout.secs": 20}
N = 150
ROWS = []


def rows():
    if not ROWS:
        ROWS.extend([i, v] for i, v in enumerate(sample(values(10), N, seed=35)))
    return ROWS


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_generated_values_cross_to_a_child_and_back(code_dir, names, serializer):
    sent = rows()
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout(names("s"), sent, ["i", "value"]))
    b.set_bolt("echo", ShellBolt(["streamparse_run", f"-s {serializer} pystorm_components.Echo"], ["i", "value"],
                                 serializer=serializer)).shuffle("s")
    b.set_bolt("rec", RecordingBolt(names("rec"))).shuffle("echo")
    with LocalCluster(FAST) as c:
        errors = run_until(c, b.build(), {}, lambda: len(names.get("s.acked")) == N, "every row acked")
    assert errors == {}
    got = {i: v for *_, (i, v) in names.get("rec")}
    assert sorted(got) == list(range(N))
    wrong = [i for i, v in sent if canon(got[i]) != canon(v)]
    assert not wrong, f"{len(wrong)} values changed, e.g. {sent[wrong[0]][1]!r} -> {got[wrong[0]]!r}"
