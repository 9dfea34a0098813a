"""A KafkaBolt's records handed to the producer together, settled together (plain code).

librdkafka reports each record's delivery, but the bolt need not act per report: a batch
(the records of one turn of the executor, one ``produce_batch`` call per topic) shares one
callback, which only counts the reports and keeps the errors; when the last report of a
batch has come, the batch goes on the bolt's ``done`` queue and the executor settles all of
its tuples at once. A failed report is matched back to its tuple by the record it carries
(topic, key, value), so a failure fails (or a refusal dead-letters) that tuple and acks the
rest. Records alike in those three are interchangeable: whichever of their tuples is failed,
the replay writes the same record again, so nothing is missing from the topic.

The callback may run on two threads at once (the report thread's ``poll`` and a ``flush``
on the executor's): it only appends to lists, which the GIL keeps whole, and a batch that
both see complete is queued twice and settled once.
"""
from __future__ import annotations

import sys
from collections import deque
from typing import Any

Record = tuple[str, Any, Any, Any]   # (topic, key, value, headers)
UNKNOWN = sys.maxsize                # a batch's size before produce_batch said how many it took


class Batch:
    """Records to one topic, handed to the producer in one ``produce_batch`` call, awaiting
    their delivery reports: ``tups[i]`` is written as ``msgs[i]`` (``{"key", "value"}``)."""

    __slots__ = ("topic", "tups", "msgs", "n", "got", "errors", "done", "settled")

    def __init__(self, topic: str, tups: list[Any], msgs: list[dict[str, Any]], done: deque[Batch]) -> None:
        self.topic, self.tups, self.msgs = topic, tups, msgs
        self.n = UNKNOWN          # set by ``taken`` once the producer said which it queued
        self.got: list[None] = []  # one entry per report
        self.errors: list[tuple[Any, Any]] = []  # (error, message) of failed reports
        self.done = done
        self.settled = False

    def report(self, err: Any, msg: Any) -> None:
        """The producer's delivery callback for every record of the batch."""
        if err is not None:
            self.errors.append((err, msg))
        got = self.got
        got.append(None)
        if len(got) >= self.n:
            self.done.append(self)

    def taken(self, tups: list[Any], msgs: list[dict[str, Any]]) -> None:
        """The producer queued these (the others were refused at once): the batch is
        complete when each of them has reported (some may have already)."""
        self.tups, self.msgs = tups, msgs
        self.n = len(tups)
        if len(self.got) >= self.n:
            self.done.append(self)

    def record(self, i: int) -> Record:
        m = self.msgs[i]
        return self.topic, m["key"], m["value"], None

    def outcomes(self) -> tuple[list[Any], list[tuple[Any, Any, Record]]]:
        """The tuples to ack, and (tuple, error, record) for each failed report. A failed
        report that matches no record of the batch (it cannot happen unless the client
        changed what it reports) fails every tuple not failed already: a replay is safe, a
        wrong ack is not."""
        if not self.errors:
            return self.tups, []
        where: dict[tuple[Any, Any, Any], list[int]] = {}
        for i, m in enumerate(self.msgs):
            where.setdefault((self.topic, m["key"], m["value"]), []).append(i)
        failed: dict[int, Any] = {}
        unmatched = None
        for err, msg in self.errors:
            ident = _identity(msg)
            found = where.get(ident) if ident is not None else None
            if found:
                failed[found.pop()] = err
            else:
                unmatched = err
        if unmatched is not None:
            for i in range(len(self.tups)):
                failed.setdefault(i, unmatched)
        acks = [tup for i, tup in enumerate(self.tups) if i not in failed]
        return acks, [(self.tups[i], err, self.record(i)) for i, err in sorted(failed.items())]


def _identity(msg: Any) -> tuple[Any, Any, Any] | None:
    try:
        return msg.topic(), msg.key(), msg.value()
    except Exception:  # noqa: BLE001 - not a message as the client makes them: matches nothing
        return None
