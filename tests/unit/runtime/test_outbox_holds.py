"""A spout's partial batch waits for company only while company comes (Outbox.flush_due)."""
from squall.runtime.collectors import WAIT_NOTHING, Outbox

INTERVAL = 0.001


def outbox():
    sent = []
    box = Outbox(lambda task, tuples: sent.append((task, list(tuples))), 500, (), "spout", 1, INTERVAL)
    return box, sent


def turn(box, now, n):
    """One spout turn that emitted ``n`` tuples to task 7; flush_due's answer."""
    box.buffer(7).extend(range(n))
    return box.flush_due(now)


def test_a_trickle_stops_waiting_for_a_timer_once_a_hold_gathered_nothing():
    box, sent = outbox()
    assert turn(box, 0.0, 1) == INTERVAL  # the first tuple waits for company
    assert turn(box, 0.0006, 0) > 0 and sent == []
    assert turn(box, 0.0012, 0) == WAIT_NOTHING and sent == [(7, [0])]  # none came in a whole interval
    # From now on a lone tuple goes at the end of its turn: no timer between it and its bolt.
    assert turn(box, 0.0050, 1) == WAIT_NOTHING and sent[-1] == (7, [0])
    assert turn(box, 0.0090, 1) == WAIT_NOTHING and len(sent) == 3


def test_batches_form_again_when_the_rate_rises_and_a_busy_spout_keeps_its_holds():
    box, sent = outbox()
    turn(box, 0.0, 1)
    turn(box, 0.0012, 0)  # a hold that gathered nothing: a trickle
    assert turn(box, 0.0015, 1) == WAIT_NOTHING  # a lone tuple goes at once
    assert turn(box, 0.0020, 5) == INTERVAL and len(sent) == 2  # five in one turn: worth holding again
    assert turn(box, 0.0025, 5) > 0
    assert turn(box, 0.0031, 5) == WAIT_NOTHING and sent[-1] == (7, list(range(5)) * 3)
    # Company kept coming, so the next lone tuple waits for company again.
    assert turn(box, 0.0040, 1) == INTERVAL


def test_tuples_sent_by_a_full_batch_count_as_company_and_a_big_batch_keeps_its_holds():
    box, sent = outbox()
    assert turn(box, 0.0, 300) == INTERVAL
    box.buffer(7).extend(range(400))
    box.full(7)  # as a route does when its buffer reaches the batch size: all of it went out mid-hold
    assert box.buffered() == 0
    turn(box, 0.0011, 0)
    assert turn(box, 0.0020, 1) == INTERVAL  # still holding: the hold did gather tuples
    assert turn(box, 0.0031, 0) == WAIT_NOTHING  # this one gathered nothing
    assert turn(box, 0.0040, 1) == WAIT_NOTHING
    # A spout capped by a large max pending: a batch that gathered nothing still waits its
    # interval next time (its batches stay whole: its maximum rate).
    assert turn(box, 0.0050, 400) == INTERVAL
    assert turn(box, 0.0061, 0) == WAIT_NOTHING
    assert turn(box, 0.0070, 300) == INTERVAL

