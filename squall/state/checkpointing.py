"""The components of a checkpointed topology run wrapped: spouts and bolts that take part
in checkpoints (Storm's ``StatefulBoltExecutor`` and ``CheckpointTupleForwarder``, which
wrap a bolt; here spouts take part too).

Each task pairs an ``Alignment`` (squall.state.protocol) with the actions it asks for
(``TaskCheckpoint``): saving, committing or restoring the task's ``KeyValueState``
(stateful components), forwarding barriers downstream and acking them. Stateless
components align and forward barriers too, so that the cut a PREPARE makes stays
consistent below them.

Spout tasks defer their user's ``ack``: a tuple is acked once a checkpoint that includes
its effects has committed (so ``ack`` means "durably counted", and
``topology.max.spout.pending`` bounds uncommitted tuples, as in Storm). A failed or
timed-out tuple asks for a rollback: the spout task fails the next PREPARE, every task
rolls back, and the spouts replay. A bolt task that failed a tuple since its last barrier
fails the next PREPARE itself: the tuple came before that barrier (channels are FIFO), so the
PREPARE covers it, and news of the failure may reach its spout only after the spout has
prepared. A bolt that keeps tuples past a barrier (windows do) keeps them in its state.
Stateful spouts replay by restoring their position from their state (exactly once
downstream); plain spouts get ``fail`` for every tuple not yet committed and replay as
usual (at least once).

The wrappers are ordinary spouts and bolts to the runtime (squall.runtime.wrapping);
``Checkpointing`` is what a checkpointed topology's specs name as their wrapper
(squall.state.wiring).
"""
from __future__ import annotations

from typing import Any

import structlog

from squall.components import Bolt, Component, Spout
from squall.context import TopologyContext
from squall.model import ACK_ACK, ACK_FAIL, CHECKPOINT_STREAM
from squall.runtime.acker import SpoutBook
from squall.runtime.collectors import BoltCollector
from squall.runtime.wrapping import BoltWrapper, SpoutWrapper
from squall.state.kv import KeyValueState
from squall.state.protocol import COMMIT, PREPARE, Alignment, AlignmentActions, Barrier
from squall.state.stores import StoreError, describe_load, namespace, open_store, state_name
from squall.values import ValueCodec

log = structlog.get_logger("squall.state")
SPOUT_MAX_HELD = 16  # a spout task's only input is barriers


class Checkpointing:
    """The wrapping every component of a checkpointed topology runs in (pickled into its
    ``ComponentSpec.wrapper``); ``stateful``: the component has a state to checkpoint."""

    def __init__(self, stateful: bool) -> None:
        self.stateful = stateful

    def wrap(self, component: Component) -> Component:
        if isinstance(component, Spout):
            return CheckpointedSpout(component, self.stateful)
        if isinstance(component, Bolt):
            return CheckpointedBolt(component, self.stateful)
        raise TypeError(f"cannot checkpoint {type(component).__name__}: not a spout or a bolt")


def channels(context: TopologyContext) -> list[int]:
    """The tasks a task receives barriers from."""
    out: set[int] = set()
    for component, stream in context.this_sources():
        if stream == CHECKPOINT_STREAM:
            out.update(context.component_tasks(component))
    return sorted(out)


class TaskCheckpoint(AlignmentActions):
    """One task's checkpoint actions (see AlignmentActions); the state part is shared by
    spouts and bolts, the rest is specialised below."""

    def __init__(self, component: Any, stateful: bool, conf: dict[str, Any], context: TopologyContext,
                 barriers: BoltCollector, report: Any) -> None:
        self.obj: Any = component  # its Stateful hooks run only when it is stateful
        self.task = context.this_task_id
        self.barriers = barriers
        self.report = report  # the task's report_error: counted, throttled, shown by squall status
        self.log = log.bind(topology=context.topology_id, component=context.this_component_id, task=self.task)
        self.state: KeyValueState | None = None
        self.restored = False
        self.counts = {"prepared": 0, "committed": 0, "restored": 0, "discarded": 0}
        if stateful:
            ns = namespace(state_name(conf), context.this_component_id, context.this_task_index)
            self.state = KeyValueState(open_store(conf, ns), ns, ValueCodec(conf.get("topology.serializers") or {}))

    # -- AlignmentActions -----------------------------------------------------------------
    def execute(self, tuples: list) -> None:
        raise NotImplementedError

    def forward(self, barrier: Barrier, anchors: list) -> None:
        self.barriers.emit(list(barrier), CHECKPOINT_STREAM, anchors=anchors)

    def ack(self, tuples: list) -> None:
        for t in tuples:
            self.barriers.ack(t)

    def fail(self, tuples: list) -> None:
        for t in tuples:
            self.barriers.fail(t)

    def discard(self, tuples: list) -> None:
        self.counts["discarded"] += len(tuples)
        self.fail(tuples)

    def checkpoint(self, action: str, txid: int) -> bool:
        where = f"checkpoint {action} {txid}"
        try:
            if action == PREPARE:
                ok = self.prepare(txid)
            elif action == COMMIT:
                ok = self.commit(txid)
            else:
                ok = self.restore(txid)
        except StoreError as exc:  # not the user's code: the store (a rollback follows)
            self.report(f"{where}: {exc}")
            return False
        except Exception as exc:  # the user's hooks
            self.report(exc)
            return False
        if ok:
            key = {PREPARE: "prepared", COMMIT: "committed"}.get(action, "restored")
            self.counts[key] += 1
        return ok

    # -- state ----------------------------------------------------------------------------
    def prepare(self, txid: int) -> bool:
        if self.state is not None:
            self.obj.pre_prepare(txid)
            self.state.prepare(txid)
        else:
            # A stateless component may still have side effects the checkpoint must cover (a
            # KafkaBolt's records in flight): its pre_prepare, if it has one, finishes them.
            finish = getattr(self.obj, "pre_prepare", None)
            if finish is not None:
                finish(txid)
        return True

    def commit(self, txid: int) -> bool:
        if self.state is not None:
            self.obj.pre_commit(txid)
            self.state.commit(txid)
        return True

    def restore(self, txid: int) -> bool:
        if self.state is not None:
            if self.restored:
                self.obj.pre_rollback()
            self.restored = False  # until this restore succeeds (a spout stays quiet)
            held = self.state.restore(txid)
            problem = describe_load(self.state.name, held, txid)
            if problem:
                self.log.warning("state restored with a gap", problem=problem)
                self.report(problem)
            self.obj.init_state(self.state)
        self.restored = True
        return True

    def close(self) -> None:
        if self.state is not None:
            self.state.close()


