"""Nesting guards for JSON from ZooKeeper nodes: refuse deep input before anything walks it."""
from __future__ import annotations

import re
from typing import Any


def check_depth(obj: Any, limit: int) -> None:
    """ValueError when lists and objects in ``obj`` nest deeper than ``limit`` (iterative:
    the check itself must not recurse)."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            raise ValueError(f"JSON nested deeper than {limit} levels")
        stack.extend((child, depth + 1) for child in children)


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_INNERMOST = re.compile(rb"\[\]|\{\}")


def check_json_depth(data: bytes, limit: int) -> None:
    """``check_depth`` on JSON text that parses, without walking the decoded values: strings
    are cut out and everything but brackets dropped (C speed), then innermost pairs are
    removed level by level. ValueError past ``limit``."""
    skeleton = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKET)
    depth = 0
    while skeleton:
        depth += 1
        if depth > limit:
            raise ValueError(f"JSON nested deeper than {limit} levels")
        skeleton = _INNERMOST.sub(b"", skeleton)
