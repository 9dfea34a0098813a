"""The checkpoint protocol as plain code: the coordinator's decisions and barrier alignment."""
import pytest

from squall.state.protocol import (
    CHECKPOINT_FIELDS,
    CHECKPOINT_STREAM,
    COMMIT,
    COMMITTED,
    COMMITTING,
    INIT,
    PREPARE,
    PREPARING,
    ROLLBACK,
    Alignment,
    Coordinator,
    TxRecord,
    retry_delay,
)
from squall.tuple import Fields, Source, Tuple

DATA = Fields(["x"])


def run_round(c, now=0.0, wall=1000):
    """Let the coordinator send its next barrier and see it complete."""
    step = c.next(now, wall)
    assert step is not None
    record, barrier = step
    c.sent(record, barrier, now)
    saved = c.acked(barrier)
    if saved is not None:
        c.saved(saved)
    return barrier


def test_coordinator_init_then_prepare_commit_cycle():
    c = Coordinator(TxRecord(), interval=1.0)
    record, barrier = c.next(0.0, 5000)
    assert barrier == (0, INIT, 5000) and record == TxRecord(0, COMMITTED, 5000, 1)
    c.sent(record, barrier, 0.0)
    assert c.next(0.1, 5000) is None  # one barrier at a time
    assert c.acked(barrier) is None and not c.recovering
    assert run_round(c, 1.0) == (1, PREPARE, 5000)
    assert c.record == TxRecord(1, COMMITTING, 5000, 1)
    assert run_round(c, 1.0) == (1, COMMIT, 5000)  # at once, not after an interval
    assert c.record == TxRecord(1, COMMITTED, 5000, 1)
    assert c.next(1.5, 5000) is None  # the interval runs from the last PREPARE
    assert run_round(c, 2.0) == (2, PREPARE, 5000)


def test_failed_prepare_rolls_back_and_failed_commit_rolls_forward():
    c = Coordinator(TxRecord(), interval=0.0)
    run_round(c)
    record, prepare = c.next(1.0, 1000)
    c.sent(record, prepare, 1.0)
    c.failed(prepare)
    _, barrier = c.next(1.0, 1000)
    assert barrier[:2] == (0, ROLLBACK)  # txid 1 was only preparing: back to 0
    c2 = Coordinator(TxRecord(7, COMMITTING, 3, 2), interval=0.0)
    record, barrier = c2.next(0.0, 0)
    assert barrier == (7, INIT, 4) and record.recoveries == 3  # a decided commit is rolled forward


@pytest.mark.parametrize("record,point", [(TxRecord(5, PREPARING, 2), 4), (TxRecord(5, COMMITTING, 2), 5),
                                          (TxRecord(5, COMMITTED, 2), 5)])
def test_restart_restores_to_the_decided_txid(record, point):
    c = Coordinator(record, interval=1.0)
    new, barrier = c.next(0.0, 0)
    assert barrier == (point, INIT, 3) and new.phase == COMMITTED and new.txid == point


def test_stale_outcomes_are_ignored_and_epochs_follow_the_wall_clock():
    c = Coordinator(TxRecord(epoch=10), interval=0.0)
    first = run_round(c, 0.0, wall=50)
    assert first[2] == 50
    record, prepare = c.next(1.0, 60)
    c.sent(record, prepare, 1.0)
    c.failed((0, INIT, 50))     # an old tree's failure
    assert c.acked((9, PREPARE, 50)) is None
    assert c.in_flight == prepare and not c.recovering
    c.failed(prepare)
    _, rollback = c.next(2.0, 40)  # a wall clock behind the record still gives a newer epoch
    assert rollback[1] == ROLLBACK and rollback[2] == 51


def test_record_from_a_store_is_checked():
    assert TxRecord.from_dict(TxRecord(3, PREPARING, 9, 2).to_dict()) == TxRecord(3, PREPARING, 9, 2)
    for bad in (None, [], {"txid": -1, "phase": COMMITTED, "epoch": 0}, {"txid": 1, "phase": "x", "epoch": 0},
                {"txid": "1", "phase": COMMITTED, "epoch": 0}):
        with pytest.raises(ValueError):
            TxRecord.from_dict(bad)


# -- alignment ----------------------------------------------------------------------------

