"""What a child may say, checked field by field; the handshake's context."""
import pytest

from squall import TopologyBuilder
from squall.context import TopologyContext
from squall.model import component_tasks, system_topology, task_ids
from squall.multilang import protocol
from squall.multilang.framing import ProtocolError
from squall.multilang.protocol import BadMessage
from squall.testing.components import FixedTupleSpout, RecordingBolt


def parse(obj, commands=protocol.BOLT_COMMANDS):
    return protocol.parse(obj, commands)


def test_emit_defaults_are_storms():
    m = parse({"command": "emit", "tuple": ["a", 1]})
    assert (m.stream, m.task, m.need_task_ids, m.anchors, m.id) == ("default", 0, True, [], None)


def test_emit_fields():
    m = parse({"command": "emit", "tuple": [1], "stream": "s", "task": 9, "need_task_ids": False,
               "anchors": "12", "id": 5})
    assert (m.stream, m.task, m.need_task_ids, m.anchors, m.id) == ("s", 9, False, ["12"], 5)


@pytest.mark.parametrize("bad, field", [
    ({"command": "emit"}, "tuple"),
    ({"command": "emit", "tuple": "abc"}, "tuple"),
    ({"command": "emit", "tuple": [], "task": "9"}, "task"),
    ({"command": "emit", "tuple": [], "task": True}, "task"),
    ({"command": "emit", "tuple": [], "stream": 3}, "stream"),
    ({"command": "emit", "tuple": [], "need_task_ids": "yes"}, "need_task_ids"),
    ({"command": "emit", "tuple": [], "anchors": [["x"]]}, "anchors"),
    ({"command": "ack"}, "id"),
    ({"command": "fail", "id": 1.5}, "id"),
    ({"command": "metrics", "name": ""}, "name"),
    ({"command": "launch-missiles"}, "unknown command"),
    ({"tuple": []}, "command"),
    (["not", "a", "dict"], "object"),
])
def test_bad_messages_name_the_problem(bad, field):
    with pytest.raises(BadMessage, match=field):
        parse(bad)


def test_spout_children_may_not_ack():
    with pytest.raises(BadMessage, match="unknown command"):
        protocol.parse({"command": "ack", "id": "1"}, protocol.SPOUT_COMMANDS)


def test_log_levels_and_text():
    assert parse({"command": "log", "msg": "hi", "level": 4}).level == protocol.ERROR
    assert parse({"command": "log", "msg": 12, "level": 99}).level == protocol.INFO
    assert parse({"command": "log", "msg": 12}).msg == "12"


@pytest.mark.parametrize("reply", [{"pid": "12"}, {"pid": 0}, {"pid": True}, {"command": "sync"}, [1]])
def test_handshake_reply_must_be_a_pid(reply):
    with pytest.raises(ProtocolError, match="handshake reply"):
        protocol.parse_pid(reply)


def test_context_info_has_storms_shape():
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout("w", [["a"]], ["word"]))
    b.set_bolt("count", RecordingBolt("r"), 2).fields("words", ["word"])
    system = system_topology(b.build(), {"topology.workers": 1})
    t2c = task_ids(system)
    c2t = component_tasks(t2c)
    task = c2t["count"][1]
    ctx = TopologyContext("topo-1", system, t2c, c2t, task, frozenset(t2c))
    info = protocol.context_info(ctx)
    assert info["taskid"] == task and info["componentid"] == "count"
    assert info["task->component"][str(task)] == "count" and "__acker" in info["task->component"].values()
    assert info["source->stream->grouping"] == {"words": {"default": {"type": "FIELDS"}}}
    assert info["source->stream->fields"] == {"words": {"default": ["word"]}}
    spout_ctx = TopologyContext("topo-1", system, t2c, c2t, c2t["words"][0], frozenset(t2c))
    sinfo = protocol.context_info(spout_ctx)
    assert sinfo["stream->target->grouping"] == {"default": {"count": {"type": "FIELDS"}}}
    assert sinfo["streams"] == ["default"] and sinfo["stream->outputfields"] == {"default": ["word"]}


def test_messages_squall_sends():
    assert protocol.heartbeat("7") == {"id": "7", "comp": None, "stream": "__heartbeat", "task": -1, "tuple": []}
    assert protocol.spout_command("next") == {"command": "next", "id": ""}
    assert protocol.bolt_tuple("1", "c", "s", 3, [1]) == {"id": "1", "comp": "c", "stream": "s", "task": 3,
                                                            "tuple": [1]}
