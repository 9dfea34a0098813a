"""Executors of a checkpointed topology: spouts and bolts that take part in checkpoints.

Each task pairs an ``Alignment`` (squall.state.protocol) with the actions it asks for:
saving, committing or restoring the task's ``KeyValueState`` (stateful components),
forwarding barriers downstream and acking them. Stateless components align and forward
barriers too, so that the cut a PREPARE makes stays consistent below them.

Spout tasks defer their user's ``ack``: a tuple is acked once a checkpoint that includes
its effects has committed (so ``ack`` means "durably counted", and
``topology.max.spout.pending`` bounds uncommitted tuples, as in Storm). A failed or
timed-out tuple asks for a rollback: the spout task fails the next PREPARE, every task
rolls back, and the spouts replay. Stateful spouts replay by restoring their position from
their state (exactly once downstream); plain spouts get ``fail`` for every tuple not yet
committed and replay as usual (at least once).
"""
from __future__ import annotations

import time
from typing import Any

from squall.components import Spout
from squall.model import ACK_ACK, ACK_FAIL, ACKER, CHECKPOINT
from squall.runtime.acker import PendingTuples
from squall.runtime.collectors import BoltCollector
from squall.runtime.executor import BoltExecutor, Executor, SpoutExecutor
from squall.state.components import is_stateful
from squall.state.kv import KeyValueState
from squall.state.protocol import CHECKPOINT_STREAM, COMMIT, PREPARE, Alignment, Barrier
from squall.state.stores import StoreError, describe_load, namespace, open_store
from squall.state.wiring import channels, is_checkpointed
from squall.topology import SPOUT, Topology


class TaskCheckpoint:
    """One task's checkpoint actions (see AlignmentActions); the state part is shared by
    spouts and bolts, the rest is specialised below."""

    def __init__(self, executor: Executor, task: int, component: Any) -> None:
        self.ex = executor
        self.task = task
        self.obj = component
        self.barriers = BoltCollector(executor.component, task, executor.routes(task, [CHECKPOINT_STREAM]),
                                      executor.outbox, executor.reporter(task))
        self.state: KeyValueState | None = None
        self.restored = False
        self.counts = {"prepared": 0, "committed": 0, "restored": 0, "discarded": 0}
        if is_stateful(component):
            ctx = executor.context(task)
            ns = namespace(str(executor.conf["topology.name"]), executor.component, ctx.this_task_index)
            self.state = KeyValueState(open_store(executor.conf, ns), ns)

    # -- AlignmentActions -----------------------------------------------------------------
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
            ex = self.ex
            ex.errors += 1
            if ex.throttle.allow(time.monotonic()):
                ex.log.error("state store failed", task=self.task, where=where, error=str(exc))
                ex.runtime.report_error(ex.component, self.task, f"{where}: {exc}")
            return False
        except Exception as exc:  # the user's hooks
            self.ex.user_error(self.task, exc, where)
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
                self.ex.log.warning("state restored with a gap", task=self.task, problem=problem)
                self.ex.runtime.report_error(self.ex.component, self.task, problem)
            self.obj.init_state(self.state)
        self.restored = True
        return True

    def close(self) -> None:
        if self.state is not None:
            self.state.close()


class Checkpointed:
    """What checkpointed spout and bolt executors share: per-task checkpoint counters in
    their stats, and their stores closed at teardown."""

    ckpt: dict[int, TaskCheckpoint]
    aligners: dict[int, Alignment]

    def stats(self) -> dict[str, Any]:
        out = super().stats()  # type: ignore[misc]
        totals: dict[str, int] = {}
        for ck in getattr(self, "ckpt", {}).values():
            for k, v in ck.counts.items():
                totals[k] = totals.get(k, 0) + v
        totals["held_over_limit"] = sum(al.over_limit for al in getattr(self, "aligners", {}).values())
        out["checkpoint"] = totals
        return out

    def teardown(self) -> None:
        super().teardown()  # type: ignore[misc]
        for ck in getattr(self, "ckpt", {}).values():
            ck.close()


