"""How multilang messages travel over a child's pipes: Storm's JSON framing and pystorm's
msgpack framing. Plain code, no I/O: an encoder turns a message into bytes, a decoder is fed
the bytes as they arrive and hands back whole messages.

JSON (Storm's protocol): each message is JSON text followed by a line holding ``end``; the
text may span lines. msgpack (pystorm's ``MsgpackSerializer``): messages follow each other
with no delimiter. Both decoders refuse to hold more than ``max_bytes`` of one message, so a
child that writes an endless or enormous message is caught at that bound.

Tuple values cross both ways as what they are (squall.values): over msgpack, the types it
does not know are the wire's extension types (a child that echoes one sends it back
unchanged), and so is a map whose keys are not all text (pystorm reads only text keys);
over JSON, they are tagged objects (squall.multilang.json_values).
"""
from __future__ import annotations

import codecs
import json
from collections.abc import Sequence
from typing import Any

import msgpack

from squall.errors import SquallError
from squall.multilang.json_values import object_hook, to_json
from squall.values import PLAIN, ValueCodec

JSON, MSGPACK = "json", "msgpack"
# Names a Storm or streamparse topology may give topology.multilang.serializer.
SERIALIZER_NAMES = {
    "json": JSON,
    "msgpack": MSGPACK,
    "org.apache.storm.multilang.JsonSerializer": JSON,
}
END = b"end"
BOM = codecs.BOM_UTF8
TERMINATOR = b"\nend\n"
ANSWERS_KEPT = 4096  # task-id answers kept encoded (JsonFraming.encode_task_ids)


class ProtocolError(SquallError, ValueError):
    """The child broke the protocol (bad framing, wrong handshake). ``messages``: the whole
    messages that came before the break in the same bytes."""

    def __init__(self, text: str, messages: list[Any] | None = None) -> None:
        super().__init__(text)
        self.messages = messages or []


def too_long(max_bytes: int) -> str:
    """The one text of a message over the bound, whether or not its end was seen."""
    return f"a message longer than {max_bytes} bytes (topology.multilang.max.message.bytes)"


def serializer_name(value: Any) -> str:
    """``json`` or ``msgpack`` for a topology.multilang.serializer value; ValueError naming it."""
    name = SERIALIZER_NAMES.get(value) if isinstance(value, str) else None
    if name is None:
        raise ValueError(f"topology.multilang.serializer {value!r} is not one of "
                         f"{sorted(SERIALIZER_NAMES)}")
    return name