class Recorder:
    def __init__(self, ok=True):
        self.log, self.ok = [], ok

    def execute(self, tuples):
        self.log.append(("execute", [t.values[0] for t in tuples]))

    def discard(self, tuples):
        self.log.append(("discard", [t.values[0] for t in tuples]))

    def checkpoint(self, action, txid):
        self.log.append(("checkpoint", action, txid))
        return self.ok

    def forward(self, barrier, anchors):
        self.log.append(("forward", barrier, sorted(a.source.task for a in anchors)))

    def ack(self, tuples):
        self.log.append(("ack", sorted((t.source.task, t.values[1]) for t in tuples)))

    def fail(self, tuples):
        self.log.append(("fail", sorted((t.source.task, t.values[1] if len(t.values) == 3 else t.values[0])
                                        for t in tuples)))


def data(task, x):
    return Tuple([x], Source("up", task, "default", DATA))


def barrier(task, txid, action, epoch):
    return Tuple([txid, action, epoch], Source("up", task, CHECKPOINT_STREAM, CHECKPOINT_FIELDS))


def initialized(rec, epoch=1):
    al = Alignment([1, 2], rec, max_held=100)
    al.feed([barrier(1, 0, INIT, epoch), barrier(2, 0, INIT, epoch)])
    rec.log.clear()
    return al


def test_nothing_runs_before_the_first_init_and_the_init_is_aligned():
    rec = Recorder()
    al = Alignment([1, 2], rec, max_held=100)
    al.feed([data(1, "a"), barrier(1, 0, PREPARE, 1)])
    assert rec.log == [("discard", ["a"]), ("fail", [(1, PREPARE)])]
    rec.log.clear()
    # Channel 1's INIT arrives: what 1 sends next waits; what 2 still sends is from before.
    al.feed([barrier(1, 0, INIT, 5), data(1, "new1"), data(2, "old2"), barrier(2, 0, INIT, 5), data(2, "new2")])
    assert rec.log == [("discard", ["old2"]), ("checkpoint", INIT, 0), ("forward", (0, INIT, 5), [1, 2]),
                       ("ack", [(1, INIT), (2, INIT)]), ("execute", ["new1"]), ("execute", ["new2"])]
    assert al.initialized


def test_prepare_is_aligned_so_the_snapshot_is_a_consistent_cut():
    rec = Recorder()
    al = initialized(rec)
    al.feed([data(1, "a"), barrier(1, 3, PREPARE, 1), data(1, "after1"), data(2, "b")])
    assert rec.log == [("execute", ["a"]), ("execute", ["b"])]  # 1's later tuple is held
    al.feed([data(2, "c"), barrier(2, 3, PREPARE, 1), data(2, "after2")])
    assert rec.log[2:] == [("execute", ["c"]), ("checkpoint", PREPARE, 3),
                           ("forward", (3, PREPARE, 1), [1, 2]), ("ack", [(1, PREPARE), (2, PREPARE)]),
                           ("execute", ["after1"]), ("execute", ["after2"])]


def test_a_newer_rollback_overtakes_a_stuck_alignment():
    rec = Recorder()
    al = initialized(rec)
    al.feed([barrier(1, 3, PREPARE, 1), data(1, "held"), barrier(1, 2, ROLLBACK, 2)])
    # The PREPARE from 1 is dropped (acked: its tree is stale), its held data discarded.
    assert rec.log == [("ack", [(1, PREPARE)]), ("discard", ["held"])]
    rec.log.clear()
    al.feed([data(2, "old"), barrier(2, 3, PREPARE, 1), barrier(2, 2, ROLLBACK, 2)])
    assert rec.log == [("discard", ["old"]), ("ack", [(2, PREPARE)]), ("checkpoint", ROLLBACK, 2),
                       ("forward", (2, ROLLBACK, 2), [1, 2]), ("ack", [(1, ROLLBACK), (2, ROLLBACK)])]


def test_stale_and_untrusted_barriers():
    rec = Recorder()
    al = initialized(rec, epoch=4)
    al.feed([barrier(1, 1, PREPARE, 3), barrier(2, 0, INIT, 4)])
    assert rec.log == [("ack", [(1, PREPARE)]), ("ack", [(2, INIT)])]  # old epoch; this epoch's, done
    rec.log.clear()
    al.feed([barrier(1, 1, "explode", 4), barrier(9, 1, PREPARE, 4),
             Tuple(["x", PREPARE, 4], Source("up", 2, CHECKPOINT_STREAM, CHECKPOINT_FIELDS))])
    assert [e[0] for e in rec.log] == ["fail", "fail", "fail"]
    assert al.pending is None


