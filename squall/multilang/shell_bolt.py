"""ShellBolt: a bolt whose ``execute`` runs in a child process, over Storm's multilang
protocol (asynchronous: tuples go to the child as they come; its emits, acks and fails come
back when it writes them).

The executor thread does the I/O: each ``execute`` writes the tuple and reads what the child
has written. When the child writes between tuples (the rest of a tuple's emits, a request
for task ids, which Storm's ``storm.py`` waits for after every emit), its stdout reader
thread wakes the executor, which handles it at once (``woken``). A short tick
(``POLL_SECS``, set through the component's topology.tick.tuple.freq.secs) sends the
heartbeat and checks for a hung child.
A child that dies, hangs (a heartbeat or the handshake unanswered for
topology.subprocess.timeout.secs), breaks the protocol or stops reading is killed, reported
through the component's errors and restarted; the tuples it held are failed, so their spouts
replay them. While it waits for its restart, new tuples are failed at once.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

from squall.components import Bolt
from squall.multilang import protocol
from squall.multilang.link import DOWN, READY, STARTING, LinkBroken
from squall.multilang.settings import CONVERSE_SECS, HEARTBEAT_SECS, SPIN_PROBE, SPIN_SECS, SPIN_TRIES
from squall.multilang.shell_component import TICK_KEY, ShellComponentMixin
from squall.tuple import SYSTEM_COMPONENT, TICK_STREAM, Tuple

POLL_SECS = 0.05  # how often an idle shell bolt reads its child (its tick period)
_monotonic = time.monotonic


class ShellBolt(ShellComponentMixin, Bolt):
    """Run ``command`` as the bolt (Storm's ShellBolt). ``outputs``: the default stream's
    fields, or {stream: fields}; ``direct`` names direct streams. ``cwd`` is relative to the
    topology's code directory. ``tick_secs`` (or the component config
    topology.tick.tuple.freq.secs) sends the child tick tuples at that period."""

    kind = "bolt"

    def __init__(self, command: Sequence[str],
                 outputs: Sequence[str] | Mapping[str, Sequence[str]] | None = None, *,
                 direct: Sequence[str] = (), env: Mapping[str, str] | None = None, cwd: str | None = None,
                 serializer: str | None = None, tick_secs: float | None = None,
                 config: Mapping[str, Any] | None = None) -> None:
        self.tick_secs: float | None = None
        self._init_shell(command, outputs, direct, env, cwd, serializer, config)
        if tick_secs is not None:
            self.add_component_config(TICK_KEY, tick_secs)

    def add_component_config(self, key: str, value: Any) -> None:
        if key == TICK_KEY:  # for the child; the bolt's own tick is its poll period
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or value <= 0):
                raise ValueError(f"{TICK_KEY} must be a positive number of seconds, got {value!r}")
            self.tick_secs = value
            return
        super().add_component_config(key, value)

    def component_config(self) -> dict[str, Any]:
        return {**self.config, TICK_KEY: POLL_SECS}

    # -- lifecycle ----------------------------------------------------------------------------
    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        # the runtime collector's (a spout's emit may be dropped: its answer waits for the emit)
        self.fixed_targets = getattr(collector, "fixed_targets", None)
        self.link = self._open_link(conf, context, collector.report_error)
        # A tick period other than ours was set on the declarer: those ticks are the child's.
        self.forward_ticks = conf.get(TICK_KEY) not in (None, POLL_SECS)
        self.inputs: dict[str, Tuple] = {}
        self.ids = itertools.count(1)
        self.failed_while_down = 0
        # when the child may write again soon (it was just answered task ids); 0 while it has
        # not asked since it last held no tuples (between_steps looks only at children that ask)
        self.converse_until = 0.0
        self.polling = False       # the conversation goes on at the next wake (the reader stands aside)
        self.wake_queued = False   # a wake of this bolt is queued on its executor
        self.spin_misses = 0       # waits since a spin last found the child's output (_await)
        now = _monotonic()
        self.hb_sent: float | None = None
        self.next_hb = now + HEARTBEAT_SECS
        self.next_child_tick = now + self.tick_secs if self.tick_secs else None
        self.link.start(now)

    def cleanup(self) -> None:
        self.link.close()

    # -- input ----------------------------------------------------------------------------------
    def execute(self, tup: Tuple) -> None:
        now = _monotonic()
        if tup.is_tick():
            if self.forward_ticks:
                self._send_tick(tup.values)
            self._service(now, wait=False)
            return
        link = self.link
        if link.state == DOWN and not link.ensure(now):
            self.failed_while_down += 1
            self.collector.fail(tup)
            return
        tid = str(next(self.ids))
        src = tup.source
        try:
            data = link.encode(protocol.bolt_tuple(tid, src.component, src.stream, src.task, tup.values))
        except (TypeError, ValueError, OverflowError) as exc:
            self.collector.report_error(f"shell bolt cannot send {tup!r:.200} to its child "
                                        f"({link.settings.serializer}): {exc}")
            self.collector.fail(tup)
            return
        self.inputs[tid] = tup
        try:
            link.send(data)
        except LinkBroken as exc:
            self._broken(now, str(exc))
            return
        self._service(now, wait=False)
        child = link.child
        if child is not None and (len(self.inputs) >= link.settings.max_inflight
                                  or child.pending_messages > link.settings.max_pending):
            self._wait_for_room(now)

    def woken(self) -> None:
        """The child wrote (its reader thread woke the executor): emits, task ids asked for,
        acks and syncs are handled now; a child mid-tuple is waited for (``_converse``)."""
        self.wake_queued = False
        self._service(_monotonic())

    def between_steps(self) -> None:
        """Called by the executor thread between the steps of its executors. A child that
        asks for task ids (storm.py's way: each emit waits for them), holds tuples and wrote
        is answered now, not after the rest of the thread's turn: the child goes on while
        the other executors' steps run. Nothing is waited for here; a child that never asks
        (pystorm's emits) is read at this bolt's own step, in larger batches."""
        if self.converse_until and self.inputs:
            child = self.link.child
            if child is not None and child.ready():
                self._service(_monotonic(), wait=False)

    def _send_tick(self, values: list) -> None:
        link = self.link
        if link.state == DOWN:
            return
        try:
            link.send(link.encode(protocol.bolt_tuple(f"t{next(self.ids)}", SYSTEM_COMPONENT, TICK_STREAM,
                                                      protocol.SYSTEM_TASK, list(values))))
        except LinkBroken as exc:
            self._broken(_monotonic(), str(exc))

    def _wait_for_room(self, now: float) -> None:
        """Block (reading the child) until it took enough of its input; a child that makes no
        progress for the subprocess timeout is broken."""
        link, settings = self.link, self.link.settings
        progress_at, last = now, (link.last_read, link.child.pending if link.child else 0)
        while link.state != DOWN and link.child is not None:
            if len(self.inputs) < settings.max_inflight and link.child.pending_messages <= settings.max_pending:
                return
            link.wait(0.05)
            now = _monotonic()
            self._service(now)
            if link.child is None:
                return
            seen = (link.last_read, link.child.pending)
            if seen != last:
                progress_at, last = now, seen
            elif now - progress_at > settings.timeout:
                self._broken(now, f"took none of its input and wrote nothing for {settings.timeout}s "
                                  f"({len(self.inputs)} tuples held, {link.child.pending} bytes unsent)")
                return

    # -- the child's output -----------------------------------------------------------------
    def _service(self, now: float, wait: bool = True) -> None:
        """Read and handle what the child wrote; heartbeats, child ticks and the hang check.
        ``wait``: a child mid-tuple may be waited for (``_converse``)."""
        link = self.link
        if link.state == DOWN:
            link.ensure(now)
            return
        try:
            self.polling = False
            try:
                now = self._converse(now, wait)
            finally:
                if link.child is not None and not self.polling:
                    link.child.end_conversation()  # the reader thread takes stdout again
            if link.state == READY:
                if self.hb_sent is None and now >= self.next_hb:
                    link.send(link.encode(protocol.heartbeat(f"h{next(self.ids)}")))
                    self.hb_sent = now
                if self.next_child_tick is not None and self.tick_secs and now >= self.next_child_tick:
                    self.next_child_tick = max(self.next_child_tick + self.tick_secs, now)
                    self._send_tick([self.tick_secs])
        except LinkBroken as exc:
            self._broken(now, str(exc))
            return
        if link.state == DOWN:
            return
        waiting = link.started_at if link.state == STARTING else self.hb_sent
        if waiting is not None and now - max(waiting, link.last_read) > link.settings.timeout:
            what = "handshake" if link.state == STARTING else "heartbeat"
            deaf = ""
            if link.deaf and link.child is not None:
                deaf = (f"stopped reading its input ({link.child.pending_messages} messages, "
                        f"{link.child.pending} bytes unsent) and ")
            self._broken(now, f"{deaf}did not answer the {what} within topology.subprocess.timeout.secs "
                              f"({link.settings.timeout}s)")

    def _converse(self, now: float, wait: bool = True) -> float:
        """Read and handle the child's messages. A child that was just answered task ids
        (storm.py asks after every emit, then waits) is mid-tuple: it writes again soon (its
        next emit or its ack). For CONVERSE_SECS after each answer the executor thread stays
        on its stdout: it looks at the pipe for SPIN_SECS (the child's answer often comes
        before a sleep would end; ``_await``), then waits on it (``converse``, no GIL held), and
        answers the moment the child writes, not after a reader thread's wake or a turn of
        the thread's other executors. One call lasts at most CONVERSE_SECS: a child that
        never stops asking does not hold the thread; with a wake attached the conversation
        goes on at the thread's next turn (``polling``). ``execute`` does not wait (``wait``
        false): it leaves the waiting to that wake, once per turn of the thread, so a batch
        of input tuples does not hold the thread for CONVERSE_SECS each. Returns the time
        last read."""
        link = self.link
        turn_ends = now + CONVERSE_SECS
        while True:
            try:
                messages = link.receive(now, protocol.BOLT_COMMANDS)
            except LinkBroken:
                self._salvage(now)
                raise
            self.answered = False
            for msg in messages:
                self._handle(msg, now)
            child = link.child
            if child is None or not self.inputs:
                self.converse_until = 0.0
                return now
            if self.answered:
                self.converse_until = now + CONVERSE_SECS
            elif now >= self.converse_until:
                return now
            if now >= turn_ends or not wait:
                if self._wake is not None:
                    self.polling = True
                    if not self.wake_queued:
                        self.wake_queued = True
                        self._wake()  # back at the executor thread's next turn
                return now
            if not self._await(child, min(self.converse_until, turn_ends) - now):
                return now
            now = _monotonic()

    def _await(self, child: Any, timeout: float) -> bool:
        """Wait up to ``timeout`` for the child's next output: looking for SPIN_SECS first
        while that has found it lately; a child slower than that (real work per emit) is
        looked for once in SPIN_PROBE waits, so it costs no spinning. True if it wrote."""
        misses = self.spin_misses
        if (misses < SPIN_TRIES or misses % SPIN_PROBE == 0) and child.spin(SPIN_SECS):
            self.spin_misses = 0
            return True
        self.spin_misses = misses + 1
        return bool(child.converse(timeout))

    def _salvage(self, now: float) -> None:
        """Apply what the child said before it broke (its acks spare those tuples a replay)."""
        messages, self.link.broken_after = self.link.broken_after, []
        for msg in messages:
            try:
                self._handle(msg, now)
            except LinkBroken:
                pass

    def _handle(self, msg: protocol.ShellMsg, now: float) -> None:
        command = msg.command
        if command == "emit":
            self._emit(msg)
        elif command == "ack" or command == "fail":
            key = msg.id if isinstance(msg.id, str) else str(msg.id)
            tup = self.inputs.pop(key, None)
            if tup is not None:
                (self.collector.ack if command == "ack" else self.collector.fail)(tup)
            elif not key.startswith("t"):  # ticks are acked too (pystorm's auto_ack); nothing to do
                self.link.bad_message(f"{command} of tuple id {key!r:.40}, which it does not hold")
        elif command == "sync":
            self.hb_sent = None
            self.next_hb = now + HEARTBEAT_SECS
        elif command == "log":
            self.link.child_log(msg, now)
        elif command == "error":
            self.collector.report_error(f"shell bolt child reported: {msg.msg[:10_000]}")
        elif command == "metrics":
            self._metrics_command(msg)

    def _emit(self, msg: protocol.ShellMsg) -> None:
        anchors: Any = None
        if msg.anchors:
            anchors = []
            for a in msg.anchors:
                tup = self.inputs.get(a if isinstance(a, str) else str(a))
                if tup is None:
                    self.link.bad_message(f"emit anchored to tuple id {a!r:.40}, which it does not hold "
                                          "(the emit goes on without that anchor)")
                else:
                    anchors.append(tup)
            if len(anchors) == 1:  # the collector's inline path takes a lone anchor as itself
                anchors = anchors[0]
        self._emit_and_answer(msg, anchors)

    def _broken(self, now: float, reason: str) -> None:
        self.link.broken(now, reason)
        held, self.inputs = self.inputs, {}
        self.converse_until, self.polling = 0.0, False
        for tup in held.values():
            self.collector.fail(tup)
        self.hb_sent = None
