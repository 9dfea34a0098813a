"""RetrySchedule: exponential back-off, a bounded count, seeks at the lowest due offset."""
import pytest

from squall.contrib.kafka.retry import RetrySchedule


def test_delays_grow_exponentially_up_to_the_cap():
    r = RetrySchedule(0.5, 2.0, 5.0, None)
    assert [r.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert r.delay(10_000) == 5.0  # no overflow however many failures


def test_a_retry_is_due_after_its_delay_and_forgotten_once_retried():
    r = RetrySchedule(1.0, 2.0, 10.0, 3)
    key = ("t", 0)
    assert r.failed(key, 7, now=100.0)
    assert not r.is_ready(key, 7, 100.5) and r.is_ready(key, 7, 101.0)
    assert r.ready(100.5) == {} and r.ready(101.0) == {key: 7}
    r.retried(key, 7)
    assert not r.is_scheduled(key, 7) and r.ready(200.0) == {}
    assert r.failed(key, 7, now=200.0)  # second failure: waits 2 s
    assert not r.is_ready(key, 7, 201.5) and r.is_ready(key, 7, 202.0)


def test_after_max_count_retries_the_record_is_given_up():
    r = RetrySchedule(0.0, 2.0, 1.0, 2)
    key = ("t", 1)
    assert r.failed(key, 3, 0.0)
    assert r.failed(key, 3, 0.0)
    assert not r.failed(key, 3, 0.0)  # the third failure: given up, forgotten
    assert key not in {k[0] for k in r.failures} and len(r) == 0


def test_zero_retries_gives_up_at_once_and_none_never_does():
    assert not RetrySchedule(0.1, 2.0, 1.0, 0).failed(("t", 0), 1, 0.0)
    r = RetrySchedule(0.1, 2.0, 1.0, None)
    assert all(r.failed(("t", 0), 1, float(i)) for i in range(1000))


def test_seek_goes_to_the_lowest_due_offset_per_partition():
    r = RetrySchedule(0.0, 2.0, 1.0, None)
    a, b = ("t", 0), ("t", 1)
    for off in (9, 4, 6):
        r.failed(a, off, 0.0)
    r.failed(b, 2, 0.0)
    assert r.ready(0.0) == {a: 4, b: 2}
    r.forget_partition(a)
    assert r.ready(0.0) == {b: 2}
    assert r.next_due() == 0.0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        RetrySchedule(2.0, 2.0, 1.0, None)
    with pytest.raises(ValueError):
        RetrySchedule(0.1, 0.5, 1.0, None)
