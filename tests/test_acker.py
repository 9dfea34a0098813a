"""The acker's XOR ledger and the spout's pending map, as plain code."""
import random

from hypothesis import given, strategies as st

from squall.acker import AckerLedger, PendingTuples


def test_tree_completes_only_when_every_edge_is_acked():
    ledger = AckerLedger()
    e1, e2, e3 = 0x1111, 0x2222, 0x4444
    assert ledger.init(7, e1, spout_task=3, now=0) is None
    # the bolt that got e1 emits two children (e2, e3) and acks its input
    assert ledger.ack(7, e1 ^ e2 ^ e3, now=0) is None
    assert ledger.ack(7, e2, now=0) is None
    assert ledger.ack(7, e3, now=0) == 3  # the last edge: spout task 3 is told
    assert len(ledger) == 0


def test_ack_before_init_is_remembered():
    ledger = AckerLedger()
    assert ledger.ack(9, 0xAB, now=0) is None
    assert ledger.init(9, 0xAB, spout_task=4, now=0) == 4


def test_fail_reports_the_spout_and_forgets():
    ledger = AckerLedger()
    ledger.init(5, 0x10, spout_task=2, now=0)
    assert ledger.fail(5) == 2
    assert ledger.ack(5, 0x10, now=0) is None  # unknown again: kept until it expires
    assert ledger.expire(now=100, timeout=30) == [5]


def test_batch_forms_match():
    ledger, done = AckerLedger(), {}
    ledger.apply_inits({1: 0x5, 2: 0x6}, spout=8, now=0, done=done)
    ledger.apply_acks({1: 0x5, 2: 0x2}, now=0, done=done)
    assert done == {8: [1]}
    ledger.apply_acks({2: 0x4}, now=0, done=done)
    assert done == {8: [1, 2]}


@given(st.integers(min_value=1, max_value=6), st.integers(min_value=0, max_value=2**32))
def test_any_tree_in_any_order_completes_exactly_at_the_last_ack(depth, seed):
    """Build a random tuple tree; deliver init and acks in random order: completion comes
    with the last message and not before. (Edge ids come from a PRNG, as in the runtime:
    a chosen zero id or XOR collision has probability 2**-64 there.)"""
    rnd = random.Random(seed)
    ledger = AckerLedger()
    root = rnd.getrandbits(64)
    messages = []
    frontier = [rnd.getrandbits(64)]
    messages.append(("init", frontier[0]))
    for _ in range(depth):
        new = []
        for edge in frontier:
            children = [rnd.getrandbits(64) for _ in range(rnd.randint(0, 3))]
            val = edge
            for c in children:
                val ^= c
            messages.append(("ack", val))
            new.extend(children)
        frontier = new
    for edge in frontier:
        messages.append(("ack", edge))
    rnd.shuffle(messages)
    for i, (kind, val) in enumerate(messages):
        res = ledger.init(root, val, 1, 0) if kind == "init" else ledger.ack(root, val, 0)
        assert (res == 1) == (i == len(messages) - 1)


def test_pending_expires_oldest_first():
    p = PendingTuples()
    p.add(1, "a", now=0.0)
    p.add(2, "b", now=5.0)
    p.add(3, "c", now=9.0)
    assert p.pop(2) == ("b", 5.0)
    assert p.expire(now=12.0, timeout=10.0) == ["a"]
    assert len(p) == 1 and p.expire(now=30.0, timeout=10.0) == ["c"]
