"""Worker beats and supervisor reports as the leading nimbus heard them, kept in memory.

Supervisors post one report per interval (``squall.daemons.reports``); the table keeps, per
topology and slot, the newest beat (its stats as the worker's JSON text, decoded only for a
status) and when nimbus saw its time advance (nimbus's own clock,
as Storm times beats, so clock skew between hosts does not matter), and per supervisor when
its last report came. A report is the supervisor's whole picture: a slot it no longer names
has no worker any more and leaves the table. Beats that workers of an earlier squall still
write to ZooKeeper during a rolling upgrade are fed in the same way (``take_legacy``).

Everything is bounded: supervisors, slots and the bytes of stats kept (past the budget a
beat is kept without its stats, and that is counted). Plain code, no I/O; one
lock, since reports arrive on the API's threads while the leader's round reads.
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import NamedTuple

from squall.daemons.reports import ReportedBeat, SupervisorReport
from squall.daemons.state import Slot, WorkerBeat

MAX_SUPERVISORS = 20_000
MAX_SLOTS = 200_000
MAX_STATS_BYTES = 256 << 20  # stats texts kept for all workers together


class Heard(NamedTuple):
    """A worker's newest beat and the nimbus time at which its beat time last advanced."""

    beat: ReportedBeat
    seen: float


Key = tuple[str, Slot]  # (topology id, slot)