class BoltCheckpoint(TaskCheckpoint):
    def __init__(self, executor: "CheckpointedBoltExecutor", task: int, bolt: Any, coll: BoltCollector,
                 basic: bool) -> None:
        super().__init__(executor, task, bolt)
        self.run = lambda tuples: executor._run_batch(task, bolt.execute, coll, basic, tuples)

    def execute(self, tuples: list) -> None:
        self.run(tuples)


class CheckpointedBoltExecutor(Checkpointed, BoltExecutor):
    def setup(self) -> None:
        super().setup()
        rt = self.runtime
        chans = channels(rt.system, self.component, rt.component_to_tasks)
        max_held = int(self.conf["topology.executor.receive.buffer.size"])
        self.ckpt: dict[int, BoltCheckpoint] = {}
        self.aligners: dict[int, Alignment] = {}
        for task, (bolt, coll, basic) in self.tasks.items():
            ck = self.ckpt[task] = BoltCheckpoint(self, task, bolt, coll, basic)
            if chans:
                self.aligners[task] = Alignment(chans, ck, max_held)
            else:  # a bolt without inputs gets no barriers: it runs as usual
                ck.restore(0)

    def run_input(self, task: int, tuples: list) -> None:
        aligner = self.aligners.get(task)
        if aligner is None:
            super().run_input(task, tuples)
        else:
            aligner.feed(tuples)


class HeldPending(PendingTuples):
    """A spout task's pending tuples: those in flight (``entries``, which the collector
    and timeouts use) plus those complete but not yet committed (``held``). Both count
    toward ``topology.max.spout.pending``; keeping the held ones out of ``entries``
    keeps that dict as small, and as fast, as without checkpoints."""

    __slots__ = ("held",)

    def __init__(self, entries: dict) -> None:
        self.entries = entries
        self.held = 0

    def __len__(self) -> int:
        return len(self.entries) + self.held


class SpoutCheckpoint(TaskCheckpoint):
    """A spout task's actions, and its acks deferred until a commit covers them."""

    def __init__(self, executor: "CheckpointedSpoutExecutor", task: int, spout: Any, pending: HeldPending) -> None:
        super().__init__(executor, task, spout)
        self.pending = pending
        self.done: list[tuple[Any, float]] = []                      # completed since the last PREPARE
        self.closed: list[tuple[int, list[tuple[Any, float]]]] = []  # (txid, what its PREPARE covered)
        self.rollback_wanted = False

    def execute(self, tuples: list) -> None:  # a spout's only input is barriers
        raise AssertionError("spout tasks receive no data")

    def completed(self, roots: list[int]) -> None:
        """Trees complete: their tuples wait for a commit to be acked."""
        pop, done = self.pending.entries.pop, self.done
        n = len(done)
        for root in roots:
            entry = pop(root, None)
            if entry is not None:  # None: timed out already, or from before a restore
                done.append(entry)
        self.pending.held += len(done) - n

    def prepare(self, txid: int) -> bool:
        if self.rollback_wanted:
            return False  # a tuple failed since the last checkpoint: fail this one, roll back
        super().prepare(txid)
        self.closed.append((txid, self.done))
        self.done = []
        return True

    def commit(self, txid: int) -> bool:
        super().commit(txid)
        ex = self.ex
        # Most spouts leave ack alone: then only the bookkeeping runs.
        ack = None if type(self.obj).ack is Spout.ack else self.obj.ack
        now, lat = time.monotonic(), ex.latencies.append
        keep = []
        for t, entries in self.closed:
            if t > txid:
                keep.append((t, entries))
                continue
            for entry in entries[15::16]:
                lat(now - entry[1])  # a sample: the latency from emit to commit
            if ack is not None:
                for msg_id, _ in entries:
                    ex._call(self.task, ack, msg_id)
            ex.acked += len(entries)
            ex.task_acked[self.task] += len(entries)
            self.pending.held -= len(entries)
        self.closed = keep
        return True

    def restore(self, txid: int) -> bool:
        # Everything not committed is replayed: a stateful spout rewinds with its state, a
        # plain one hears fail for each such tuple.
        stale = [*self.pending.entries.values(), *self.done, *(e for _, es in self.closed for e in es)]
        self.pending.entries.clear()
        self.pending.held = 0
        self.done, self.closed, self.rollback_wanted = [], [], False
        if self.state is None:
            for msg_id, _ in stale:
                self.ex.failed += 1
                self.ex.task_failed[self.task] += 1
                self.ex._call(self.task, self.obj.fail, msg_id)
        return super().restore(txid)

    @property
    def ready(self) -> bool:
        return self.restored and not self.rollback_wanted


