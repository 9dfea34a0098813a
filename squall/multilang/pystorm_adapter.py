"""pystorm components in the worker's own process: no child, no pipe.

A pystorm component talks to Storm through ``send_message`` (emit, ack, fail, log, error,
metrics, sync) and reads through ``read_tuple`` / ``read_task_ids``. The adapter gives an
unmodified component those calls on the instance and answers them with squall's collector,
so the component's own logic (auto-ack, auto-anchor, BatchingBolt's ticks, ReliableSpout's
replays) runs exactly as under Storm. What pystorm does when user code raises (report the
error, fail the tuple, exit) is kept: the component is reported, its held tuples fail, and a
fresh instance replaces it, as a restarted child would.

pystorm is imported when a component is prepared: it is an optional dependency.
"""
from __future__ import annotations

import importlib
import io
import itertools
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from squall.components import Bolt, OutputFieldsDeclarer, Spout
from squall.multilang import codedir, protocol
from squall.multilang.child import LineBudget

_LEVELS = ("debug", "debug", "info", "warning", "error")


def load_class(target: str, import_dir: str | None) -> type:
    """The class ``module:Name`` (or ``module.Name``), importing from the code directory's
    ``import_dir`` when given (a streamparse project's src/)."""
    if import_dir is not None:
        folder = os.path.join(codedir.code_dir(), import_dir)
        if folder not in sys.path:
            sys.path.insert(0, folder)
    module, sep, name = target.partition(":")
    if not sep:
        module, _, name = target.rpartition(".")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


class _LogForward(logging.Handler):
    """A component's Python log records into the worker log (its StormHandler's job)."""

    def __init__(self, log: Any, budget: LineBudget) -> None:
        super().__init__()
        self.log, self.budget = log, budget

    def emit(self, record: logging.LogRecord) -> None:
        if self.budget.allow(record.created):
            level = "error" if record.levelno >= logging.ERROR else "warning" if record.levelno >= logging.WARNING \
                else "info" if record.levelno >= logging.INFO else "debug"
            getattr(self.log, level)("pystorm log", logger=record.name, msg=record.getMessage()[:10_000])


class _PipeStub:
    """Stands in for the component's serializer: its logging handler writes here."""

    output_stream = None

    def __init__(self, send: Any) -> None:
        self.send_message = send


