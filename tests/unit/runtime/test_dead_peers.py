"""A peer that stops reading cannot stall a worker: refresh-connections moves its tasks to
their new home at once, and the tuples that went nowhere are replayed through timeouts."""
import threading

import zmq

from squall import TopologyBuilder
from squall.config import build_config
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt
from squall.testing.waiting import wait_for
from squall.testing.wire import runtime_over_zmq
from squall.testing.zookeeper import free_port

N = 1000
PAD = "x" * 40_000  # 40 MB in all: more than the socket buffers of a dead peer can swallow


def test_executors_moved_off_a_dead_peer_resume_on_their_new_home():
    key = "dead-peer"
    for suffix in ("", ".acked", ".failed"):
        Recorder.clear(key + suffix)
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout(key, [[i, PAD] for i in range(N)], ["i", "pad"]))
    b.set_bolt("sink", RecordingBolt(key, fields=["i"])).shuffle("src")  # not the 40 MB of padding
    # Task ids: __acker 1, sink 2, src 3.
    conf = build_config({"topology.acker.executors": 1, "topology.message.timeout.secs": 1,  # replays come sooner
                         "topology.producer.batch.size": 10,
                         "zmq.hwm": 2, "zmq.bind.host": "127.0.0.1", "zmq.linger.millis": 0,
                         "worker.pin.cpu": False}, user_file=False)
    zctx = zmq.Context()
    dead = zctx.socket(zmq.PULL)  # the old home of "sink": bound, but never reads again
    dead.setsockopt(zmq.RCVHWM, 1)
    dead.setsockopt(zmq.LINGER, 0)
    dead_port = dead.bind_to_random_port("tcp://127.0.0.1")
    port_a, port_c = free_port(), free_port()
    home_a, home_c = ("127.0.0.1", port_a), ("127.0.0.1", port_c)
    moved = {1: home_a, 3: home_a, 2: home_c}
    topo = b.build()
    try:
        with runtime_over_zmq("dead-1-1", topo, conf, [(1, 1), (3, 3)], port_a,
                              {1: home_a, 3: home_a, 2: ("127.0.0.1", dead_port)}) as a, \
                runtime_over_zmq("dead-1-1", topo, conf, [(2, 2)], port_c, moved) as c:
            # The dead peer's pipe fills up; the rest waits in the transfer thread's buffers.
            wait_for(lambda: a.transfer.held_bytes > 0, 20, what="sends to the dead peer backing up")
            refresh = threading.Thread(target=a.refresh_connections, args=(moved,), daemon=True)
            refresh.start()
            refresh.join(5)
            assert not refresh.is_alive(), "refresh-connections waited on a send to the dead peer"
            wait_for(lambda: len(set(Recorder.get(key + ".acked"))) == N, 60,
                     what="every row acked after the move",
                     detail=lambda: f"acked {len(set(Recorder.get(key + '.acked')))} of {N}")
            assert {i for (i,) in RecordingBolt.values(key)} == set(range(N))
            # What the dead peer swallowed came back through timeouts, not silently lost.
            assert Recorder.get(key + ".failed")
            assert all(t.is_alive() for t in a.threads + c.threads)
    finally:
        dead.close()
        zctx.term()
