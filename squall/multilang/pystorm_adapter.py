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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from squall.components import Bolt, OutputFieldsDeclarer, Spout
from squall.multilang import codedir, protocol
from squall.multilang.child import LineBudget
from squall.multilang.shell_metrics import ShellMetrics
from squall.tuple import SYSTEM_COMPONENT, TICK_STREAM

_LEVELS = ("debug", "debug", "info", "warning", "error")
_new_tuple = tuple.__new__


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

    _send: Callable[[dict], None]  # the kind's: what the component writes to Storm

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
        self._pytuple = pystorm.component.Tuple
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
        self.metrics = ShellMetrics(context, conf)  # the component's ``metrics`` messages
        self.comp = self._make()

    def _make(self) -> Any:
        comp = self.cls(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
        comp.send_message = self._send
        comp.read_task_ids = self._read_task_ids
        comp.serializer = _PipeStub(self._send)
        root = logging.getLogger()
        before = list(root.handlers)
        comp._setup_component(self.conf, self.context_info)
        # pystorm's ``self.logger`` is named after the component, so every task of it in this
        # process (and every replacement instance) would share one logger and each line would
        # go out once per handler hung on it: this instance gets a logger of its own.
        shared = comp.logger
        comp.logger = logging.Logger(shared.name, shared.level)
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

    def _emit_message(self, msg: dict, last: Any) -> None:
        """An emit message (the protocol path): ``last`` is its anchors or message id."""
        task = msg.get("task")
        stream = msg.get("stream") or "default"
        if task is None:
            self.last_targets = self.collector.emit(msg["tuple"], stream, last)
        else:
            self.collector.emit_direct(task, msg["tuple"], stream, last)
            self.last_targets = [task]

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
            name = msg.get("name")
            problem = self.metrics.update(name, msg.get("params")) if isinstance(name, str) and name else \
                f"metrics needs a non-empty string 'name', got {name!r:.80}"
            if problem is not None:
                self.collector.report_error(f"pystorm component: {problem}")

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
    """A pystorm Bolt class (``module:Name``) run in-process.

    The tuple being processed is kept aside (``state``); only tuples the component still
    holds when ``process`` returns (a BatchingBolt's batch, an ack left for later) go into
    ``inputs`` by id. pystorm's own emit, ack and fail, when the class keeps them, are
    replaced by closures that do the same without building protocol messages: the hot path.
    """

    def __init__(self, target: str, outputs: Mapping[str, Sequence[str]], *, direct: Sequence[str] = (),
                 import_dir: str | None = None, config: Mapping[str, Any] | None = None) -> None:
        self._setup_adapter(target, outputs, direct, import_dir, config)

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        import pystorm.bolt  # optional dependency (see the module docstring)

        self._pystorm_bolt = pystorm.bolt.Bolt
        self.inputs: dict[str, Any] = {}
        self.ids = itertools.count(1)
        self.types: dict[tuple[str, str], Any] = {}
        self.state: list[Any] = [None, None, True]  # pystorm tuple, squall tuple, done
        self._prepare_adapter(conf, context, collector)

    def _take(self, x: Any) -> Any:
        """The squall tuple for a pystorm Tuple or id the component acks or fails, once."""
        state = self.state
        current = state[0]
        if current is not None and not state[2]:
            if x is current or (x.id if isinstance(x, self._pytuple) else x) == current.id:
                state[2] = True
                return state[1]
        return self.inputs.pop(x.id if isinstance(x, self._pytuple) else x, None)

    def _anchors(self, anchors: Any) -> Any:
        """squall tuples for pystorm anchors (its Tuples or their ids); one goes bare (the
        collector's fast path)."""
        state, inputs, pytuple = self.state, self.inputs, self._pytuple
        current = state[0]
        out = []
        for a in anchors:
            key = a.id if isinstance(a, pytuple) else a
            if current is not None and (a is current or key == current.id):
                out.append(state[1])
            else:
                t = inputs.get(key)
                if t is not None:
                    out.append(t)
        return out[0] if len(out) == 1 else out or None

    def _make(self) -> Any:
        comp = super()._make()
        comp.read_tuple = self._read_tuple
        self.types = {}
        base, cls = self._pystorm_bolt, type(comp)
        self.plain_run = cls._run is base._run
        state, collector, anchors_of, take = self.state, self.collector, self._anchors, self._take
        c_emit, c_direct, c_ack, c_fail = collector.emit, collector.emit_direct, collector.ack, collector.fail
        report = collector.report_error

        def emit(tup: Any, stream: str | None = None, anchors: Any = None, direct_task: int | None = None,
                 need_task_ids: bool = False) -> list[int] | None:
            if not isinstance(tup, (list, tuple)):
                raise TypeError(f"All Tuples must be either lists or tuples, received {type(tup)!r} instead.")
            if anchors is None:
                if comp.auto_anchor:
                    cur = comp._current_tups
                    squall = state[1] if len(cur) == 1 and cur[0] is state[0] else anchors_of(cur)
                else:
                    squall = None
            else:
                squall = anchors_of(anchors) if anchors else None
            if direct_task is None:
                targets = c_emit(tup, stream or "default", squall)
                return list(targets) if need_task_ids else None
            c_direct(direct_task, tup, stream or "default", squall)
            return [direct_task] if need_task_ids else None

        def settler(done: Any, verb: str) -> Any:
            def settle(tup: Any) -> None:
                if tup is state[0] and not state[2]:  # the tuple being processed: the common case
                    state[2] = True
                    done(state[1])
                    return
                t = take(tup)
                if t is not None:
                    done(t)
                else:
                    report(f"pystorm bolt {verb} tuple id {getattr(tup, 'id', tup)!r:.40}, which it does not hold")
            return settle

        ack, fail = settler(c_ack, "acked"), settler(c_fail, "failed")

        if cls.emit is base.emit:
            comp.emit = emit
        if cls.ack is base.ack:
            comp.ack = ack
        if cls.fail is base.fail:
            comp.fail = fail
        return comp

    def _read_tuple(self) -> Any:
        return self.state[0]

    def execute(self, tup: Any) -> None:
        src = tup.source
        kind = self.types.get(src)  # per Source object: one per (task, stream)
        if kind is None:
            val_type = self.comp._source_tuple_types[src.component].get(src.stream, tuple)
            kind = self.types[src] = (val_type, src.stream == TICK_STREAM and src.component == SYSTEM_COMPONENT)
        tid = str(next(self.ids))
        # tuple.__new__ builds the namedtuples without their Python-level constructors.
        current = _new_tuple(self._pytuple, (tid, src.component, src.stream, src.task,
                                             _new_tuple(kind[0], tup.values)))
        state = self.state
        state[0], state[1], state[2] = current, tup, False
        comp = self.comp
        try:
            if self.plain_run:  # pystorm.bolt.Bolt._run, minus reading the pipe
                comp._current_tups = [current]
                if kind[1]:
                    comp.process_tick(current)
                else:
                    comp.process(current)
                if comp.auto_ack:
                    comp.ack(current)
                comp._current_tups = []
            else:
                comp._run()
        except Exception as exc:  # pystorm's run(): handle, then exit (here: replace)
            try:
                comp._handle_run_exception(exc)
            except Exception as inner:  # the handler itself failed: report it too
                self.collector.report_error(inner)
            self._hold(tid, tup)
            self._crashed(exc, "process")
            return
        if not state[2]:  # neither acked nor failed yet: the component holds it
            self.inputs[tid] = tup
        state[0] = state[1] = None
        state[2] = True

    def _hold(self, tid: str, tup: Any) -> None:
        state = self.state
        if not state[2]:
            self.inputs[tid] = tup
        state[0] = state[1] = None
        state[2] = True

    def _send(self, msg: dict) -> None:
        """The protocol path, for classes that override emit, ack or fail."""
        command = msg.get("command") if isinstance(msg, dict) else None
        if command == "emit":
            ids = msg.get("anchors")
            self._emit_message(msg, self._anchors(ids) if ids else None)
        elif command == "ack" or command == "fail":
            tup = self._take(msg.get("id"))
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
            self._emit_message(msg, None if tup_id is None else (self.generation, tup_id))
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