class BoltCheckpoint(TaskCheckpoint):
    def __init__(self, bolt: CheckpointedBolt, conf: dict[str, Any], context: TopologyContext,
                 collector: BoltCollector, report: Any) -> None:
        assert bolt.system is not None
        super().__init__(bolt.bolt, bolt.stateful, conf, context, bolt.system, report)
        self.run = bolt.run  # the executor's run of the bolt: its rules for acks, errors, counts
        # Whose fails count (the bolt's own, and the alignment's discards and overflows) and
        # how many there were when the task last acted on a barrier.
        self.collectors = (collector, bolt.system)
        self.fails_seen = 0

    def execute(self, tuples: list) -> None:
        self.run(tuples)

    def fails(self) -> int:
        return sum(c.failed for c in self.collectors)

    def checkpoint(self, action: str, txid: int) -> bool:
        ok = super().checkpoint(action, txid)
        self.fails_seen = self.fails()
        return ok

    def prepare(self, txid: int) -> bool:
        if self.fails() > self.fails_seen:
            return False  # this task failed a tuple the PREPARE covers: roll back
        return super().prepare(txid)


class Participant:
    """What checkpointed spouts and bolts share: their task's checkpoint actions and
    barrier alignment (made when the task starts), and the figures they report."""

    stateful: bool
    ckpt: TaskCheckpoint | None = None
    aligner: Alignment | None = None

    def executor_stats(self) -> dict[str, dict[str, Any]]:
        counts = dict(self.ckpt.counts) if self.ckpt is not None else {}
        counts["held_over_limit"] = self.aligner.over_limit if self.aligner is not None else 0
        return {"checkpoint": counts}

    def close_state(self) -> None:
        if self.ckpt is not None:
            self.ckpt.close()


class CheckpointedBolt(Participant, BoltWrapper):
    """A bolt of a checkpointed topology: its input goes through its task's alignment,
    which runs the bolt, checkpoints its state and forwards barriers."""

    ckpt: BoltCheckpoint | None

    def __init__(self, bolt: Bolt, stateful: bool) -> None:
        super().__init__(bolt)
        self.stateful = stateful

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.bolt.prepare(conf, context, collector)
        ck = self.ckpt = BoltCheckpoint(self, conf, context, collector, collector.report_error)
        chans = channels(context)
        if chans:
            self.aligner = Alignment(chans, ck, int(conf["topology.executor.receive.buffer.size"]))
        else:  # a bolt without inputs gets no barriers: it runs as usual
            ck.restore(0)

    def feed(self, tuples: list) -> None:
        aligner = self.aligner
        if aligner is None:
            self.run(tuples)
        else:
            aligner.feed(tuples)

    def cleanup(self) -> None:
        try:
            self.bolt.cleanup()
        finally:
            self.close_state()


