"""Whether another process holds a slot's port: the supervisor's own look, after a worker
said it could not bind it (a worker's word alone takes no slot out of use)."""
from __future__ import annotations

import errno
import socket


def port_held(host: str, port: int) -> bool:
    """True when binding ``host:port`` as a worker's receive socket would (SO_REUSEADDR, as
    ZeroMQ's listening sockets set it) fails because the address is in use; any other
    outcome (bound, an address not of this host, a name that does not resolve) is False."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return False
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False
