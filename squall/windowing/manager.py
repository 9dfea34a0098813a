"""Which tuples are in which window, and when windows fire: plain code, no I/O.

``WindowManager.add`` takes a tuple with its timestamp and returns the windows that fire
(and whether the tuple was late); ``advance`` moves processing time on; ``flush`` fires
everything left (the end of a bounded input). Each fired window lists the entries to ack
after it ran: those that will be in no later window.
"""
from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from squall.windowing.spec import WindowSpec

_ts = lambda e: e.ts  # noqa: E731 (bisect key)


class Entry:
    __slots__ = ("seq", "ts", "tup", "shown")

    def __init__(self, seq: int, ts: float, tup: Any, shown: bool = False) -> None:
        self.seq, self.ts, self.tup, self.shown = seq, ts, tup, shown

    def __lt__(self, other: "Entry") -> bool:  # heap order: timestamp, then arrival
        return (self.ts, self.seq) < (other.ts, other.seq)


@dataclass
class Fired:
    """One window: its entries in order, those not in an earlier window, those that left
    since the previous window, its bounds, and the entries to ack once it has run."""

    entries: list[Entry]
    new: list[Entry]
    expired: list[Entry]
    start: float
    end: float
    evicted: list[Entry] = field(default_factory=list)


class WindowManager:
    def __init__(self, spec: WindowSpec) -> None:
        self.spec = spec
        self.length = WindowSpec.size(spec.length)
        self.slide = WindowSpec.size(spec.slide)
        self.seq = 0
        self.count = 0                          # tuples released so far (count windows)
        self.pending: list[Entry] = []          # event time: a heap of tuples not yet below the watermark
        self.buf: list[Entry] = []              # released tuples still in some window
        self.head = 0                           # buf[:head] has left every window
        self.expired: list[Entry] = []          # left since the last window fired
        self.max_ts: dict[Any, float] = {}      # input stream -> greatest timestamp seen
        self.watermark = -math.inf
        self.next_k: int | None = None          # time windows: the next window ends at next_k * slide

    def expect(self, streams: list[Any]) -> None:
        """Event time: the watermark waits for these input streams, each until its first
        tuple (as Storm's watermarks wait for every input stream): a stream that has not
        spoken yet does not see its tuples made late by another's timestamps."""
        for stream in streams:
            self.max_ts.setdefault(stream, -math.inf)

    def __len__(self) -> int:
        """Tuples held (in windows or waiting for the watermark)."""
        return len(self.buf) - self.head + len(self.pending)

    # -- input ----------------------------------------------------------------------------
    def add(self, tup: Any, ts: float, stream: Any = None, advance: bool = True) -> tuple[bool, list[Fired]]:
        """Add a tuple; (late, windows fired). A late tuple is not kept. ``advance=False``
        (event time) holds the watermark where it is: a batch run adds all its input, in
        whatever order it comes, then ``flush``es."""
        self.seq += 1
        if not self.spec.event_time:
            if self.buf and ts < self.buf[-1].ts:
                ts = self.buf[-1].ts  # a wall clock stepping back must not reorder the buffer
            fired: list[Fired] = []
            self._release(Entry(self.seq, ts, tup), fired)
            if not self.spec.counted:
                self._fire_time(ts, fired)
            return False, fired
        if ts < self.watermark:
            return True, []
        heapq.heappush(self.pending, Entry(self.seq, ts, tup))
        if ts > self.max_ts.get(stream, -math.inf):
            self.max_ts[stream] = ts
        if not advance:
            return False, []
        return False, self._advance_to(min(self.max_ts.values()) - self.spec.lateness)

    def advance(self, now: float) -> list[Fired]:
        """Processing time has reached ``now``."""
        if self.spec.event_time or self.spec.counted:
            return []
        fired: list[Fired] = []
        self._fire_time(now, fired)
        return fired

    def flush(self) -> list[Fired]:
        """The input has ended: release everything and fire every time window left."""
        return self._advance_to(math.inf)

    # -- releasing and firing -------------------------------------------------------------
    def _advance_to(self, watermark: float) -> list[Fired]:
        fired: list[Fired] = []
        if watermark > self.watermark:
            self.watermark = watermark
        pending = self.pending
        while pending and pending[0].ts < self.watermark:
            self._release(heapq.heappop(pending), fired)
        if not self.spec.counted:
            self._fire_time(self.watermark, fired)
        return fired

    def _release(self, entry: Entry, fired: list[Fired]) -> None:
        self.buf.append(entry)
        if not self.spec.counted:
            return
        self.count += 1
        slide, length = int(self.slide), int(self.length)
        if self.count % slide:
            return
        window = self.buf[max(self.head, len(self.buf) - length):]
        f = self._window(window, self.count - len(window), self.count)
        cut = len(self.buf) - (length - slide)  # the next window keeps the last length - slide
        self._evict(cut, f)
        fired.append(f)

    def _fire_time(self, upto: float, fired: list[Fired]) -> None:
        buf, slide, length = self.buf, self.slide, self.length
        while True:
            if self.next_k is None:
                if self.head >= len(buf):
                    return
                self.next_k = math.floor(buf[self.head].ts / slide) + 1
            end = self.next_k * slide
            if end > upto:
                return
            j = bisect_left(buf, end, lo=self.head, key=_ts)
            if j == self.head:  # nothing in this window: skip to the next one that has tuples
                self.next_k = None if j >= len(buf) else math.floor(buf[j].ts / slide) + 1
                continue
            f = self._window(buf[self.head:j], end - length, end)
            self._evict(bisect_left(buf, end + slide - length, lo=self.head, key=_ts), f)
            fired.append(f)
            self.next_k += 1

    def _window(self, entries: list[Entry], start: float, end: float) -> Fired:
        new = [e for e in entries if not e.shown]
        for e in new:
            e.shown = True
        f = Fired(entries, new, self.expired, start, end)
        self.expired = []
        return f

    def _evict(self, cut: int, f: Fired) -> None:
        """Entries before ``cut`` are in no later window: they leave now."""
        if cut > self.head:
            f.evicted = self.buf[self.head:cut]
            self.expired = f.evicted
            self.head = cut
            if self.head > 1024 and self.head * 2 > len(self.buf):
                del self.buf[:self.head]
                self.head = 0

    # -- checkpointing --------------------------------------------------------------------
    def snapshot(self, encode_tuple: Any) -> dict[str, Any]:
        """Everything needed to carry on exactly from here, as msgpack-able values."""
        def rows(entries: list[Entry]) -> list:
            return [[e.seq, e.ts, e.shown, encode_tuple(e.tup)] for e in entries]

        return {"seq": self.seq, "count": self.count, "next_k": self.next_k,
                "watermark": None if self.watermark == -math.inf else self.watermark,
                "max_ts": [[list(k) if isinstance(k, tuple) else k, v] for k, v in self.max_ts.items()],
                "buf": rows(self.buf[self.head:]), "pending": rows(sorted(self.pending)),
                "expired": rows(self.expired)}

    def restore(self, snap: dict[str, Any], decode_tuple: Any) -> None:
        """Load a ``snapshot`` (checked: it comes from a store)."""
        def entries(rows: Any) -> list[Entry]:
            out = []
            for seq, ts, shown, tup in rows:
                if not isinstance(seq, int) or not isinstance(ts, (int, float)):
                    raise ValueError("malformed window entry")
                out.append(Entry(seq, ts, decode_tuple(tup), bool(shown)))
            return out

        try:
            buf, pending, expired = entries(snap["buf"]), entries(snap["pending"]), entries(snap["expired"])
            seq, count, next_k = int(snap["seq"]), int(snap["count"]), snap["next_k"]
            wm = snap["watermark"]
            max_ts = {tuple(k) if isinstance(k, list) else k: float(v) for k, v in snap["max_ts"]}
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"window snapshot is malformed: {exc!r:.80}") from None
        self.buf, self.head, self.pending, self.expired = buf, 0, pending, expired
        heapq.heapify(self.pending)
        self.seq, self.count = seq, count
        self.next_k = None if next_k is None else int(next_k)
        self.watermark = -math.inf if wm is None else float(wm)
        self.max_ts = max_ts
