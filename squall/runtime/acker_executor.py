"""The acker executor: the system bolt that tracks tuple trees and tells spouts which
completed or failed."""
from __future__ import annotations

from squall.model import ACK_ACK, ACK_FAIL
from squall.runtime import drops
from squall.runtime.acker import AckerLedger, ledger_limit
from squall.runtime.executor import IDLE, Executor
from squall.runtime.link import WorkerLink
from squall.runtime.stats import ExecutorStats
from squall.tuple import Tuple


class AckerExecutor(Executor):
    """The system bolt that tracks tuple trees (see squall.runtime.acker). Emitters on its own
    thread write to its ledger directly (Outbox.fuse); others send it ack messages."""

    kind = "acker"

    def __init__(self, link: WorkerLink, executor_id: tuple[int, int], component: str) -> None:
        super().__init__(link, executor_id, component)
        self.ledger = AckerLedger()

    def setup(self) -> None:
        topo = self.topology
        self.spout_tasks = frozenset(t for spec in topo.system.spouts() for t in topo.component_to_tasks[spec.id])
        # The ledger's bound (it was made, and maybe fused, before the conf was known).
        self.ledger.table.limit = ledger_limit(self.conf.get("topology.max.spout.pending"), len(self.spout_tasks))
        self.refused = 0
        self.timeout = float(self.conf["topology.message.timeout.secs"])
        # Timeouts off means off everywhere: spouts wait for every tree, so the acker keeps it.
        self.expires = bool(self.conf["topology.enable.message.timeouts"])
        self.ack_src, self.fail_src = self.outbox.sources[ACK_ACK], self.outbox.sources[ACK_FAIL]
        self.next_expiry = self.clock.monotonic() + self.timeout

    def step(self, now: float) -> float:
        ledger = self.ledger
        for _, tuples in self.queue.get_all():
            for tup in tuples:
                stream = tup.source.stream
                if stream == ACK_ACK:
                    vals = tup.values[0]
                    if type(vals) is bytes:  # from another worker: packed (root, XOR) pairs
                        ledger.apply_pairs(vals)
                    else:
                        ledger.apply(vals)
                elif stream == ACK_FAIL:
                    for entry in tup.values[0]:
                        if type(entry) is int:
                            ledger.fail(entry)
                        else:  # [root, reason]: a tuple of the tree could not be delivered
                            ledger.fail(entry[0], entry[1])
        done, failed = ledger.take()
        if ledger.refused != self.refused:
            self._full(ledger.refused - self.refused)
        deliver, spouts = self.link.deliver, self.spout_tasks
        finished = 0
        for spout, roots in done.items():
            finished += len(roots)  # an acker's "executed" counts finished trees
            if spout in spouts:
                deliver(spout, [Tuple([roots], self.ack_src)])
            else:
                self._no_spout(spout, roots)
        for spout, roots in failed.items():
            finished += len(roots)
            reasons = ledger.take_reasons(roots)
            if spout in spouts:
                batch = [r if r not in reasons else [r, reasons[r]] for r in roots] if reasons else roots
                deliver(spout, [Tuple([batch], self.fail_src)])
            else:
                self._no_spout(spout, roots)
        if finished:
            self.executed += finished
            self.task_executed[self.task_ids[0]] += finished
        if self.expires and now >= self.next_expiry:
            self.next_expiry = now + self.timeout
            ledger.expire()
        return IDLE

    def _full(self, n: int) -> None:
        """New trees the ledger had no room for: they failed at once (their spouts replay them)."""
        self.refused += n
        self.link.drop(drops.LEDGER_FULL, n, self.executor_id,
                       error=f"acker ledger full ({self.ledger.table.limit} trees in flight): {n} new tuple "
                             f"trees failed at once; raise topology.max.spout.pending's bound or add ackers")

    def _no_spout(self, task: int, roots: list[int]) -> None:
        """Roots whose low bits name no spout task: only forged ack traffic makes these."""
        self.link.drop(drops.ACKER_STREAM, len(roots), self.executor_id,
                       error=f"tuple trees of task {task}, which is not a spout task")

    def stats(self) -> ExecutorStats:
        out = super().stats()
        out.pending_trees = len(getattr(self, "ledger", ()))
        return out
