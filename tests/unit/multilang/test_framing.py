"""Storm's JSON framing and pystorm's msgpack framing: whole messages however the bytes
arrive, and a clear error for what is not a message."""
import pytest

from squall.multilang.framing import JsonFraming, MsgpackFraming, ProtocolError, serializer_name

MESSAGES = [{"command": "emit", "tuple": ["snow white", 7, None, 1.5], "anchors": ["12"]},
            {"pid": 1234}, [3, 4], {"command": "log", "msg": "multi\nline ünïcode"}]


@pytest.mark.parametrize("framing", [JsonFraming, MsgpackFraming])
def test_messages_survive_any_split(framing):
    data = b"".join(framing.encode(m) for m in MESSAGES)
    for cut in range(len(data) + 1):
        f = framing(1 << 20)
        got = f.feed(data[:cut]) + f.feed(data[cut:])
        assert got == MESSAGES


@pytest.mark.parametrize("framing", [JsonFraming, MsgpackFraming])
def test_byte_at_a_time(framing):
    data = b"".join(framing.encode(m) for m in MESSAGES)
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


def test_json_message_without_end_is_bounded():
    f = JsonFraming(1000)
    f.feed(b'{"command": "log", "msg": "' + b"x" * 900)
    with pytest.raises(ProtocolError, match="longer than 1000 bytes"):
        f.feed(b"x" * 200)


def test_json_oversized_message_with_its_end_names_the_key_and_claims_no_missing_end():
    whole = JsonFraming.encode({"command": "log", "msg": "x" * 5000})  # ends with its "end" line
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
        f.feed(MsgpackFraming.encode({"msg": "x" * 5000}))


def test_msgpack_garbage():
    with pytest.raises(ProtocolError, match="not msgpack"):
        MsgpackFraming(1024).feed(b"\xc1" * 4)


def test_json_refuses_what_it_cannot_carry():
    with pytest.raises(TypeError):
        JsonFraming.encode({"tuple": [b"bytes"]})
    with pytest.raises(ValueError):
        JsonFraming.encode({"tuple": [float("nan")]})


def test_serializer_names():
    assert serializer_name("json") == "json"
    assert serializer_name("msgpack") == "msgpack"
    assert serializer_name("org.apache.storm.multilang.JsonSerializer") == "json"
    with pytest.raises(ValueError, match="'yaml'"):
        serializer_name("yaml")
