"""A real standalone ZooKeeper server for tests, and fault helpers.

The server itself (``ZooKeeperServer``, ``free_port``, installation) is product code in
``squall.cli.zookeeper_server`` (``squall dev-cluster`` runs it) and is re-exported here for the
harness. ``expire_session`` and ``drop_connection`` break a kazoo client's session or TCP
connection for real, through the server, in the kazoo style; ``TcpRelay`` makes the server
unreachable for chosen processes (cut, then restore).
"""
from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState

from squall.cli.zookeeper_server import (  # noqa: F401 (harness API)
    ZooKeeperError,
    ZooKeeperServer,
    ensure_zookeeper_installed,
    find_java,
    find_zookeeper_classpath,
    four_letter_word,
    free_port,
)
from squall.daemons.nimbus.credentials import DAEMON_USER, daemon_auth_conf  # noqa: F401 (harness API)


def authenticated_client(hosts: str, conf: dict[str, Any] | None, timeout: float = 10.0) -> KazooClient:
    """A started kazoo client authenticated with ``conf``'s daemon credential (if any)."""
    user = (conf or {}).get("zookeeper.auth.user")
    password = (conf or {}).get("zookeeper.auth.password")
    client = KazooClient(hosts=hosts, timeout=timeout,
                         auth_data=[("digest", f"{user}:{password}")] if user and password else None)
    client.start(timeout=timeout)
    return client


# --- faults for tests (kazoo style) ----------------------------------------------------

def _client_hosts(client: KazooClient) -> list[tuple[str, int]]:
    return list(client.hosts)


def _wait_for_states(client: KazooClient, first: str, then_connected: bool, timeout: float,
                     trigger: Callable[[], None]) -> None:
    seen_first = threading.Event()
    reconnected = threading.Event()

    def listener(state: str) -> bool | None:
        if state == first:
            seen_first.set()
        elif state == KazooState.CONNECTED and seen_first.is_set():
            reconnected.set()
            return True  # removes the listener
        return None

    client.add_listener(listener)
    try:
        trigger()
        if not seen_first.wait(timeout):
            raise TimeoutError(f"client did not reach state {first} within {timeout}s")
        if then_connected and not reconnected.wait(timeout):
            raise TimeoutError(f"client did not reconnect within {timeout}s")
    finally:
        client.remove_listener(listener)


def expire_session(client: KazooClient, timeout: float = 10.0, wait_reconnect: bool = True) -> None:
    """Expire ``client``'s session for real: the server closes it and deletes its ephemerals.

    A second client joins the same session (id and password) and closes it. ``client`` sees
    SUSPENDED, then LOST; with ``wait_reconnect`` this returns once it is CONNECTED again
    with a new session.
    """
    client_id = client.client_id
    if client_id is None:
        raise RuntimeError("client is not connected")
    hosts = ",".join(f"{h}:{p}" for h, p in _client_hosts(client))

    def close_session() -> None:
        other = KazooClient(hosts=hosts, client_id=client_id, timeout=max(timeout, 1.0))
        try:
            other.start(timeout)
            other.stop()  # sends CloseSession: a real expiry for every holder of the session
        finally:
            other.close()

    _wait_for_states(client, KazooState.LOST, wait_reconnect, timeout, close_session)


def drop_connection(client: KazooClient, timeout: float = 10.0) -> None:
    """Make the server drop ``client``'s TCP connection while its session lives on.

    A raw connection takes over the session (the server closes the client's socket, as it
    does when a session moves), then goes away without closing the session. Returns once
    the client is CONNECTED again in the same session.
    """
    client_id = client.client_id
    if client_id is None:
        raise RuntimeError("client is not connected")
    session_id, password = client_id
    host, port = _client_hosts(client)[0]

    def hijack() -> None:
        # ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd, readOnly.
        # The server adopts the timeout sent here until the client reconnects: send its own.
        session_ms = int(getattr(client, "_session_timeout", 10000))
        body = struct.pack("!iqiqi", 0, 0, session_ms, session_id, len(password)) + password + b"\0"
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack("!i", len(body)) + body)
            sock.recv(64)  # the ConnectResponse; then close without CloseSession

    _wait_for_states(client, KazooState.SUSPENDED, True, timeout, hijack)
    if client.client_id is None or client.client_id[0] != session_id:
        raise RuntimeError("drop_connection lost the session instead of the connection")


class TcpRelay:
    """A TCP relay to ZooKeeper (or any server) that a test can cut and restore, making it
    unreachable for the processes that connect through it, and only for them."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = threading.Event()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()  # refused while cut
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._conns += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Drop every relayed connection and refuse new ones until ``restore``."""
        self._cut.set()
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self.listener.close()
