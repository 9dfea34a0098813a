"""A spout task's pending map: its compiled build (slots, a free list, a root table) and its
plain-Python build (a dict) against a model and each other, its bound, and the spout's
answer when it is full."""
import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall import Bolt, Spout, TopologyBuilder
from squall.runtime import pending as pending_module
from squall.runtime.pending import DEFAULT_LIMIT, PendingTuples, pending_limit
from squall.runtime.root_table import FULL
from squall.testing.components import Recorder
from support.stepping import SteppedWorker

MAX_U64 = (1 << 64) - 1


def _plain_module():
    """pending.py loaded as plain Python under another name (whatever the build)."""
    source = Path(pending_module.__file__).with_name("pending.py")
    spec = importlib.util.spec_from_file_location("pending_plain", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLAIN = _plain_module()
BUILDS = [PendingTuples, PLAIN.PendingTuples]

roots = st.sampled_from([0, 1, MAX_U64, 1 << 63]) | st.integers(0, 30).map(lambda k: (3 << 44) + 7 * k) \
    | st.integers(0, MAX_U64)
ops = st.lists(st.one_of(
    st.tuples(st.just("add"), roots, st.integers(0, 3)),
    st.tuples(st.just("pop"), roots, st.just(0)),
    st.tuples(st.just("complete"), st.lists(roots, max_size=6), st.integers(-1, 4)),
    st.tuples(st.just("entries"), st.lists(roots, max_size=4), st.just(0)),
    st.tuples(st.just("expire"), st.integers(0, 6), st.integers(0, 4)),
    st.tuples(st.just("drain"), st.just(0), st.just(0)),
), max_size=120)


def _by_start(got, start):
    """``got`` (message ids) as a set, after checking that it is in start order."""
    starts = [start[m] for m in got]
    assert starts == sorted(starts), got
    return sorted(got)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(1, 12))
def test_both_builds_match_a_model_of_tuples_in_flight_under_a_bound(seq, limit):
    """Every answer and the final contents agree with a dict of root -> (message id, start)
    under ``limit``: a root in flight refused (0), any beyond the limit refused (FULL) with
    nothing changed; completed, popped, expired and drained entries leave; expiry and
    drain give the oldest first. Starts only grow, as a spout's turns do."""
    tables = [build(limit) for build in BUILDS]
    model: dict[int, tuple[int, float]] = {}
    start: dict[int, float] = {}  # message id -> start
    now, next_msg = 0.0, 0
    for op, arg, n in seq:
        if op == "add":
            now += n
            next_msg += 1
            want = FULL if len(model) >= limit else 0 if arg in model else 1
            if want == 1:
                model[arg] = (next_msg, now)
                start[next_msg] = now
            for t in tables:
                assert t.add(arg, next_msg, now) == want
        elif op == "pop":
            want = model.pop(arg, None)
            for t in tables:
                assert t.pop(arg) == want and (arg in t) is False
        elif op == "complete":
            wanted = [model.pop(r) for r in arg if r in model]
            for t in tables:
                lats, ids = [], ([] if n % 2 else None)
                assert t.complete(arg, now + 10.0, lats, n, ids) == len(wanted)
                assert lats == [now + 10.0 - s for _, s in wanted[:max(0, n)]]
                assert ids is None or ids == [m for m, _ in wanted]
        elif op == "entries":
            wanted = [model.pop(r) for r in arg if r in model]
            for t in tables:
                assert t.pop_entries(arg) == wanted
        elif op == "expire":
            now += arg
            dead = [r for r, (_, s) in model.items() if s <= now - n]
            want = sorted(model.pop(r)[0] for r in dead)
            for t in tables:
                assert _by_start(t.expire(now, float(n)), start) == want
        else:
            want = sorted(model.values())
            model.clear()
            for t in tables:
                got = t.drain()
                assert [s for _, s in got] == sorted(s for _, s in got) and sorted(got) == want
        for t in tables:
            assert len(t) == len(model)
    for t in tables:
        assert t.as_dict() == model
        assert all(r in t for r in model)
        t.held = 2
        assert len(t) == len(model) + 2


