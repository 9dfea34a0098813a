"""What a KafkaSpout does with acks, failures and records it cannot use (part of KafkaSpout).

A failed record is retried after its back-off (the spout seeks its partition back to it);
after ``kafka.spout.retry.max.count`` failures it is given up. A record whose tuple could
not be delivered (``undeliverable``: a value that cannot cross between workers) is not
retried, since a retry would fail alike. A given-up, undeliverable or undecodable record is
reported (counted per partition, logged, reported as an error) and, when the spout has a
``failed`` stream, emitted there with its reason as a reliable tuple whose ack lets its
offset be committed (a failed one is sent again with the same back-off, without a limit);
without the stream its offset counts as done at once. The tuple's ``headers`` are the
record's own, then the reason and where it was read: a KafkaBolt on the stream writes a
dead letter that keeps them all.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from squall.contrib.kafka.offsets import OffsetManager
from squall.contrib.kafka.records import dead_letter_headers
from squall.contrib.kafka.retry import RetrySchedule
from squall.contrib.kafka.settings import SpoutSettings
from squall.contrib.kafka.translator import FAILED_STREAM

Key = tuple[str, int]  # (topic, partition)
MAX_REASON = 1000      # characters of an error kept in a failed-stream tuple
MAX_ASIDE = 10_000     # records set aside per partition for the replay after a rollback


def label(key: Key) -> str:
    """A partition as metrics and logs name it."""
    return f"{key[0]}-{key[1]}"


class RecordFailures:
    """KafkaSpout's ack, fail and reporting; uses the spout's managers, schedules and metrics."""

    # The spout's, made in its open (squall.contrib.kafka.spout.KafkaSpout).
    collector: Any
    settings: SpoutSettings
    log: Any
    managers: dict[Key, OffsetManager | None]
    retry: RetrySchedule[Key]
    dead_retry: RetrySchedule[Key]
    dead: dict[Key, dict[int, str]]  # offsets reported -> why
    aside: dict[Key, dict[int, str]]  # offsets to report when read again (after a rollback)
    sought: dict[Key, tuple[int, float]]
    m_retries: Any
    m_given_up: Any
    m_decode: Any
    m_undeliverable: Any
    _has_failed_stream: bool
    _emit: Callable[..., Any]
    _translate: Callable[[Any], list[Any] | None]

    def _emit_again(self, msg: Any, key: Key, mgr: OffsetManager, off: int) -> bool:
        """A record at or below the last emitted offset: emitted again when its retry (or
        its failed-stream tuple) is due; True if it was."""
        if not self._again(key, mgr, off):
            return False  # done, in flight or not due yet
        dead = self.dead.get(key)
        if dead is not None and off in dead:
            self._emit_failed(msg, key, mgr, dead[off])
            return True
        try:
            values = self._translate(msg)
        except Exception as exc:  # noqa: BLE001 - decoded before, not now: reported as any undecodable
            self._undecodable(msg, key, mgr, exc)
            return self._has_failed_stream
        if values is None:
            mgr.done(off)
            return False
        mgr.emitted(off)
        self._emit(values, msg_id=(key[0], key[1], off))
        return True

    def _again(self, key: Key, mgr: OffsetManager, off: int) -> bool:
        """Whether a record at or below the last emitted offset goes out again: a retry
        that is due (or a reported record whose failed-stream tuple is due)."""
        if mgr.is_done_or_pending(off):
            return False
        for sched in (self.retry, self.dead_retry):
            if sched.is_scheduled(key, off):
                if sched.is_ready(key, off, time.monotonic()):
                    sched.retried(key, off)
                    if self.sought.get(key, (None,))[0] == off:
                        del self.sought[key]  # the seek was read back: the next retry may seek
                    return True
                return False
        return False

    def ack(self, msg_id: Any) -> None:
        key = (msg_id[0], msg_id[1])
        mgr = self.managers.get(key)
        if mgr is None:
            return
        off = msg_id[2]
        pending = mgr._pending
        if off in pending:  # OffsetManager.acked, inlined (the hot path)
            pending.discard(off)
            mgr._acked.add(off)
            if self.retry.failures or self.dead:
                self.retry.forget(key, off)
                dead = self.dead.get(key)
                if dead is not None and off in dead:
                    del dead[off]
                    self.dead_retry.forget(key, off)

    def fail(self, msg_id: Any) -> None:
        topic, part, off = msg_id
        key = (topic, part)
        mgr = self.managers.get(key)
        if mgr is None or not mgr.failed(off):
            return
        now = time.monotonic()
        dead = self.dead.get(key)
        if dead is not None and off in dead:
            self.dead_retry.failed(key, off, now)  # the failed-stream tuple: sent again, no limit
            return
        self.m_retries.incr(label(key))
        if not self.retry.failed(key, off, now):
            self._give_up(key, mgr, off)

    def undeliverable(self, msg_id: Any, reason: str) -> None:
        """A tuple of the record's tree could not be delivered (``reason`` names the
        component, stream, field and type): reported at once, with that reason, not retried."""
        topic, part, off = msg_id
        key = (topic, part)
        mgr = self.managers.get(key)
        if mgr is None or not mgr.failed(off):
            return
        dead = self.dead.get(key)
        if dead is not None and off in dead:
            self.dead_retry.failed(key, off, time.monotonic())  # the failed-stream tuple: as fail does
            return
        self.retry.forget(key, off)
        self.m_undeliverable.incr(label(key))
        reason = reason[:MAX_REASON]
        self.log.error("kafka record undeliverable", partition=label(key), offset=off, error=reason)
        self.collector.report_error(f"kafka record {label(key)}@{off} undeliverable: {reason}")
        self._set_aside(key, mgr, off, reason)

    def _give_up(self, key: Key, mgr: OffsetManager, off: int) -> None:
        self.m_given_up.incr(label(key))
        text = f"kafka record {label(key)}@{off} failed {self.settings.retry_max_count} retries: given up"
        self.log.error("kafka record given up", partition=label(key), offset=off,
                       retries=self.settings.retry_max_count)
        self.collector.report_error(text)
        self._set_aside(key, mgr, off, "given up after retries")

    def _set_aside(self, key: Key, mgr: OffsetManager, off: int, reason: str) -> None:
        """A reported record: read again for the failed stream, or done without one."""
        if self._has_failed_stream:
            self.dead.setdefault(key, {})[off] = reason
            self.dead_retry.schedule(key, off, time.monotonic())  # read it again, for the failed stream
        else:
            mgr.done(off)

    def _emit_aside(self, msg: Any, key: Key, mgr: OffsetManager, off: int) -> bool:
        """A record set aside before a rollback, read again: its reason goes to the failed
        stream instead of its tuple (True), or it is done without one (False)."""
        reason = self.aside[key].pop(off)
        if not self.aside[key]:
            del self.aside[key]
        if self._has_failed_stream:
            self.dead.setdefault(key, {})[off] = reason
            self._emit_failed(msg, key, mgr, reason)
            return True
        mgr.done(off)
        return False

    def _undecodable(self, msg: Any, key: Key, mgr: OffsetManager, exc: Exception) -> None:
        off = msg.offset()
        self.m_decode.incr(label(key))
        reason = f"{type(exc).__name__}: {exc}"[:MAX_REASON]
        self.log.warning("kafka record undecodable", partition=label(key), offset=off, error=reason)
        self.collector.report_error(f"kafka record {label(key)}@{off} undecodable: {reason}")
        if self._has_failed_stream:
            self.dead.setdefault(key, {})[off] = reason
            self._emit_failed(msg, key, mgr, reason)
        else:
            mgr.done(off)

    def _emit_failed(self, msg: Any, key: Key, mgr: OffsetManager, reason: str) -> None:
        off = msg.offset()
        mgr.emitted(off)
        headers = dead_letter_headers(msg.headers(), reason, f"{label(key)}@{off}")
        self.collector.emit([key[0], key[1], off, msg.key(), msg.value(), reason, headers], stream=FAILED_STREAM,
                            msg_id=(key[0], key[1], off))
