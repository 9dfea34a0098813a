"""JSON lines: the one set of rules by which a line becomes a tuple, live and in backfills.

``JsonLineRules.parse`` is the only place a JSON line is turned into values; the live
``JsonLinesSpout`` and ``squall spark-run`` (``--input-format jsonl``) both call it, so
bolts see the same values in both. The rules:

- a line is split off as ``squall.contrib.lines`` says (``\\n``, ``\\r\\n`` or ``\\r``);
  a line of spaces and tabs only is skipped and not counted;
- it must be UTF-8 and one JSON object (RFC 8259): anything else is malformed;
- values keep the type JSON gives them: integers are ``int``, numbers with a fraction or
  exponent ``float``, strings ``str`` (``"12"`` stays a string), ``true``/``false`` are
  ``bool``, ``null`` is None, objects are dicts and arrays lists, in their order;
  a key given twice keeps its last value;
- the tuple is the object's values for the declared fields, in declared order; a field
  the object lacks is None, keys that are not fields are ignored;
- malformed, and so skipped and counted: not UTF-8 (UTF-16 and UTF-32, with or without a
  byte-order mark, included); not JSON; JSON that is not an object; ``NaN``/``Infinity``
  (not JSON) or a number too large for a float; a string holding a lone surrogate (a
  ``\\ud800`` escape without its pair); nesting deeper than ``max_depth`` (default 64); a
  line longer than ``max_line_bytes``. Integers of any size are data (Python's ``int``;
  tuples carry them).

``json_value`` is the part of these rules that makes one JSON value of bytes: the Kafka
``JsonTranslator`` decodes record values by it, so a record is data or malformed alike live,
in a Kafka backfill and in a JSON-lines file.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from squall.components import DEFAULT_STREAM
from squall.contrib.line_spout import LineRules, LineSpout, MalformedLine
from squall.contrib.lines import DEFAULT_MAX_LINE_BYTES

DEFAULT_MAX_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _float(text: str) -> float:
    value = float(text)
    if value - value != 0.0:  # inf (NaN cannot come from a JSON number)
        raise MalformedLine(f"number {text[:24]}{'...' if len(text) > 24 else ''} is too large for a float")
    return value


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_float)


def _check(obj: Any, max_depth: int, strings: bool) -> None:
    """Walk a parsed value: nesting depth, and (with ``strings``) lone surrogates."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        t = type(value)
        if t is dict or t is list:
            if depth > max_depth:
                raise MalformedLine(f"nested deeper than {max_depth} levels")
            if t is dict:
                for k, v in value.items():
                    if strings:
                        _check_str(k)
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in value)
        elif strings and t is str:
            _check_str(value)


def _check_str(s: str) -> None:
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedLine("a string holds a lone surrogate (an unpaired \\ud800-\\udfff escape)") from None


class JsonLineRules(LineRules):
    """The JSON-lines rules for one spout stream's ``fields`` (picklable)."""

    def __init__(self, fields: Sequence[str], max_depth: int = DEFAULT_MAX_DEPTH,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        super().__init__(fields, max_line_bytes)
        if not isinstance(max_depth, int) or max_depth < 1:
            raise ValueError(f"max_depth must be an integer >= 1, got {max_depth!r}")
        self.max_depth = max_depth

    def parse(self, raw: bytes) -> list | None:
        if not raw.strip(b" \t"):
            return None
        obj = json_value(raw, self.max_depth, " \t")  # JSON's whitespace, but for line ends (no longer there)
        if type(obj) is not dict:
            raise MalformedLine(f"a JSON {_JSON_NAMES.get(type(obj), type(obj).__name__)}, not an object")
        get = obj.get
        return [get(f) for f in self.fields]


def json_value(raw: bytes, max_depth: int = DEFAULT_MAX_DEPTH, space: str = " \t\r\n") -> Any:
    """One JSON value of ``raw`` by the rules above (``space``: what may surround it);
    MalformedLine naming why it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedLine(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    text = text.strip(space)
    try:
        obj, end = _DECODER.raw_decode(text)
    except RecursionError:
        raise MalformedLine(f"nested deeper than {max_depth} levels") from None
    except MalformedLine:
        raise
    except ValueError as exc:
        raise MalformedLine(f"not JSON ({exc})") from None
    if end != len(text):
        raise MalformedLine(f"not JSON (extra data at character {end})")
    # Depth d takes 2d bytes, so short values need no walk; escapes are rare.
    strings = "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None
    if strings or (len(raw) > 2 * max_depth and raw.count(b"[") + raw.count(b"{") > max_depth):
        _check(obj, max_depth, strings)
    return obj


_JSON_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}


class JsonLinesSpout(LineSpout):
    """Emit the objects of a JSON-lines file (``path``, or the file named by config key
    ``conf_key``) as tuples of ``fields``, by the rules above.

    With several tasks, task i of n reads lines i, i+n, i+2n, ... of the file. Every
    tuple carries its line number as message id (when ``reliable``); a failed one is
    emitted again. A malformed line is reported (``report_error``, so it counts in the
    spout's ``errors``) and skipped.
    """

    def __init__(self, fields: Sequence[str], path: str | None = None, conf_key: str | None = None,
                 stream: str = DEFAULT_STREAM, reliable: bool = True, max_depth: int = DEFAULT_MAX_DEPTH,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        rules = JsonLineRules(fields, max_depth, max_line_bytes)
        super().__init__(rules, path, conf_key, stream, reliable)