def test_slots_are_reused_and_the_table_grows_to_its_limit():
    """Thousands of tuples through a table of 3,000: freed slots serve new roots, the table
    grows past its first slots, and at the limit a new root is refused until one leaves."""
    for build in BUILDS:
        t = build(3000)
        live = []
        for k in range(20_000):
            root = (5 << 44) + 3 * k
            assert t.add(root, k, float(k)) == 1
            live.append(root)
            if len(live) > 2500:
                assert t.complete([live.pop(0)], float(k), [], 0, None) == 1
        assert len(t) == 2500 and t.as_dict()[live[-1]] == (19_999, 19_999.0)
        for k in range(500):
            assert t.add(k, k, 20_000.0) == 1
        assert t.add(1 << 50, "x", 20_001.0) == FULL and len(t) == 3000
        assert t.pop(live[0]) == (17_500, 17_500.0)  # one leaves: room for one
        assert t.add(1 << 50, "x", 20_001.0) == 1


def test_expiry_scans_only_when_the_oldest_entry_may_have_timed_out():
    for build in BUILDS:
        t = build(100)
        t.add(1, "a", 0.0)
        t.add(2, "b", 5.0)
        t.add(3, "c", 9.0)
        assert t.pop(2) == ("b", 5.0)
        assert t.expire(now=9.0, timeout=10.0) == []
        assert t.expire(now=12.0, timeout=10.0) == ["a"]
        assert len(t) == 1 and t.expire(now=30.0, timeout=10.0) == ["c"]
        t.add(4, "d", 31.0)  # after a scan that left nothing: the next scan is due by its start
        assert t.expire(now=40.0, timeout=10.0) == [] and t.expire(now=41.0, timeout=10.0) == ["d"]


def test_a_limit_outside_its_range_is_refused_and_the_bound_follows_max_spout_pending():
    for build in BUILDS:
        for bad in (0, -5, (1 << 30) + 1):
            with pytest.raises(ValueError, match="pending limit"):
                build(bad)
    assert pending_limit(1000) == 2000 and pending_limit(3) == 1024
    assert pending_limit(None) == pending_limit(0) == DEFAULT_LIMIT


class _Burst(Spout):
    """Each next_tuple emits ``per_call`` reliable tuples (message ids 0, 1, ...) and records fails."""

    def __init__(self, per_call):
        self.per_call = per_call

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        for _ in range(self.per_call):
            self.collector.emit([self.n], msg_id=self.n)
            self.n += 1

    def fail(self, msg_id):
        Recorder.add("burst.failed", msg_id)

    def declare_output_fields(self, declarer):
        declarer.declare(["v"])


class _Holds(Bolt):
    """Acks nothing: every tree stays pending."""

    def execute(self, t):
        Recorder.add("burst.got", t.values[0])


def test_a_spout_whose_pending_map_is_full_fails_new_tuples_at_once_and_reports_them():
    """One next_tuple call emits past the bound (twice max pending, at least 1,024): the
    tuples beyond it are not sent, the spout hears fail for each in the same turn, and the
    worker counts ``pending_full``; the tuples in flight stay pending."""
    b = TopologyBuilder()
    b.set_spout("src", _Burst(1500))
    b.set_bolt("hold", _Holds()).shuffle("src")
    Recorder.clear("burst.failed")
    Recorder.clear("burst.got")
    worker = SteppedWorker(b.build(), {"topology.acker.executors": 1, "topology.max.spout.pending": 10})
    worker.step()
    worker.step()
    spout = worker.executor("src")
    t = next(iter(spout.tasks.values()))
    assert len(t.pending) == 1024
    assert sorted(Recorder.get("burst.failed")) == list(range(1024, 1500))
    assert sorted(Recorder.get("burst.got")) == list(range(1024))
    assert worker.runtime.drops.by_cause(every=True)["pending_full"] == 476
    assert t.book.failed == 476 and not worker.errors
