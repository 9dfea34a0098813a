"""The checkpoint protocol as plain code: the coordinator's state machine and the
per-task barrier alignment. No I/O here; the checkpoint spout and the checkpointed
executors drive these and do the saving and sending.

Storm's model with a stronger promise. A system spout (``__checkpoint``) sends checkpoint
tuples ``[txid, action, epoch]`` to every spout task; each task handles one and forwards it
on its ``__checkpoint`` stream to every task downstream, anchored, so the acker tells the
checkpoint spout when every task has handled it. Two things make state updates exactly
once where Storm's are at least once:

- Barriers are aligned (Chandy-Lamport, as Flink does): a task acts on a barrier only when
  it has arrived from every upstream task, holding back what those tasks sent after it.
  Channels between two tasks are FIFO, so a PREPARE snapshots exactly the effects of the
  tuples its spouts emitted before it, everywhere in the topology.
- Recovery is fenced by epochs: every ROLLBACK/INIT carries a new epoch. A task restores
  its committed state and, until the new epoch's barrier has come from every upstream
  task, fails what the others still send from before (it belongs to the rolled-back past,
  which the spouts replay).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

# The barrier stream every component declares, and its fields: part of the system topology.
from squall.model import CHECKPOINT_FIELDS, CHECKPOINT_STREAM

__all__ = ["ACTIONS", "CHECKPOINT_FIELDS", "CHECKPOINT_STREAM", "COMMIT", "COMMITTED", "COMMITTING", "INIT",
           "PREPARE", "PREPARING", "RECOVERY", "ROLLBACK", "Alignment", "AlignmentActions", "Barrier",
           "Coordinator", "TxRecord"]

PREPARE, COMMIT, ROLLBACK, INIT = "prepare", "commit", "rollback", "init"
RECOVERY = (ROLLBACK, INIT)
ACTIONS = (PREPARE, COMMIT, ROLLBACK, INIT)

# The coordinator's durable phases (Storm's CheckPointState).
COMMITTED, PREPARING, COMMITTING = "committed", "preparing", "committing"


@dataclass(frozen=True)
class TxRecord:
    """What the checkpoint spout keeps durable: the latest txid, its phase, the epoch."""

    txid: int = 0
    phase: str = COMMITTED
    epoch: int = 0
    recoveries: int = 0   # INIT/ROLLBACK rounds started, ever

    def restore_point(self) -> int:
        """The txid every task restores to: a txid whose commit was decided (COMMITTING)
        is rolled forward, a PREPARING one is rolled back."""
        return self.txid - 1 if self.phase == PREPARING else self.txid

    def to_dict(self) -> dict[str, Any]:
        return {"txid": self.txid, "phase": self.phase, "epoch": self.epoch, "recoveries": self.recoveries}

    @classmethod
    def from_dict(cls, d: Any) -> "TxRecord":
        """Checked: the record comes from a store another process wrote."""
        if not isinstance(d, dict):
            raise ValueError(f"checkpoint record is not a mapping: {d!r:.80}")
        txid, phase, epoch, n = d.get("txid"), d.get("phase"), d.get("epoch"), d.get("recoveries", 0)
        if not (isinstance(txid, int) and isinstance(epoch, int) and isinstance(n, int)
                and min(txid, epoch, n) >= 0 and phase in (COMMITTED, PREPARING, COMMITTING)):
            raise ValueError(f"malformed checkpoint record {d!r:.80}")
        return cls(txid, phase, epoch, n)


Barrier = tuple[int, str, int]  # (txid, action, epoch): also the checkpoint tuple's message id


RETRY_FIRST_SECS = 1.0   # the wait before the second recovery in a row; it doubles from there
RETRY_MAX_SECS = 30.0


def retry_delay(failures: int) -> float:
    """Seconds from sending a barrier whose tree failed to the next recovery, after
    ``failures`` failed trees in a row: none after one, then 1, 2, 4 ... up to 30."""
    if failures <= 1:
        return 0.0
    return min(RETRY_MAX_SECS, RETRY_FIRST_SECS * 2.0 ** (failures - 2))


class Coordinator:
    """The checkpoint spout's decisions. ``next`` proposes the barrier to send and the
    record it moves to; the caller saves the record first if ``durable`` says so, then
    calls ``sent``. ``acked``/``failed`` take the message id of a completed or failed
    checkpoint tree; ``acked`` may return the next record (saved, if durable, before
    ``saved``)."""

    def __init__(self, record: TxRecord, interval: float) -> None:
        self.record = record
        self.interval = interval
        self.recovering = True      # a fresh coordinator always starts with INIT
        self.started = False        # has an INIT completed since it started
        self.in_flight: Barrier | None = None
        self.last_prepare = float("-inf")
        self.sent_at = float("-inf")
        self.failures = 0           # checkpoint trees failed in a row
        self.retry_at = float("-inf")  # no recovery barrier before this

    def next(self, now: float, wall_ms: int) -> tuple[TxRecord, Barrier] | None:
        """``wall_ms``: wall-clock milliseconds. A new epoch is at least that, so epochs keep
        growing even if this record is lost (tasks ignore barriers of older epochs)."""
        if self.in_flight is not None:
            return None
        rec = self.record
        if self.recovering:
            if now < self.retry_at:
                return None
            point = rec.restore_point()
            new = TxRecord(point, COMMITTED, max(rec.epoch + 1, wall_ms), rec.recoveries + 1)
            return new, (point, ROLLBACK if self.started else INIT, new.epoch)
        if rec.phase == COMMITTING:
            return rec, (rec.txid, COMMIT, rec.epoch)
        if now - self.last_prepare >= self.interval:
            new = TxRecord(rec.txid + 1, PREPARING, rec.epoch, rec.recoveries)
            return new, (new.txid, PREPARE, rec.epoch)
        return None

    def durable(self, record: TxRecord) -> bool:
        """Must ``record`` be saved before the coordinator acts on it? Only where losing it
        would change what a restart does: a decided commit (COMMITTING) and a new epoch.
        A lost PREPARING(k) restarts as the saved record before it does (restore to k-1),
        and a lost COMMITTED(k) as the saved COMMITTING(k) does (restore to k)."""
        return record.phase == COMMITTING and record != self.record or record.epoch != self.record.epoch

    def sent(self, record: TxRecord, barrier: Barrier, now: float) -> None:
        self.record = record
        self.in_flight = barrier
        self.sent_at = now
        if barrier[1] == PREPARE:
            self.last_prepare = now

    def acked(self, msg_id: Any) -> TxRecord | None:
        """A checkpoint tree completed; returns the record to save next, if any."""
        if msg_id != self.in_flight:
            return None  # an old tree: its outcome no longer matters
        self.in_flight = None
        self.failures = 0
        action = msg_id[1]
        if action in RECOVERY:
            self.recovering, self.started = False, True
            return None
        return replace(self.record, phase=COMMITTING if action == PREPARE else COMMITTED)

    def saved(self, record: TxRecord) -> None:
        self.record = record

    def failed(self, msg_id: Any) -> None:
        """A checkpoint tree failed or timed out: recover, at once the first time, then
        backing off (``retry_delay``), so a failure that comes back at once (a state that
        cannot be restored) does not loop as fast as barriers go round."""
        if msg_id == self.in_flight:
            self.in_flight = None
            self.recovering = True
            self.failures += 1
            self.retry_at = self.sent_at + retry_delay(self.failures)

    def unsaved(self) -> None:
        """The record ``acked`` returned could not be saved: recover from what is saved."""
        self.recovering = True


class AlignmentActions(Protocol):
    """What an ``Alignment`` asks of the task it serves (the executor implements these)."""

    def execute(self, tuples: list) -> None: ...
    def discard(self, tuples: list) -> None: ...   # fail tuples that belong to a rolled-back past
    def checkpoint(self, action: str, txid: int) -> bool: ...  # prepare / commit / restore
    def forward(self, barrier: Barrier, anchors: list) -> None: ...
    def ack(self, tuples: list) -> None: ...
    def fail(self, tuples: list) -> None: ...


class Alignment:
    """One task's barrier handling over its input channels (upstream task ids).

    ``feed`` takes tuples in arrival order. Data from a channel whose barrier has arrived
    is held until the barrier has come from every channel; then the task acts (prepare,
    commit, or restore), forwards the barrier, acks the barrier tuples and runs what it
    held. During a recovery, data from channels whose new-epoch barrier has not arrived
    yet is discarded. A task executes nothing until its first INIT/ROLLBACK completes.
    """

    def __init__(self, channels: Sequence[int], actions: AlignmentActions, max_held: int) -> None:
        if not channels:
            raise ValueError("a task with no input channels has nothing to align")
        self.channels = frozenset(channels)
        self.act = actions
        self.max_held = max_held
        self.initialized = False
        self.epoch = -1
        self.pending: Barrier | None = None        # the barrier being aligned
        self.arrived: dict[int, Any] = {}          # channel -> its barrier tuple
        self.held: dict[int, list] = {}            # channel -> what came after its barrier
        self.n_held = 0
        self.over_limit = 0                        # tuples failed because the hold was full

    @property
    def recovering(self) -> bool:
        return self.pending is not None and self.pending[1] in RECOVERY

    def feed(self, tuples: list) -> None:
        if self.initialized and self.pending is None:
            # Running normally (nothing held, no recovery): hand the batch over as it is, up
            # to a barrier if one came. Tuples come in runs sharing one Source.
            src = None
            for i, t in enumerate(tuples):
                s = t.source
                if s is not src:
                    src = s
                    if s.stream == CHECKPOINT_STREAM:
                        if i:
                            self.act.execute(tuples[:i])
                        self._feed(tuples[i:])
                        return
            self.act.execute(tuples)
            return
        self._feed(tuples)

    def _feed(self, tuples: list) -> None:
        run: list = []
        drop: list = []
        for t in tuples:
            src = t.source
            c = src.task
            arrived = self.arrived  # (a barrier below may replace it)
            if src.stream == CHECKPOINT_STREAM:
                if c in arrived and not self._preempts(t):
                    self._hold(c, t)
                    continue
                self._flush(run, drop)
                run, drop = [], []
                self._barrier(c, t)
            elif c in arrived:
                self._hold(c, t)
            elif c not in self.channels:  # tick tuples and the like: no channel to align
                if self.initialized and not self.recovering:
                    run.append(t)
            elif self.initialized and not self.recovering:
                run.append(t)
            else:
                drop.append(t)
        self._flush(run, drop)

    def _flush(self, run: list, drop: list) -> None:
        if run:
            self.act.execute(run)
        if drop:
            self.act.discard(drop)

    def _hold(self, c: int, t: Any) -> None:
        if self.n_held >= self.max_held:
            self.over_limit += 1
            self.act.fail([t])  # fails its tree: the spouts replay it after a rollback
            return
        self.held.setdefault(c, []).append(t)
        self.n_held += 1

    def _preempts(self, t: Any) -> bool:
        """A newer epoch's recovery barrier overtakes whatever is being aligned."""
        try:
            _, action, epoch = t.values
        except (TypeError, ValueError):
            return False
        return action in RECOVERY and isinstance(epoch, int) and epoch > self.epoch

    def _barrier(self, c: int, t: Any) -> None:
        values = t.values
        try:
            txid, action, epoch = values
            ok = isinstance(txid, int) and isinstance(epoch, int) and action in ACTIONS
        except (TypeError, ValueError):
            ok = False
        if not ok or c not in self.channels:
            self.act.fail([t])  # not a barrier we can trust: its tree fails, a rollback follows
            return
        if epoch < self.epoch:
            self.act.ack([t])  # from before a recovery this task already took part in
            return
        if action in RECOVERY:
            if epoch > self.epoch:
                self._abort()
                self.epoch = epoch
                self.pending = (txid, action, epoch)
            elif self.pending != (txid, action, epoch):
                self.act.ack([t])  # this epoch's recovery is already done here
                return
        else:
            if not self.initialized or epoch > self.epoch or self.recovering:
                self.act.fail([t])  # e.g. a restarted task: its state is not loaded yet
                return
            if self.pending is None:
                self.pending = (txid, action, epoch)
            elif self.pending != (txid, action, epoch):
                self.act.fail([t])
                return
        self.arrived[c] = t
        if len(self.arrived) == len(self.channels):
            self._complete()

    def _abort(self) -> None:
        """Drop an alignment a newer recovery overtook: its barriers' trees are stale."""
        if self.arrived:
            self.act.ack(list(self.arrived.values()))
        held = [t for ts in self.held.values() for t in ts]
        self.arrived, self.held, self.n_held, self.pending = {}, {}, 0, None
        if held:
            stale = [t for t in held if t.source.stream != CHECKPOINT_STREAM]
            if stale:
                self.act.discard(stale)
            barriers = [t for t in held if t.source.stream == CHECKPOINT_STREAM]
            if barriers:
                self.act.ack(barriers)

    def _complete(self) -> None:
        barrier = self.pending
        assert barrier is not None
        txid, action, _ = barrier
        tuples = list(self.arrived.values())
        held = [t for ts in self.held.values() for t in ts]
        self.arrived, self.held, self.n_held, self.pending = {}, {}, 0, None
        if self.act.checkpoint(action, txid):
            if action in RECOVERY:
                self.initialized = True
            self.act.forward(barrier, tuples)
            self.act.ack(tuples)
        else:
            if action in RECOVERY:
                self.initialized = False
            self.act.fail(tuples)
        if held:
            self.feed(held)