class SpoutCheckpoint(TaskCheckpoint):
    """A spout task's actions, and its acks deferred until a commit covers them. Tuples
    complete but not committed count toward max pending (``book.pending.held``)."""

    def __init__(self, spout: CheckpointedSpout, conf: dict[str, Any], context: TopologyContext,
                 report: Any, book: SpoutBook) -> None:
        assert spout.system is not None
        super().__init__(spout.spout, spout.stateful, conf, context, spout.system, report)
        self.book = book
        self.pending = book.pending
        self.clock = context.clock
        self.done: list[tuple[Any, float]] = []                      # completed since the last PREPARE
        self.closed: list[tuple[int, list[tuple[Any, float]]]] = []  # (txid, what its PREPARE covered)
        self.rollback_wanted = False
        self.ready = False  # restored and no rollback wanted: next_tuple may run

    def execute(self, tuples: list) -> None:  # a spout's only input is barriers
        raise AssertionError("spout tasks receive no data")

    def want_rollback(self) -> None:
        self.rollback_wanted = True
        self.ready = False

    def completed(self, roots: list[int]) -> None:
        """Trees complete: their tuples wait for a commit to be acked."""
        # A root no longer pending timed out already, or is from before a restore.
        entries = self.pending.pop_entries(roots)
        self.done += entries
        self.pending.held += len(entries)

    def prepare(self, txid: int) -> bool:
        if self.rollback_wanted:
            return False  # a tuple failed since the last checkpoint: fail this one, roll back
        super().prepare(txid)
        self.closed.append((txid, self.done))
        self.done = []
        return True

    def commit(self, txid: int) -> bool:
        super().commit(txid)
        book = self.book
        # Most spouts leave ack alone: then only the bookkeeping runs.
        ack = None if type(self.obj).ack is Spout.ack else self.obj.ack
        now, lat = self.clock.monotonic(), book.latencies.append
        keep = []
        for t, entries in self.closed:
            if t > txid:
                keep.append((t, entries))
                continue
            for entry in entries[15::16]:
                lat(now - entry[1])  # a sample: the latency from emit to commit
            if ack is not None:
                for msg_id, _ in entries:
                    self._call(ack, msg_id)
            book.acked += len(entries)
            self.pending.held -= len(entries)
        self.closed = keep
        return True

    def restore(self, txid: int) -> bool:
        # Everything not committed is replayed: a stateful spout rewinds with its state, a
        # plain one hears fail for each such tuple.
        stale = [*self.pending.drain(), *self.done, *(e for _, es in self.closed for e in es)]
        self.pending.held = 0
        self.done, self.closed, self.rollback_wanted, self.ready = [], [], False, False
        if self.state is None:
            for msg_id, _ in stale:
                self.book.failed += 1
                self._call(self.obj.fail, msg_id)
        ok = super().restore(txid)
        self.ready = self.restored and not self.rollback_wanted
        return ok

    def undeliverable(self, msg_id: Any, reason: str) -> None:
        """A tuple that could not be delivered: the spout hears why (a stateful spout sets
        the record aside for its replay after the rollback; a plain one replays it)."""
        try:
            self.obj.undeliverable(msg_id, reason)
        except Exception as exc:
            self.report(exc)

    def _call(self, fn: Any, msg_id: Any) -> None:
        try:
            fn(msg_id)
        except Exception as exc:
            self.report(exc)


class CheckpointedSpout(Participant, SpoutWrapper):
    """A spout of a checkpointed topology: it emits only while its state is loaded and no
    rollback is wanted, aligns the barriers the checkpoint spout sends it, and acks its
    spout's tuples once a commit covers them."""

    ckpt: SpoutCheckpoint | None

    def __init__(self, spout: Spout, stateful: bool) -> None:
        super().__init__(spout)
        self.stateful = stateful

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.spout.open(conf, context, collector)
        assert self.book is not None, "open before attach"
        ck = self.ckpt = SpoutCheckpoint(self, conf, context, collector.report_error, self.book)
        self.aligner = Alignment(channels(context), ck, SPOUT_MAX_HELD)

    def may_emit(self) -> bool:
        """Only while the task's state is loaded and no rollback is wanted."""
        return self.ckpt is not None and self.ckpt.ready

    def next_tuple(self) -> None:  # the executor asks may_emit once a turn instead
        if self.may_emit():
            self.spout.next_tuple()

    def receive(self, tuples: list, now: float) -> None:
        ck = self.ckpt
        assert ck is not None and self.aligner is not None
        pending = ck.pending
        for tup in tuples:
            stream = tup.source.stream
            if stream == ACK_ACK:
                ck.completed(tup.values[0])
            elif stream == ACK_FAIL:
                for root in tup.values[0]:
                    reason = None
                    if type(root) is not int:  # [root, reason]: a tuple of the tree could not be delivered
                        root, reason = root
                    if root in pending:  # stays pending: the restore fails it
                        ck.book.failed += 1
                        ck.want_rollback()
                        if reason is not None:  # undeliverable: the spout hears why, and not fail too
                            entry = pending.pop(root)
                            if entry is not None:
                                ck.undeliverable(entry[0], reason)
            elif stream == CHECKPOINT_STREAM:
                self.aligner.feed([tup])

    def fail(self, msg_id: Any) -> None:
        """The executor timed the tuple out: roll back; a plain spout replays it itself."""
        ck = self.ckpt
        assert ck is not None
        ck.want_rollback()
        if ck.state is None:
            self.spout.fail(msg_id)

    def close(self) -> None:
        try:
            self.spout.close()
        finally:
            self.close_state()
