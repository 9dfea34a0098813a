"""A peer that ignores backpressure cannot grow a worker's receive queue past its bound: a
worker runtime on a real ZeroMQ socket in this process, flooded from a raw socket."""
import itertools
import threading
import time

import msgpack
import zmq

from squall import Bolt, TopologyBuilder
from squall.config import build_config
from squall.messaging import codec
from squall.runtime.receiver import RECEIVE_HARD_LIMIT
from squall.testing.components import FixedTupleSpout
from squall.testing.waiting import wait_for
from squall.testing.wire import raw_sender, runtime_over_zmq


class Counting(Bolt):
    """0.1 ms per tuple, counted in a class attribute the test reads."""

    seen = 0

    def execute(self, t):
        time.sleep(0.0001)
        Counting.seen += 1


def test_a_peer_ignoring_backpressure_cannot_grow_the_receive_queue():
    cap, batches, per_batch = 1000, 16, 500  # 8,000 tuples: over three times the bound below
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout("unused", [], ["n"]))
    b.set_bolt("slow", Counting()).shuffle("src")
    # Task ids: slow 1, src 2 (no ackers).
    conf = build_config({"topology.acker.executors": 0, "topology.executor.receive.buffer.size": cap,
                         "zmq.hwm": 4, "zmq.bind.host": "127.0.0.1", "worker.pin.cpu": False}, user_file=False)
    Counting.seen = 0
    numbers = itertools.count()
    frames = [codec.encode_tasks([(1, msgpack.packb([[2, "default", [[next(numbers)] for _ in range(per_batch)],
                                                      None]]))])
              for _ in range(batches)]
    stop = threading.Event()
    with runtime_over_zmq("flood-1-1", b.build(), conf, [(1, 1)]) as rt, raw_sender(rt.port) as push:
        def flood():  # ignores backpressure; waits only for ZeroMQ to take each frame
            for frame in frames:
                while not stop.is_set():
                    try:
                        push.send(frame, zmq.NOBLOCK)
                        break
                    except zmq.Again:
                        time.sleep(0.001)
        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        try:
            wait_for(lambda: Counting.seen == batches * per_batch, 60, what="every flooded tuple executed",
                     detail=lambda: f"executed {Counting.seen}")
            queue = rt.queues[1]
            assert queue.peak <= cap * RECEIVE_HARD_LIMIT + per_batch, f"receive queue peaked at {queue.peak}"
        finally:
            stop.set()
            sender.join(5)