def test_a_failed_restore_leaves_the_task_uninitialized():
    rec = Recorder(ok=False)
    al = Alignment([1], rec, max_held=100)
    al.feed([barrier(1, 0, INIT, 1), data(1, "x")])
    assert rec.log == [("checkpoint", INIT, 0), ("fail", [(1, INIT)]), ("discard", ["x"])]
    assert not al.initialized
    rec.ok = True
    rec.log.clear()
    al.feed([barrier(1, 0, ROLLBACK, 2), data(1, "y")])
    assert rec.log[-1] == ("execute", ["y"]) and al.initialized


def test_commit_is_aligned_too_and_ticks_pass_when_initialized():
    rec = Recorder()
    al = initialized(rec)
    tick = Tuple([1.0], Source("__system", -1, "__tick", Fields(["rate_secs"])))
    al.feed([barrier(1, 1, COMMIT, 1), tick, barrier(2, 1, COMMIT, 1)])
    assert rec.log == [("execute", [1.0]), ("checkpoint", COMMIT, 1), ("forward", (1, COMMIT, 1), [1, 2]),
                       ("ack", [(1, COMMIT), (2, COMMIT)])]


def test_held_tuples_are_bounded():
    rec = Recorder()
    al = Alignment([1, 2], rec, max_held=2)
    al.feed([barrier(1, 0, INIT, 1), barrier(2, 0, INIT, 1)])
    rec.log.clear()
    al.feed([barrier(1, 1, PREPARE, 1), data(1, "a"), data(1, "b"), data(1, "c")])
    assert rec.log == [("fail", [(1, "c")])] and al.over_limit == 1


def test_only_decided_commits_and_new_epochs_are_saved():
    c = Coordinator(TxRecord(4, COMMITTED, 7, 1), interval=0.0)
    record, barrier = c.next(0.0, 0)
    assert c.durable(record)                 # a new epoch
    c.sent(record, barrier, 0.0)
    c.acked(barrier)
    record, barrier = c.next(1.0, 0)
    assert barrier[1] == PREPARE and not c.durable(record)  # lost, it restores like the record before
    c.sent(record, barrier, 1.0)
    committing = c.acked(barrier)
    assert committing.phase == COMMITTING and c.durable(committing)
    c.saved(committing)
    record, barrier = c.next(1.0, 0)
    c.sent(record, barrier, 1.0)
    committed = c.acked(barrier)
    assert committed.phase == COMMITTED and not c.durable(committed)
    # What a restart does from the last saved record equals what it does from the lost one.
    assert TxRecord(5, COMMITTING, 8).restore_point() == TxRecord(5, COMMITTED, 8).restore_point()
    assert TxRecord(5, PREPARING, 8).restore_point() == TxRecord(4, COMMITTING, 8).restore_point()


def test_recoveries_that_fail_at_once_back_off():
    """A state that cannot be restored fails every ROLLBACK at once: the first is sent again
    at once, then after 1, 2, 4 ... 30 s, not as fast as barriers go round (34,426 rollbacks
    in 2.5 minutes before). A completed tree ends the back-off."""
    c = Coordinator(TxRecord(), interval=1.0)
    now, sent_at = 0.0, []
    while now < 120.0:
        step = c.next(now, 0)
        if step is not None:
            record, barrier = step
            c.sent(record, barrier, now)
            sent_at.append(now)
            c.failed(barrier)  # fails at once
        now = round(now + 0.1, 1)
    assert sent_at == pytest.approx([0.0, 0.1, 1.1, 3.1, 7.1, 15.1, 31.1, 61.1, 91.1], abs=0.11)
    assert [retry_delay(n) for n in (1, 2, 3, 6, 7, 20)] == [0.0, 1.0, 2.0, 16.0, 30.0, 30.0]
    assert c.next(121.0, 0) is None
    record, barrier = c.next(121.2, 0)
    c.sent(record, barrier, 121.2)
    c.acked(barrier)
    assert c.failures == 0 and not c.recovering
    record, prepare = c.next(122.0, 0)
    c.sent(record, prepare, 122.0)
    c.failed(prepare)
    assert c.next(122.0, 0)[1][1] == ROLLBACK  # once after a success: at once again
