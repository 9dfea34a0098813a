"""A KafkaSpout's group commits and lag (part of KafkaSpout).

Commits are asynchronous and confirmed in ``_on_commit`` (run inside ``consume``, on the
spout's thread); deactivate, close and a revoke wait for theirs at most SYNC_COMMIT_SECS,
so a broker that is away never holds the spout's thread.
"""
from __future__ import annotations

import time
from typing import Any

from squall.contrib.kafka.failures import Key, label

SYNC_COMMIT_SECS = 3.0  # how long deactivate, close and a revoke wait for their commit


class GroupCommits:
    """KafkaSpout's commits to the consumer group, and the lag metric."""

    def _on_commit(self, err: Any, partitions: list[Any]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if self.committing.get(key) == tp.offset:
                del self.committing[key]
            if err is not None or tp.error is not None:
                continue  # committed again at the next period
            mgr = self.managers.get(key)
            if mgr is not None and tp.offset > mgr.committed:  # confirmations may overtake each other
                mgr.commit(tp.offset)
                self.m_committed.set(label(key), tp.offset)
        if err is not None:
            self._on_client_error(err)

    def _commit(self, sync: bool = False, keys: list[Key] | None = None) -> None:
        """Commit each partition's contiguous acked offsets that moved (async: confirmed in
        ``_on_commit``; sync on deactivate, close and revoke, with a deadline)."""
        offsets = []
        for key in (self.managers if keys is None else keys):
            mgr = self.managers.get(key)
            if mgr is None:
                continue
            nxt = mgr.next_commit()
            if nxt > mgr.committed and self.committing.get(key) != nxt:
                offsets.append(self._TP(key[0], key[1], nxt, metadata=self._metadata))
                self.committing[key] = nxt
        self._send_commit(offsets, sync)

    def _send_commit(self, offsets: list[Any], sync: bool) -> None:
        """Commit asynchronously; ``sync`` then waits for the confirmations, at most
        SYNC_COMMIT_SECS (a broker that is away must not hold the spout's thread)."""
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=True)
        except Exception as exc:  # noqa: BLE001 - not committed: the next period tries again
            for tp in offsets:
                self.committing.pop((tp.topic, tp.partition), None)
            self._on_client_error(exc)
            return
        if not sync:
            return
        keys = {(tp.topic, tp.partition) for tp in offsets}
        deadline = time.monotonic() + SYNC_COMMIT_SECS
        while keys & self.committing.keys() and time.monotonic() < deadline:
            try:  # serves the commit callbacks; records read meanwhile are kept for next_tuple
                self.buf.extend(self.consumer.consume(self.settings.poll_records, 0.05))
            except Exception as exc:  # noqa: BLE001
                self._on_client_error(exc)
                return

    def _update_lag(self) -> None:
        for key, mgr in self.managers.items():
            try:
                low, high = self.consumer.get_watermark_offsets(self._tp(key), cached=True)
            except Exception:  # noqa: BLE001 - unknown yet
                continue
            if high is not None and high >= 0 and mgr is not None:
                self.m_lag.set(label(key), max(0, high - mgr.committed))
