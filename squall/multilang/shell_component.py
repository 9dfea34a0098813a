"""What ShellBolt and ShellSpout share: the command, output streams, environment and the
settings methods of Storm's ShellBolt/ShellSpout and Flux's FluxShellBolt/FluxShellSpout."""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from squall.components import OutputFieldsDeclarer
from squall.context import TopologyContext
from squall.multilang import codedir, protocol
from squall.multilang.framing import serializer_name
from squall.multilang.link import ChildLink
from squall.multilang.settings import ShellSettings
from squall.multilang.shell_metrics import ShellMetrics

TICK_KEY = "topology.tick.tuple.freq.secs"


class ShellComponentMixin:
    """Set-up of a component whose work runs in a child process (Storm's multilang)."""

    kind = "?"
    # The component's, once it opened or prepared (ShellSpout, ShellBolt).
    link: ChildLink
    collector: Any
    answered = False  # a task-id request was answered in the current read of the child
    # The collector's targets of an emit known before it is made (set with the collector)
    fixed_targets: Callable[[str, Any], tuple[int, ...] | None] | None = None
    _wake: Callable[[], None] | None = None  # the executor's (attach_wake)

    def _init_shell(self, command: Sequence[str], outputs: Sequence[str] | Mapping[str, Sequence[str]] | None,
                    direct: Sequence[str], env: Mapping[str, str] | None, cwd: str | None,
                    serializer: str | None, config: Mapping[str, Any] | None) -> None:
        if isinstance(command, str) or not command or not all(isinstance(a, str) for a in command):
            raise ValueError(f"a shell component's command must be a non-empty list of strings, got {command!r}")
        self.command = list(command)
        self.outputs: dict[str, list[str]] = {}
        if isinstance(outputs, Mapping):
            for name, fields in outputs.items():
                self.set_named_stream(name, fields)
        elif outputs is not None:
            self.set_default_stream(outputs)
        self.direct = set(direct)
        self.env = dict(env or {})
        self.cwd = cwd
        self.change_cwd = True
        self.serializer = None if serializer is None else serializer_name(serializer)
        self.config: dict[str, Any] = {}
        for key, value in (config or {}).items():
            self.add_component_config(key, value)

    # -- Storm's and Flux's settings methods ------------------------------------------------
    def set_default_stream(self, fields: Sequence[str]) -> None:
        self.set_named_stream("default", fields)

    def set_named_stream(self, name: str, fields: Sequence[str]) -> None:
        if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
            raise ValueError(f"stream {name!r}: fields must be a list of names, got {fields!r}")
        self.outputs[name] = list(fields)

    def add_component_config(self, key: str, value: Any) -> None:
        self.config[key] = value

    def set_env(self, env: Mapping[str, str]) -> Any:
        self.env = {str(k): str(v) for k, v in env.items()}
        return self

    def change_child_cwd(self, change: bool) -> None:
        """False: run the child from the worker's directory, not the code directory."""
        self.change_cwd = bool(change)

    # -- squall's component interface -------------------------------------------------------
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for name, fields in self.outputs.items():
            declarer.declare(fields, stream=name, direct=name in self.direct)

    def component_config(self) -> dict[str, Any] | None:
        return dict(self.config) or None

    def script_paths(self) -> list[str]:
        """The script files its command names, relative to the topology's code directory."""
        base = self.cwd or ""
        return [os.path.normpath(os.path.join(base, a)) for a in codedir.script_args(self.command)
                if not os.path.isabs(a)]

    def attach_wake(self, wake: Callable[[], None]) -> None:
        """The executor's ``wake`` (squall.runtime.executor): the child's stdout reader calls
        it when the child wrote, and the executor then calls ``woken`` on its own thread."""
        self._wake = wake

    def woken(self) -> None:
        raise NotImplementedError

    def _open_link(self, conf: Mapping[str, Any], context: TopologyContext, report: Any) -> ChildLink:
        self.log = structlog.get_logger("squall.multilang").bind(
            topology=context.topology_id, component=context.this_component_id, task=context.this_task_id)
        self.settings = ShellSettings.from_conf(conf, self.serializer)
        self.metrics = ShellMetrics(context, conf)  # the child's ``metrics`` commands
        link = ChildLink(self.kind, self.command, codedir.child_cwd(self.cwd, self.change_cwd),
                         codedir.child_env(self.env), self.settings, conf, protocol.context_info(context),
                         self.log, report)
        link.wake = self._wake
        return link

    def _metrics_command(self, msg: protocol.ShellMsg) -> None:
        problem = self.metrics.update(msg.name, msg.params)
        if problem is not None:
            self.link.bad_message(problem)

    def _emit_and_answer(self, msg: protocol.ShellMsg, last: Any) -> None:
        """A child's emit, with ``last`` its anchors (bolts) or message id (spouts); the
        target task ids go back when it asked for them (Storm answers non-direct emits only).
        Targets known before the emit (``fixed_targets``) are answered first: a child that
        waits for them (storm.py) goes on while the tuple is made and handed on."""
        direct = bool(msg.task)
        if msg.need_task_ids and not direct and self.fixed_targets is not None:
            fixed = self.fixed_targets(msg.stream, msg.tuple)
            if fixed is not None:
                self.link.send(self.link.encode_task_ids(fixed))
                self.answered = True
                try:
                    self.collector.emit(msg.tuple, msg.stream, last)
                except (ValueError, TypeError, KeyError) as exc:
                    self.link.bad_message(f"emit refused: {exc}")
                return
        targets: Sequence[int] = ()
        try:
            if direct:
                self.collector.emit_direct(msg.task, msg.tuple, msg.stream, last)
            else:
                targets = self.collector.emit(msg.tuple, msg.stream, last)
        except (ValueError, TypeError, KeyError) as exc:
            self.link.bad_message(f"emit refused: {exc}")
        if msg.need_task_ids and not direct:
            self.link.send(self.link.encode_task_ids(targets))
            self.answered = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.command!r})"
