"""ZeroMQ transport: a PULL socket per worker receives, one PUSH socket per peer sends.

Threading (ZeroMQ sockets are not thread-safe):
- A client (``connect``) is used from ONE thread: the worker's transfer thread sends on it
  and is also the thread that closes it. Another thread that wants it gone must ask that
  thread to close it.
- A server (``bind``) socket is created in the caller's thread, then handed to its receive
  thread (``Thread.start`` is the memory barrier ZeroMQ asks for) and never touched by any
  other thread again; the receive thread closes it. ``close()`` may be called from any
  thread: it wakes the receive thread through an inproc socket of its own.

A ``send`` call sends the batch for one peer as one task frame, or several when it
would exceed about 256 KiB (``codec.chunks``); control frames have a socket of their own.

With CURVE keys (``ZmqContext(curve=...)``) every socket is encrypted and authenticated:
servers accept only peers holding the same key pair (``messaging.curve``); a refused
handshake delivers nothing and is counted in ``ZmqServer.refused_connections`` (and, for a
foreign key, in the context's ``refused_keys``).
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import structlog
import zmq
from zmq.utils.monitor import recv_monitor_message

from squall.messaging import codec
from squall.messaging.base import Connection, Context, RecvCallback, ServerConnection, TaskMessage, TransportCounters
from squall.messaging.curve import CurveKeys, ZapHandler, apply_curve, should_log

log = structlog.get_logger("squall.messaging.zmq")

_NOBLOCK = zmq.NOBLOCK
# Frames handled per poll wake-up: amortizes the poll call over a burst without starving
# the stop check for long.
_DRAIN = 256
# A send stuck at the high-water mark polls in slices this long and warns this often.
_BLOCKED_POLL_MS = 500
_BLOCKED_WARN_SECS = 5.0
_JOIN_SECS = 5.0
TERM_LINGER_MS = 1000  # at term(): how long clients may still flush (see ZmqContext.term)
_CONTROL_HWM = 4
# How often a client reads its socket's connection events (for the reconnect counter).
_EVENTS_EVERY_SECS = 1.0
_wake_ids = itertools.count()
# Monitor events of a refused peer: it spoke no CURVE, or another key, or garbage.
_REFUSED_EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                   | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


class ZmqServer(ServerConnection):
    """The receive side: a bound PULL socket drained by a dedicated thread."""

    def __init__(self, zctx: zmq.Context, topology_id: str, host: str, port: int, hwm: int,
                 curve: CurveKeys | None = None, max_bytes: int = codec.DEFAULT_MAX_BYTES,
                 counters: TransportCounters | None = None) -> None:
        self._topology_id = topology_id
        self.counters = counters or TransportCounters()
        self._callback: RecvCallback | None = None
        self._ready = threading.Event()     # set by register_recv (or close)
        self._stopping = False
        self._closed = False
        self._close_lock = threading.Lock()
        self._max_bytes = max_bytes
        self.refused_connections = 0  # handshakes that failed: no CURVE, a foreign key, garbage
        self._zctx = zctx
        pull = zctx.socket(zmq.PULL)
        if curve is not None:
            apply_curve(pull, curve, server=True)
        # RCVHWM bounds what ZeroMQ buffers for us per sender (in frames); beyond it the
        # senders' PUSH sockets refuse more, which is the flow control we want, not loss.
        pull.setsockopt(zmq.RCVHWM, hwm)
        # A peer that sends a frame over the limit is disconnected by ZeroMQ before the
        # frame is buffered: no frame can make the worker allocate more than this.
        if max_bytes:
            pull.setsockopt(zmq.MAXMSGSIZE, max_bytes)
        # Nothing is ever sent from a PULL socket: closing it need not wait.
        pull.setsockopt(zmq.LINGER, 0)
        try:
            pull.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError as exc:
            pull.close()
            raise OSError(exc.errno, f"cannot bind tcp://{host}:{port}: {exc}") from None
        # Port 0 asks the OS for a free port; report the one we got.
        self._port = int(pull.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
        self._wake_addr = f"inproc://squall-wake-{next(_wake_ids)}"
        wake = zctx.socket(zmq.PULL)
        wake.setsockopt(zmq.LINGER, 0)
        wake.bind(self._wake_addr)
        monitor = pull.get_monitor_socket(_REFUSED_EVENTS)
        monitor.setsockopt(zmq.LINGER, 0)
        self._thread = threading.Thread(target=self._run, args=(pull, wake, monitor),
                                        name=f"zmq-recv-{self._port}", daemon=True)
        self._thread.start()

    # -- receive thread ---------------------------------------------------------------
    def _run(self, pull: zmq.Socket, wake: zmq.Socket, monitor: zmq.Socket) -> None:
        try:
            # Frames that arrive before register_recv stay queued in ZeroMQ (up to the
            # HWM, then senders block): none is dropped for want of a callback.
            self._ready.wait()
            poller = zmq.Poller()
            poller.register(pull, zmq.POLLIN)
            poller.register(wake, zmq.POLLIN)
            poller.register(monitor, zmq.POLLIN)
            recv, handle = pull.recv, self.handle_frame
            while not self._stopping:
                if monitor in dict(poller.poll()):
                    self._drain_monitor(monitor)
                for _ in range(_DRAIN):
                    if self._stopping:
                        break
                    try:
                        frame = recv(_NOBLOCK)
                    except zmq.Again:
                        break
                    handle(frame)
        except Exception:  # a bug here must be loud, not a silently deaf worker
            log.exception("receive thread failed", topology_id=self._topology_id, port=self._port)
            raise
        finally:
            pull.disable_monitor()
            monitor.close()
            pull.close()
            wake.close()

    def _drain_monitor(self, monitor: zmq.Socket) -> None:
        while True:
            try:
                event = recv_monitor_message(monitor, _NOBLOCK)
            except zmq.Again:
                return
            if event["event"] & _REFUSED_EVENTS:
                self.refused_connections += 1
                if should_log(self.refused_connections):
                    log.warning("connection refused at handshake", topology_id=self._topology_id,
                                port=self._port, endpoint=event["endpoint"].decode(errors="replace"),
                                refused_connections=self.refused_connections)

    # -- Connection -------------------------------------------------------------------
    def close(self) -> None:
        """Stop receiving now; frames not yet handled are discarded."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._stopping = True
        self._ready.set()
        if self._thread.is_alive():
            # A short-lived socket of the calling thread: the server's own sockets belong
            # to the receive thread. Linger covers the instant before the thread reads it.
            waker = self._zctx.socket(zmq.PUSH)
            waker.setsockopt(zmq.LINGER, 200)
            waker.connect(self._wake_addr)
            try:
                waker.send(b"", _NOBLOCK)
            except zmq.Again:
                pass  # the thread already has a wake-up pending
            waker.close()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=_JOIN_SECS)
            if self._thread.is_alive():
                log.warning("receive thread did not stop; its callback is still running",
                            topology_id=self._topology_id, port=self._port)

    @property
    def stopped(self) -> bool:
        return not self._thread.is_alive()


