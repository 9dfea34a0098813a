"""A worker's connections to ZooKeeper, counted as the supervisor counts them: the TCP sockets
of its processes whose far end is one of ZooKeeper's addresses."""
from __future__ import annotations

import socket

import psutil

from squall.daemons.supervisor.containment import connections_to, zookeeper_endpoints


def test_zookeepers_addresses_resolve_with_their_ports():
    found = zookeeper_endpoints({"zookeeper.servers": ["127.0.0.1", "localhost:2182", "no.such.host.invalid"],
                                 "zookeeper.port": 2181})
    assert ("127.0.0.1", 2181) in found and ("127.0.0.1", 2182) in found
    assert all(port in (2181, 2182) for _, port in found)


def test_only_connections_to_zookeeper_count():
    with socket.create_server(("127.0.0.1", 0)) as zk, socket.create_server(("127.0.0.1", 0)) as other:
        zk_port, other_port = zk.getsockname()[1], other.getsockname()[1]
        socks = [socket.create_connection(("127.0.0.1", zk_port)) for _ in range(3)]
        socks.append(socket.create_connection(("127.0.0.1", other_port)))
        accepted = [zk.accept()[0] for _ in range(3)]  # the server's ends do not count: their far end is us
        try:
            me = [psutil.Process()]
            assert connections_to(me, {("127.0.0.1", zk_port)}) == 3
            assert connections_to(me, {("127.0.0.1", other_port)}) == 1
            assert connections_to(me, set()) == 0
        finally:
            for sock in socks + accepted:
                sock.close()
