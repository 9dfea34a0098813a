"""CurveZMQ for the ZeroMQ transport: key pairs, the ZAP verdict and the ZAP handler thread.

Every worker of a topology holds the same key pair (made by whoever deploys the topology)
and uses it both as server key (its PULL socket) and client key (its PUSH sockets). The
ZAP handler of a process accepts a CURVE client only when the client's public key is that
key: a peer with another key pair is refused before any frame is delivered. A peer that
does not speak CURVE at all fails the handshake earlier (mechanism mismatch); the server
counts both through its socket monitor.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import structlog
import zmq
from zmq.utils import z85

log = structlog.get_logger("squall.messaging.curve")

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # fixed by the ZAP specification (RFC 27)
ZAP_DOMAIN = "squall"
_POLL_MS = 200  # how often the handler thread checks for a stop


@dataclass(frozen=True)
class CurveKeys:
    """A CURVE key pair as Z85 text (40 characters each)."""

    public: str
    secret: str

    def __post_init__(self) -> None:
        for name in ("public", "secret"):
            value = getattr(self, name)
            if not isinstance(value, str) or len(value) != 40:
                raise ValueError(f"CURVE {name} key must be 40 characters of Z85")
        try:
            derived = zmq.curve_public(self.secret.encode("ascii")).decode("ascii")
        except (zmq.ZMQError, ValueError, UnicodeError) as exc:
            raise ValueError(f"CURVE secret key is not valid Z85: {exc}") from None
        if derived != self.public:
            raise ValueError("CURVE public key does not belong to the secret key")

    @classmethod
    def generate(cls) -> CurveKeys:
        public, secret = zmq.curve_keypair()
        return cls(public.decode("ascii"), secret.decode("ascii"))

    def __repr__(self) -> str:  # never print the secret
        return f"CurveKeys(public={self.public!r})"


def apply_curve(sock: zmq.Socket, keys: CurveKeys, server: bool) -> None:
    """Make ``sock`` a CURVE server, or a client of a server holding the same keys."""
    sock.curve_secretkey = keys.secret.encode("ascii")
    sock.curve_publickey = keys.public.encode("ascii")
    if server:
        sock.zap_domain = ZAP_DOMAIN.encode()
        sock.curve_server = True
    else:
        sock.curve_serverkey = keys.public.encode("ascii")


def curve_available() -> bool:
    """Whether this libzmq was built with CURVE."""
    return bool(zmq.has("curve"))


def zap_verdict(mechanism: bytes, credentials: list[bytes], allowed_public: bytes) -> tuple[bytes, bytes]:
    """The ZAP status code and text for one handshake: 200 only for CURVE with the
    allowed public key (32 raw bytes), 400 otherwise."""
    if mechanism != b"CURVE":
        return b"400", b"CURVE required"
    if len(credentials) != 1 or credentials[0] != allowed_public:
        return b"400", b"unknown key"
    return b"200", b"OK"


def should_log(count: int) -> bool:
    """Log the 1st, 2nd, 4th, 8th ... occurrence: a peer retrying forever cannot flood the log."""
    return count > 0 and count & (count - 1) == 0


class ZapHandler:
    """The process's ZAP handler: answers every handshake of the context's CURVE servers.

    ``refused`` counts refused handshakes (another key pair). The REP socket lives on the
    handler's thread only; ``stop`` ends the thread within _POLL_MS.
    """

    def __init__(self, zctx: zmq.Context, keys: CurveKeys) -> None:
        self._allowed = z85.decode(keys.public.encode("ascii"))
        self.refused = 0
        self.accepted = 0
        self._stopping = threading.Event()
        sock = zctx.socket(zmq.REP)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(ZAP_ENDPOINT)  # before any CURVE server exists: without a handler, all pass
        self._thread = threading.Thread(target=self._run, args=(sock,), name="zmq-zap", daemon=True)
        self._thread.start()

    def _run(self, sock: zmq.Socket) -> None:
        try:
            while not self._stopping.is_set():
                if not sock.poll(_POLL_MS):
                    continue
                request = sock.recv_multipart()
                sock.send_multipart(self._answer(request))
        except zmq.ZMQError as exc:
            if not self._stopping.is_set():
                log.error("ZAP handler failed; CURVE handshakes will stall", error=str(exc))
        finally:
            sock.close()

    def _answer(self, request: list[bytes]) -> list[bytes]:
        # version, request id, domain, address, identity, mechanism, credentials...
        if len(request) < 6:
            self.refused += 1
            return [b"1.0", request[1] if len(request) > 1 else b"", b"400", b"bad request", b"", b""]
        version, request_id, _domain, address, _identity, mechanism, *credentials = request
        code, text = zap_verdict(mechanism, credentials, self._allowed)
        if code == b"200":
            self.accepted += 1
        else:
            self.refused += 1
            if should_log(self.refused):
                log.warning("connection refused", reason=text.decode(), peer=address.decode(errors="replace"),
                            refused=self.refused)
        return [version, request_id, code, text, b"", b""]

    def stop(self) -> None:
        self._stopping.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(_POLL_MS / 1000 * 5)
