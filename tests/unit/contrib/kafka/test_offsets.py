"""OffsetManager: what a spout task may commit, from emits, acks and fails alone."""
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.contrib.kafka.offsets import OffsetManager


def test_commit_stops_at_the_first_unacked_offset():
    m = OffsetManager(10)
    for off in range(10, 20):
        m.emitted(off)
    for off in (10, 11, 13, 14, 15):
        m.acked(off)
    assert m.next_commit() == 12  # 12 is pending: nothing past it
    m.commit(12)
    assert m.committed == 12 and m.uncommitted == 8
    m.acked(12)
    assert m.next_commit() == 16


def test_gaps_in_the_log_hold_nothing_back():
    m = OffsetManager(0)
    for off in (0, 1, 5, 9):  # 2-4 and 6-8 were compacted away: never emitted
        m.emitted(off)
        m.acked(off)
    assert m.next_commit() == 10


def test_a_failed_offset_holds_the_commit_until_it_is_acked_on_retry():
    m = OffsetManager(0)
    for off in range(5):
        m.emitted(off)
    assert m.failed(2)
    for off in (0, 1, 3, 4):
        m.acked(off)
    assert m.next_commit() == 2
    assert not m.is_done_or_pending(2) and m.is_done_or_pending(3)
    m.emitted(2)  # the retry
    assert m.next_commit() == 2
    m.acked(2)
    assert m.next_commit() == 5


def test_late_and_duplicate_acks_change_nothing():
    m = OffsetManager(0)
    m.emitted(0)
    assert m.acked(0) and not m.acked(0)
    m.commit(1)
    assert not m.acked(0) and not m.failed(0)
    assert not m.acked(7)  # never emitted
    assert m.next_commit() == 1


def test_done_marks_a_skipped_record():
    m = OffsetManager(3)
    m.done(3)
    m.emitted(4)
    assert m.next_commit() == 4


def test_reset_forgets_everything():
    m = OffsetManager(0)
    for off in range(4):
        m.emitted(off)
    m.reset(2)
    assert m.uncommitted == 0 and m.committed == 2 and m.last_emitted == 1 and m.next_commit() == 2


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from("afe"), st.integers(0, 40)), max_size=200))
def test_the_commit_never_passes_an_offset_not_acked(ops):
    """Whatever order emits, acks, fails and commits come in: every offset below the commit
    point that was ever emitted was acked (the spout's promise to the group)."""
    m = OffsetManager(0)
    emitted, acked = set(), set()
    for op, off in ops:
        if op == "e" and off > m.last_emitted:
            for o in range(m.last_emitted + 1, off + 1, 3):  # emits in order, with gaps
                m.emitted(o)
                emitted.add(o)
        elif op == "a" and m.acked(off):
            acked.add(off)
        elif op == "f" and m.failed(off):
            pass
        nxt = m.next_commit()
        assert all(o in acked for o in emitted if o < nxt)
        m.commit(nxt)


def test_uncommitted_counts_what_a_bound_limits():
    """The spout pauses a partition while ``uncommitted`` is at its bound: emitted offsets
    count until a commit passes them, acked or not."""
    m = OffsetManager(0)
    for off in range(100):
        m.emitted(off)
    assert m.uncommitted == 100
    for off in range(50):
        m.acked(off)
    assert m.uncommitted == 100  # acked is not committed
    m.commit(m.next_commit())
    assert m.uncommitted == 50 and m.committed_since == 50
    m.failed(50)
    m.commit(m.next_commit())
    assert m.uncommitted == 50  # a failed record holds everything after it