class BeatTable:
    """What the leader heard from supervisors and workers (see the module doc)."""

    def __init__(self, max_supervisors: int = MAX_SUPERVISORS, max_slots: int = MAX_SLOTS,
                 max_stats_bytes: int = MAX_STATS_BYTES) -> None:
        self.max_supervisors, self.max_slots, self.max_stats_bytes = max_supervisors, max_slots, max_stats_bytes
        self._lock = threading.Lock()
        self._topologies: dict[str, dict[Slot, Heard]] = {}
        self._keys: dict[str, set[Key]] = {}  # supervisor id -> its slots' keys from reports
        self._covered: dict[str, dict[Slot, bool]] = {}  # topology -> reported slots -> with stats?
        self._legacy: dict[str, set[Slot]] = {}  # topology id -> slots last read from ZooKeeper
        self._reported: dict[str, float] = {}  # supervisor id -> nimbus time of its last report
        self._size = 0  # slots in the table
        self._stats_total = 0  # length of every stats text kept
        self.counts: Counter[str] = Counter()  # reports, refused (and why), stats dropped

    # -- intake -----------------------------------------------------------------------
    def take(self, report: SupervisorReport, now: float) -> int:
        """Take one supervisor's report heard at ``now``; the number of beats kept. A full
        table refuses a new supervisor or new slots (counted)."""
        sid = report.supervisor_id
        with self._lock:
            if sid not in self._reported and len(self._reported) >= self.max_supervisors:
                self.counts["refused:supervisors"] += 1
                return 0
            self.counts["reports"] += 1
            self._reported[sid] = now
            kept: set[Key] = set()
            for beat in report.beats:
                key = (beat.topology_id, (sid, beat.port))
                if self._put(key, beat, now):
                    kept.add(key)
                    self._covered.setdefault(beat.topology_id, {})[key[1]] = bool(beat.stats)
            for topology_id, slot in self._keys.get(sid, set()) - kept:
                self._drop(topology_id, slot)
            self._keys[sid] = kept
            return len(kept)

    def wants_legacy(self, topology_id: str, slots: Iterable[Slot]) -> bool:
        """Whether a topology's beats should be read from ZooKeeper as well: some slot of it
        is not covered by a report with stats (its worker, or its supervisor, may be of an
        earlier squall, which beats there). Never once every worker of it reports."""
        with self._lock:
            covered = self._covered.get(topology_id, {})
            return not all(covered.get(slot, False) for slot in slots)

    def take_legacy(self, topology_id: str, beats: Mapping[Slot, WorkerBeat], now: float) -> None:
        """Beats read from ZooKeeper for one topology (workers of an earlier squall): taken
        like reported ones; slots read last time and gone now leave the table unless a
        report keeps them."""
        with self._lock:
            reported = self._covered.get(topology_id, {}).keys()
            for slot in self._legacy.get(topology_id, set()) - set(beats) - reported:
                self._drop(topology_id, slot)
            self._legacy[topology_id] = {slot for slot, beat in beats.items()
                                         if self._put((topology_id, slot), ReportedBeat.of(beat), now)}

    def _put(self, key: Key, beat: ReportedBeat, now: float) -> bool:
        # Caller holds the lock. Newer beat: kept, seen now; an older or equal one changes
        # nothing. Stats left out of a beat (over a budget, or a worker that writes none)
        # keep the last ones heard.
        topology_id, slot = key
        slots = self._topologies.setdefault(topology_id, {})
        old = slots.get(slot)
        if old is None and self._size >= self.max_slots:
            self.counts["refused:slots"] += 1
            if not slots:
                del self._topologies[topology_id]
            return False
        if old is not None and beat.time <= old.beat.time:
            return True
        if not beat.stats and old is not None:
            beat = replace(beat, stats=old.beat.stats)
        kept = len(old.beat.stats) if old is not None else 0
        if beat.stats and self._stats_total - kept + len(beat.stats) > self.max_stats_bytes:
            beat = replace(beat, stats="")
            self.counts["stats_dropped"] += 1
        self._stats_total += len(beat.stats) - kept
        self._size += old is None
        slots[slot] = Heard(beat, now)
        return True

    def _drop(self, topology_id: str, slot: Slot) -> None:
        covered = self._covered.get(topology_id)
        if covered is not None:
            covered.pop(slot, None)
            if not covered:
                del self._covered[topology_id]
        slots = self._topologies.get(topology_id)
        heard = slots.pop(slot, None) if slots is not None else None
        if heard is not None:
            self._size -= 1
            self._stats_total -= len(heard.beat.stats)
            if not slots:
                del self._topologies[topology_id]

    # -- reads ------------------------------------------------------------------------
    def heard(self, topology_id: str) -> dict[Slot, Heard]:
        """The topology's beats by slot, with when each was seen to advance."""
        with self._lock:
            return dict(self._topologies.get(topology_id, {}))

    def beats(self, topology_id: str) -> dict[Slot, WorkerBeat]:
        """The topology's beats with their stats decoded (for a status)."""
        return {slot: h.beat.decoded() for slot, h in self.heard(topology_id).items()}

    def reported_at(self) -> dict[str, float]:
        """Supervisor id -> nimbus time of its last report."""
        with self._lock:
            return dict(self._reported)

    def seen_times(self) -> list[float]:
        """When every beat in the table was last seen to advance (for the next judgement)."""
        with self._lock:
            return [h.seen for slots in self._topologies.values() for h in slots.values()]

    # -- housekeeping -----------------------------------------------------------------
    def clear(self) -> None:
        """Forget everything (a new leadership starts with no history)."""
        with self._lock:
            self._topologies.clear()
            self._keys.clear()
            self._covered.clear()
            self._legacy.clear()
            self._reported.clear()
            self._size = 0
            self._stats_total = 0

    def restart_silence(self, now: float) -> None:
        """Count every silence from ``now`` (after nimbus was cut off from the cluster, what
        it did not hear says nothing about the workers)."""
        with self._lock:
            for slots in self._topologies.values():
                for slot, heard in slots.items():
                    slots[slot] = Heard(heard.beat, now)
            self._reported = {sid: now for sid in self._reported}

    def retain(self, topology_ids: Iterable[str], supervisor_ids: Iterable[str]) -> None:
        """Keep only live topologies and registered supervisors."""
        topologies, supervisors = set(topology_ids), set(supervisor_ids)
        with self._lock:
            for sid in [s for s in self._reported if s not in supervisors]:
                for topology_id, slot in self._keys.pop(sid, set()):
                    self._drop(topology_id, slot)
                del self._reported[sid]
            for topology_id in [t for t in self._topologies if t not in topologies]:
                for slot in list(self._topologies[topology_id]):
                    self._drop(topology_id, slot)
            self._legacy = {t: s for t, s in self._legacy.items() if t in topologies}
            for sid, keys in self._keys.items():
                self._keys[sid] = {k for k in keys if k[0] in topologies}
