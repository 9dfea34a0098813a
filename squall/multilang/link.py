"""A shell component's link to its child: start and handshake, send, receive, fail and
restart. ShellBolt and ShellSpout build their protocol on it.

The handshake does not block: the setup message is written, and anything sent after it
queues behind it in the pipe; the child's first message must be its pid.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from squall.errors import SquallError
from squall.multilang import protocol
from squall.multilang.child import ChildGone, ChildProcess, LineBudget
from squall.multilang.framing import ProtocolError, framing
from squall.multilang.settings import MAX_UNREAD_ANSWERS, READ_BUDGET_BYTES, RestartPolicy, ShellSettings
from squall.values import ValueCodec

DOWN, STARTING, READY = "down", "starting", "ready"
_LOG_LEVELS = ("debug", "debug", "info", "warning", "error")  # Storm's TRACE..ERROR


class LinkBroken(SquallError):
    """The child can no longer be talked to; the text says why."""


class ChildLink:
    def __init__(self, kind: str, command: Sequence[str], cwd: str | None, env: Mapping[str, str],
                 settings: ShellSettings, conf: Mapping[str, Any], context: Mapping[str, Any],
                 log: Any, report: Callable[[str], None]) -> None:
        self.kind, self.command, self.cwd, self.env = kind, list(command), cwd, dict(env)
        self.settings, self.conf, self.context = settings, conf, context
        self.log, self.report = log, report
        self.state = DOWN
        self.child: ChildProcess | None = None
        self.generation = 0           # which child: messages of an earlier one are stale
        self.restart_at = 0.0
        self.started_at = 0.0
        self.last_read = 0.0
        self.policy = RestartPolicy()
        self.restarts = 0
        self.log_budget = LineBudget(settings.lines_per_sec)
        self.bad_messages = 0
        self.deaf = False             # its output is not read: it does not read its input (receive)
        self.broken_after: list[protocol.ShellMsg] = []  # messages read before the link broke
        self.pid_dir = tempfile.mkdtemp(prefix=f"squall-shell-{os.getpid()}-")
        self.codec = ValueCodec(conf.get("topology.serializers") or {})
        self._frames = framing(settings.serializer, settings.max_message_bytes, self.codec)
        self.encode = self._frames.encode
        self.encode_task_ids = self._frames.encode_task_ids
        # Called by the child's stdout reader thread when it has news (squall.multilang.child);
        # the component's executor then reads it on its own thread.
        self.wake: Callable[[], None] | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, now: float) -> bool:
        """Start a child and send the handshake; False (reported, retried later) if it cannot."""
        self._frames = framing(self.settings.serializer, self.settings.max_message_bytes, self.codec)
        self.encode = self._frames.encode
        self.encode_task_ids = self._frames.encode_task_ids
        self.generation += 1
        try:
            self.child = ChildProcess(self.command, self.cwd, self.env, self.log, self.settings.lines_per_sec,
                                      self.wake)
        except OSError as exc:
            self.child = None
            self._down(now, 0.0, f"could not be started: {exc}")
            return False
        self.state, self.started_at, self.last_read = STARTING, now, now
        try:
            setup = protocol.handshake(self.conf, self.context, self.pid_dir)
            self.child.write(self._encode_lenient(setup))
        except ChildGone as exc:
            self.broken(now, str(exc))
            return False
        self.log.info("shell child started", pid=self.child.pid, command=self.command, cwd=self.cwd,
                      generation=self.generation)
        return True

    def _encode_lenient(self, message: Any) -> bytes:
        """The handshake carries the whole conf: a value JSON cannot carry goes as its text."""
        try:
            return self.encode(message)
        except (TypeError, ValueError):
            return self.encode(json.loads(json.dumps(message, default=str)))

    def broken(self, now: float, reason: str) -> str:
        """The child failed: kill it, report why, and plan the restart. Returns the report."""
        child = self.child
        code = child.kill() if child is not None else None
        tail = child.tail() if child is not None else ""
        lived = now - self.started_at
        text = (f"shell {self.kind} child (pid {child.pid if child else '-'}, command {self.command}) "
                f"{reason}; exit code {code}")
        if tail:
            text += f"; its last stderr lines:\n{tail}"
        self.child = None
        self._down(now, lived, text)
        return text

    def _down(self, now: float, lived: float, text: str) -> None:
        self.state = DOWN
        self.restart_at = self.policy.next_start(now, lived)
        self.restarts += 1
        self.log.error("shell child failed; restarting", reason=text.splitlines()[0],
                       restart_in=round(self.restart_at - now, 2))
        self.report(text)

    def ensure(self, now: float) -> bool:
        """Start the child if it is down and its restart is due; True when one is up."""
        if self.state == DOWN and now >= self.restart_at:
            self.start(now)
        return self.state != DOWN

    def close(self) -> None:
        """Stop the child for good (a short grace for a clean exit on end of input)."""
        if self.child is not None:
            self.child.kill(grace=0.2)
            self.child = None
        self.state = DOWN
        shutil.rmtree(self.pid_dir, ignore_errors=True)

    # -- traffic ----------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        """Write encoded bytes; LinkBroken if the child is gone."""
        child = self.child
        if child is None:
            raise LinkBroken("no child")
        try:
            child.write(data)
        except ChildGone as exc:
            raise LinkBroken(str(exc)) from None

    def receive(self, now: float, commands: frozenset[str]) -> list[protocol.ShellMsg]:
        """The child's checked messages available now, up to a read budget. LinkBroken when
        the child is gone or broke the framing or the handshake; bad single messages are
        reported and dropped."""
        child = self.child
        if child is None:
            return []
        out: list[protocol.ShellMsg] = []
        budget = READ_BUDGET_BYTES
        try:
            child.flush()
            # As Storm's ShellBolt, whose reader blocks on a full queue to the child: while the
            # child leaves that many messages unread, what it writes waits (the hang check of
            # the component ends a child that never reads again).
            self.deaf = child.pending_messages > self.settings.max_pending + MAX_UNREAD_ANSWERS
            if self.deaf:
                child.check_exit(now)
                return out
            while budget > 0:
                data = child.read()
                if not data:
                    child.check_exit(now)
                    break
                budget -= len(data)
                self.last_read = now
                try:
                    raws = self._frames.feed(data)
                except ProtocolError as exc:  # what came before the break still counts
                    self._take(exc.messages, commands, out)
                    raise
                self._take(raws, commands, out)
                if not child.holding:  # all read: the next look at an empty pipe waits for the next receive
                    break
        except ChildGone as exc:
            self.broken_after = out
            raise LinkBroken(str(exc)) from None
        except ProtocolError as exc:
            self.broken_after = out
            what = "wrong handshake" if self.state == STARTING else "broke the protocol"
            raise LinkBroken(f"{what}: {exc}") from None
        return out

    def _take(self, raws: list, commands: frozenset[str], out: list[protocol.ShellMsg]) -> None:
        for raw in raws:
            if self.state == STARTING:
                pid = protocol.parse_pid(raw)
                self.state = READY
                self.log.info("shell child ready", pid=self.child.pid if self.child else None, reported_pid=pid)
                continue
            try:
                out.append(protocol.parse(raw, commands))
            except protocol.BadMessage as exc:
                self.bad_message(str(exc))

    def wait(self, timeout: float) -> None:
        if self.child is not None:
            self.child.wait_io(timeout)

    def bad_message(self, text: str) -> None:
        self.bad_messages += 1
        self.report(f"shell {self.kind} child sent a bad message (dropped): {text}")

    def child_log(self, msg: protocol.ShellMsg, now: float) -> None:
        """A ``log`` command: into the worker log, within the lines-per-second budget."""
        if self.log_budget.allow(now):
            dropped = self.log_budget.take_dropped()
            getattr(self.log, _LOG_LEVELS[msg.level])(
                "shell child log", pid=self.child.pid if self.child else None, msg=msg.msg[:10_000],
                **({"dropped_before": dropped} if dropped else {}))

    @property
    def pending_bytes(self) -> int:
        return self.child.pending if self.child is not None else 0
