"""Sampling of emits (squall debug): what a sample holds, the bound, and a plain deliver again."""
from __future__ import annotations

from types import SimpleNamespace

from squall.runtime.sampling import MAX_VALUE_CHARS, SampledDeliver, TupleSampler, set_sampling, shown
from squall.tuple import Fields, Source, anchored_tuple


def _tuples(n: int, stream: str = "default") -> list:
    src = Source("split", 3, stream, Fields(["word", "blob"]))
    return [anchored_tuple([f"w{i}", b"x" * 300], src, {0xABC + i: 0x10}) for i in range(n)]


def test_every_emit_sampled_at_100_percent_with_stream_tasks_anchors_and_values():
    delivered = []
    sampler = TupleSampler(wall=lambda: 100.5)
    deliver = SampledDeliver(lambda task, tuples: delivered.append((task, len(tuples))), 100, "split", sampler)
    deliver(7, _tuples(3))
    deliver(8, _tuples(2, stream="__ack_ack"))  # system streams are never sampled
    assert delivered == [(7, 3), (8, 2)]  # everything still goes on
    samples = sampler.drain()
    assert [s["values"][0] for s in samples] == ["w0", "w1", "w2"]
    first = samples[0]
    assert {k: first[k] for k in ("time", "component", "task", "stream", "target", "anchors")} == {
        "time": 100.5, "component": "split", "task": 3, "stream": "default", "target": 7, "anchors": {"abc": "10"}}
    assert len(first["values"][1]) == MAX_VALUE_CHARS + 3 and first["values"][1].endswith("...")
    assert sampler.drain() == []


def test_samples_are_bounded_per_second():
    sampler = TupleSampler(max_per_sec=5, wall=lambda: 7.0)
    SampledDeliver(lambda *_: None, 100, "split", sampler)(1, _tuples(20))
    assert len(sampler.drain()) == 5 and sampler.skipped == 15


def test_values_shown_as_json_scalars_or_cut_reprs():
    class Loud:
        def __repr__(self):
            raise RuntimeError("no")
    assert shown(3) == 3 and shown(None) is None and shown(2**60) == str(2**60)
    assert shown(Loud()).startswith("<Loud: repr failed")


def test_set_sampling_wraps_and_unwraps_an_outbox_deliver():
    plain = lambda task, tuples: None  # noqa: E731
    ex = SimpleNamespace(component="split", outbox=SimpleNamespace(deliver=plain))
    acker = SimpleNamespace(component="__acker", outbox=SimpleNamespace(deliver=plain))
    sampler = TupleSampler()
    set_sampling([ex, acker], lambda c: 50.0, sampler)
    assert isinstance(ex.outbox.deliver, SampledDeliver) and ex.outbox.deliver.fraction == 0.5
    assert acker.outbox.deliver is plain  # system components are not sampled
    set_sampling([ex], lambda c: 0.0, sampler)
    assert ex.outbox.deliver is plain
