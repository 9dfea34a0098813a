"""Storm's JSON framing and pystorm's msgpack framing: whole messages however the bytes
arrive, and a clear error for what is not a message; every value a tuple may hold
crosses both ways as itself."""
import json

import msgpack
import pytest
from hypothesis import given, settings

from squall.multilang.framing import JsonFraming, MsgpackFraming, ProtocolError, serializer_name
from support.values import canon, values

MESSAGES = [{"command": "emit", "tuple": ["snow white", 7, None, 1.5], "anchors": ["12"]},
            {"pid": 1234}, [3, 4], {"command": "log", "msg": "multi\nline ünïcode"}]


@pytest.mark.parametrize("framing", [JsonFraming, MsgpackFraming])
def test_messages_survive_any_split(framing):
    data = b"".join(framing(1 << 20).encode(m) for m in MESSAGES)
    for cut in range(len(data) + 1):
        f = framing(1 << 20)
        got = f.feed(data[:cut]) + f.feed(data[cut:])
        assert got == MESSAGES


@pytest.mark.parametrize("framing", [JsonFraming, MsgpackFraming])
def test_byte_at_a_time(framing):
    data = b"".join(framing(1 << 20).encode(m) for m in MESSAGES)
    f = framing(1 << 20)
    got = []
    for i in range(len(data)):
        got += f.feed(data[i:i + 1])
    assert got == MESSAGES


def test_json_body_over_several_lines_and_crlf():
    f = JsonFraming(1 << 20)
    assert f.feed(b'{"command":\r\n "sync"}\r\nend\r\n') == [{"command": "sync"}]


def test_json_garbage_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="not JSON"):
        JsonFraming(1 << 20).feed(b"hello world\nend\n")


def test_json_nested_deeper_than_the_stack_is_a_protocol_error_not_a_crash():
    """Within the size bound, a child can nest arrays deeper than Python's recursion limit:
    the framing says so (the link then breaks as for any bad JSON), no RecursionError escapes."""
    f = JsonFraming(1 << 20)
    with pytest.raises(ProtocolError, match="nested too deeply"):
        f.feed(b"[" * 100_000 + b"]" * 100_000 + b"\nend\n")


def test_json_message_without_end_is_bounded():
    f = JsonFraming(1000)
    f.feed(b'{"command": "log", "msg": "' + b"x" * 900)
    with pytest.raises(ProtocolError, match="longer than 1000 bytes"):
        f.feed(b"x" * 200)


def test_json_oversized_message_with_its_end_names_the_key_and_claims_no_missing_end():
    whole = JsonFraming(1000).encode({"command": "log", "msg": "x" * 5000})  # ends with its "end" line
    for chunks in ([whole], [whole[:3000], whole[3000:]]):
        f = JsonFraming(1000)
        with pytest.raises(ProtocolError) as caught:
            for chunk in chunks:
                f.feed(chunk)
        assert str(caught.value) == "a message longer than 1000 bytes (topology.multilang.max.message.bytes)"


def test_json_many_lines_without_end_are_bounded():
    f = JsonFraming(1000)
    with pytest.raises(ProtocolError, match="longer than 1000"):
        for _ in range(100):
            f.feed(b"noise line\n")


def test_msgpack_oversized_message():
    f = MsgpackFraming(1024)
    with pytest.raises(ProtocolError, match=r"longer than 1024 bytes \(topology.multilang.max.message.bytes\)"):
        f.feed(f.encode({"msg": "x" * 5000}))


def test_msgpack_garbage():
    with pytest.raises(ProtocolError, match="not msgpack"):
        MsgpackFraming(1024).feed(b"\xc1" * 4)


class Opaque:
    pass


@pytest.mark.parametrize("framing", [JsonFraming, MsgpackFraming])
def test_a_value_no_rule_carries_is_refused(framing):
    with pytest.raises(ValueError, match="Opaque"):
        framing(1 << 20).encode({"tuple": [Opaque()]})


@settings(max_examples=20, deadline=None)
@given(values())
def test_every_value_crosses_to_a_child_and_back(v):
    """A child that echoes what it read (pystorm's decoders: json.loads, msgpack.unpackb)
    sends back what it got: squall reads the same values, types and all."""
    for framing in (JsonFraming(1 << 20), MsgpackFraming(1 << 20)):
        sent = framing.encode({"command": "emit", "tuple": [v]})
        if framing.name == "json":
            echoed = json.dumps(json.loads(sent[:-len(b"\nend\n")])).encode() + b"\nend\n"
        else:
            echoed = msgpack.packb(msgpack.unpackb(sent, raw=False), use_bin_type=True)  # pystorm's strict keys
        (back,) = framing.feed(echoed)
        assert canon(back["tuple"][0]) == canon(v), framing.name


def test_json_children_read_plain_json_and_tags():
    framing = JsonFraming(1 << 20)
    text = json.loads(framing.encode({"tuple": [1, 2 ** 80, "x", (1, b"\x00"), {1: float("nan")}]})[:-5])
    assert text["tuple"] == [1, 2 ** 80, "x", {"$squall": ["tuple", [1, {"$squall": ["bytes", "AA=="]}]]},
                             {"$squall": ["map", [[1, {"$squall": ["float", "nan"]}]]]}]
    # an object that only looks like a tag stays what it is
    assert framing.feed(b'{"$squall": ["tuple", 5], "x": 1}\nend\n{"$squall": ["nope", 1]}\nend\n') == \
        [{"$squall": ["tuple", 5], "x": 1}, {"$squall": ["nope", 1]}]


def test_serializer_names():
    assert serializer_name("json") == "json"
    assert serializer_name("msgpack") == "msgpack"
    assert serializer_name("org.apache.storm.multilang.JsonSerializer") == "json"
    with pytest.raises(ValueError, match="'yaml'"):
        serializer_name("yaml")


@pytest.mark.parametrize("framing", [JsonFraming, MsgpackFraming])
@pytest.mark.parametrize("tasks", [[], [7], [3, 12, 1024]])
def test_an_emits_task_ids_read_back_as_the_list_they_are(framing, tasks):
    """The answer to each emit (storm.py waits for one per word) takes a short way to its
    bytes; a child reads back exactly the ids, as from any other message."""
    f = framing(1 << 20)
    data = f.encode_task_ids(tasks)
    assert data == f.encode(list(tasks))
    assert framing(1 << 20).feed(data) == [tasks]
