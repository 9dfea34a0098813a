"""A spout task's requests that wait on the broker, on a thread of their own.

The executor thread that runs a KafkaSpout runs other executors too, and the executor calls
``next_tuple`` in chunks: a request that waits for the broker there (metadata, a new
partition's committed offset, a commit that must land before a partition is handed over)
stalls every one of them, for as long as the broker takes to answer or to time out. So the
spout only asks: ``BrokerLookups`` runs the requests on its own thread, through a client
that never fetches, each with a deadline, and hands the answers back through ``answers``,
which the spout drains on its own thread at housekeeping. A request that fails is answered
with the error (the spout counts it and asks again after a back-off); the thread never ends
the worker.
"""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

REQUEST_TIMEOUT = 5.0    # the longest one request may wait for the broker
METADATA = "metadata"    # answer: (METADATA, cluster metadata or None, error or None)
COMMITTED = "committed"  # answer: (COMMITTED, {key: (offset, metadata)} or None, error or None)
COMMIT = "commit"        # answer: (COMMIT, [(key, offset)] committed or None, error or None)


@dataclass
class Backoff:
    """When to ask again after failures: ``initial`` doubling up to ``maximum`` (plain code)."""

    initial: float = 0.2
    maximum: float = 5.0
    failures: int = 0
    next_at: float = float("-inf")

    def failed(self, now: float) -> None:
        self.failures += 1
        self.next_at = now + min(self.maximum, self.initial * 2 ** min(self.failures - 1, 16))

    def succeeded(self) -> None:
        self.failures = 0
        self.next_at = float("-inf")

    def due(self, now: float) -> bool:
        return now >= self.next_at


class BrokerLookups:
    """The requests of one spout task. ``client``: a confluent-kafka consumer in the spout's
    group that never fetches (it answers metadata and committed-offset requests, and makes
    commits: with manual assignment any member of the group may commit). ``TP``: the
    TopicPartition class. Requests are queued and run in order; ``stop`` ends the thread
    after the request under way (at most its deadline)."""

    def __init__(self, client: Any, tp: Callable[..., Any], timeout: float = REQUEST_TIMEOUT) -> None:
        self.client, self.TP, self.timeout = client, tp, timeout
        self.answers: queue.SimpleQueue[tuple[str, Any, Any]] = queue.SimpleQueue()
        self._requests: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self.pending: set[str] = set()   # kinds asked and not yet answered (the spout's thread only)
        self._thread = threading.Thread(target=self._run, name="kafka-lookups", daemon=True)
        self._thread.start()

    # -- the spout's side --------------------------------------------------------------------
    def metadata(self) -> None:
        """Ask for the cluster's metadata (once at a time)."""
        self._ask(METADATA, None)

    def committed(self, keys: list[tuple[str, int]]) -> None:
        """Ask for the group's committed offsets of ``keys``."""
        self._ask(COMMITTED, list(keys))

    def commit(self, offsets: list[tuple[str, int, int, str]]) -> None:
        """Commit ``(topic, partition, offset, metadata)`` and say when it landed."""
        self._ask(COMMIT, list(offsets))

    def _ask(self, kind: str, body: Any) -> None:
        if kind == METADATA and kind in self.pending:
            return
        self.pending.add(kind)
        self._requests.put((kind, body))

    def drain(self) -> list[tuple[str, Any, Any]]:
        """Answers that arrived, in order (never waits)."""
        out: list[tuple[str, Any, Any]] = []
        while True:
            try:
                ans = self.answers.get_nowait()
            except queue.Empty:
                return out
            self.pending.discard(ans[0])
            out.append(ans)

    def wait(self, kind: str, timeout: float) -> list[tuple[str, Any, Any]]:
        """Answers until one of ``kind`` came or ``timeout`` passed (for close only)."""
        deadline = time.monotonic() + timeout
        out: list[tuple[str, Any, Any]] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            try:
                ans = self.answers.get(timeout=left)
            except queue.Empty:
                return out
            self.pending.discard(ans[0])
            out.append(ans)
            if ans[0] == kind:
                return out

    def stop(self, timeout: float = REQUEST_TIMEOUT) -> None:
        self._stop.set()
        self._requests.put(None)
        self._thread.join(timeout)

    # -- the lookup thread -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                req = self._requests.get(timeout=0.5)
            except queue.Empty:
                self._poll()
                continue
            if req is None:
                return
            kind, body = req
            try:
                self.answers.put((kind, self._do(kind, body), None))
            except Exception as exc:  # noqa: BLE001 - answered with the error: the spout retries
                self.answers.put((kind, None, exc))
            self._poll()

    def _do(self, kind: str, body: Any) -> Any:
        client, timeout = self.client, self.timeout
        if kind == METADATA:
            return client.list_topics(timeout=timeout)
        if kind == COMMITTED:
            tps = client.committed([self.TP(t, p) for t, p in body], timeout=timeout)
            out = {}
            for tp in tps:
                if tp.error is not None:
                    raise RuntimeError(f"committed offset of {tp.topic}-{tp.partition}: {tp.error}")
                out[(tp.topic, tp.partition)] = (tp.offset, tp.metadata)
            return out
        tps = [self.TP(t, p, o, metadata=m) for t, p, o, m in body]
        done = client.commit(offsets=tps, asynchronous=False)
        bad = [tp for tp in done or () if tp.error is not None]
        if bad:
            raise RuntimeError(f"commit of {bad[0].topic}-{bad[0].partition}: {bad[0].error}")
        return [((t, p), o) for t, p, o, _ in body]

    def _poll(self) -> None:
        """Serve the client's callbacks (its log lines are handed over only when polled)."""
        try:
            self.client.poll(0)
        except Exception:  # noqa: BLE001 - a client error here is also reported to a request
            pass
