"""Reading py-spy's collapsed stacks: threads, idle waits, path stages, functions and lines."""
from profile_stages import IDLE, OTHER, USER, Frame, parse, render, stage_of, summarize

SOURCE = {
    ("squall/runtime/collectors.py", 317): "        tup = _new(TreeTuple)",
    ("squall/runtime/collectors.py", 315): "        edge = _rand(64)",
    ("squall/runtime/collectors.py", 306): "        route.emitted += 1",
    ("squall/runtime/queues.py", 50): "        woken = self._bell.acquire(True, timeout)",
    ("squall/runtime/executor_thread.py", 91): "                w = ex.step(mono())",
    ("wordcount.py", 65): "            emit([word], anchors=tuple)",
}


def line_of(frame: Frame) -> str:
    return SOURCE.get((frame.file, frame.line), "")


RUN = "ExecutorThread.run (squall/runtime/executor_thread.py:91)"
EXECUTE = "BoltExecutor._run_batch (squall/runtime/bolt_executor.py:82);SplitSentence.execute (wordcount.py:65)"
RAW = [
    f"thread (11): executors-0;{RUN};{EXECUTE};BoltCollector.emit (squall/runtime/collectors.py:317) 30\n",
    f"thread (11): executors-0;{RUN};{EXECUTE};BoltCollector.emit (squall/runtime/collectors.py:315) 20\n",
    f"thread (11): executors-0;{RUN};{EXECUTE};BoltCollector.emit (squall/runtime/collectors.py:306) 10\n",
    f"thread (11): executors-0;{RUN};{EXECUTE} 15\n",
    f"thread (11): executors-0;{RUN};BatchQueue.wait (squall/runtime/queues.py:113);"
    "Doorbell.wait (squall/runtime/queues.py:50) 25\n",
    "thread (12): transfer;Thread.run (threading.py:982);Condition.wait (threading.py:327) 100\n",
    "thread (13): MainThread;main (run.py:176);_measure_local (run.py:46) 100\n",
    "not a stack line\n",
    "thread (11): executors-0;SomethingElse.go (lib/elsewhere.py:3) 5\n",
]


def test_parse_keeps_threads_frames_and_counts_and_skips_garbage():
    samples = parse(RAW)
    assert len(samples) == 8
    first = samples[0]
    assert first.thread == "executors-0" and first.count == 30
    assert first.frames[0] == Frame("ExecutorThread.run", "squall/runtime/executor_thread.py", 91)
    assert first.frames[-1].func == "BoltCollector.emit"


def test_inlined_stages_are_told_apart_by_the_source_line():
    samples = parse(RAW)
    stages = [stage_of(s.frames, {"wordcount.py"}, line_of) for s in samples[:4]]
    assert stages == ["tuple creation", "acker ledger", "emit and routing", USER]
    assert stage_of(parse(RAW)[-1].frames, {"wordcount.py"}, line_of) == OTHER
    acker = [Frame("AckerExecutor.step", "squall/runtime/acker_executor.py", 1),
             Frame("AckerLedger.complete", "squall/runtime/acker.py", 2)]
    assert stage_of(acker, (), line_of) == "acker ledger"
    # A stdlib leaf is charged to the runtime frame that called it.
    wire = [Frame("Transfer._run", "squall/runtime/transfer.py", 80), Frame("Lock.release", "threading.py", 9)]
    assert stage_of(wire, (), line_of) == "wire encode/decode"


def test_summary_splits_busy_from_idle_per_thread_and_leaves_the_driver_out():
    prof = summarize(parse(RAW), {"wordcount.py"}, line_of, skip_threads=["MainThread"])
    assert "MainThread" not in prof.threads
    assert prof.threads["executors-0"] == {"busy": 80, "idle": 25}  # Doorbell.wait's acquire line is a wait
    assert prof.threads["transfer"] == {"idle": 100}  # no source line: Condition.wait by name
    assert prof.busy == 80
    assert prof.stages == {"tuple creation": 30, "acker ledger": 20, "emit and routing": 10, USER: 15, OTHER: 5}
    assert prof.functions["BoltCollector.emit (squall/runtime/collectors.py)"] == 60
    text = render(prof, 3, line_of)
    assert "executors-0              busy  76.2%   idle waits  23.8%" in text
    assert f"{IDLE} (of the executor threads' time)  23.8%" in text
    assert " 37.5%  BoltCollector.emit (collectors.py:317)" in text and "tup = _new(TreeTuple)" in text


def test_a_zeromq_poll_is_a_wait_whatever_its_line_says_and_a_nonblocking_recv_is_not():
    lines = {("zmq/sugar/poll.py", 106): "        return zmq_poll(self.sockets, timeout=timeout)",
             ("messaging/zmq.py", 118): "                        frame = recv(_NOBLOCK)"}
    raw = ["thread (5): zmq-recv-1;ZmqServer._run (messaging/zmq.py:111);Poller.poll (zmq/sugar/poll.py:106) 7\n",
           "thread (5): zmq-recv-1;ZmqServer._run (messaging/zmq.py:118) 3\n"]
    prof = summarize(parse(raw), (), lambda f: lines.get((f.file, f.line), ""))
    assert prof.threads["zmq-recv-1"] == {"idle": 7, "busy": 3}
    assert prof.stages == {"receive dispatch": 3}