class ZmqClient(Connection):
    """The send side: PUSH sockets connected to one peer. Use from one thread only.

    Two sockets, so two pipes into the peer's PULL socket: data frames, and control frames
    (backpressure status), which a backlog of data frames therefore cannot hold up."""

    def __init__(self, zctx: zmq.Context, topology_id: str, host: str, port: int,
                 hwm: int, linger_ms: int, curve: CurveKeys | None = None,
                 max_bytes: int = codec.DEFAULT_MAX_BYTES, counters: TransportCounters | None = None,
                 close_linger: Callable[[], int | None] = lambda: None) -> None:
        """``close_linger``: the linger close() uses instead of ``linger_ms`` (None: that)."""
        self._topology_id, self._host, self._port, self._hwm = topology_id, host, port, hwm
        self._close_linger = close_linger
        self._counters = counters or TransportCounters()
        self._connected_once = False
        self._events_at = 0.0
        self._max_bytes = max_bytes
        self._peer_load: dict[int, float] = {}
        self.blocked_sends = 0
        self.control_dropped = 0
        sock = zctx.socket(zmq.PUSH)
        if curve is not None:
            apply_curve(sock, curve, server=False)
        # SNDHWM bounds the frames queued for this peer; at the mark a send is refused
        # (the caller keeps the batch and retries) instead of dropped, which is what lets a
        # slow or not-yet-started peer hold memory bounded without losing tuples.
        sock.setsockopt(zmq.SNDHWM, hwm)
        # The configured linger, not 0: close() must still flush queued batches (a PUSH
        # socket with linger 0 drops them), but bounded so term() cannot hang on a dead peer.
        sock.setsockopt(zmq.LINGER, linger_ms)
        # IMMEDIATE off (the default, set on purpose): the pipe exists as soon as connect()
        # returns, so batches sent before the peer has bound are queued and delivered once
        # it comes up (ZeroMQ reconnects every RECONNECT_IVL) rather than refused.
        sock.setsockopt(zmq.IMMEDIATE, 0)
        # Connection events (read by the sending thread) count reconnections to the peer.
        self._monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED)
        self._monitor.setsockopt(zmq.LINGER, 0)
        sock.connect(f"tcp://{host}:{port}")
        ctl = zctx.socket(zmq.PUSH)
        if curve is not None:
            apply_curve(ctl, curve, server=False)
        # Status is sent again every second: a few frames are all worth keeping, and none at close.
        ctl.setsockopt(zmq.SNDHWM, _CONTROL_HWM)
        ctl.setsockopt(zmq.LINGER, 0)
        ctl.connect(f"tcp://{host}:{port}")
        self._sock, self._ctl = sock, ctl
        self._send = sock.send

    def send(self, messages: Iterable[TaskMessage], timeout: float | None = None) -> list[TaskMessage]:
        batch = messages if isinstance(messages, list) else list(messages)
        if not batch:
            return []
        if timeout == 0 and not self._sock.getsockopt(zmq.EVENTS) & zmq.POLLOUT:
            return batch  # still full: do not encode a backlog only to have it refused
        runs = codec.chunks(batch, self._max_bytes)
        counters = self._counters
        for i, run in enumerate(runs):
            frame = codec.encode_tasks(run)
            try:
                self._send(frame, _NOBLOCK)
            except zmq.Again:
                if not self._send_blocked(frame, timeout):
                    return [m for r in runs[i:] for m in r]
            counters.frames_out += 1
            counters.bytes_out += len(frame)
        now = time.monotonic()
        if now >= self._events_at:
            self._events_at = now + _EVENTS_EVERY_SECS
            self._read_events()
        return []

    def _read_events(self) -> None:
        """Count connections made after the first: the peer went away and came back."""
        while True:
            try:
                recv_monitor_message(self._monitor, _NOBLOCK)
            except zmq.Again:
                return
            if self._connected_once:
                self._counters.reconnects += 1
            self._connected_once = True

    def _send_blocked(self, frame: bytes, timeout: float | None) -> bool:
        """The peer holds HWM frames unread: wait up to ``timeout`` for room, warning
        while we wait. False if the frame was not sent."""
        self.blocked_sends += 1
        self._counters.blocked_sends += 1
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        next_warn = started + _BLOCKED_WARN_SECS
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            wait = _BLOCKED_POLL_MS if deadline is None else min(_BLOCKED_POLL_MS, int((deadline - now) * 1000) + 1)
            if self._sock.poll(wait, zmq.POLLOUT):
                try:
                    self._send(frame, _NOBLOCK)
                    return True
                except zmq.Again:
                    continue
            now = time.monotonic()
            if now >= next_warn:
                next_warn = now + _BLOCKED_WARN_SECS
                log.warning("send blocked at high-water mark; peer is not reading",
                            topology_id=self._topology_id, host=self._host, port=self._port,
                            hwm=self._hwm, waited_secs=round(now - started, 1))

    def wait_writable(self, timeout: float) -> bool:
        return bool(self._sock.poll(max(1, int(timeout * 1000)), zmq.POLLOUT))

    def send_raw(self, frame: bytes) -> None:
        """Send an already encoded (or deliberately malformed) frame; used by tests."""
        self._send(frame)

    def send_load_metrics(self, load: Mapping[int, float]) -> None:
        self.send_control(codec.KIND_LOAD, dict(load))

    def send_control(self, kind: int, body: Any) -> bool:
        try:
            self._ctl.send(codec.encode_control(kind, body), _NOBLOCK)
            return True
        except zmq.Again:
            self.control_dropped += 1
            return False

    def register_recv(self, callback: RecvCallback) -> None:
        raise TypeError("a connected (client) connection only sends")

    @property
    def port(self) -> int:
        return self._port

    def close(self) -> None:
        """Returns at once; ZeroMQ keeps flushing for up to the linger, and term() waits."""
        if not self._sock.closed:
            linger = self._close_linger()
            self._sock.disable_monitor()
            self._monitor.close()
            self._sock.close(linger=linger)
            self._ctl.close(linger=linger)


