"""A shell child's stdout read by the executor itself while they converse (issue 31, point 3),
waiting on the pipe (converse) or looking at it (poll):
every answer costs one wake-up, and handing the pipe between the reader thread and the
executor loses or reorders nothing."""
import os
import sys
import threading
import time

import pytest
import structlog

from squall.multilang.child import ChildGone, ChildProcess
from squall.runtime.affinity import pin_thread

ECHO = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n"
# Writes 0..N-1, one line each, in small bursts with pauses: the pipe changes hands mid-stream.
COUNTER = ("import sys, time\nfor i in range(3000):\n    sys.stdout.write(f'{i}\\n')\n"
           "    if i % 7 == 0:\n        sys.stdout.flush()\n    if i % 300 == 0:\n        time.sleep(0.005)\n")


def child(script, wakes):
    return ChildProcess([sys.executable, "-c", script], None, {"PATH": "/usr/bin:/bin"},
                        structlog.get_logger("test"), 100, wake=lambda: wakes.append(1))


def test_a_child_started_by_a_pinned_executor_thread_runs_on_the_workers_cpus():
    """A worker pins its executor threads to one CPU (worker.pin.cpu); a child started there
    would inherit that pin and share the CPU with the thread that answers it, so each of
    storm.py's round trips is two context switches on one core while the other idles."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip("one CPU: nothing to pin away from")
    started, done = {}, threading.Event()

    def executor_thread():  # lives as long as the child (setpriv's parent-death signal)
        pin_thread(min(cpus))
        started["child"] = child(ECHO, [])
        done.wait(30)

    t = threading.Thread(target=executor_thread)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while "child" not in started:
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.01)
        c = started["child"]
        assert os.sched_getaffinity(c.pid) == os.sched_getaffinity(os.getpid()) == cpus
        c.write(b"alive\n")  # and it still talks
        got = b""
        while got != b"alive\n":
            assert time.monotonic() < deadline, f"no echo from the child, got {got!r}"
            c.converse(1.0)
            got += c.read()
    finally:
        if "child" in started:
            started["child"].kill()
        done.set()
        t.join(10)


def test_a_child_in_conversation_is_read_by_the_executor_not_through_the_reader():
    wakes = []
    c = child(ECHO, wakes)
    try:
        for i in range(200):  # storm.py's way: a message, then wait for the answer
            c.write(f"{i}\n".encode())
            got = b""
            deadline = time.monotonic() + 10
            while not got.endswith(b"\n"):
                assert time.monotonic() < deadline, f"no answer to message {i}"
                c.converse(1.0)
                got += c.read()
            assert got == f"{i}\n".encode()
        # The reader thread may have taken the first answer before the conversation began;
        # after that every answer came through converse, with no wake of the executor.
        before = len(wakes)
        assert before <= 1
        c.end_conversation()
        c.write(b"after\n")  # the reader thread has the pipe again and wakes the executor
        deadline = time.monotonic() + 10
        while len(wakes) == before:
            assert time.monotonic() < deadline, "the reader thread did not take stdout back"
            time.sleep(0.01)
        assert c.read() == b"after\n"
    finally:
        c.kill()


def test_poll_takes_what_the_child_wrote_without_waiting():
    """A bolt polls its conversing child between its executor thread's turns: nothing
    written is an immediate False (no wait for the child, no wake through the reader)."""
    wakes = []
    c = child(ECHO, wakes)
    try:
        started = time.monotonic()
        assert c.poll() is False  # the child has written nothing yet
        assert time.monotonic() - started < 0.05
        for i in range(100):
            c.write(f"{i}\n".encode())
            got = b""
            deadline = time.monotonic() + 10
            while not got.endswith(b"\n"):
                assert time.monotonic() < deadline, f"no answer to message {i}"
                if not c.poll():
                    time.sleep(0.0001)
                got += c.read()
            assert got == f"{i}\n".encode()
        assert len(wakes) <= 1  # polled on this thread, not handed over by the reader thread
    finally:
        c.kill()


def test_stdout_changing_hands_between_poll_converse_and_the_reader_keeps_every_byte_in_order():
    c = child(COUNTER, [])
    out = bytearray()
    turn = 0
    try:
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, f"stdout not read to its end: {bytes(out[-40:])!r}"
            turn += 1
            try:
                if turn % 4 == 0:  # the reader thread reads
                    c.end_conversation()
                    time.sleep(0.002)
                elif turn % 4 == 1:
                    c.converse(0.002)
                else:
                    c.poll()
                out += c.read()
            except ChildGone:
                break
    finally:
        c.kill()
    assert out.decode().split() == [str(i) for i in range(3000)]