class CheckpointedSpoutExecutor(Checkpointed, SpoutExecutor):
    def setup(self) -> None:
        super().setup()
        rt = self.runtime
        chans = channels(rt.system, self.component, rt.component_to_tasks)
        self.ckpt: dict[int, SpoutCheckpoint] = {}
        self.aligners: dict[int, Alignment] = {}
        for task, (spout, coll, pending) in list(self.tasks.items()):
            held = HeldPending(pending.entries)  # the collector keeps using the same entries
            self.tasks[task] = (spout, coll, held)
            ck = self.ckpt[task] = SpoutCheckpoint(self, task, spout, held)
            self.aligners[task] = Alignment(chans, ck, 16)

    def _emitting(self):
        ckpt = self.ckpt
        return [(t, v) for t, v in self.tasks.items() if ckpt[t].ready]

    def _acks(self, task: int, tuples: list, now: float) -> None:
        ck = self.ckpt[task]
        pending = ck.pending.entries
        for tup in tuples:
            stream = tup.source.stream
            if stream == ACK_ACK:
                ck.completed(tup.values[0])
            elif stream == ACK_FAIL:
                for root in tup.values[0]:
                    if root in pending:
                        self.failed += 1
                        self.task_failed[task] += 1
                        ck.rollback_wanted = True
            elif stream == CHECKPOINT_STREAM:
                self.aligners[task].feed([tup])

    def _expire(self, now: float) -> None:
        for task, (spout, coll, pending) in self.tasks.items():
            expired = pending.expire(now, self.timeout)
            if not expired:
                continue
            ck = self.ckpt[task]
            ck.rollback_wanted = True
            self.failed += len(expired)
            self.task_failed[task] += len(expired)
            if ck.state is None:  # a plain spout replays these itself
                for msg_id in expired:
                    self._call(task, spout.fail, msg_id)


class CheckpointSpoutExecutor(SpoutExecutor):
    """Runs the checkpoint spout: one ``next_tuple`` call per turn (it sends at most one
    barrier at a time), and its own timeout (``topology.state.checkpoint.timeout.secs``)."""

    def setup(self) -> None:
        super().setup()
        timeout = self.conf.get("topology.state.checkpoint.timeout.secs")
        if timeout:
            self.timeout = float(timeout)

    def _emit(self, now: float) -> tuple[int, bool]:
        emitted = 0
        for task, (spout, coll, pending) in self.tasks.items():
            coll.now = now
            before = sum(r.emitted for r in coll._routes.values())
            try:
                spout.next_tuple()
            except Exception as exc:
                self.user_error(task, exc, "next_tuple")
            emitted += sum(r.emitted for r in coll._routes.values()) - before
        return emitted, True  # wake for acks, or after IDLE for the next interval

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        for spout, _, _ in getattr(self, "tasks", {}).values():
            rec = spout.coordinator.record
            out["checkpoint"] = {"txid": rec.txid, "phase": rec.phase, "recoveries": rec.recoveries}
        return out


def executor_class(system: Topology, component: str) -> type[Executor] | None:
    """The executor class of ``component`` when its topology is checkpointed, else None."""
    if not is_checkpointed(system) or component == ACKER:
        return None
    if component == CHECKPOINT:
        return CheckpointSpoutExecutor
    return CheckpointedSpoutExecutor if system.components[component].kind == SPOUT else CheckpointedBoltExecutor

