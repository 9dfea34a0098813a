"""A worker's connections to ZooKeeper, counted as the supervisor counts them: the TCP sockets
of its processes whose far end is one of ZooKeeper's addresses."""
from __future__ import annotations

import os
import socket
import time

import psutil

from squall.daemons.supervisor.containment import zookeeper_endpoints
from squall.daemons.supervisor.tcp_table import SocketsTo


def connections_to(procs, endpoints, monotonic=time.monotonic, max_age=0.0) -> int:
    return SocketsTo(endpoints, monotonic, max_age).count(p.pid for p in procs)


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


def test_counts_agree_with_psutils_reading_for_ipv4_and_ipv6_and_a_socket_held_twice():
    """The supervisor reads /proc's tables itself (psutil's decoding cost it 4-5 ms a worker a
    second); what it counts must be what psutil sees."""
    with socket.create_server(("127.0.0.1", 0)) as v4, socket.create_server(("::1", 0), family=socket.AF_INET6) as v6:
        ends = {("127.0.0.1", v4.getsockname()[1]), ("::1", v6.getsockname()[1])}
        socks = [socket.create_connection(("127.0.0.1", v4.getsockname()[1])) for _ in range(2)]
        socks += [socket.create_connection(("::1", v6.getsockname()[1])) for _ in range(3)]
        second_fd = os.dup(socks[0].fileno())  # one socket behind two descriptors, as a forked child holds it
        try:
            me = psutil.Process()
            by_psutil = {(c.laddr, c.raddr) for c in me.net_connections(kind="tcp")
                         if c.raddr and (c.raddr.ip, c.raddr.port) in ends}
            assert len(by_psutil) == 5
            assert connections_to([me, me], ends) == 5
            assert connections_to([me], {("::1", v6.getsockname()[1])}) == 3
            assert connections_to([me], {("not an address", 1)}) == 0
        finally:
            os.close(second_fd)
            for sock in socks:
                sock.close()


def test_a_namespaces_table_is_read_once_a_tick_and_again_after_it():
    """Asked for each worker in one tick, the supervisor reads the table once; a socket opened
    later is seen once the reading is older than max_age."""
    now = [100.0]
    with socket.create_server(("127.0.0.1", 0)) as zk:
        end = {("127.0.0.1", zk.getsockname()[1])}
        counter = SocketsTo(end, lambda: now[0], max_age=0.25)
        first = socket.create_connection(("127.0.0.1", zk.getsockname()[1]))
        me = [psutil.Process().pid]
        try:
            assert counter.count(me) == 1
            second = socket.create_connection(("127.0.0.1", zk.getsockname()[1]))
            try:
                assert counter.count(me) == 1  # the same tick: the rows read a moment ago
                now[0] += 0.3
                assert counter.count(me) == 2
                assert counter.tables == ("tcp",)  # IPv4 ends only: tcp6 is not walked
            finally:
                second.close()
        finally:
            first.close()
