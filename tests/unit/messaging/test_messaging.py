"""Both transports (in-process and ZeroMQ) through the same behavioural tests.

Everything is real: real ZeroMQ sockets on 127.0.0.1 (a second process sending in bulk is in
tests/cluster/messaging/test_zmq_second_process.py). Waits poll against deadlines.
"""
from __future__ import annotations

import threading
import time

import msgpack
import pytest
import zmq

from squall.config import build_config
from squall.messaging import codec, make_context
from squall.testing.waiting import wait_for
from squall.testing.zookeeper import free_port  # below the ephemeral range: no self-connect on reconnect

TOPO = "topo-1"
TIMEOUT = 10.0


def conf_for(transport: str, **extra) -> dict:
    overrides = {"squall.messaging.transport": transport, "zmq.bind.host": "127.0.0.1",
                 "zmq.linger.millis": 1000}
    overrides.update(extra)
    return build_config(overrides, user_file=False)


class Collector:
    """Receive callback that records batches (as lists of (task, payload) tuples)."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, bytes]]] = []
        self.controls: list[tuple[int, dict]] = []

    def __call__(self, batch) -> None:
        self.batches.append([(t, p) for t, p in batch])

    def control(self, kind: int, body) -> None:
        self.controls.append((kind, body))

    @property
    def messages(self) -> list[tuple[int, bytes]]:
        return [m for b in self.batches for m in b]


@pytest.fixture(params=["local", "zmq"])
def transport(request) -> str:
    return request.param


@pytest.fixture
def ctx(transport):
    context = make_context(conf_for(transport))
    yield context
    started = time.monotonic()
    context.term()
    assert time.monotonic() - started < 3.0, "term() was not prompt"


def make_batches(n: int, size: int, task_base: int = 1) -> list[list[tuple[int, bytes]]]:
    return [[(task_base + (i % 3), b"%d:%d\x00\xff" % (b, i)) for i in range(size)]
            for b in range(n)]


def test_batches_arrive_intact_and_in_order(ctx):
    port = free_port()
    server = ctx.bind(TOPO, port)
    assert server.port == port
    got = Collector()
    server.register_recv(got)
    client = ctx.connect(TOPO, "127.0.0.1", port)
    sent = make_batches(50, 40)
    for batch in sent:
        client.send(batch)
    client.send([])                       # an empty batch is not a frame
    client.send(iter([(9, b"gen")]))      # any iterable of task messages
    wait_for(lambda: len(got.batches) >= 51, what="51 batches")
    assert got.batches == sent + [[(9, b"gen")]]


def test_order_is_kept_per_connection_with_two_senders(ctx):
    port = free_port()
    server = ctx.bind(TOPO, port)
    got = Collector()
    server.register_recv(got)
    a = ctx.connect(TOPO, "127.0.0.1", port)
    b = ctx.connect(TOPO, "127.0.0.1", port)
    for i in range(200):
        a.send([(1, b"a%d" % i)])
        b.send([(2, b"b%d" % i)])
    wait_for(lambda: len(got.messages) >= 400, what="400 messages")
    msgs = got.messages
    assert [p for t, p in msgs if t == 1] == [b"a%d" % i for i in range(200)]
    assert [p for t, p in msgs if t == 2] == [b"b%d" % i for i in range(200)]


def test_client_connected_before_server_binds_still_delivers(ctx, transport):
    port = free_port()
    client = ctx.connect(TOPO, "127.0.0.1", port)
    sent = make_batches(5, 10)
    for batch in sent:
        client.send(batch)
    server = ctx.bind(TOPO, port)
    got = Collector()
    server.register_recv(got)
    wait_for(lambda: len(got.batches) >= 5, timeout=2 if transport == "local" else TIMEOUT,
               what="batches queued before bind")
    assert got.batches == sent


def test_frames_received_before_register_recv_wait_for_it(ctx):
    port = free_port()
    server = ctx.bind(TOPO, port)
    client = ctx.connect(TOPO, "127.0.0.1", port)
    sent = make_batches(5, 10)
    for batch in sent:
        client.send(batch)
    time.sleep(0.2)  # give a buggy implementation the chance to drop them
    got = Collector()
    server.register_recv(got)
    wait_for(lambda: len(got.batches) >= 5, what="batches sent before register_recv")
    assert got.batches == sent


BAD_FRAMES = [
    b"garbage bytes \xff\xfe",                                             # not msgpack
    b"",                                                                   # too short
    bytes((9, codec.KIND_TASKS)) + msgpack.packb([[1, b"x"]]),             # wrong version
    bytes((codec.VERSION, 77)) + msgpack.packb({}),                        # unknown kind
    bytes((codec.VERSION, codec.KIND_TASKS)) + msgpack.packb({"a": 1}),    # body not a list
    bytes((codec.VERSION, codec.KIND_TASKS)) + msgpack.packb([[1, 2, 3]]),  # entry shape
    bytes((codec.VERSION, codec.KIND_TASKS)) + msgpack.packb([["1", b"x"]]),  # task not int
    bytes((codec.VERSION, codec.KIND_LOAD)) + msgpack.packb([1, 2]),       # control not a map
]


def test_malformed_frames_are_counted_and_dropped(ctx, transport):
    port = free_port()
    server = ctx.bind(TOPO, port)
    got = Collector()
    server.register_recv(got)
    if transport == "zmq":
        # A foreign sender: a plain PUSH socket from another ZeroMQ context.
        raw_ctx = zmq.Context()
        raw = raw_ctx.socket(zmq.PUSH)
        raw.setsockopt(zmq.LINGER, 1000)
        raw.connect(f"tcp://127.0.0.1:{port}")
        send_raw = raw.send
    else:
        send_raw = ctx.connect(TOPO, "127.0.0.1", port).send_raw
    try:
        send_raw(codec.encode_tasks([(1, b"before")]))
        for frame in BAD_FRAMES:
            send_raw(frame)
        send_raw(codec.encode_tasks([(2, b"after")]))
        wait_for(lambda: len(got.batches) >= 2, what="good frames around the bad ones")
        assert got.batches == [[(1, b"before")], [(2, b"after")]]
        assert server.bad_frames == len(BAD_FRAMES)
        # The receiver is still alive for the real client too.
        client = ctx.connect(TOPO, "127.0.0.1", port)
        client.send([(3, b"later")])
        wait_for(lambda: len(got.batches) >= 3, what="a frame after the bad ones")
        assert got.batches[-1] == [(3, b"later")]
    finally:
        if transport == "zmq":
            raw.close()
            raw_ctx.term()


def test_control_frames_reach_the_control_callback(ctx):
    port = free_port()
    server = ctx.bind(TOPO, port)
    got = Collector()
    server.register_control(got.control)  # before register_recv, which starts delivery
    server.register_recv(got)
    client = ctx.connect(TOPO, "127.0.0.1", port)
    client.send_load_metrics({1: 0.5, 2: 1.0})
    client.send([(4, b"task")])
    client.send_control(codec.KIND_BACKPRESSURE, {3: True})
    wait_for(lambda: len(got.controls) >= 2 and got.batches, what="control frames")
    assert got.controls == [(codec.KIND_LOAD, {1: 0.5, 2: 1.0}),
                            (codec.KIND_BACKPRESSURE, {3: True})]
    assert got.batches == [[(4, b"task")]]
    with pytest.raises(ValueError):
        client.send_control(codec.KIND_TASKS, {})


def test_each_side_refuses_the_other_sides_calls(ctx):
    port = free_port()
    server = ctx.bind(TOPO, port)
    client = ctx.connect(TOPO, "127.0.0.1", port)
    with pytest.raises(TypeError):
        server.send([(1, b"x")])
    with pytest.raises(TypeError):
        client.register_recv(lambda batch: None)


def test_binding_a_bound_port_fails_with_oserror(ctx):
    port = free_port()
    ctx.bind(TOPO, port)
    with pytest.raises(OSError, match=str(port)):
        ctx.bind(TOPO, port)


def test_close_and_term_are_prompt(transport):
    context = make_context(conf_for(transport, **{"zmq.linger.millis": 300}))
    port = free_port()
    server = context.bind(TOPO, port)
    got = Collector()
    server.register_recv(got)
    client = context.connect(TOPO, "127.0.0.1", port)
    client.send([(1, b"x")])
    wait_for(lambda: got.batches, what="one batch")
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 1.0, "server close() was not prompt"
    # A server closed before register_recv must stop too.
    idle = context.bind(TOPO, free_port())
    started = time.monotonic()
    idle.close()
    assert time.monotonic() - started < 1.0
    # A client with frames queued for a peer that never comes: term waits at most ~linger.
    dead = context.connect(TOPO, "127.0.0.1", free_port())
    for batch in make_batches(3, 5):
        dead.send(batch)
    started = time.monotonic()
    context.term()
    assert time.monotonic() - started < 2.0, "term() waited past the linger"
    context.term()  # idempotent


def test_server_closed_from_its_own_callback_does_not_deadlock(ctx):
    port = free_port()
    server = ctx.bind(TOPO, port)
    done = threading.Event()

    def cb(batch):
        server.close()
        done.set()

    server.register_recv(cb)
    ctx.connect(TOPO, "127.0.0.1", port).send([(1, b"x")])
    assert done.wait(TIMEOUT)


# --- ZeroMQ only ----------------------------------------------------------------------

@pytest.fixture
def zctx():
    context = make_context(conf_for("zmq", **{"zmq.hwm": 2}))
    yield context
    context.term()


def test_zmq_failing_callback_does_not_kill_the_receiver(zctx):
    port = free_port()
    server = zctx.bind(TOPO, port)
    got = Collector()

    def cb(batch):
        if batch[0][1] == b"boom":
            raise RuntimeError("bug in the caller's callback")
        got(batch)

    server.register_recv(cb)
    client = zctx.connect(TOPO, "127.0.0.1", port)
    client.send([(1, b"boom")])
    client.send([(1, b"fine")])
    wait_for(lambda: got.batches, what="the batch after a failing callback")
    assert got.batches == [[(1, b"fine")]]
    assert server.callback_errors == 1


def test_zmq_counts_traffic_and_a_reconnect_to_a_restarted_peer(zctx):
    """The context's counters (the worker's metrics): frames and bytes each way, bad
    frames, and a connection made again after the peer went away and came back."""
    port = free_port()
    server = zctx.bind(TOPO, port)
    got = Collector()
    server.register_recv(got)
    client = zctx.connect(TOPO, "127.0.0.1", port)
    client.send([(1, b"a" * 10)])
    client.send_raw(b"not a frame")
    wait_for(lambda: len(got.messages) == 1, what="first message")
    # The bad frame too, before the peer goes away: one still queued would die with it.
    wait_for(lambda: zctx.counters.bad_frames == 1, what="the bad frame counted")
    server.close()  # the peer goes away ...

    def rebind():
        try:
            return zctx.bind(TOPO, port)
        except OSError:  # ZeroMQ releases the port a moment after close
            return None

    server = wait_for(rebind, what="the same port bound again")  # ... and comes back
    server.register_recv(got)
    sent = 1

    def reconnected() -> bool:
        nonlocal sent
        client.send([(2, b"b" * 10)])  # queued while the peer is away, delivered after
        sent += 1
        return zctx.counters.reconnects == 1

    wait_for(reconnected, TIMEOUT, what="a reconnect counted", interval=0.3)

    def delivered_again() -> bool:
        # Frames written to the dying connection are lost, as ZeroMQ does: on a busy machine
        # every send above may have gone there. Send until one crosses the new connection.
        nonlocal sent
        if len(got.messages) >= 2:
            return True
        client.send([(2, b"b" * 10)])
        sent += 1
        return False

    wait_for(delivered_again, TIMEOUT, what="a message through the new connection", interval=0.3)
    c = zctx.counters
    frame_bytes = len(codec.encode_tasks([(1, b"a" * 10)]))
    assert c.frames_out == sent and c.bytes_out == sent * frame_bytes  # send_raw is not a counted send
    # What arrived is counted exactly, the bad frame included; the counter is bumped just
    # before the callback runs.
    wait_for(lambda: c.frames_in == len(got.messages) + 1
             and c.bytes_in == len(got.messages) * frame_bytes + len(b"not a frame"),
             what="received frames and bytes counted",
             detail=lambda: f"counters {c.as_dict()}, {len(got.messages)} messages delivered")
    assert c.bad_frames == 1


def test_zmq_send_blocks_at_high_water_mark_and_loses_nothing(zctx):
    """A peer that stops reading holds the sender back (bounded memory) without loss."""
    port = free_port()
    server = zctx.bind(TOPO, port)
    client = zctx.connect(TOPO, "127.0.0.1", port)
    payload = b"p" * 256 * 1024
    total = 200  # 50 MB: far beyond both HWMs plus the kernel's socket buffers
    sent = []

    def sender():
        for i in range(total):
            client.send([(i, payload)])
            sent.append(i)

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    wait_for(lambda: client.blocked_sends >= 1, what="the sender to block at the HWM")
    assert len(sent) < total
    got = Collector()
    server.register_recv(got)
    thread.join(TIMEOUT)
    assert not thread.is_alive()
    wait_for(lambda: len(got.batches) >= total, what=f"{total} large batches")
    assert [b[0][0] for b in got.batches] == list(range(total))
    assert all(b[0][1] == payload for b in got.batches)


def test_zmq_backlogs_go_as_bounded_frames_and_a_full_peer_returns_what_it_did_not_take(zctx):
    port = free_port()
    server = zctx.bind(TOPO, port)
    got = Collector()
    client = zctx.connect(TOPO, "127.0.0.1", port)
    backlog = [(1, bytes([i % 256]) * 50_000) for i in range(200)]  # 10 MB for one peer
    # Nobody reads yet: the socket takes zmq.hwm frames (2 here) plus what the kernel
    # buffers, then refuses; what it refused comes back, in order, for a later try.
    left = client.send(backlog, 0.0)
    assert 0 < len(left) < len(backlog) and left == backlog[len(backlog) - len(left):]
    server.register_recv(got)
    while left:
        left = client.send(left, 1.0)
    wait_for(lambda: len(got.messages) == len(backlog), what="the whole backlog")
    assert got.messages == backlog
    assert max(sum(len(p) for _, p in b) for b in got.batches) <= codec.FRAME_TARGET_BYTES
