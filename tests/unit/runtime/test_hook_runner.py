"""WorkerHooks (squall.runtime.hook_runner): hooks in order, each failure reported under
__system, a stuck phase left behind after its time bound."""
import pickle
import threading

import structlog

from squall.context import WorkerContext
from squall.hooks import WorkerHook
from squall.runtime.hook_runner import WorkerHooks

CALLS = []


class Note(WorkerHook):
    def __init__(self, name):
        self.name = name

    def start(self, conf, context):
        CALLS.append(("start", self.name, conf["k"], context.worker_port))

    def shutdown(self):
        CALLS.append(("shutdown", self.name))


class Blocks(WorkerHook):
    gate = threading.Event()

    def start(self, conf, context):
        self.gate.wait(10)


def hooks(*objs, blobs=()):
    reports = []
    context = WorkerContext("t-1", {"k": "v"}, {1: "a"}, {"a": [1]}, frozenset({1}), port=6700)
    timeouts = {"topology.worker.hook.start.timeout.secs": 0.2, "topology.worker.hook.shutdown.timeout.secs": 0.2}
    runner = WorkerHooks([*blobs, *(pickle.dumps(o) for o in objs)], context, timeouts,
                         structlog.get_logger("test"), lambda c, t, text: reports.append((c, t, text)))
    return runner, reports


def test_hooks_run_in_order_and_shutdown_only_after_start():
    CALLS.clear()
    runner, reports = hooks(Note("a"), Note("b"))
    runner.shutdown()  # never started: nothing to shut down
    runner.start()
    runner.shutdown()
    runner.shutdown()
    assert CALLS == [("start", "a", "v", 6700), ("start", "b", "v", 6700), ("shutdown", "a"), ("shutdown", "b")]
    assert reports == []


def test_an_unloadable_hook_is_reported_and_a_stuck_one_left_behind():
    CALLS.clear()
    foreign = pickle.dumps(Note("x")).replace(b"Note", b"Gone")  # its class is not in the code
    runner, reports = hooks(Blocks(), Note("after"), blobs=[foreign])
    runner.start()
    Blocks.gate.set()
    assert [r[:2] for r in reports] == [("__system", -1)] * 2
    assert reports[0][2].startswith("worker hook 0 cannot be loaded: ")
    assert reports[1][2].startswith("worker hook Blocks did not finish its start within")
    assert runner.stuck == ["start: Blocks"]
