"""ShellSpout: a spout whose work runs in a child process, over Storm's multilang protocol
(synchronous: each of next, ack, fail, activate and deactivate is answered by ``sync``, the
child's emits and logs coming before it).

One command is in flight at a time. ``next_tuple`` waits for the child's sync only a few
milliseconds (other executors share the thread); a child still busy is read again when its
stdout reader thread wakes the executor (``woken``) or on the next call, and acks and fails
that arrive meanwhile queue behind the command in flight. A
child silent for topology.subprocess.timeout.secs while a command waits is killed, reported
and restarted. Message ids carry the child's generation: acks and fails of tuples a dead
child emitted are dropped (its source replays them, as after a Storm worker restart).
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from squall.components import Spout
from squall.multilang import protocol
from squall.multilang.link import DOWN, STARTING, LinkBroken
from squall.multilang.settings import SPOUT_QUEUE_MAX, SPOUT_SLICE_SECS
from squall.multilang.shell_component import ShellComponentMixin

_monotonic = time.monotonic


class ShellSpout(ShellComponentMixin, Spout):
    """Run ``command`` as the spout (Storm's ShellSpout); arguments as for ShellBolt."""

    kind = "spout"

    def __init__(self, command: Sequence[str],
                 outputs: Sequence[str] | Mapping[str, Sequence[str]] | None = None, *,
                 direct: Sequence[str] = (), env: Mapping[str, str] | None = None, cwd: str | None = None,
                 serializer: str | None = None, config: Mapping[str, Any] | None = None) -> None:
        self._init_shell(command, outputs, direct, env, cwd, serializer, config)

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.link = self._open_link(conf, context, collector.report_error)
        self.queue: deque[bytes] = deque()
        self.outstanding: float | None = None  # when the command in flight was sent
        self.active = False
        self.stale = 0  # acks and fails of tuples an earlier child emitted
        self._start(_monotonic())

    def _start(self, now: float) -> None:
        self.queue.clear()
        self.outstanding = None
        if self.link.start(now) and self.active:
            self.queue.append(self.link.encode(protocol.spout_command("activate")))

    def close(self) -> None:
        self.link.close()

    # -- what the executor calls ----------------------------------------------------------
    def next_tuple(self) -> None:
        now = _monotonic()
        if self.link.state == DOWN:
            if now < self.link.restart_at:
                return
            self._start(now)
        self._pump(now, SPOUT_SLICE_SECS, want_next=True)

    def ack(self, msg_id: Any) -> None:
        self._queue_for("ack", msg_id)

    def fail(self, msg_id: Any) -> None:
        self._queue_for("fail", msg_id)

    def activate(self) -> None:
        self.active = True
        self._queue(protocol.spout_command("activate"))

    def deactivate(self) -> None:
        self.active = False
        self._queue(protocol.spout_command("deactivate"))

    def woken(self) -> None:
        """The child wrote (its reader thread woke the executor): a sync sends the next
        queued ack or fail at once, also while the executor calls no ``next_tuple``."""
        if self.link.state != DOWN:
            self._pump(_monotonic(), 0.0, want_next=False)

    def _queue_for(self, command: str, msg_id: Any) -> None:
        if not (isinstance(msg_id, tuple) and len(msg_id) == 2 and msg_id[0] == self.link.generation
                and self.link.state != DOWN):
            self.stale += 1
            return
        self._queue(protocol.spout_command(command, msg_id[1]))

    def _queue(self, message: dict) -> None:
        if self.link.state == DOWN:
            return
        self.queue.append(self.link.encode(message))
        now = _monotonic()
        if len(self.queue) > SPOUT_QUEUE_MAX:
            self._drain_queue(now)
        else:
            self._pump(now, 0.0, want_next=False)

    def _drain_queue(self, now: float) -> None:
        """Too many commands wait: block (bounded by the subprocess timeout) until the child
        takes them."""
        while self.link.state != DOWN and len(self.queue) > SPOUT_QUEUE_MAX // 2:
            self._pump(now, 0.05, want_next=False)
            now = _monotonic()

    # -- the conversation ------------------------------------------------------------------
    def _pump(self, now: float, wait: float, want_next: bool) -> None:
        """Send queued commands (and one ``next`` if asked) as the child syncs, handling its
        emits; wait at most ``wait`` seconds for a sync."""
        link = self.link
        deadline = now + wait
        sent_next = False
        while link.state != DOWN:
            try:
                try:
                    messages = link.receive(now, protocol.SPOUT_COMMANDS)
                except LinkBroken:
                    self._salvage()
                    raise
                for msg in messages:
                    self._handle(msg)
                if self.outstanding is None:
                    if self.queue:
                        link.send(self.queue.popleft())
                    elif want_next and not sent_next:
                        link.send(link.encode(protocol.spout_command("next")))
                        sent_next = True
                    else:
                        return
                    self.outstanding = now
                    continue
            except LinkBroken as exc:
                self._broken(now, str(exc))
                return
            waiting = min(self.outstanding, link.started_at) if link.state == STARTING else self.outstanding
            if now - max(waiting, link.last_read) > link.settings.timeout:
                self._broken(now, f"did not sync within topology.subprocess.timeout.secs "
                                  f"({link.settings.timeout}s)")
                return
            remaining = deadline - _monotonic()
            if remaining <= 0:
                return
            link.wait(remaining)
            now = _monotonic()

    def _salvage(self) -> None:
        """Apply what the child emitted before it broke."""
        messages, self.link.broken_after = self.link.broken_after, []
        for msg in messages:
            try:
                self._handle(msg)
            except LinkBroken:
                pass

    def _handle(self, msg: protocol.ShellMsg) -> None:
        command = msg.command
        if command == "sync":
            self.outstanding = None
        elif command == "emit":
            self._emit(msg)
        elif command == "log":
            self.link.child_log(msg, _monotonic())
        elif command == "error":
            self.collector.report_error(f"shell spout child reported: {msg.msg[:10_000]}")
        elif command == "metrics":
            self._metrics_command(msg)

    def _emit(self, msg: protocol.ShellMsg) -> None:
        self._emit_and_answer(msg, None if msg.id is None else (self.link.generation, msg.id))

    def _broken(self, now: float, reason: str) -> None:
        self.link.broken(now, reason)
        self.queue.clear()
        self.outstanding = None
