"""Wire frames: a version byte, a kind byte, then a msgpack body.

A task-message frame body is a list of ``[task_id, payload]`` pairs. A control frame body
is kind-specific (load metrics: {task: load 0..1}; backpressure: {task: bool}, the state of
every task of the sending worker). Anything that does not parse exactly is a FrameError,
so a foreign or corrupt frame is rejected whole. Frames are at most ``max_bytes`` long and
their bodies at most MAX_ENTRIES entries, so what a frame decodes to stays bounded.
"""
from __future__ import annotations

from typing import Any

import msgpack

from squall.errors import SquallError

# A task message: (target task id, payload bytes). The payload is opaque to messaging.
TaskMessage = tuple[int, bytes]

VERSION = 1
KIND_TASKS = 0
KIND_LOAD = 1
KIND_BACKPRESSURE = 2
_KINDS = {KIND_TASKS, KIND_LOAD, KIND_BACKPRESSURE}
_TASKS_HEADER = bytes((VERSION, KIND_TASKS))
HEADER_BYTES = len(_TASKS_HEADER)
# Entries of a frame body (task messages, or tasks of a control frame): a batch carries one
# entry per target task, so this is far above what squall sends and still bounds decoding.
MAX_ENTRIES = 65536
# The default frame size limit (zmq.max.message.bytes).
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
# Frames are cut at about this many payload bytes: zmq.hwm frames per socket then hold at
# most a few MiB, whatever the backlog behind them.
FRAME_TARGET_BYTES = 256 * 1024
# msgpack encodes a [task, payload] pair in at most this many bytes besides the payload.
ENTRY_OVERHEAD = 16


class FrameError(SquallError, ValueError):
    """A frame that is not a valid squall frame of a known version."""


def encode_tasks(messages: list[TaskMessage]) -> bytes:
    return _TASKS_HEADER + msgpack.packb(messages, use_bin_type=True)


def chunks(messages: list[TaskMessage], max_bytes: int,
           target_bytes: int = FRAME_TARGET_BYTES) -> list[list[TaskMessage]]:
    """Split ``messages`` into runs of about ``target_bytes`` (and at most ``max_bytes``)
    of payload each, one frame per run, so what a socket's high-water mark of frames holds
    is bounded in bytes. A message over the target goes alone (over ``max_bytes``, the
    receiver refuses it)."""
    budget = min(target_bytes, max_bytes - HEADER_BYTES - ENTRY_OVERHEAD) if max_bytes else target_bytes
    if sum(len(p) for _, p in messages) + ENTRY_OVERHEAD * len(messages) <= budget:
        return [messages]
    out: list[list[TaskMessage]] = []
    run: list[TaskMessage] = []
    size = 0
    for m in messages:
        n = len(m[1]) + ENTRY_OVERHEAD
        if run and size + n > budget:
            out.append(run)
            run, size = [], 0
        run.append(m)
        size += n
    if run:
        out.append(run)
    return out


def encode_control(kind: int, body: Any) -> bytes:
    if kind not in _KINDS or kind == KIND_TASKS:
        raise ValueError(f"not a control frame kind: {kind}")
    return bytes((VERSION, kind)) + msgpack.packb(body, use_bin_type=True)


def decode(frame: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[int, Any]:
    """Return (kind, body); task bodies come back as a list of (task, payload)."""
    if len(frame) < 2:
        raise FrameError(f"frame of {len(frame)} bytes is too short")
    if max_bytes and len(frame) > max_bytes:
        raise FrameError(f"frame of {len(frame)} bytes is over the limit of {max_bytes}")
    if frame[0] != VERSION:
        raise FrameError(f"frame version {frame[0]} is not {VERSION}")
    kind = frame[1]
    if kind not in _KINDS:
        raise FrameError(f"unknown frame kind {kind}")
    try:
        body = msgpack.unpackb(memoryview(frame)[2:], raw=False, strict_map_key=False,
                               use_list=True, max_array_len=MAX_ENTRIES, max_map_len=MAX_ENTRIES,
                               max_ext_len=0)
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
    for task, value in body.items():
        if type(task) is not int:
            raise FrameError(f"control frame key {task!r:.40} is not a task id")
        if kind == KIND_BACKPRESSURE and type(value) is not bool:
            raise FrameError(f"backpressure of task {task} is {value!r:.40}, not true/false")
        if kind == KIND_LOAD and not (type(value) in (int, float) and 0.0 <= value <= 1.0):
            raise FrameError(f"load of task {task} is {value!r:.40}, not a number in 0..1")
    return kind, body
