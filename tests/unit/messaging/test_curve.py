"""CurveZMQ on the ZeroMQ transport: the ZAP verdict, and real sockets on 127.0.0.1 refusing
plain and foreign-key peers while the topology's own peers get through."""
from __future__ import annotations

import pytest
import zmq
from zmq.utils import z85

from squall.config import build_config
from squall.messaging import CurveKeys, codec, make_context
from squall.messaging.curve import curve_available, should_log, zap_verdict
from squall.testing.waiting import wait_for
from squall.testing.zookeeper import free_port

TOPO = "topo-1"
KEYS = CurveKeys.generate()
FOREIGN = CurveKeys.generate()


def test_libzmq_has_curve() -> None:
    assert curve_available()


def test_zap_verdict_accepts_only_the_topology_key() -> None:
    own = z85.decode(KEYS.public.encode())
    other = z85.decode(FOREIGN.public.encode())
    assert zap_verdict(b"CURVE", [own], own) == (b"200", b"OK")
    assert zap_verdict(b"CURVE", [other], own)[0] == b"400"
    assert zap_verdict(b"NULL", [], own)[0] == b"400"
    assert zap_verdict(b"PLAIN", [b"user", b"pass"], own)[0] == b"400"
    assert zap_verdict(b"CURVE", [own, own], own)[0] == b"400"


def test_curve_keys_are_checked() -> None:
    with pytest.raises(ValueError, match="does not belong"):
        CurveKeys(FOREIGN.public, KEYS.secret)
    with pytest.raises(ValueError, match="40 characters"):
        CurveKeys("short", KEYS.secret)
    assert KEYS.secret not in repr(KEYS)


def test_should_log_is_bounded() -> None:
    assert [n for n in range(1, 100) if should_log(n)] == [1, 2, 4, 8, 16, 32, 64]


@pytest.fixture
def server():
    conf = build_config({"zmq.bind.host": "127.0.0.1", "zmq.linger.millis": 500}, user_file=False)
    ctx = make_context(conf, curve=KEYS)
    srv = ctx.bind(TOPO, free_port())
    got: list[tuple[int, bytes]] = []
    srv.register_recv(lambda batch: got.extend((t, bytes(p)) for t, p in batch))
    try:
        yield ctx, srv, got, conf
    finally:
        ctx.term()


def test_same_keys_deliver(server) -> None:
    ctx, srv, got, conf = server
    peer = make_context(conf, curve=KEYS)
    try:
        peer.connect(TOPO, "127.0.0.1", srv.port).send([(1, b"hello")])
        wait_for(lambda: got == [(1, b"hello")], 10, "curve batch delivered")
        assert srv.refused_connections == 0 and ctx.refused_keys == 0
    finally:
        peer.term()


def offer(sock: zmq.Socket, frame: bytes) -> None:
    """Send if the socket takes it now. The handshake that connect() started may already have
    been refused, taking the socket's only pipe with it: then there is nothing to send on (the
    refusal, which the test counts, has happened)."""
    try:
        sock.send(frame, zmq.NOBLOCK)
    except zmq.Again:
        pass


def test_plain_and_foreign_peers_are_refused_and_counted(server) -> None:
    ctx, srv, got, conf = server
    plain_ctx = zmq.Context()
    plain = plain_ctx.socket(zmq.PUSH)
    plain.setsockopt(zmq.LINGER, 0)
    plain.connect(f"tcp://127.0.0.1:{srv.port}")
    offer(plain, codec.encode_tasks([(1, b"plain")]))
    # Another topology's worker: its own key pair, its own idea of the server key.
    foreign = make_context(conf, curve=FOREIGN)
    # A peer that learned the server's public key but holds another key pair: ZAP refuses it.
    knows_server = plain_ctx.socket(zmq.PUSH)
    knows_server.setsockopt(zmq.LINGER, 0)
    knows_server.curve_secretkey = FOREIGN.secret.encode()
    knows_server.curve_publickey = FOREIGN.public.encode()
    knows_server.curve_serverkey = KEYS.public.encode()
    knows_server.connect(f"tcp://127.0.0.1:{srv.port}")
    offer(knows_server, codec.encode_tasks([(1, b"zap")]))
    try:
        foreign.connect(TOPO, "127.0.0.1", srv.port).send([(1, b"foreign")])
        wait_for(lambda: srv.refused_connections >= 3 and ctx.refused_keys >= 1, 10,
                 "all three handshakes refused")
        assert got == []
        # The server still serves its own topology afterwards.
        own = make_context(conf, curve=KEYS)
        try:
            own.connect(TOPO, "127.0.0.1", srv.port).send([(2, b"own")])
            wait_for(lambda: (2, b"own") in got, 10, "own batch delivered")
        finally:
            own.term()
        assert [m for m in got if m[1] != b"own"] == []
    finally:
        plain.close()
        knows_server.close()
        plain_ctx.term()
        foreign.term()