class ZmqContext(Context):
    """One per worker process: owns the zmq.Context and every connection made from it."""

    def __init__(self, curve: CurveKeys | None = None, io_cpus: Collection[int] = ()) -> None:
        """``curve``: the key pair of every peer (None: plain TCP, unauthenticated).
        ``io_cpus``: the CPUs ZeroMQ's own threads (I/O, reaper) may run on; empty: any.

        A worker keeps them off the CPU its Python threads are pinned to: they need no GIL,
        and unpinned the kernel woke them on the CPU of whoever woke them, which was mostly
        the busiest worker's (a cluster's spout worker), so every frame's I/O waited for, and
        took time from, that worker's executor thread."""
        self._zctx = zmq.Context()
        for cpu in io_cpus:  # before the first socket: ZeroMQ starts its threads with it
            self._zctx.set(zmq.THREAD_AFFINITY_CPU_ADD, cpu)
        self._curve = curve
        # The ZAP handler must exist before the first CURVE server socket.
        self._zap = ZapHandler(self._zctx, curve) if curve is not None else None
        self._hwm = 1000
        self._linger_ms = 5000
        self._ending = False
        self._max_bytes = codec.DEFAULT_MAX_BYTES
        self._bind_host = "127.0.0.1"
        self._made: list[Connection] = []
        self._lock = threading.Lock()
        self._terminated = False
        self.counters = TransportCounters()

    def prepare(self, conf: Mapping[str, Any]) -> None:
        self._hwm = int(conf.get("zmq.hwm", self._hwm))
        self._linger_ms = int(conf.get("zmq.linger.millis", self._linger_ms))
        self._bind_host = str(conf.get("zmq.bind.host") or self._bind_host)
        self._max_bytes = int(conf.get("zmq.max.message.bytes", self._max_bytes))

    @property
    def curve(self) -> bool:
        return self._curve is not None

    @property
    def refused_keys(self) -> int:
        """Handshakes the ZAP handler refused (a CURVE peer with another key pair)."""
        return self._zap.refused if self._zap is not None else 0

    def _add(self, conn: Connection) -> None:
        with self._lock:
            if self._terminated:
                conn.close()
                raise RuntimeError("messaging context is terminated")
            self._made.append(conn)

    def bind(self, topology_id: str, port: int) -> ZmqServer:
        """Bind on ``zmq.bind.host``:``port`` (port 0 picks a free one; see ``.port``)."""
        server = ZmqServer(self._zctx, topology_id, self._bind_host, port, self._hwm, self._curve,
                           self._max_bytes, self.counters)
        self._add(server)
        log.info("bound", topology_id=topology_id, host=self._bind_host, port=server.port, curve=self.curve)
        return server

    def connect(self, topology_id: str, host: str, port: int) -> ZmqClient:
        client = ZmqClient(self._zctx, topology_id, host, port, self._hwm, self._linger_ms, self._curve,
                           self._max_bytes, self.counters, self._close_linger)
        self._add(client)
        return client

    def ending(self) -> None:
        """The process is ending: connections closed from now on (also by the worker's own
        shutdown, before term) flush for at most TERM_LINGER_MS. Its supervisor SIGKILLs it
        after ``supervisor.worker.shutdown.sleep.secs``, its peers may be ending too, and
        what does not arrive is replayed from the spouts."""
        self._ending = True

    def _close_linger(self) -> int | None:
        return min(self._linger_ms, TERM_LINGER_MS) if self._ending else None

    def term(self) -> None:
        """Close every connection, then terminate ZeroMQ (waits up to the linger to flush).

        Closes clients from the calling thread: stop the thread that sends on them first.
        """
        with self._lock:
            if self._terminated:
                return
            self._terminated = True
            made, self._made = self._made, []
        self.ending()
        # Servers first: their threads close their own sockets before term() needs them.
        for conn in sorted(made, key=lambda c: not isinstance(c, ZmqServer)):
            conn.close()
        stuck = [c.port for c in made if isinstance(c, ZmqServer) and not c.stopped]
        if stuck:
            # term() would block until those threads close their sockets: never hang shutdown.
            log.error("zmq context left open: receive threads still running", ports=stuck)
            return
        if self._zap is not None:
            self._zap.stop()
        self._zctx.term()
