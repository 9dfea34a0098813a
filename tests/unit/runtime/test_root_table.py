"""The acker ledger's root table: its compiled build (C arrays) and its plain-Python build
(a dict) against a model and against each other, its bound, and the ledger's answer when full."""
import importlib.util
import random
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.compiled import is_compiled
from squall.runtime import root_table
from squall.runtime.acker import ROOT_RANDOM_BITS, AckerLedger, ledger_limit
from squall.runtime.root_table import FULL, RootTable

MAX_U64 = (1 << 64) - 1


def _plain_module():
    """root_table.py loaded as plain Python under another name (whatever the build)."""
    source = Path(root_table.__file__).with_name("root_table.py")
    spec = importlib.util.spec_from_file_location("root_table_plain", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLAIN = _plain_module()
BUILDS = [RootTable, PLAIN.RootTable]

# Roots that collide: one residue class (root_layout's stride), the ends of the range, zero.
roots = st.sampled_from([0, 1, MAX_U64, MAX_U64 - 1, 1 << 63]) | st.integers(0, 40).map(lambda k: (3 << 44) + 7 * k) \
    | st.integers(0, MAX_U64)
ops = st.lists(st.tuples(st.sampled_from(["fold", "put", "insert", "pop", "discard", "get", "contains"]), roots,
                         st.sampled_from([0, 1, MAX_U64]) | st.integers(0, MAX_U64)), max_size=300)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(1, 40))
def test_both_builds_match_a_dict_of_nonzero_values_under_a_bound(seq, limit):
    """Every answer and the final contents agree with a model: a dict of the nonzero values,
    a new root beyond ``limit`` refused (FULL) with nothing changed."""
    tables = [build(limit) for build in BUILDS]
    model: dict[int, int] = {}
    for op, root, x in seq:
        if op in ("fold", "put"):
            v = (model.get(root, 0) ^ x) if op == "fold" else x
            if v and root not in model and len(model) >= limit:
                want = FULL
            elif v:
                model[root], want = v, 1
            else:
                model.pop(root, None)
                want = 0
        elif op == "insert":  # set only when absent (the spout's pending map: root -> slot)
            x = x or 1
            want = 0 if root in model else FULL if len(model) >= limit else 1
            if want == 1:
                model[root] = x
        elif op == "pop":
            want = model.pop(root, 0)
        elif op == "discard":
            want = model.pop(root, None) is not None
        elif op == "get":
            want = model.get(root, 0)
        else:
            want = root in model
        for t in tables:
            got = getattr(t, op)(root, x) if op in ("fold", "put", "insert") else \
                (root in t if op == "contains" else getattr(t, op)(root))
            assert got == want, (op, root, x, t)
    for t in tables:
        assert len(t) == len(model)
        assert sorted(t.items()) == sorted(model.items())
        assert sorted(t.roots()) == sorted(model)
        t.clear()
        assert len(t) == 0 and t.items() == [] and t.get(next(iter(model), 5)) == 0


def test_the_table_grows_past_its_first_slots_and_keeps_every_root():
    """Thousands of roots of one residue class (what a spout with a near acker draws): every
    one is found again after the table grew, and removing half in random order loses none."""
    rnd = random.Random(7)
    rs = [(5 << 44) + 3 * rnd.getrandbits(40) for _ in range(5000)]
    rs = list(dict.fromkeys(rs))
    for build in BUILDS:
        t = build(10_000)
        for r in rs:
            assert t.put(r, r | 1) == 1
        gone = set(rnd.sample(rs, len(rs) // 2))
        for r in gone:
            assert t.discard(r)
        assert len(t) == len(rs) - len(gone)
        assert all(t.get(r) == (0 if r in gone else r | 1) for r in rs)


@pytest.mark.parametrize("n", [0, 1, 3, 5000])
def test_take_pairs_hands_over_every_entry_packed_and_leaves_the_table_empty_and_usable(n):
    """An emitter's folded acks for one acker, as they go on the wire: every (root, value)
    once, as little-endian pairs; the table empties (a table grown for a burst shrinks, and
    takes a burst again after)."""
    rnd = random.Random(n)
    want = {(3 << 44) + 7 * rnd.getrandbits(40): rnd.getrandbits(64) | 1 for _ in range(n)}
    for build in BUILDS:
        t = build(10_000)
        for _ in range(2):
            for r, v in want.items():
                assert t.fold(r, v) == 1
            pairs = t.take_pairs()
            flat = struct.unpack(f"<{len(pairs) // 8}Q", pairs)
            assert dict(zip(flat[::2], flat[1::2])) == want and len(pairs) == 16 * len(want)
            assert len(t) == 0 and t.items() == [] and t.take_pairs() == b""


def test_values_outside_64_bits_are_refused_before_they_reach_the_table():
    """The compiled table takes C integers: an out-of-range root raises OverflowError
    (the wire decoder's range check, tests/unit/runtime/test_hostile_input.py, keeps them out)."""
    if not is_compiled(root_table):
        pytest.skip("the plain build keeps any int; the range is the decoder's to check")
    t = RootTable(4)
    for bad in (-1, 1 << 64):
        with pytest.raises(OverflowError):
            t.fold(bad, 1)
    assert len(t) == 0


def test_a_limit_outside_its_range_is_refused():
    for build in BUILDS:
        for bad in (0, -5, root_table.MAX_LIMIT + 1):
            with pytest.raises(ValueError, match="root table limit"):
                build(bad)


def test_a_full_ledger_fails_new_trees_at_once_and_keeps_tracking_the_others():
    ledger = AckerLedger(limit=2)
    a, b, c = ((2 << ROOT_RANDOM_BITS) | k for k in (11, 12, 13))
    assert not ledger.xor(a, 0x5) and not ledger.xor(b, 0x6)
    assert not ledger.xor(c, 0x7)  # no room: refused
    assert ledger.refused == 1 and len(ledger) == 2
    assert ledger.take() == ({}, {2: [c]})  # its spout task is told it failed: it replays
    ledger.apply({c: 0x1, a: 0x5})  # a completes; c is refused again, b is untouched
    assert ledger.take() == ({2: [a]}, {2: [c]}) and ledger.refused == 2
    assert ledger.xor(b, 0x6)
    assert ledger.take() == ({2: [b]}, {})


def test_the_ledger_bound_follows_max_spout_pending():
    assert ledger_limit(1000, 3) == 6000
    assert ledger_limit(1, 1) == 1024  # never tighter than a few batches
    assert ledger_limit(None, 2) == ledger_limit(0, 2) == 1 << 22
