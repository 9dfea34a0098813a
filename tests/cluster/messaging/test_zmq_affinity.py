"""A pinned worker's ZeroMQ threads (I/O, reaper) run off the CPU its Python threads are pinned to."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from squall.runtime.affinity import io_cpus

# Run in a fresh interpreter: in the suite's process, contexts of other tests (or their
# threads, still ending) may start ZeroMQ threads of their own while this one is watched.
ZMQ_THREADS_OF_A_PINNED_WORKER = r"""
import json, os, sys, time
from squall.config import build_config
from squall.messaging import make_context
from squall.testing.zookeeper import free_port

def cpus(text):
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)

def zmq_threads():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            if not open(f"/proc/self/task/{tid}/comm").read().startswith("ZMQbg"):
                continue
            status = open(f"/proc/self/task/{tid}/status").read()
        except OSError:  # the thread ended meanwhile
            continue
        out[tid] = cpus(next(line.split(":", 1)[1].strip() for line in status.splitlines()
                             if line.startswith("Cpus_allowed_list")))
    return out

others = json.loads(sys.argv[1])
before = zmq_threads()
context = make_context(build_config({"squall.messaging.transport": "zmq"}, user_file=False), io_cpus=others)
try:
    context.bind("topo", free_port())  # ZeroMQ starts its threads with the first socket
    # A thread names itself ZMQbg/... once it runs, a moment after the bind: look until then.
    deadline = time.monotonic() + 10
    while True:
        new = {tid: c for tid, c in zmq_threads().items() if tid not in before}
        if new or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    print(json.dumps(new))
finally:
    context.term()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="thread affinity is read from Linux's /proc; needs two CPUs to tell")
def test_zmq_threads_run_off_the_cpu_the_worker_is_pinned_to():
    """A worker's ZeroMQ threads stay off its executor thread's CPU (worker.pin.cpu):
    unpinned, they ran on whichever CPU woke them, mostly the busiest worker's."""
    cpu = min(os.sched_getaffinity(0))  # CPU 0 where it may be: where threads land unpinned
    others = io_cpus(cpu)
    assert others and cpu not in others
    out = subprocess.run([sys.executable, "-c", ZMQ_THREADS_OF_A_PINNED_WORKER, json.dumps(list(others))],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    mine = json.loads(out.stdout.strip().splitlines()[-1])  # after the transport's own log lines
    assert mine, "no ZeroMQ thread started"
    assert all(cpus == list(others) for cpus in mine.values()), mine