class JsonFraming:
    """Storm's framing: ``<json>\\nend\\n``."""

    name = JSON

    def __init__(self, max_bytes: int, codec: ValueCodec = PLAIN) -> None:
        self.max_bytes = max_bytes
        self.codec = codec
        # Built once: json.loads builds a decoder per call when given a hook. Text with no
        # tag in it (no "$squall" and no \u escape that could spell one) skips the hook's
        # Python call per object.
        self._tagged = json.JSONDecoder(object_hook=object_hook(codec)).decode
        plain = json.JSONDecoder()
        self._plain = plain.decode
        self._scan = plain.scan_once  # type: ignore[attr-defined]  # JSONDecoder's own; typeshed omits it
        self._answers: dict[tuple[int, ...], bytes] = {}
        self._partial = b""          # an unterminated line
        self._body: list[bytes] = []  # complete lines of the message being read
        self._body_bytes = 0

    def encode(self, message: Any) -> bytes:
        """Raises TypeError/ValueError when ``message`` holds a value no rule carries."""
        return json.dumps(to_json(message, self.codec), ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False).encode("utf-8") + b"\nend\n"

    def encode_task_ids(self, tasks: Sequence[int]) -> bytes:
        """The answer to an emit (task ids are squall's own ints): what ``encode`` makes of
        them, without its walk of the message (one per word for storm.py). Answers are
        kept by their tasks (a bounded number: the routes' target sets, few in practice)."""
        key = tasks if type(tasks) is tuple else tuple(tasks)
        answer = self._answers.get(key)
        if answer is None:
            answer = f"[{','.join(map(str, key))}]\nend\n".encode()
            if len(self._answers) < ANSWERS_KEPT:
                self._answers[key] = answer
        return answer

    def feed(self, data: bytes) -> list[Any]:
        """The messages completed by ``data`` (ProtocolError on a bad or oversized one)."""
        out: list[Any] = []
        if not data:
            return out
        if not self._partial and not self._body and data[-5:] == TERMINATOR and b"\r" not in data:
            whole = self._whole(data, out)
            if whole:
                return out
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        body = self._body
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if line == END:
                self._body, self._body_bytes = [], 0
                try:
                    out.append(self._parse(body[0] if len(body) == 1 else b"\n".join(body)))
                except ProtocolError as exc:
                    raise ProtocolError(str(exc), out) from None
                body = self._body
                continue
            body.append(line)
            self._body_bytes += len(line) + 1
            if self._body_bytes > self.max_bytes:
                raise ProtocolError(too_long(self.max_bytes), out)
        if self._body_bytes + len(self._partial) > self.max_bytes:
            raise ProtocolError(too_long(self.max_bytes), out)
        return out

    def _whole(self, data: bytes, out: list[Any]) -> bool:
        """``feed`` of bytes that are whole messages (each ending ``\nend\n``, no CR): one
        split, no walk of their lines; the messages go into ``out``. False, with ``out``
        untouched, when the bytes hold an empty message (an ``end`` line first): ``feed``'s
        walk reads those."""
        texts = data.split(TERMINATOR)
        if texts.pop():  # the last terminator overlapped an earlier one: "...\nend\nend\n"
            return False
        limit = self.max_bytes - 1  # the walk counts each line with its newline
        for text in texts:
            if text[:4] == b"end\n" or text == END:
                return False
        for text in texts:
            if len(text) > limit:
                raise ProtocolError(too_long(self.max_bytes), out)
            try:
                out.append(self._parse(text))
            except ProtocolError as exc:
                raise ProtocolError(str(exc), out) from None
        return True

    def _parse(self, text: bytes) -> Any:
        tagged = b"$squall" in text or b"\\u" in text
        try:
            # as json.loads decodes UTF-8 bytes (a BOM skipped, lone surrogates allowed)
            s = text.decode("utf-8-sig" if text[:3] == BOM else "utf-8", "surrogatepass")
            if not tagged:
                try:  # the scanner alone, when no space surrounds the value (decode's two regex looks)
                    value, end = self._scan(s, 0)
                    if end == len(s):
                        return value
                except StopIteration:
                    pass  # decode says what is wrong, in json.loads's words
            return (self._tagged if tagged else self._plain)(s)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"not JSON: {exc}; got {text[:200]!r}") from None
        except RecursionError:  # arrays or objects nested deeper than the interpreter's stack
            raise ProtocolError(f"not JSON this side reads: nested too deeply; got {text[:200]!r}") from None

    @property
    def buffered(self) -> int:
        return self._body_bytes + len(self._partial)


class MsgpackFraming:
    """pystorm's msgpack framing: back-to-back msgpack objects."""

    name = MSGPACK

    def __init__(self, max_bytes: int, codec: ValueCodec = PLAIN) -> None:
        self.max_bytes = max_bytes
        self.codec = codec
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max_bytes,
                                          ext_hook=codec.ext_hook)

    def encode(self, message: Any) -> bytes:
        # pystorm's reader takes only str and bytes map keys: other maps go as MAP extensions
        return self.codec.pack(self.codec.text_keyed(message))

    def encode_task_ids(self, tasks: Sequence[int]) -> bytes:
        return self.codec.pack(tasks)

    def feed(self, data: bytes) -> list[Any]:
        out: list[Any] = []
        if not data:
            return out
        try:
            self._unpacker.feed(data)
        except msgpack.BufferFull:
            raise ProtocolError(too_long(self.max_bytes)) from None
        try:
            for message in self._unpacker:
                out.append(message)
        except msgpack.OutOfData:  # pragma: no cover - the iterator stops on its own
            pass
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
            raise ProtocolError(f"not msgpack: {exc}", out) from None
        return out

    @property
    def buffered(self) -> int:
        return 0  # the unpacker bounds itself (max_buffer_size)


def framing(name: str, max_bytes: int, codec: ValueCodec = PLAIN) -> JsonFraming | MsgpackFraming:
    return JsonFraming(max_bytes, codec) if name == JSON else MsgpackFraming(max_bytes, codec)
