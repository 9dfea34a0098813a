"""A KafkaSpout's group commits and lag (part of KafkaSpout).

Periodic commits are asynchronous on the consumer and confirmed in ``_on_commit`` (run
inside ``consume``, on the spout's thread). Commits that must land before a partition
changes hands (a revoke, deactivate, close) go through the lookup thread
(squall.contrib.kafka.lookups) and are confirmed when its answer is applied: the spout's
thread never waits for the broker, except in ``close``, at most SYNC_COMMIT_SECS.

A partition's commit also goes out early, between periods, once half of
``kafka.spout.max.uncommitted.offsets`` of its offsets wait for one: reading stops at the
bound, and a fast partition would otherwise sit idle until the next period.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall.contrib.kafka.client import ClientErrors
from squall.contrib.kafka.failures import Key, label
from squall.contrib.kafka.lookups import BrokerLookups
from squall.contrib.kafka.offsets import OffsetManager

SYNC_COMMIT_SECS = 3.0  # how long close waits for its last commit


class GroupCommits:
    """KafkaSpout's commits to the consumer group, and the lag metric."""

    # The spout's, made in its open (squall.contrib.kafka.spout.KafkaSpout).
    consumer: Any
    lookups: BrokerLookups
    managers: dict[Key, OffsetManager | None]
    committing: dict[Key, int]
    m_committed: Any
    m_lag: Any
    _metadata: str
    _TP: Any
    _on_client_error: ClientErrors
    _tp: Callable[..., Any]

    def _on_commit(self, err: Any, partitions: list[Any]) -> None:
        if err is not None:
            for tp in partitions:
                if self.committing.get((tp.topic, tp.partition)) == tp.offset:
                    del self.committing[(tp.topic, tp.partition)]
            self._on_client_error(err)  # committed again at the next period
            return
        self._confirmed([((tp.topic, tp.partition), tp.offset) for tp in partitions if tp.error is None])
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if tp.error is not None and self.committing.get(key) == tp.offset:
                del self.committing[key]

    def _confirmed(self, done: list[tuple[Key, int]]) -> None:
        """Commits the broker took: the managers forget what they cover."""
        for key, offset in done:
            if self.committing.get(key) == offset:
                del self.committing[key]
            mgr = self.managers.get(key)
            if mgr is not None and offset > mgr.committed:  # confirmations may overtake each other
                mgr.commit(offset)
                self.m_committed.set(label(key), offset)

    def _commit(self, handover: bool = False, keys: list[Key] | None = None) -> None:
        """Commit each partition's contiguous acked offsets that moved (asynchronously;
        ``handover``: through the lookup thread, for a revoke, deactivate or close)."""
        offsets = []
        for key in (self.managers if keys is None else keys):
            mgr = self.managers.get(key)
            if mgr is None:
                continue
            nxt = mgr.next_commit()
            if nxt > mgr.committed and self.committing.get(key) != nxt:
                offsets.append((key[0], key[1], nxt, self._metadata))
                self.committing[key] = nxt
        if handover:
            if offsets:
                self.lookups.commit(offsets)
            return
        self._send_commit([self._TP(t, p, o, metadata=m) for t, p, o, m in offsets])

    def _send_commit(self, offsets: list[Any], sync: bool = False) -> None:
        """Commit asynchronously; confirmed in ``_on_commit``."""
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=True)
        except Exception as exc:  # noqa: BLE001 - not committed: the next period tries again
            for tp in offsets:
                self.committing.pop((tp.topic, tp.partition), None)
            self._on_client_error(exc)

    def _update_lag(self) -> None:
        for key, mgr in self.managers.items():
            try:
                low, high = self.consumer.get_watermark_offsets(self._tp(key), cached=True)
            except Exception:  # noqa: BLE001 - unknown yet
                continue
            if high is not None and high >= 0 and mgr is not None:
                self.m_lag.set(label(key), max(0, high - mgr.committed))
