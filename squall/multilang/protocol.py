"""Storm's multilang protocol as data: the messages squall sends a child and the checks on
what a child sends back (docs/Multilang-protocol.md in Storm's repository). Plain code.

Everything a child writes is hostile input: ``parse`` accepts only the shapes the protocol
names and raises BadMessage naming the field otherwise. A bad message is reported and dropped;
broken framing or a wrong handshake (ProtocolError) ends the child.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from squall.context import TopologyContext
from squall.errors import SquallError
from squall.multilang.framing import ProtocolError

HEARTBEAT_STREAM = "__heartbeat"
SYSTEM_TASK = -1
BOLT_COMMANDS = frozenset({"emit", "ack", "fail", "log", "error", "metrics", "sync"})
SPOUT_COMMANDS = frozenset({"emit", "log", "error", "metrics", "sync"})
# Storm's ShellLogLevel: TRACE, DEBUG, INFO, WARN, ERROR.
TRACE, DEBUG, INFO, WARN, ERROR = range(5)


class BadMessage(SquallError, ValueError):
    """A well-framed message of the wrong shape: reported and dropped, the child goes on."""


class ShellMsg:
    """One checked message from a child."""

    __slots__ = ("command", "id", "stream", "task", "tuple", "anchors", "need_task_ids",
                 "msg", "level", "name", "params")

    def __init__(self, command: str) -> None:
        self.command = command
        self.id: Any = None
        self.stream = "default"
        self.task = 0                  # 0: not a direct emit
        self.tuple: list = []
        self.anchors: list = []
        self.need_task_ids = True      # Storm's default when the field is absent
        self.msg = ""
        self.level = INFO
        self.name = ""
        self.params: Any = None


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _id(value: Any, field: str, required: bool) -> Any:
    if value is None and not required:
        return None
    if isinstance(value, str) or _is_int(value):
        return value
    raise BadMessage(f"field {field!r} must be a string or an integer, got {value!r:.80}")


def parse(obj: Any, commands: frozenset[str]) -> ShellMsg:
    """A child's message, checked; BadMessage naming what is wrong."""
    if not isinstance(obj, dict):
        raise BadMessage(f"a message must be an object, got {type(obj).__name__} {obj!r:.80}")
    command = obj.get("command")
    if not isinstance(command, str):
        raise BadMessage(f"message without a string 'command': {obj!r:.120}")
    if command not in commands:
        raise BadMessage(f"unknown command {command!r:.40} (expected one of {sorted(commands)})")
    m = ShellMsg(command)
    if command == "emit":
        values = obj.get("tuple")
        if not isinstance(values, list):
            raise BadMessage(f"emit needs 'tuple' as a list, got {values!r:.80}")
        m.tuple = values
        stream = obj.get("stream")
        if stream not in (None, ""):
            if not isinstance(stream, str):
                raise BadMessage(f"emit 'stream' must be a string, got {stream!r:.80}")
            m.stream = stream
        task = obj.get("task")
        if task is not None:
            if not _is_int(task):
                raise BadMessage(f"emit 'task' must be an integer, got {task!r:.80}")
            m.task = task
        need = obj.get("need_task_ids")
        if need is not None:
            if not isinstance(need, bool):
                raise BadMessage(f"emit 'need_task_ids' must be true or false, got {need!r:.80}")
            m.need_task_ids = need
        anchors = obj.get("anchors")
        if anchors is not None:
            if isinstance(anchors, (str, int)) and not isinstance(anchors, bool):
                anchors = [anchors]  # Storm accepts a lone anchor
            if not isinstance(anchors, list):
                raise BadMessage(f"emit 'anchors' must be a list of tuple ids, got {anchors!r:.80}")
            # text ids (what storm.py sends) pass without a call each
            m.anchors = [a if type(a) is str else _id(a, "anchors", True) for a in anchors]
        emit_id = obj.get("id")
        m.id = emit_id if emit_id is None or type(emit_id) is str else _id(emit_id, "id", False)
    elif command in ("ack", "fail"):
        m.id = _id(obj.get("id"), "id", True)
    elif command in ("log", "error"):
        msg = obj.get("msg")
        m.msg = msg if isinstance(msg, str) else str(msg)
        level = obj.get("level")
        if _is_int(level) and TRACE <= level <= ERROR:
            m.level = level
    elif command == "metrics":
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            raise BadMessage(f"metrics needs a non-empty string 'name', got {name!r:.80}")
        m.name, m.params = name, obj.get("params")
    return m


def parse_pid(obj: Any) -> int:
    """The child's handshake reply ``{"pid": N}``."""
    pid = obj.get("pid") if isinstance(obj, dict) else None
    if not _is_int(pid) or pid <= 0:
        raise ProtocolError(f'the handshake reply must be {{"pid": <positive integer>}}, got {obj!r:.120}')
    return pid


def _grouping(kind: str) -> dict[str, Any]:
    return {"type": kind.upper()}


def context_info(context: TopologyContext) -> dict[str, Any]:
    """The handshake's ``context`` (Storm 0.10+ shape; task ids as JSON object keys)."""
    me = context.this_component_id
    sources = context.this_sources()
    by_source: dict[str, dict[str, Any]] = {}
    fields: dict[str, dict[str, list[str]]] = {}
    for (component, stream), kind in sorted(sources.items()):
        by_source.setdefault(component, {})[stream] = _grouping(kind)
        try:
            names = list(context.component_output_fields(component, stream).names)
        except KeyError:  # a system stream no component declares
            continue
        fields.setdefault(component, {})[stream] = names
    return {
        "task->component": {str(t): c for t, c in sorted(context.task_to_component.items())},
        "taskid": context.this_task_id,
        "componentid": me,
        "stream->target->grouping": {s: {c: _grouping(k) for c, k in targets.items()}
                                     for s, targets in context.this_targets().items()},
        "streams": sorted(context.this_output_streams()),
        "stream->outputfields": {s: list(context.component_output_fields(me, s).names)
                                 for s in context.this_output_streams()},
        "source->stream->grouping": by_source,
        "source->stream->fields": fields,
    }


def handshake(conf: Mapping[str, Any], context: Mapping[str, Any], pid_dir: str) -> dict[str, Any]:
    return {"conf": dict(conf), "pidDir": pid_dir, "context": dict(context)}


def bolt_tuple(tuple_id: str, component: Any, stream: str, task: int, values: list) -> dict[str, Any]:
    return {"id": tuple_id, "comp": component, "stream": stream, "task": task, "tuple": values}


def heartbeat(tuple_id: str) -> dict[str, Any]:
    return {"id": tuple_id, "comp": None, "stream": HEARTBEAT_STREAM, "task": SYSTEM_TASK, "tuple": []}


def spout_command(command: str, msg_id: Any = "") -> dict[str, Any]:
    """next, ack, fail, activate, deactivate (Storm sends an empty id with the id-less ones)."""
    return {"command": command, "id": msg_id}
