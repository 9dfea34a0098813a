"""Profiles taken with the standard library (py-spy aside)."""
from __future__ import annotations

import re
import threading

from squall.daemons.worker import profiling


def _busy(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(1000))


def test_stack_dump_names_every_thread_and_its_frames():
    text = profiling.stack_dump()
    assert re.match(r"stacks of pid \d+ at .* \(\d+ threads; from sys._current_frames\)", text)
    assert "thread MainThread" in text and "test_stack_dump_names_every_thread_and_its_frames" in text


def test_sampling_profile_is_collapsed_stacks_of_other_threads():
    stop = threading.Event()
    worker = threading.Thread(target=_busy, args=(stop,), name="busy-one")
    worker.start()
    try:
        text = profiling.profile("record", 0.3, "/nonexistent", use_py_spy=False)
    finally:
        stop.set()
        worker.join()
    head, *lines = text.splitlines()
    assert head.startswith("# sampling profile of pid") and "over 0.3s at 100 Hz" in head
    busy = [line for line in lines if line.startswith("busy-one;")]
    assert busy and all(re.match(r".+ \d+$", line) for line in lines)
    assert any("_busy (test_profiling.py" in line for line in busy)


def test_heap_snapshot_lists_allocation_lines_and_object_types():
    text = profiling.profile("heap", 0.05, "/nonexistent")
    assert "allocations traced over 0.05s (tracemalloc)" in text and "live objects tracked by gc" in text
    assert re.search(r"^\s+[\d,]+\s+dict$", text, re.M)