class _Adapter:
    """What the in-process bolt and spout share: make, wire and replace the component."""

    def _setup_adapter(self, target: str, outputs: Mapping[str, Sequence[str]], direct: Sequence[str],
                       import_dir: str | None, config: Mapping[str, Any] | None) -> None:
        self.target, self.import_dir = target, import_dir
        self.outputs = {s: list(f) for s, f in outputs.items()}
        self.direct = set(direct)
        self.config = dict(config or {})

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for name, fields in self.outputs.items():
            declarer.declare(fields, stream=name, direct=name in self.direct)

    def component_config(self) -> dict[str, Any] | None:
        return dict(self.config) or None

    def _prepare_adapter(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        import pystorm.component  # optional dependency: only topologies with pystorm components need it

        self._pystorm = pystorm.component
        self.collector = collector
        self.cls = load_class(self.target, self.import_dir)
        self.conf = dict(conf)
        self.context_info = protocol.context_info(context)
        self.log = structlog.get_logger("squall.multilang").bind(
            topology=context.topology_id, component=context.this_component_id, task=context.this_task_id)
        self.budget = LineBudget(int(conf.get("topology.multilang.log.lines.per.sec", 100)))
        self.generation = 0
        self.last_targets: list[int] = []
        self.restarts = 0
        self.metrics: dict[str, list] = {}
        self.comp = self._make()

    def _make(self) -> Any:
        comp = self.cls(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
        comp.send_message = self._send
        comp.read_task_ids = self._read_task_ids
        comp.serializer = _PipeStub(self._send)
        root = logging.getLogger()
        before = list(root.handlers)
        comp._setup_component(self.conf, self.context_info)
        # pystorm hangs its handler on the root logger; here that is the worker's: move it to
        # the component's logger (Storm's log handler becomes the worker log).
        for handler in [h for h in root.handlers if h not in before]:
            root.removeHandler(handler)
            if isinstance(handler, self._pystorm.StormHandler):
                handler = _LogForward(self.log, self.budget)
            comp.logger.addHandler(handler)
        comp.logger.propagate = False
        self.generation += 1
        comp.initialize(self.conf, self.context_info)
        return comp

    def _read_task_ids(self) -> list[int]:
        return list(self.last_targets)

    def _common(self, msg: dict) -> None:
        """log, error, metrics and sync (the latter means nothing in-process)."""
        command = msg.get("command")
        if command == "log":
            level = msg.get("level", protocol.INFO)
            level = level if isinstance(level, int) and 0 <= level <= 4 else protocol.INFO
            if self.budget.allow(time.monotonic()):
                getattr(self.log, _LEVELS[level])("pystorm log", msg=str(msg.get("msg"))[:10_000])
        elif command == "error":
            self.collector.report_error(f"pystorm component reported: {str(msg.get('msg'))[:10_000]}")
        elif command == "metrics":
            entry = self.metrics.setdefault(str(msg.get("name")), [0, None])
            entry[0] += 1
            entry[1] = msg.get("params")

    def _crashed(self, exc: BaseException, where: str) -> None:
        """pystorm's run loop caught ``exc``: its handler already reported and failed what it
        held; replace the component when pystorm would have exited."""
        self.collector.report_error(exc)
        if getattr(self.comp, "exit_on_exception", True):
            self.restarts += 1
            self.log.error("pystorm component raised; replacing it, as a restarted child",
                           where=where, error=repr(exc)[:500])
            self._abandon()
            self.comp = self._make()

    def _abandon(self) -> None:
        """The old instance is gone: what it held fails (as when its child dies)."""


class PystormBolt(_Adapter, Bolt):
    """A pystorm Bolt class (``module:Name``) run in-process."""

    def __init__(self, target: str, outputs: Mapping[str, Sequence[str]], *, direct: Sequence[str] = (),
                 import_dir: str | None = None, config: Mapping[str, Any] | None = None) -> None:
        self._setup_adapter(target, outputs, direct, import_dir, config)

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        self.inputs: dict[str, Any] = {}
        self.ids = itertools.count(1)
        self.types: dict[tuple[str, str], Any] = {}
        self._prepare_adapter(conf, context, collector)

    def _make(self) -> Any:
        comp = super()._make()
        comp.read_tuple = self._read_tuple
        self.types = {}
        return comp

    def _read_tuple(self) -> Any:
        return self.current

    def execute(self, tup: Any) -> None:
        src = tup.source
        key = (src.component, src.stream)
        make = self.types.get(key)
        if make is None:
            val_type = self.comp._source_tuple_types[src.component].get(src.stream)
            make = self.types[key] = tuple if val_type is None else (lambda v, t=val_type: t(*v))
        tid = str(next(self.ids))
        self.inputs[tid] = tup
        self.current = self._pystorm.Tuple(tid, src.component, src.stream, src.task, make(tup.values))
        try:
            self.comp._run()
        except Exception as exc:  # pystorm's run(): handle, then exit (here: replace)
            try:
                self.comp._handle_run_exception(exc)
            except Exception as inner:  # the handler itself failed: report it too
                self.collector.report_error(inner)
            self._crashed(exc, "process")

    def _send(self, msg: dict) -> None:
        command = msg.get("command") if isinstance(msg, dict) else None
        if command == "emit":
            anchors = None
            ids = msg.get("anchors")
            if ids:
                inputs = self.inputs
                anchors = [inputs[a] for a in ids if a in inputs]
            task = msg.get("task")
            stream = msg.get("stream") or "default"
            if task is None:
                self.last_targets = self.collector.emit(msg["tuple"], stream, anchors)
            else:
                self.collector.emit_direct(task, msg["tuple"], stream, anchors)
                self.last_targets = [task]
        elif command == "ack" or command == "fail":
            tup = self.inputs.pop(msg.get("id"), None)
            if tup is not None:
                (self.collector.ack if command == "ack" else self.collector.fail)(tup)
            else:
                self.collector.report_error(f"pystorm bolt {command}ed tuple id {msg.get('id')!r:.40}, "
                                            "which it does not hold")
        else:
            self._common(msg)

    def _abandon(self) -> None:
        held, self.inputs = self.inputs, {}
        for tup in held.values():
            self.collector.fail(tup)

    def cleanup(self) -> None:
        pass


class PystormSpout(_Adapter, Spout):
    """A pystorm Spout class (``module:Name``) run in-process."""

    def __init__(self, target: str, outputs: Mapping[str, Sequence[str]], *, direct: Sequence[str] = (),
                 import_dir: str | None = None, config: Mapping[str, Any] | None = None) -> None:
        self._setup_adapter(target, outputs, direct, import_dir, config)

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        self.stale = 0
        self._prepare_adapter(conf, context, collector)

    def _send(self, msg: dict) -> None:
        command = msg.get("command") if isinstance(msg, dict) else None
        if command == "emit":
            tup_id = msg.get("id")
            msg_id = None if tup_id is None else (self.generation, tup_id)
            task = msg.get("task")
            stream = msg.get("stream") or "default"
            if task is None:
                self.last_targets = self.collector.emit(msg["tuple"], stream, msg_id)
            else:
                self.collector.emit_direct(task, msg["tuple"], stream, msg_id)
                self.last_targets = [task]
        else:
            self._common(msg)

    def _call(self, where: str, *args: Any) -> None:
        try:
            getattr(self.comp, where)(*args)
        except Exception as exc:
            try:
                self.comp._handle_run_exception(exc)
            except Exception as inner:
                self.collector.report_error(inner)
            self._crashed(exc, where)

    def next_tuple(self) -> None:
        self._call("next_tuple")

    def ack(self, msg_id: Any) -> None:
        if isinstance(msg_id, tuple) and msg_id[0] == self.generation:
            self._call("ack", msg_id[1])
        else:
            self.stale += 1

    def fail(self, msg_id: Any) -> None:
        if isinstance(msg_id, tuple) and msg_id[0] == self.generation:
            self._call("fail", msg_id[1])
        else:
            self.stale += 1

    def activate(self) -> None:
        self._call("activate")

    def deactivate(self) -> None:
        self._call("deactivate")
