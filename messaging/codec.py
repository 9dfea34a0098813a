"""Wire frames: a version byte, a kind byte, then a msgpack body.

A task-message frame body is a list of ``[task_id, payload]`` pairs. A control frame body
is kind-specific (load metrics: {task: load}; backpressure: {task: bool}). Anything that
does not parse exactly is a FrameError, so a foreign or corrupt frame is rejected whole.
"""
from __future__ import annotations

from typing import Any

import msgpack

from squall.messaging.base import TaskMessage

VERSION = 1
KIND_TASKS = 0
KIND_LOAD = 1
KIND_BACKPRESSURE = 2
_KINDS = {KIND_TASKS, KIND_LOAD, KIND_BACKPRESSURE}
_TASKS_HEADER = bytes((VERSION, KIND_TASKS))


class FrameError(ValueError):
    """A frame that is not a valid squall frame of a known version."""


def encode_tasks(messages: list[TaskMessage]) -> bytes:
    return _TASKS_HEADER + msgpack.packb(messages, use_bin_type=True)


def encode_control(kind: int, body: Any) -> bytes:
    if kind not in _KINDS or kind == KIND_TASKS:
        raise ValueError(f"not a control frame kind: {kind}")
    return bytes((VERSION, kind)) + msgpack.packb(body, use_bin_type=True)


def decode(frame: bytes) -> tuple[int, Any]:
    """Return (kind, body); task bodies come back as a list of (task, payload)."""
    if len(frame) < 2:
        raise FrameError(f"frame of {len(frame)} bytes is too short")
    if frame[0] != VERSION:
        raise FrameError(f"frame version {frame[0]} is not {VERSION}")
    kind = frame[1]
    if kind not in _KINDS:
        raise FrameError(f"unknown frame kind {kind}")
    try:
        body = msgpack.unpackb(memoryview(frame)[2:], raw=False, strict_map_key=False,
                               use_list=True)
    except Exception as exc:  # msgpack raises several types for garbage
        raise FrameError(f"undecodable frame body: {exc}") from None
    if kind == KIND_TASKS:
        if not isinstance(body, list):
            raise FrameError("task frame body is not a list")
        for item in body:
            if (not isinstance(item, list) or len(item) != 2 or type(item[0]) is not int
                    or not isinstance(item[1], bytes)):
                raise FrameError(f"task frame entry is not [task, payload]: {item!r:.80}")
        return kind, body
    if not isinstance(body, dict):
        raise FrameError("control frame body is not a map")
    return kind, body
